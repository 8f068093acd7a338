#!/bin/sh
# build-libfabric.sh SOURCE PREFIX - builds an upstream libfabric 2.x with
# CUDA support and the efa, shm, tcp, rxm and sockets providers, and installs
# it into PREFIX, for `make LIBFABRIC=PREFIX` (README.md, "Other targets").
#
# SOURCE is a release tarball you downloaded (.tar.bz2, .tar.gz or .tar.xz),
# or the folder it unpacks to. Upstream publishes the releases on the GitHub
# releases page of ofiwg/libfabric, e.g. libfabric-2.6.0.tar.bz2. This script
# never downloads anything: it builds what it is given.
#
# Why: Debian 12's libfabric 1.17 is built without CUDA; its shm provider
# offers FI_HMEM and then refuses every FI_HMEM_CUDA registration, so GPU
# memory over the fabric is staged through host buffers (docs/gpu.md, "Over
# the fabric"). This build registers CUDA memory. CUDA and NVML are opened at
# run time (--enable-cuda-dlopen), so the same build runs with or without a
# GPU and links no CUDA library; building it needs the CUDA toolkit's headers
# ($CUDA_HOME, default /usr/local/cuda).
#
# Needs a C compiler, make and libibverbs-dev (the efa provider), and, for a
# source tree without a configure script (a git snapshot rather than a
# release tarball), autoconf, automake and libtool: installed through
# tools/deps.sh when missing (root and apt-get), else named and the script
# stops. About 6 minutes on 2 cores. Exit codes: 0 built, 1 failed (the end
# of the failing step's log is printed), 2 usage.
set -eu
usage="usage: build-libfabric.sh SOURCE(.tar.bz2|.tar.gz|.tar.xz|folder) PREFIX"
[ $# -eq 2 ] || {
	echo "$usage" >&2
	exit 2
}
src=$1
prefix=$2
here=$(cd "$(dirname "$0")" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
case $prefix in
/*) ;;
*) prefix=$(pwd)/$prefix ;;
esac
if [ ! -e "$src" ]; then
	echo "build-libfabric.sh: $src: no such file or folder" >&2
	echo "$usage" >&2
	exit 2
fi
if [ ! -f "$cuda/include/cuda_runtime.h" ]; then
	echo "build-libfabric.sh: no CUDA toolkit headers in $cuda/include (set CUDA_HOME)" >&2
	exit 1
fi

work=$(mktemp -d /tmp/libfabric-build-XXXXXX)
trap 'rm -rf "$work"' EXIT
if [ -d "$src" ]; then
	# Built in a copy: the tree given is left as it was.
	cp -R "$src" "$work/src"
	tree=$work/src
else
	mkdir "$work/src"
	# GNU tar picks the decompressor from the file itself.
	tar -xf "$src" -C "$work/src"
	tree=$(find "$work/src" -mindepth 1 -maxdepth 1 -type d | head -n 1)
fi
if [ ! -f "$tree/configure" ] && [ ! -f "$tree/autogen.sh" ]; then
	echo "build-libfabric.sh: $src holds no libfabric source (no configure, no autogen.sh)" >&2
	exit 1
fi

need="bin:cc=gcc bin:make=make file:/usr/include/infiniband/verbs.h=libibverbs-dev"
[ -f "$tree/configure" ] || need="$need bin:autoconf=autoconf bin:automake=automake bin:libtoolize=libtool"
# shellcheck disable=SC2086
sh "$here/deps.sh" $need

# libfabric's CUDA code includes nvml.h for the types of the NVML calls it
# opens at run time; some CUDA toolkits ship no nvml.h. Only its return type
# and NVML_SUCCESS are used.
inc=$work/include
mkdir "$inc"
if [ ! -f "$cuda/include/nvml.h" ]; then
	cat >"$inc/nvml.h" <<'EOF'
/* What libfabric's hmem_cuda.c needs of NVML when it opens
 * libnvidia-ml.so.1 at run time (--enable-cuda-dlopen). */
#ifndef DP_NVML_MIN_H
#define DP_NVML_MIN_H
typedef enum nvmlReturn_enum { NVML_SUCCESS = 0 } nvmlReturn_t;
#endif
EOF
fi

cd "$tree"
if [ ! -f configure ]; then
	./autogen.sh >autogen.log 2>&1 || {
		tail -20 autogen.log
		exit 1
	}
fi
./configure --prefix="$prefix" --with-cuda="$cuda" --enable-cuda-dlopen \
	--enable-efa=yes --enable-shm=yes --enable-tcp=yes --enable-rxm=yes --enable-sockets=yes \
	--disable-verbs --disable-psm2 --disable-psm3 --disable-opx --disable-usnic \
	--disable-ucx --disable-lpp --disable-cxi >configure.log 2>&1 || {
	tail -20 configure.log
	exit 1
}
make -j"$(nproc)" CPPFLAGS="-I$inc -I$cuda/include" >make.log 2>&1 || {
	tail -20 make.log
	exit 1
}
make install >install.log 2>&1 || {
	tail -20 install.log
	exit 1
}
version=$(sed -n 's/^Version: *//p' "$prefix/lib/pkgconfig/libfabric.pc")
echo "build-libfabric.sh: libfabric $version with CUDA (opened at run time) in $prefix"
echo "  make LIBFABRIC=$prefix ...   builds the project against it (rpath to $prefix/lib)"
