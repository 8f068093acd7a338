#!/bin/sh
# bench-failover.sh BUILD - make bench-failover (issue 46; docs/benchmarks.md,
# "Rail failover"): two dataplaned in two network namespaces joined by two
# veth pairs, one rail each (tcp provider, --no-same-host); a client of a
# (failover-bench, in the root namespace) keeps 64 WRITEs or READs of 1 MiB
# or 64 KiB in flight into an export of b's client, bytes verified, while
# one rail is cut CUTS times (default 10; QUICK=1: 3), 1 s each, 1 s apart:
# its veth end in a's namespace set down, or every packet it sends dropped
# (netem loss 100%, or where the kernel has no sch_netem a pfifo of length
# 0: the same silent loss). Then the rail shaped (tbf, both ends) to a tenth
# of what the other carries alone. Prints one table, the CPUs everything ran
# on, and what a's log said of the rail. Needs root and iproute2.
# Knobs: A_CPU / B_CPU (the services' pollers; default 0 and 1), C_CPU (the
# client; default A_CPU), CUTS, QUICK=1, SPIN (--spin-us, default 50).
set -eu
B=${1:-build}
A_CPU=${A_CPU:-0}
B_CPU=${B_CPU:-1}
C_CPU=${C_CPU:-$A_CPU}
BENCH=bench-failover
. "$(dirname "$0")/bench-services.sh"
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
	echo "bench-failover: needs root, ip and tc (iproute2): it creates network namespaces" >&2
	exit 1
fi
if [ -n "${QUICK:-}" ]; then cuts=${CUTS:-3}; else cuts=${CUTS:-10}; fi
id=$$
nsA=dpxA-$id nsB=dpxB-$id
x=$((id % 250 + 1))
ip netns add "$nsA"
ip netns add "$nsB"
for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
for p in 0 1; do
	ip link add "dpxa$p-$id" type veth peer name "dpxb$p-$id"
	ip link set "dpxa$p-$id" netns "$nsA"
	ip link set "dpxb$p-$id" netns "$nsB"
	ip -n "$nsA" addr add "10.$((85 + p)).$x.1/24" dev "dpxa$p-$id"
	ip -n "$nsB" addr add "10.$((85 + p)).$x.2/24" dev "dpxb$p-$id"
	ip -n "$nsA" link set "dpxa$p-$id" up
	ip -n "$nsB" link set "dpxb$p-$id" up
done
va=dpxa1-$id vb=dpxb1-$id # the rail cut and slowed
ipB=10.85.$x.2

echo "bench-failover: $(nproc) CPUs, $(uname -r), namespaces $nsA/$nsB, two veth rails each"
"$B/dp-bench" --cpu "$A_CPU" --service-cpu "$B_CPU" placement
svc a "$A_CPU" 18715 "$nsA" -- --nics "dpxa0-$id,$va" --server-name "10.85.$x.1" \
	--spin-us "${SPIN:-50}" --no-same-host --log-level info
svc b "$B_CPU" 18715 "$nsB" -- --nics "dpxb0-$id,$vb" --server-name "$ipB" \
	--spin-us "${SPIN:-50}" --no-same-host
echo "CPUs: a's poller $A_CPU (in $nsA), b's poller $B_CPU (in $nsB), the client $C_CPU (root namespace)"

down="ip -n $nsA link set $va down"
up="ip -n $nsA link set $va up"
loss="tc -n $nsA qdisc add dev $va root netem loss 100% 2>/dev/null || tc -n $nsA qdisc add dev $va root pfifo limit 0"
unloss="tc -n $nsA qdisc del dev $va root"
fb() { # OP SIZE CUT RESTORE [more]
	op=$1 size=$2 cut=$3 restore=$4
	shift 4
	"$B/failover-bench" --socket "$dir/a.sock" --peer-socket "$dir/b.sock" \
		--peer "$ipB:18715" --rail "$va" --op "$op" --size "$size" --depth 64 \
		--cpu "$C_CPU" --cut "$cut" --restore "$restore" "$@"
}
: >"$dir/rows"
for kind in down loss; do
	if [ $kind = down ]; then c=$down r=$up; else c=$loss r=$unloss; fi
	for op in write read; do
		for size in 1048576 65536; do
			echo "== $op $size B, rail $va cut ($kind) $cuts times"
			out=$(fb $op $size "$c" "$r" --cuts "$cuts") || true
			echo "$out" | grep -v '^SUMMARY'
			echo "$out" | sed -n "s/^SUMMARY /$kind /p" >>"$dir/rows"
		done
	done
done
: >"$dir/slow"
for op in write read; do
	echo "== $op 1 MiB, rail $va shaped to a tenth (tbf, both ends)"
	out=$(fb $op 1048576 "$down" "$up" \
		--slow "tc -n $nsA qdisc add dev $va root tbf rate %umbit burst 256kb latency 50ms && tc -n $nsB qdisc add dev $vb root tbf rate %1\$umbit burst 256kb latency 50ms") || true
	echo "$out" | grep -v '^SLOW'
	echo "$out" | sed -n 's/^SLOW //p' >>"$dir/slow"
	tc -n "$nsA" qdisc del dev "$va" root 2>/dev/null || true
	tc -n "$nsB" qdisc del dev "$vb" root 2>/dev/null || true
done

echo "== what a's log said of the rails (every cut lasts 1000 ms: a rail back sooner was taken out by a stall, not a cut)"
grep -m2 -E 'taken out of the stripe|back in the stripe' "$dir/a.log" | sed 's/^/  /'
sed -n 's/.*rail \([0-9]*\) (\([^)]*\)).* answers again after \([0-9]*\) ms out.*/\2 \3/p' "$dir/a.log" |
	awk '{ n++; if ($2 < 500) { s++; st[$1]++ } } END {
		printf "  taken out and back %d times; %d of them (a stall, no cut) back within 500 ms:", n, s
		for (r in st) printf " %s %d", r, st[r]; print "" }'
stop_services

awk '
function v(k,   i) { for (i = 1; i < NF; i++) if ($i == k) return $(i + 1); return "?" }
BEGIN {
	print "Rail failover, two tcp rails over veth, queue depth 64, bytes verified (ms; p50 / max over the cuts)"
	printf "| cut | op | size | cuts | failed | re-posted | taken out | back to 90%% of one rail | longest descriptor | rail back after restore: max (within 1 s) |\n"
	printf "|---|---|---|---|---|---|---|---|---|---|\n"
}
{
	printf "| %s | %s | %s | %s | %s%s | %s | %s / %s | %s / %s | %s / %s | %s (%s of %s) |\n",
		$1 == "down" ? "link down" : "100% loss", $2, $3 == 1048576 ? "1 MiB" : "64 KiB",
		v("cuts"), v("failed"), v("bad") == 0 ? "" : " (" v("bad") " bad bytes)", v("reposted"),
		v("detect_p50"), v("detect_max"), v("recover_p50"), v("recover_max"),
		v("longest_p50"), v("longest_max"), v("back_max"), v("back_1s"), v("cuts")
}' "$dir/rows"
awk '
function v(k,   i) { for (i = 1; i < NF; i++) if ($i == k) return $(i + 1); return "?" }
BEGIN { print ""; print "One rail shaped to a tenth of the other (tbf, both ends), 1 MiB, depth 64 (GB/s)"
	print "| op | both rails | the other alone | with the slow rail | ratio | target | failed |"
	print "|---|---|---|---|---|---|---|" }
{ printf "| %s | %s | %s | %s | %sx | >= 0.9x %s | %s |\n", $1, v("both"), v("alone"), v("slowed"),
	v("ratio"), (v("ratio") >= 0.9 ? "PASS" : "MISS"), v("failed") }' "$dir/slow"
