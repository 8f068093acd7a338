#!/bin/sh
# SPDX-License-Identifier: MIT
# check-header.sh - the public header, libclient/dataplane.h, compiles
# cleanly (-Wall -Wextra -pedantic -Werror) as C99, C11 and C17 with gcc and
# as C++11, C++14, C++17 and C++20 with g++, alone and with its inline
# helpers used; and tests/cxx/api_check.cpp compiles and links against
# $B/libdataplane.a with each C++ standard.
#
# usage: tools/check-header.sh [BUILD_DIR]   (default: $B, else build)
# Set RUN=1 to also run api_check (it transfers only when a service answers
# on $DP_SOCKET or the default socket). Exit 0 all passed, 1 any failed (each
# failing standard is named), 2 bad usage or missing build.
set -u

B=${1:-${B:-build}}
CC=${CC:-gcc}
CXX=${CXX:-g++}
case "$CC" in cc) CC=gcc ;; esac
top=$(cd "$(dirname "$0")/.." && pwd)
lib="$top/$B/libdataplane.a"
[ -f "$lib" ] || lib="$B/libdataplane.a"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dp-check-header.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
failed=""

fail() {
	echo "check-header: FAIL: $1" >&2
	failed="$failed $1"
}

# A translation unit that includes the header and uses its inline helpers
# and every type, in the common subset of C and C++.
cat >"$tmp/use.h" <<'EOT'
#include "dataplane.h"
#include "dataplane.h" /* the include guard holds */
int dp_check_use(struct dp_desc *d, struct dp_cqe *e, struct dp_queue_stats *st);
int dp_check_use(struct dp_desc *d, struct dp_cqe *e, struct dp_queue_stats *st)
{
	dp_prep_write(d, 1, 2, 3, 4, 5, 6);
	dp_prep_read(d + 1, 1, 2, 3, 4, 5, 6);
	e->flags = DP_CQE_F_LOCAL | DP_CQE_F_FABRIC | DP_CQE_F_GPU | DP_CQE_F_FILE;
	st->depth = DP_ABI_VERSION + DP_ACCESS_RW + DP_FILE_BUFFERED + DP_ALLOC_HUGE +
		    DP_SEGMENT_NAME_MAX;
	return d[0].opcode == DP_OP_WRITE && d[1].opcode == DP_OP_READ;
}
EOT
printf '#include "use.h"\n' >"$tmp/use.c"
printf '#include "use.h"\n' >"$tmp/use.cpp"

WARN="-Wall -Wextra -pedantic -Werror"
for std in c99 c11 c17; do
	for opt in -O0 -O2; do
		$CC -std=$std $WARN $opt -I"$top/libclient" -I"$tmp" -c "$tmp/use.c" \
			-o "$tmp/use-$std.o" || fail "gcc -std=$std $opt"
	done
done
for std in c++11 c++14 c++17 c++20; do
	for opt in -O0 -O2; do
		$CXX -std=$std $WARN $opt -I"$top/libclient" -I"$tmp" -c "$tmp/use.cpp" \
			-o "$tmp/use-$std.o" || fail "g++ -std=$std $opt"
	done
done

# The C++ program, compiled and linked against the static library. The
# library's own needs: pthreads, and cudart when it was built with CUDA.
if [ ! -f "$lib" ]; then
	fail "no $lib (build the library first: make B=$B)"
else
	libs="-pthread"
	if nm "$lib" 2>/dev/null | grep -q ' U cuda'; then
		cuda=${CUDA_HOME:-/usr/local/cuda}
		libs="$libs -L$cuda/lib64 -Wl,-rpath,$cuda/lib64 -lcudart"
	fi
	for std in c++11 c++14 c++17 c++20; do
		$CXX -std=$std $WARN -O0 -I"$top/libclient" "$top/tests/cxx/api_check.cpp" \
			"$lib" $libs -o "$tmp/api_check-$std" ||
			fail "api_check.cpp with g++ -std=$std (compile and link)"
	done
	if [ "${RUN:-0}" = 1 ] && [ -x "$tmp/api_check-c++17" ]; then
		"$tmp/api_check-c++17" || fail "api_check (run)"
	fi
fi

if [ -n "$failed" ]; then
	echo "check-header: failed:$failed" >&2
	exit 1
fi
echo "check-header: dataplane.h clean as C99/C11/C17 and C++11/14/17/20; api_check.cpp links"
exit 0
