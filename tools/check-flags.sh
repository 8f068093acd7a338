#!/bin/sh
# check-flags.sh BUILD - one name per flag of dataplaned (issue 47): every
# flag named in a comment of dataplane/, in man/dataplaned.8 or in the flag
# table of docs/operations.md is one dataplaned accepts, and every flag its
# --help lists is in both documents. Run by `make test`.
#
# A flag counts as accepted when `dataplaned --FLAG --version --no-such-flag`
# does not call --FLAG unknown: a flag without argument stops at --version
# (exit 0), one with an argument takes --version as its value and stops at
# --no-such-flag or at its own check of the value; nothing starts a service.
set -eu
B=${1:-build}
[ -x "$B/dataplaned" ] || { echo "check-flags: $B/dataplaned missing (make B=$B)" >&2; exit 1; }
svc=$(cd "$B" && pwd)/dataplaned
cd "$(dirname "$0")/.."
tmp=$(mktemp -d /tmp/dp-flags-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0

# Flags in comments (lines that open a comment or continue one), in the man
# page (groff writes \-\-name) and in the table of docs/operations.md.
grep -rhE '/\*|^[[:space:]]*\*([[:space:]]|$)' dataplane/ |
	grep -oE '(^|[^A-Za-z0-9_>-])--[a-z][a-z0-9-]*[a-z0-9]($|[^A-Za-z0-9_-])' |
	sed -E 's/^[^-]*(--[a-z0-9-]*[a-z0-9]).*/\1/' | sort -u >"$tmp/code"
grep -oE '\\-\\-[a-z][a-z0-9\\-]*[a-z0-9]' man/dataplaned.8 | sed 's/\\//g' | sort -u >"$tmp/man"
sed -n '/^## Flags/,/^## /p' docs/operations.md | grep -oE '^\| `--[a-z0-9-]+' |
	sed 's/^| `//' | sort -u >"$tmp/ops"
"$svc" --help | sed -n 's/^  \(--[a-z0-9-]*\).*/\1/p' | sort -u >"$tmp/help"

for where in code man ops; do
	for f in $(cat "$tmp/$where"); do
		if "$svc" "$f" --version --no-such-flag 2>&1 >/dev/null |
			grep -q "unknown or incomplete option '$f'"; then
			case $where in
			code) echo "check-flags: $f is named in a comment of dataplane/ but dataplaned has no such flag" ;;
			man) echo "check-flags: man/dataplaned.8 names $f, which dataplaned does not have" ;;
			ops) echo "check-flags: docs/operations.md lists $f, which dataplaned does not have" ;;
			esac
			fail=1
		fi
	done
done
for f in $(cat "$tmp/help"); do
	grep -qx -- "$f" "$tmp/man" || { echo "check-flags: $f (--help) is not in man/dataplaned.8"; fail=1; }
	grep -qx -- "$f" "$tmp/ops" || { echo "check-flags: $f (--help) is not in docs/operations.md"; fail=1; }
done
[ $fail = 0 ] || exit 1
echo "check-flags: ok: $(wc -l <"$tmp/help") flags of --help in the man page and docs/operations.md;" \
	"$(cat "$tmp/code" "$tmp/man" "$tmp/ops" | sort -u | wc -l) named in comments and docs, all accepted"
