#!/bin/sh
# check-package.sh BUILD - the package as a user meets it (make check-package):
#  1. `make install DESTDIR=...` lays out the documented tree;
#  2. installed under a scratch PREFIX, docs/api.md's example builds through
#     `pkg-config dataplane`, linked dynamically (NEEDED libdataplane.so.1)
#     and statically (libdataplane.a), and both run against the installed
#     dataplaned;
#  3. the library exports exactly the calls of dataplane.h, under its SONAME;
#  4. the header compiles as C and C++ (tools/check-header.sh);
#  5. the installed systemd unit passes `systemd-analyze verify` (skipped
#     where systemd is not installed, e.g. in a bare build root).
# Every tool answers --help and --version with status 0.
set -eu
B=${1:-build}
MAKE=${MAKE:-make}
top=$(pwd)
tmp=$(mktemp -d /tmp/dp-package-XXXXXX)
svc=
cleanup() {
	[ -n "$svc" ] && kill "$svc" 2>/dev/null && wait "$svc" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "check-package: FAIL: $*" >&2; exit 1; }
ok() { echo "check-package: ok: $*"; }

# 1. DESTDIR layout.
$MAKE -s --no-print-directory B="$B" install DESTDIR="$tmp/dest" >/dev/null
for f in bin/dataplaned bin/ring-stat bin/dp-bench lib/libdataplane.so.1 lib/libdataplane.so \
	lib/libdataplane.a include/dataplane.h lib/pkgconfig/dataplane.pc \
	lib/systemd/system/dataplaned.service share/man/man8/dataplaned.8 \
	share/man/man1/ring-stat.1 share/man/man1/dp-bench.1 share/man/man3/dataplane.3; do
	[ -e "$tmp/dest/usr/local/$f" ] || fail "make install DESTDIR: no /usr/local/$f"
done
$MAKE -s --no-print-directory B="$B" uninstall DESTDIR="$tmp/dest" >/dev/null
left=$(find "$tmp/dest" -type f | head -5)
[ -z "$left" ] || fail "make uninstall left: $left"
ok "make install/uninstall DESTDIR=... (/usr/local/{bin,lib,include,share/man,lib/systemd})"

# 2. A scratch PREFIX, found through pkg-config.
p=$tmp/prefix
$MAKE -s --no-print-directory B="$B" install PREFIX="$p" >/dev/null
export PKG_CONFIG_PATH="$p/lib/pkgconfig"
pkg-config --exists dataplane || fail "pkg-config does not find dataplane"
cflags=$(pkg-config --cflags dataplane)
cc -o "$tmp/dyn" examples/api-example.c $cflags $(pkg-config --libs dataplane) ||
	fail "dynamic link of examples/api-example.c"
readelf -d "$tmp/dyn" | grep -q 'NEEDED.*\[libdataplane\.so\.1\]' ||
	fail "the dynamic example does not need libdataplane.so.1"
static_libs=$(pkg-config --static --libs dataplane | sed 's/-ldataplane/-l:libdataplane.a/')
cc -o "$tmp/static" examples/api-example.c $cflags $static_libs ||
	fail "static link of examples/api-example.c with pkg-config --static"
readelf -d "$tmp/static" | grep -q 'libdataplane' && fail "the static example needs libdataplane.so"
ok "examples/api-example.c through pkg-config: dynamic and static"

"$p/bin/dataplaned" --socket "$tmp/dp.sock" --pollers 1 --log-level warn --no-stats &
svc=$!
i=0
while [ ! -S "$tmp/dp.sock" ]; do
	i=$((i + 1))
	[ $i -le 200 ] || fail "the installed dataplaned did not listen"
	sleep 0.05
done
LD_LIBRARY_PATH="$p/lib" "$tmp/dyn" "$tmp/dp.sock" >/dev/null || fail "the dynamic example failed"
"$tmp/static" "$tmp/dp.sock" >/dev/null || fail "the static example failed"
ok "both examples ran against the installed dataplaned"
kill "$svc"
wait "$svc" || fail "dataplaned exited with status $?"
svc=

# 3. Exports: exactly the header's calls, under the SONAME.
so=$p/lib/libdataplane.so.1
readelf -d "$so" | grep -q 'SONAME.*\[libdataplane\.so\.1\]' || fail "no SONAME libdataplane.so.1"
nm -D --defined-only "$so" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' | sort >"$tmp/exported"
sed -n 's/^\(DP__INLINE \)\{0,1\}[a-z].*[ *]\(dp_[a-z_0-9]*\)(.*/\2/p' libclient/dataplane.h | sort -u >"$tmp/declared"
if ! cmp -s "$tmp/exported" "$tmp/declared"; then
	diff "$tmp/declared" "$tmp/exported" | sed 's/^/  /' >&2
	fail "exported symbols (>) differ from dataplane.h's calls (<)"
fi
ok "libdataplane.so.1 exports the $(wc -l <"$tmp/exported") calls of dataplane.h and nothing else"

# 4. The header from C and C++.
if [ -x tools/check-header.sh ]; then
	tools/check-header.sh "$B" || fail "tools/check-header.sh"
fi

# 5. Every installed tool: --help and --version exit 0.
for t in dataplaned ring-stat dp-bench; do
	"$p/bin/$t" --help >/dev/null || fail "$t --help exited $?"
	v=$("$p/bin/$t" --version) || fail "$t --version exited $?"
	case $v in *"$t (dataplane) "*) ;; *) fail "$t --version printed '$v'" ;; esac
done
ok "dataplaned, ring-stat, dp-bench: --help and --version"

# 6. The unit, as installed.
if command -v systemd-analyze >/dev/null 2>&1 && command -v man >/dev/null 2>&1; then
	MANPATH="$p/share/man" systemd-analyze verify "$p/lib/systemd/system/dataplaned.service" ||
		fail "systemd-analyze verify dataplaned.service"
	ok "systemd-analyze verify dataplaned.service"
else
	echo "check-package: skipped: systemd-analyze verify (systemd or man not installed)"
fi
