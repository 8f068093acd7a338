# SPDX-License-Identifier: MIT
"""Builds the dataplane package: the C extension over libclient (compiled in,
from this source tree) and the pure-Python modules. Offline, with Debian's
python3-setuptools:

    pip install --no-build-isolation --no-index libclient/python

(docs/python.md). CUDA: like the Makefile, on when nvcc is on PATH or in
$CUDA_HOME (default /usr/local/cuda); DP_CUDA=0 or 1 forces it.
"""
import glob
import os
import re
import shutil
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
if not os.path.exists(os.path.join(TOP, "libclient", "dataplane.h")):
    sys.exit("setup.py: build from the dataplane source tree (libclient/python in it)")

# The version: DP_VERSION_STRING of libclient/dp_version.h, the only place
# it is written (docs/operations.md).
with open(os.path.join(TOP, "libclient", "dp_version.h")) as f:
    VERSION = re.search(r'#define DP_VERSION_STRING "([^"]+)"', f.read()).group(1)

# libclient's sources, copied beside the build so that setuptools keeps its
# objects inside build/ (it would follow '..' out of it).
src_dir = os.path.join(HERE, "build", "dpsrc")
os.makedirs(src_dir, exist_ok=True)
# The extension's own files: _dataplane.c (the module) and one per object.
sources = sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "dataplane", "*.c")))
for path in sorted(glob.glob(os.path.join(TOP, "libclient", "*.c")) +
                   glob.glob(os.path.join(TOP, "common", "*.c")) +
                   [os.path.join(TOP, "ring", "ring.c")]):
    name = os.path.basename(os.path.dirname(path)) + "_" + os.path.basename(path)
    shutil.copyfile(path, os.path.join(src_dir, name))
    sources.append(os.path.relpath(os.path.join(src_dir, name), HERE))

cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
cuda = os.environ.get("DP_CUDA")
if cuda is None:
    cuda = "1" if (shutil.which("nvcc") or os.path.exists(os.path.join(cuda_home, "bin", "nvcc"))) else "0"
macros = [("_GNU_SOURCE", None)]
include_dirs = [os.path.join(TOP, d) for d in ("libclient", "common", "ring")]
libraries, library_dirs, rpath = [], [], []
if cuda == "1":
    macros.append(("DP_HAVE_CUDA", None))
    include_dirs.append(os.path.join(cuda_home, "include"))
    libraries.append("cudart")
    library_dirs.append(os.path.join(cuda_home, "lib64"))
    rpath.append(os.path.join(cuda_home, "lib64"))

ext = Extension(
    "dataplane._dataplane",
    sources=sources,
    define_macros=macros,
    include_dirs=include_dirs,
    libraries=libraries,
    library_dirs=library_dirs,
    runtime_library_dirs=rpath,
    extra_compile_args=["-std=gnu11", "-pthread", "-fvisibility=hidden",
                        "-Wno-missing-field-initializers"],
    extra_link_args=["-pthread"],
    py_limited_api=True,
)

setup(
    name="dataplane",
    version=VERSION,
    description="Python binding of libclient, the client library of dataplaned",
    license="MIT",
    packages=["dataplane"],
    package_data={"dataplane": ["*.pyi", "py.typed"]},
    ext_modules=[ext],
    python_requires=">=3.11",
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
