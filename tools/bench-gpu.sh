#!/bin/sh
# bench-gpu.sh BIN [gpu-bench args] - P8..P10: starts a private dataplaned from
# BIN (local transfers only, one poller pinned to CPU 1, spinning), runs
# BIN/gpu-bench pinned to CPU 0 against it, stops the service. BIN is the
# build tree, or a gpu-bundle's bin/ on a GPU machine.
# bench-gpu.sh BIN p13 [gpu-bench args] - P13: two services on this host over
# tcp (loopback), the initiator with --no-hmem so that GPU memory goes
# through host staging (the stage engine): GPU -> the other's host segment
# vs the same WRITEs from host memory, both columns and the ratio. Without a
# GPU the host column alone runs. CPUs: gpu-bench on 0, the initiator's
# poller on 1, the target's on 2 (1 on a 2-CPU machine, shared).
set -eu
B=${1:-build}
shift || true
dir=$(mktemp -d /tmp/dp-gpu-bench-XXXXXX)
svc= svc2=
trap 'kill $svc $svc2 2>/dev/null; wait $svc $svc2 2>/dev/null; rm -rf "$dir"' EXIT
cpus=$(nproc)
pcpu=$((cpus > 1 ? 1 : 0))
tcpu=$((cpus > 2 ? 2 : pcpu))
# The placement (a cache-line ping-pong between the two CPUs), before the
# service starts; a gpu-bundle may come without dp-bench.
if [ -x "$B/dp-bench" ]; then
	"$B/dp-bench" --cpu 0 --service-cpu $pcpu placement
else
	echo "placement: not measured ($B/dp-bench missing)"
fi
wait_sock() { # PATH LOG
	for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.05; done
	echo "bench-gpu: dataplaned did not start:" >&2
	cat "$2" >&2
	exit 1
}
if [ "${1:-}" = p13 ]; then
	shift
	port=$((20000 + $$ % 20000))
	"$B/dataplaned" --socket "$dir/b.sock" --provider tcp --server-name 127.0.0.1 \
		--rpc-port $port --cpus $tcpu --spin-us 1000000 --log-level warn 2>"$dir/b.log" &
	svc2=$!
	wait_sock "$dir/b.sock" "$dir/b.log"
	"$B/dataplaned" --socket "$dir/dp.sock" --provider tcp --server-name 127.0.0.1 \
		--no-hmem --cpus $pcpu --spin-us 1000000 --log-level warn 2>"$dir/a.log" &
	svc=$!
	wait_sock "$dir/dp.sock" "$dir/a.log"
	echo "dataplaned: initiator (--no-hmem) poller on CPU $pcpu, target poller on CPU $tcpu;" \
		"gpu-bench on CPU 0; tcp over loopback; $cpus CPUs, $(uname -r)"
	rc=0
	"$B/gpu-bench" --socket "$dir/dp.sock" --cpu 0 --service-cpu $pcpu \
		--peer 127.0.0.1:$port --peer-socket "$dir/b.sock" "$@" p13 || rc=$?
	[ $rc -eq 77 ] && echo "bench-gpu: skipped (no CUDA build)" && rc=0
	exit $rc
fi
"$B/dataplaned" --socket "$dir/dp.sock" --provider none --cpus $pcpu --spin-us 1000000 \
	--log-level warn &
svc=$!
wait_sock "$dir/dp.sock" /dev/null
echo "dataplaned: poller on CPU $pcpu; gpu-bench on CPU 0; $cpus CPUs, $(uname -r)"
rc=0
"$B/gpu-bench" --socket "$dir/dp.sock" --cpu 0 "$@" || rc=$?
[ $rc -eq 77 ] && echo "bench-gpu: skipped (no CUDA device or no CUDA build)" && rc=0
exit $rc
