# bench-services.sh - sourced by tools/bench-session.sh, bench-vmtarget.sh and
# bench-fabric.sh:
# a scratch folder, dataplaned services started and stopped there (in this
# network namespace or another), and the cleanup on exit. Set BENCH (the
# script's name, for messages) and B (the build tree) first. SVC_ARGS: more
# dataplaned options for every service started (e.g. "--stage-bufs 16").
dir=$(mktemp -d "/tmp/dp-$BENCH-XXXXXX")
pids=""
nsA="" nsB=""
stop_services() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	for p in $pids; do wait "$p" 2>/dev/null || true; done
	pids=""
	rm -f "$dir"/*.sock "$dir"/*.peer
}
cleanup() {
	stop_services
	[ -z "$nsA" ] || ip netns del "$nsA" 2>/dev/null || true
	[ -z "$nsB" ] || ip netns del "$nsB" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM
svc() { # NAME CPU PORT NS(or "") -- options... (after the defaults: they win)
	name=$1 cpu=$2 port=$3 ns=$4
	shift 5
	set -- "$B/dataplaned" --socket "$dir/$name.sock" --provider tcp --rpc-port "$port" \
		--cpus "$cpu" --log-level warn "$@"
	if [ -n "$ns" ]; then set -- ip netns exec "$ns" "$@"; fi
	# shellcheck disable=SC2086
	"$@" ${SVC_ARGS:-} 2>"$dir/$name.log" &
	pids="$pids $!"
	for _ in $(seq 200); do [ -S "$dir/$name.sock" ] && return 0; sleep 0.05; done
	echo "$BENCH: dataplaned $name did not start:" >&2
	cat "$dir/$name.log" >&2
	exit 1
}
echo "$BENCH: $(nproc) CPUs, $(uname -r); CPUs: client $C_CPU, a's poller $A_CPU, b's poller $B_CPU"
