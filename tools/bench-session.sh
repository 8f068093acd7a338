#!/bin/sh
# bench-session.sh BUILD [dp-bench options] - first contact with an engine
# session (dp-bench session: dp_session_open + the first 4 KiB WRITE, beside
# a named export's open + first WRITE): a session of a client of the same
# service (a), of another service of this host (b), then, as root with
# iproute2, of a service in another network namespace over a veth pair
# (tcp, --no-same-host). a's poller on A_CPU, b's on B_CPU, dp-bench on
# C_CPU (defaults: 1, 1, 0: the client busy-polls on a CPU of its own). QUICK=1: a short run.
set -eu
B=${1:-build}
shift || true
A_CPU=${A_CPU:-1}
B_CPU=${B_CPU:-1}
C_CPU=${C_CPU:-0}
q=${QUICK:+--quick}
id=$$
BENCH=bench-session
. "$(dirname "$0")/bench-services.sh"
"$B/dp-bench" --cpu "$C_CPU" --service-cpu "$B_CPU" placement

echo "== one service"
svc a "$A_CPU" 18625 "" -- --server-name 127.0.0.1
"$B/dp-bench" --socket "$dir/a.sock" --cpu "$C_CPU" --service-cpu "$A_CPU" $q "$@" session
stop_services

echo "== two services of this host"
svc a "$A_CPU" 18625 "" -- --server-name 127.0.0.1 --same-host-socket "$dir/a.peer"
svc b "$B_CPU" 18626 "" -- --server-name 127.0.0.1 --same-host-socket "$dir/b.peer"
"$B/dp-bench" --socket "$dir/a.sock" --peer 127.0.0.1:18626 --peer-socket "$dir/b.sock" \
	--cpu "$C_CPU" --service-cpu "$B_CPU" $q "$@" session
stop_services

if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null 2>&1; then
	echo "== tcp between namespaces: skipped (needs root and iproute2)"
	exit 0
fi
nsA=dpsA-$id nsB=dpsB-$id
vA=dpsa-$id vB=dpsb-$id
net=10.82.$((id % 250 + 1))
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
# Two pollers on one CPU (a 2-CPU machine) must not spin against each other:
# the target's poller progresses the tcp provider for the initiator's WRITEs.
spin=""
[ "$A_CPU" = "$B_CPU" ] && spin="--spin-us 0" && echo "(A_CPU = B_CPU: both services --spin-us 0)"
# shellcheck disable=SC2086
svc a "$A_CPU" 18625 "$nsA" -- --server-name "$net.1" --nics "$vA" --no-same-host $spin
# shellcheck disable=SC2086
svc b "$B_CPU" 18625 "$nsB" -- --server-name "$net.2" --nics "$vB" --no-same-host $spin
"$B/dp-bench" --socket "$dir/a.sock" --peer "$net.2:18625" --peer-socket "$dir/b.sock" \
	--cpu "$C_CPU" --service-cpu "$B_CPU" $q "$@" session
stop_services
