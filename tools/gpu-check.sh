#!/bin/sh
# gpu-check.sh [BUNDLE] - on a GPU machine, from the repository root: the GPU
# checks of a bundle made by tools/bundle-libs (docs/gpu.md, "Running on the
# H200"), the newest first (VMM and torch's allocators, batched pages, the
# Python GPU tests), then the older suites and the pages/vmm benchmarks.
# No step starts after DEADLINE seconds (default 470: one device call is
# 600 s at most); each has a timeout of its own. The log goes to
# $OUT/log.txt (the device's output folder), else /tmp/gpu-check.log.
set -u
D=${1:-gpu-bundle}
B=$D/bin
export LD_LIBRARY_PATH=$PWD/$D/lib DP_BUILD=$PWD/$B PATH=$PWD/$B:$PATH
L=${OUT:+$OUT/log.txt}
L=${L:-/tmp/gpu-check.log}
T0=$(date +%s)
DEADLINE=${DEADLINE:-470}
el() { echo $(($(date +%s) - T0)); }
step() { echo "=== $* (t+$(el)s)" >>"$L"; }
t() {
	to=$1
	shift
	if [ "$(el)" -ge "$DEADLINE" ]; then
		echo "skipped (past DEADLINE)" >>"$L"
		return
	fi
	timeout "$to" "$@" >>"$L" 2>&1
	echo "rc=$?" >>"$L"
}
nvidia-smi -L >>"$L" 2>&1
nvidia-smi topo -m >>"$L" 2>&1
python3 -c 'import torch, sys; print("torch", torch.__version__, sys.version)' >>"$L" 2>&1
step gpu_vm
t 60 "$B/gpu_vm" --jobs 1
step gpu_vmm
t 60 "$B/gpu_vmm" --jobs 1
for m in expandable default expandable-noipc; do
	step torch-check "$m"
	t 30 python3 "$B/torch-check.py" "$B" "$m"
done
step gpu_pages
t 45 "$B/gpu_pages" --jobs 1
step gpu_multi
t 90 "$B/gpu_multi" --jobs 1
step python GPU tests
if [ -d "$D/python" ]; then
	PYTHONPATH=$PWD/$D/python t 60 python3 -m pytest -q -p no:cacheprovider \
		tests/python/test_cuda.py tests/python/test_mooncake_wheel.py::test_cuda_memory_and_stream \
		tests/python/test_nixl_api.py::test_cuda_tensors_read_and_write
fi
step bench-gpu pages
t 80 sh "$B/bench-gpu.sh" "$B" pages --quick
step bench-gpu vmm
t 30 sh "$B/bench-gpu.sh" "$B" vmm --quick
for s in gpu_samehost gpu_api gpu_ipc gpu_fairness gpu_notify gpu_stage gpu_loopback gpu_fabric \
	gpu_pinning gpu_file; do
	step "$s"
	t 40 "$B/$s" --jobs 1
done
step done
tail -c 4000 "$L"
