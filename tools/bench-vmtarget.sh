#!/bin/sh
# bench-vmtarget.sh BUILD [dp-bench options] - another service's export of
# dp_register_mem memory vs of a dp_alloc region (dp-bench vm-target): two
# dataplaned, a (the initiator, its poller on A_CPU) and b (the export's
# service, its poller on B_CPU), dp-bench a client of both on C_CPU (default
# A_CPU). First on the same host (b's export reached through its client's
# pidfd, or mapped), then, as root with iproute2, a and b in two network
# namespaces over a veth pair with --no-same-host (tcp; b stages the
# registered memory through its bounce buffers). QUICK=1: a short run.
set -eu
B=${1:-build}
shift || true
A_CPU=${A_CPU:-0}
B_CPU=${B_CPU:-1}
C_CPU=${C_CPU:-$A_CPU}
q=${QUICK:+--quick}
id=$$
BENCH=bench-vmtarget
. "$(dirname "$0")/bench-services.sh"
"$B/dp-bench" --cpu "$C_CPU" --service-cpu "$B_CPU" placement

echo "== same host"
svc a "$A_CPU" 18615 "" -- --server-name 127.0.0.1
svc b "$B_CPU" 18616 "" -- --server-name 127.0.0.1
"$B/dp-bench" --socket "$dir/a.sock" --peer 127.0.0.1:18616 --peer-socket "$dir/b.sock" \
	--cpu "$C_CPU" --service-cpu "$B_CPU" $q "$@" vm-target
stop_services

if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null 2>&1; then
	echo "== tcp between namespaces: skipped (needs root and iproute2)"
	exit 0
fi
nsA=dpvA-$id nsB=dpvB-$id
vA=dpva-$id vB=dpvb-$id
net=10.81.$((id % 250 + 1))
if ! ip netns add "$nsA" || ! ip netns add "$nsB" ||
	! ip link add "$vA" type veth peer name "$vB"; then
	echo "== tcp between namespaces: skipped (no network namespaces or veth here)"
	exit 0
fi
ip link set "$vA" netns "$nsA"
ip link set "$vB" netns "$nsB"
ip -n "$nsA" addr add "$net.1/24" dev "$vA"
ip -n "$nsB" addr add "$net.2/24" dev "$vB"
for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
ip -n "$nsA" link set "$vA" up
ip -n "$nsB" link set "$vB" up
echo "== tcp between namespaces $nsA and $nsB over veth (--no-same-host)"
svc a "$A_CPU" 18615 "$nsA" -- --server-name "$net.1" --nics "$vA" --no-same-host
svc b "$B_CPU" 18615 "$nsB" -- --server-name "$net.2" --nics "$vB" --no-same-host
"$B/dp-bench" --socket "$dir/a.sock" --peer "$net.2:18615" --peer-socket "$dir/b.sock" \
	--cpu "$C_CPU" --service-cpu "$B_CPU" $q "$@" vm-target
stop_services
