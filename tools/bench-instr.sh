#!/bin/sh
# bench-instr.sh BUILD - the deterministic cost figures (I1 in
# docs/benchmarks.md): instructions per 64 B local WRITE at batch 32, counted
# by callgrind, which do not move with the machine's noise. Every change to
# the hot path reports them.
#
# Service side (drain, validate, copy, complete): dataplaned under callgrind,
# one poller, --no-stats; dp-instr runs natively and keeps the SQ full
# (dp-bench's P4 loop, queue depth 4096), so every poller loop drains a full
# burst of 32. On a busy machine the client can still fall behind and the
# poller then sleeps: the script prints how often (epoll_wait's calls). The
# figure is the poller thread's whole count (callgrind --separate-threads,
# the service's second thread) over the exact number of descriptors dp-instr
# submitted (set-up WRITEs: none). It includes the poller's loop, flush and
# the few idle loops of the start and end. STATS=1 also prints it with the
# stats region on.
#
# Client side (submit + reap per descriptor): dp-instr under callgrind with
# --collect-atstart=no --toggle-collect on dp_submit, dp_poll and dp_wait:
# only instructions executed inside those libclient calls (and what they
# call: the ring code inlined in them, the clock reads) are counted, none of
# dp-instr's own loop or descriptor preparation. dp-instr's "client" shape
# submits 32 per dp_submit and waits, outside libclient, until all 32
# completions are in the CQ before one dp_poll of 32, so that no call comes
# back empty (an empty poll's count would depend on timing). The service
# runs natively and spins for the whole run, so that dp_submit never rings a
# doorbell. What still varies from run to run: dp_submit's liveness check
# polls the control socket once per millisecond of the client's run (a few
# dozen instructions per ~20 batches under callgrind: the first decimal).
#
# Cache-line transfers between the cores are not measurable with callgrind:
# it simulates one private cache per process and never invalidates a line
# the other process wrote. CACHE_SIM=1 adds --cache-sim=yes and prints
# simulated D1/LL misses per descriptor of both sides: a proxy at best
# (compulsory and capacity misses of one process), not coherence traffic.
# docs/benchmarks.md counts the shared lines per batch by hand.
#
# COUNT=N descriptors (a multiple of 32, default 1048576); KEEP=1 keeps the
# callgrind files (the directory is printed) for callgrind_annotate.
set -eu
B=${1:-build}
COUNT=${COUNT:-1048576}
command -v valgrind >/dev/null || { echo "bench-instr: needs valgrind" >&2; exit 1; }
[ -x "$B/dp-instr" ] || { echo "bench-instr: $B/dp-instr missing (make $B/dp-instr)" >&2; exit 1; }
dir=$(mktemp -d /tmp/dp-instr-XXXXXX)
svc=
trap '[ -z "$svc" ] || kill $svc 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$dir"; true' EXIT
sim=
[ -z "${CACHE_SIM:-}" ] || sim=--cache-sim=yes

wait_sock() {
	i=0
	while [ ! -S "$1" ]; do
		i=$((i + 1)); [ $i -le 600 ] || { cat "$dir"/*.log >&2; exit 1; }; sleep 0.1
	done
}

# summary line of a callgrind file: "Ir [D1mr ...]"
events() { sed -n 's/^events: *//p' "$1" | head -1; }
summary() { sed -n 's/^summary: *//p' "$1" | head -1; }

# print_side LABEL FILE N
print_side() {
	awk -v label="$1" -v n="$3" -v ev="$(events "$2")" -v sum="$(summary "$2")" 'BEGIN {
		ne = split(ev, e, " "); split(sum, s, " ")
		printf "%s: %.1f instructions per 64 B WRITE (%d over %d descriptors)\n",
			label, s[1] / n, s[1], n
		if (ne > 1) {
			for (i = 1; i <= ne; i++) v[e[i]] = s[i]
			printf "  %s, simulated cache (a proxy, not cross-core transfers): " \
				"D1 misses %.2f, LL misses %.2f per descriptor\n", label,
				(v["D1mr"] + v["D1mw"]) / n, (v["DLmr"] + v["DLmw"]) / n
		}
	}'
}

# service_side TAG LABEL [dataplaned options]
service_side() {
	tag=$1 label=$2; shift 2
	rm -f "$dir/dp.sock"
	valgrind --tool=callgrind $sim --separate-threads=yes \
		--callgrind-out-file="$dir/svc.%p" "$B/dataplaned" --socket "$dir/dp.sock" \
		--pollers 1 --provider none --spin-us 0 --log-level warn "$@" \
		2>"$dir/svc.log" &
	svc=$!
	wait_sock "$dir/dp.sock"
	n=$("$B/dp-instr" --socket "$dir/dp.sock" --count "$COUNT" --depth 4096 service |
		sed -n 's/^descriptors //p')
	kill -TERM $svc; wait $svc || true; svc=
	# The poller is the service's second thread (the -02 file).
	f=$(ls -t "$dir"/svc.*-02 | head -1)
	print_side "$label" "$f" "$n"
	# Its sleeps: epoll_wait's calls. Each means the client fell behind (a
	# busy machine) and adds the sleep path's instructions to the figure.
	sleeps=$(awk '/^c?fn=\([0-9]+\) epoll_wait$/ { sub(/^c?fn=/, "", $1); id = $1 }
		id != "" && $1 == "cfn=" id { want = 1; next }
		want && /^calls=/ { split($1, a, "="); s += a[2] } { want = 0 }
		END { print s + 0 }' "$f")
	echo "  (the poller slept $sleeps times; more than a few: the client fell behind," \
		"the figure is high: rerun on a quieter machine)"
	[ -z "${KEEP:-}" ] || mv "$f" "$dir/$tag.cg"
	rm -f "$dir"/svc.*
}

service_side service "service" --no-stats
[ -z "${STATS:-}" ] || service_side service-stats "service, stats on"

"$B/dataplaned" --socket "$dir/dp.sock" --pollers 1 --provider none --no-stats \
	--spin-us 10000000 --log-level warn 2>"$dir/svc-native.log" &
svc=$!
wait_sock "$dir/dp.sock"
valgrind --tool=callgrind $sim --collect-atstart=no --toggle-collect=dp_submit \
	--toggle-collect=dp_poll --toggle-collect=dp_wait --callgrind-out-file="$dir/client.cg" \
	"$B/dp-instr" --socket "$dir/dp.sock" --count "$COUNT" client >"$dir/client.out" \
	2>"$dir/client.log" || { cat "$dir/client.log" >&2; exit 1; }
kill -TERM $svc; wait $svc || true; svc=
n=$(sed -n 's/^descriptors //p' "$dir/client.out")
print_side "client (dp_submit + dp_poll)" "$dir/client.cg" "$n"
[ -z "${KEEP:-}" ] || echo "callgrind files kept in $dir"
exit 0
