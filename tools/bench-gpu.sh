#!/bin/sh
# bench-gpu.sh BIN [gpu-bench args] - P8..P10: starts a private dataplaned from
# BIN (local transfers only, one poller pinned to CPU 1, spinning), runs
# BIN/gpu-bench pinned to CPU 0 against it, stops the service. BIN is the
# build tree, or a gpu-bundle's bin/ on a GPU machine.
set -eu
B=${1:-build}
shift || true
dir=$(mktemp -d /tmp/dp-gpu-bench-XXXXXX)
trap 'kill $svc 2>/dev/null; wait $svc 2>/dev/null; rm -rf "$dir"' EXIT
cpus=$(nproc)
pcpu=$((cpus > 1 ? 1 : 0))
# The placement (a cache-line ping-pong between the two CPUs), before the
# service starts; a gpu-bundle may come without dp-bench.
if [ -x "$B/dp-bench" ]; then
	"$B/dp-bench" --cpu 0 --service-cpu $pcpu placement
else
	echo "placement: not measured ($B/dp-bench missing)"
fi
"$B/dataplaned" --socket "$dir/dp.sock" --provider none --cpus $pcpu --spin-us 1000000 \
	--log-level warn &
svc=$!
for _ in $(seq 200); do [ -S "$dir/dp.sock" ] && break; sleep 0.05; done
echo "dataplaned: poller on CPU $pcpu; gpu-bench on CPU 0; $cpus CPUs, $(uname -r)"
rc=0
"$B/gpu-bench" --socket "$dir/dp.sock" --cpu 0 "$@" || rc=$?
[ $rc -eq 77 ] && echo "bench-gpu: skipped (no CUDA device or no CUDA build)" && rc=0
exit $rc
