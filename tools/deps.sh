#!/bin/sh
# deps.sh - install the Debian packages whose checks fail.
# Each argument is CHECK=PACKAGE, CHECK being pc:NAME (pkg-config module),
# bin:NAME (a command on PATH), file:PATH or py:MODULE (importable by
# $PYTHON, default python3). Nothing is done when all pass.
# Exit codes: 0 all present (or installed), 1 missing and cannot install.
set -eu
missing=""
for arg in "$@"; do
	check=${arg%%=*}
	pkg=${arg#*=}
	kind=${check%%:*}
	what=${check#*:}
	case $kind in
	pc) pkg-config --exists "$what" 2>/dev/null && continue ;;
	bin) command -v "$what" >/dev/null 2>&1 && continue ;;
	file) [ -e "$what" ] && continue ;;
	py) "${PYTHON:-python3}" -c "import $what" >/dev/null 2>&1 && continue ;;
	*) echo "deps.sh: bad check '$arg'" >&2; exit 1 ;;
	esac
	case " $missing " in *" $pkg "*) ;; *) missing="$missing $pkg" ;; esac
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "deps.sh: missing packages:$missing (install them as root with apt-get)" >&2
	exit 1
fi
echo "deps.sh: installing$missing"
export DEBIAN_FRONTEND=noninteractive
# An update is needed on a fresh machine (the package lists may be empty).
apt-get update -q >/dev/null || true
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing >/dev/null
