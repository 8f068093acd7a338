#!/bin/sh
# bench-gpu.sh BIN [gpu-bench args] - P8..P10, P12: starts a private dataplaned
# from BIN (one poller pinned to CPU 1, spinning), runs BIN/gpu-bench pinned to
# CPU 0 against it, stops the service. BIN is the build tree, or a gpu-bundle's
# bin/ on a GPU machine.
#
# With p12 among the args: a second dataplaned (poller on CPU 2) exports the
# destination, and the run is made twice: the two services as they start by
# default (the same-host path), then both with --no-same-host over
# $P12_PROVIDER (default shm: FI_HMEM where libfabric was built with CUDA),
# so the fabric's figure stands beside it.
#
# bench-gpu.sh BIN p13 [gpu-bench args] - P13: two services on this host over
# tcp (loopback), both --no-same-host (the fabric, as between hosts), the
# initiator with --no-hmem so that GPU memory goes through host staging (the
# stage engine): GPU -> the other's host segment vs the same WRITEs from host
# memory, both columns and the ratio. Without a GPU the host column alone
# runs. CPUs: gpu-bench on 0, the initiator's poller on 1, the target's on 2
# (1 on a 2-CPU machine, shared).
#
# bench-gpu.sh BIN vmm [gpu-bench args] - engine sessions: a client of a second
# service of this host registers a cudaMalloc buffer and a VMM range (four
# cuMemMap pieces) in its engine session; WRITEs from this side's GPU
# memory into each by address, GB/s side by side, and raw cudaMemcpyAsync.
#
# bench-gpu.sh BIN pages [gpu-bench args] - batches of scattered GPU
# pages (4/16/64/256 KiB), one service and a second service of this host (its
# export, the same-host path); raw per-page cudaMemcpyAsync,
# cudaMemcpyBatchAsync, the page kernel in-process and one contiguous copy
# beside them; host <-> GPU pinned pages.
set -eu
B=${1:-build}
shift || true
dir=$(mktemp -d /tmp/dp-gpu-bench-XXXXXX)
pids=""
stop() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	for p in $pids; do wait "$p" 2>/dev/null || true; done
	pids=""
}
# KEEP_LOGS=DIR: the services' logs are copied there at the end (with
# SVC_LOG=info, the gpu engine's account of its page batches).
trap 'stop; [ -n "${KEEP_LOGS:-}" ] && cp "$dir"/*.log "$KEEP_LOGS"/ 2>/dev/null; rm -rf "$dir"' EXIT
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
svc() { # NAME CPU PROVIDER [flags...]
	n=$1 c=$2 p=$3
	shift 3
	"$B/dataplaned" --socket "$dir/$n.sock" --provider "$p" --cpus "$c" --spin-us 1000000 \
		--server-name 127.0.0.1 --log-level "${SVC_LOG:-warn}" "$@" 2>"$dir/$n.log" &
	pids="$pids $!"
	for _ in $(seq 200); do [ -S "$dir/$n.sock" ] && return 0; sleep 0.05; done
	echo "bench-gpu: dataplaned $n did not start:" >&2
	cat "$dir/$n.log" >&2
	exit 1
}
p12=false
for a in "$@"; do [ "$a" = p12 ] && p12=true; done
rc=0
if [ "${1:-}" = p13 ]; then
	shift
	port=$((20000 + $$ % 20000))
	svc b $tcpu tcp --rpc-port $port --no-same-host
	svc a $pcpu tcp --no-hmem --no-same-host
	echo "dataplaned: initiator (--no-hmem) poller on CPU $pcpu, target poller on CPU $tcpu;" \
		"gpu-bench on CPU 0; tcp over loopback, --no-same-host; $cpus CPUs, $(uname -r)"
	"$B/gpu-bench" --socket "$dir/a.sock" --cpu 0 --service-cpu $pcpu \
		--peer 127.0.0.1:$port --peer-socket "$dir/b.sock" "$@" p13 || rc=$?
	[ $rc -eq 77 ] && echo "bench-gpu: skipped (no CUDA build)" && rc=0
	exit $rc
fi
if [ "${1:-}" = vmm ]; then
	shift
	port=$((20000 + $$ % 20000))
	svc b $tcpu tcp --rpc-port $port
	svc a $pcpu tcp
	echo "dataplaned: initiator poller on CPU $pcpu, the session owner's on CPU $tcpu;" \
		"gpu-bench on CPU 0; same host; $cpus CPUs, $(uname -r)"
	"$B/gpu-bench" --socket "$dir/a.sock" --cpu 0 --service-cpu $pcpu \
		--peer 127.0.0.1:$port --peer-socket "$dir/b.sock" "$@" vmm || rc=$?
	[ $rc -eq 77 ] && echo "bench-gpu: skipped (no CUDA device or no CUDA build)" && rc=0
	exit $rc
fi
if [ "${1:-}" = pages ]; then
	shift
	port=$((20000 + $$ % 20000))
	svc b $tcpu tcp --rpc-port $port
	svc a $pcpu tcp
	echo "dataplaned: a (poller on CPU $pcpu) and b (CPU $tcpu, the second service's" \
		"export), same host; gpu-bench on CPU 0; $cpus CPUs, $(uname -r)"
	"$B/gpu-bench" --socket "$dir/a.sock" --cpu 0 --service-cpu $pcpu \
		--peer 127.0.0.1:$port --peer-socket "$dir/b.sock" "$@" pages || rc=$?
	[ $rc -eq 77 ] && echo "bench-gpu: skipped (no CUDA device or no CUDA build)" && rc=0
	exit $rc
fi
if ! $p12; then
	svc dp $pcpu none
	echo "dataplaned: poller on CPU $pcpu; gpu-bench on CPU 0; $cpus CPUs, $(uname -r)"
	"$B/gpu-bench" --socket "$dir/dp.sock" --cpu 0 "$@" || rc=$?
	[ $rc -eq 77 ] && echo "bench-gpu: skipped (no CUDA device or no CUDA build)" && rc=0
	exit $rc
fi
port=$((20000 + $$ % 20000))
for mode in same-host fabric; do
	if [ $mode = same-host ]; then
		prov=tcp
		more=""
	else
		prov=${P12_PROVIDER:-shm}
		more=--no-same-host
	fi
	# shellcheck disable=SC2086
	svc a $pcpu $prov $more
	# shellcheck disable=SC2086
	svc b $tcpu $prov --rpc-port $port $more
	echo "== P12 $mode: services on CPUs $pcpu (initiator) and $tcpu (exporter), provider" \
		"$prov${more:+, $more}; gpu-bench on CPU 0; $cpus CPUs, $(uname -r)"
	r=0
	"$B/gpu-bench" --socket "$dir/a.sock" --cpu 0 --service-cpu $pcpu \
		--peer-socket "$dir/b.sock" --peer 127.0.0.1:$port "$@" || r=$?
	[ $r -eq 77 ] && echo "bench-gpu: skipped (no CUDA device or no CUDA build)" && r=0
	[ $r -ne 0 ] && { rc=$r; cat "$dir/a.log" "$dir/b.log" >&2; }
	stop
	rm -f "$dir"/*.sock "$dir"/*.peer
	port=$((port + 1))
done
exit $rc
