#!/bin/sh
# bench-fabric.sh BUILD - P6, P7 (docs/benchmarks.md, "Targets"): two dataplaned in two
# network namespaces joined by a veth pair, tcp provider; dp-bench's fabric
# mode side by side with fi_pingpong and ucx_perftest between the same
# namespaces. Then the self-loopback bypass: the same transfers to a segment
# of the local service and to one of a second service on the same host.
# The peers run with no dataplaned of ours alive: each round starts services
# a and b, runs dp-bench, stops them, then runs fi_pingpong (and, after the
# rounds, ucx_perftest); a check of the dataplaned processes alive (anyone's)
# and their pollers' CPUs is printed with each peer run, and the placement
# (a cache-line ping-pong between A_CPU and B_CPU) with each round.
# Needs root (ip netns). Knobs: QUICK=1 (short run), ROUNDS=N (ours and the
# peer's alternate N times; default 5, 2 with QUICK), A_CPU / B_CPU (pollers of
# the initiating and the target service; default 0 and 1), C_CPU (dp-bench's
# CPU; default A_CPU: on 2 cores it shares a's, and sleeps in dp_wait; on a
# CPU of its own it busy-polls, as fi_pingpong's client does), SPIN (their
# --spin-us; default 50; fi_pingpong never sleeps, so SPIN=1000000 with C_CPU
# set is the like-for-like run on a machine with the CPUs for it).
#
# bench-fabric.sh BUILD shm runs only the last part, which needs no root: two
# services in this namespace over the shm provider (--provider shm
# --no-same-host), dp-bench's 64 B WRITE p50 beside fi_pingpong -p shm's
# round trip in the same run (a millisecond per WRITE before the
# target's poller counted peers' RMA as work).
set -eu
B=${1:-build}
mode=${2:-all}
A_CPU=${A_CPU:-0}
B_CPU=${B_CPU:-1}
C_CPU=${C_CPU:-$A_CPU}
BENCH=bench-fabric
. "$(dirname "$0")/bench-services.sh"

# shm: services a and b on this host, their pollers on A_CPU and B_CPU,
# dp-bench 64 B WRITEs from a's client into b's export; rounds alternate
# with fi_pingpong -p shm (server B_CPU, client A_CPU).
shm_rounds() { # ROUNDS QUICK
	sq=${2:+--quick}
	sbusy=""
	if [ "$C_CPU" != "$A_CPU" ]; then sbusy=--busy-poll; fi
	echo "== shm: two services on this host (--provider shm --no-same-host); a (poller $A_CPU) WRITEs 64 B to b (poller $B_CPU), client $C_CPU; --spin-us ${SPIN:-50}; peer fi_pingpong -p shm -e rdm -S 64 (server $B_CPU, client $A_CPU)"
	: >"$dir/shm-rounds"
	for r in $(seq "$1"); do
		for s in b:18615:$B_CPU a:18616:$A_CPU; do
			n=${s%%:*} rest=${s#*:}
			svc "$n" "${rest#*:}" "${rest%%:*}" "" -- --provider shm --no-same-host \
				--server-name 127.0.0.1 --spin-us "${SPIN:-50}"
		done
		out=$("$B/dp-bench" --socket "$dir/a.sock" --peer 127.0.0.1:18615 \
			--peer-socket "$dir/b.sock" --cpu "$C_CPU" \
			--service-cpu "$B_CPU" $sbusy $sq fabric) || { cat "$dir"/*.log >&2; exit 1; }
		stop_services
		p50=$(echo "$out" | sed -n 's/^P7 .* p50 \([0-9.]*\) us.*/\1/p')
		p99=$(echo "$out" | sed -n 's/^P7 .* p99 \([0-9.]*\) us.*/\1/p')
		taskset -c "$B_CPU" fi_pingpong -p shm -e rdm -S 64 -I 20000 >/dev/null 2>&1 &
		srv=$!
		sleep 0.3
		fp=$(taskset -c "$A_CPU" fi_pingpong -p shm -e rdm -S 64 -I 20000 127.0.0.1 \
			2>/dev/null | awk 'NF == 8 && $1 !~ /bytes/ {print $7}')
		wait "$srv" 2>/dev/null || true
		echo "$p50 $p99 ${fp:-0}" | tee -a "$dir/shm-rounds" |
			awk -v r="$r" '{printf "  round %d: dataplane 64 B WRITE p50 %.2f us, p99 %.2f us; fi_pingpong -p shm %.2f usec/xfer (round trip %.2f us)\n", r, $1, $2, $3, 2 * $3}'
	done
	awk '
	function med(a, n,   i, j, t) {
		for (i = 2; i <= n; i++)
			for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	{ n++; p[n] = $1; f[n] = $3; rr[n] = $3 > 0 ? $1 / (2 * $3) : 0 }
	END {
		printf "shm, 64 B WRITE across two services of one host, one outstanding (us, median of %d rounds)\n", n
		printf "  dataplane p50 (a full round trip)        %7.2f\n", med(p, n)
		printf "  fi_pingpong -p shm round trip (2 x usec/xfer) %7.2f   ratio %.2fx (median of per-round ratios)   target <= 3x   %s\n",
			2 * med(f, n), med(rr, n), (med(rr, n) > 0 && med(rr, n) <= 3) ? "PASS" : "MISS"
	}' "$dir/shm-rounds"
}
if [ "$mode" = shm ]; then
	if [ -n "${QUICK:-}" ]; then shm_rounds "${ROUNDS:-2}" 1; else shm_rounds "${ROUNDS:-5}" ""; fi
	exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null 2>&1; then
	echo "bench-fabric: needs root and iproute2 (it creates network namespaces)" >&2
	exit 1
fi
q=${QUICK:+--quick}
id=$$
nsA=dpbA-$id nsB=dpbB-$id vA=dpba-$id vB=dpbb-$id
net=10.79.$((id % 250 + 1))
ipA=$net.1 ipB=$net.2
busy=""
if [ "$C_CPU" != "$A_CPU" ] && [ "$C_CPU" != "$B_CPU" ]; then busy=--busy-poll; fi

ip netns add "$nsA"
ip netns add "$nsB"
ip link add "$vA" type veth peer name "$vB"
ip link set "$vA" netns "$nsA"
ip link set "$vB" netns "$nsB"
ip -n "$nsA" addr add "$ipA/24" dev "$vA"
ip -n "$nsB" addr add "$ipB/24" dev "$vB"
for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
ip -n "$nsA" link set "$vA" up
ip -n "$nsB" link set "$vB" up

# CPU plan on this 2-core machine: the client (dp-bench) and the initiating
# service's poller on A_CPU (0), the target's poller on B_CPU (1), as
# fi_pingpong's client on A_CPU and server on B_CPU. Pollers spin 50 us,
# then sleep.
fsvc() { # NS NAME IP NIC PORT CPU
	svc "$2" "$6" "$5" "$1" -- --nics "$4" --server-name "$3" --spin-us "${SPIN:-50}" \
		--no-same-host
}
echo "bench-fabric: $(nproc) CPUs, $(uname -r), libfabric $(fi_info --version | awk '/libfabric:/{print $2}'), namespaces $nsA/$nsB over veth"
"$B/dp-bench" --cpu "$A_CPU" --service-cpu "$B_CPU" placement
# Which dataplaned processes are alive, and whether a poller sits on the
# peer's CPUs; our own services are stopped whenever this runs.
check() {
	"$B/dp-bench" --cpu "$A_CPU" --service-cpu "$B_CPU" check
}
if [ -n "$q" ]; then rounds=${ROUNDS:-2} bi=50 li=5000; else rounds=${ROUNDS:-5} bi=200 li=20000; fi

# fi_pingpong: server in b's namespace on B_CPU, client in a's on A_CPU.
pingpong() { # SIZE ITERS -> "MB/sec usec/xfer"
	ip netns exec "$nsB" taskset -c "$B_CPU" fi_pingpong -p tcp -e rdm -S "$1" -I "$2" \
		>/dev/null 2>&1 &
	srv=$!
	sleep 0.5
	ip netns exec "$nsA" taskset -c "$A_CPU" fi_pingpong -p tcp -e rdm -S "$1" -I "$2" "$ipB" \
		2>/dev/null | awk 'NF == 8 && $1 !~ /bytes/ {print $6, $7}'
	wait "$srv" 2>/dev/null || true
}

# Rounds alternate ours and the peer's, so that both see the same noise (this
# machine is shared); the report takes medians.
echo "== $rounds rounds; CPUs: dataplane: client $C_CPU in the root namespace (${busy:-sleeping in dp_wait}), a ($ipA, poller $A_CPU) WRITEs to b ($ipB, poller $B_CPU); peer fi_pingpong: client $A_CPU in $nsA, server $B_CPU in $nsB, run after a and b have stopped"
: >"$dir/rounds"
for r in $(seq "$rounds"); do
	fsvc "$nsA" a "$ipA" "$vA" 18515 "$A_CPU"
	fsvc "$nsB" b "$ipB" "$vB" 18515 "$B_CPU"
	out=$("$B/dp-bench" --socket "$dir/a.sock" --peer "$ipB:18515" \
		--peer-socket "$dir/b.sock" --cpu "$C_CPU" --service-cpu "$B_CPU" $busy $q fabric)
	stop_services
	[ "$r" = 1 ] && echo "$out" | grep '^fabric:'
	pl=$(echo "$out" | sed -n 's/^placement: .*: \([0-9.]*\) ns round trip.*/\1/p')
	bw1=$(echo "$out" | sed -n 's/^P6 .* 1 outstanding \([0-9.]*\) GB.*/\1/p')
	bwn=$(echo "$out" | sed -n 's/^P6 .* outstanding \([0-9.]*\) GB\/s$/\1/p')
	p50=$(echo "$out" | sed -n 's/^P7 .* p50 \([0-9.]*\) us.*/\1/p')
	chk=$(check)
	fpb=$(pingpong 4194304 $bi)
	fpl=$(pingpong 64 $li)
	echo "$bw1 $bwn $p50 ${fpb:-0 0} ${fpl:-0 0}" | tee -a "$dir/rounds" |
		awk -v r="$r" -v pl="${pl:-?}" '{printf "  round %d: placement %s ns; ours %.3f / %.3f GB/s (1 / 8 outstanding), p50 %.2f us (a round trip); fi_pingpong %.3f GB/s (1 in flight), %.2f usec/xfer (half a round trip)\n", r, pl, $1, $2, $3, $4 / 1000, $7}'
	echo "  $chk"
done

# ucx_perftest put_bw over tcp, once: server in b's namespace, client in a's.
ucx=""
if command -v ucx_perftest >/dev/null 2>&1; then
	echo "== ucx_perftest: server $B_CPU in $nsB, client $A_CPU in $nsA; no service of ours running"
	check
	ip netns exec "$nsB" taskset -c "$B_CPU" env UCX_TLS=tcp ucx_perftest >"$dir/ucx-srv.log" 2>&1 &
	usrv=$!
	sleep 0.5
	ucx=$(ip netns exec "$nsA" taskset -c "$A_CPU" env UCX_TLS=tcp timeout 120 ucx_perftest "$ipB" \
		-t ucp_put_bw -s 4194304 -n $((bi * 2)) -w 20 2>"$dir/ucx.log" |
		awk '/^Final:/ {print $7}') || true
	kill "$usrv" 2>/dev/null || true
	wait "$usrv" 2>/dev/null || true
fi

awk -v ucx="$ucx" '
function verdict(ok) { return ok ? "PASS" : "MISS" }
function med(a, n,   i, j, t) {
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
	n++; b1[n] = $1; bn[n] = $2; p[n] = $3; fb[n] = $4 / 1000; fl[n] = $7
	# P6 like for like: fi_pingpong has one message in flight, so it is
	# set against our 1-outstanding figure (8 outstanding has no peer here).
	rb[n] = $4 > 0 ? $1 / ($4 / 1000) : 0; rl[n] = $7 > 0 ? $3 / $7 : 0
	rr[n] = $7 > 0 ? $3 / (2 * $7) : 0
}
END {
	peer = med(fb, n); lat = med(fl, n)
	printf "P6 fabric bandwidth, 4 MiB WRITEs, tcp provider across veth (GB/s, median of %d rounds)\n", n
	printf "  dataplane, 8 outstanding                %7.3f   (no fi_pingpong figure with 8 in flight)\n", med(bn, n)
	printf "  dataplane, 1 outstanding                %7.3f\n", med(b1, n)
	printf "  fi_pingpong -p tcp -e rdm -S 4194304    %7.3f   ratio %.2fx (1 outstanding vs its 1 in flight, median of per-round ratios)   target >= 0.9x   %s\n",
		peer, med(rb, n), verdict(med(rb, n) >= 0.9)
	if (ucx != "") {
		u = ucx * 1048576 / 1e9     # ucx_perftest MB/s (2^20 B/s) -> GB/s
		printf "  ucx_perftest -t ucp_put_bw, UCX_TLS=tcp %7.3f   ratio %.2fx (one run)   target >= 1.0x   %s\n",
			u, med(bn, n) / u, verdict(med(bn, n) >= u)
	} else
		printf "  ucx_perftest: did not run\n"
	printf "P7 fabric latency, 64 B WRITE, one outstanding (us, median of %d rounds)\n", n
	printf "  dataplane p50 (a full round trip)       %7.2f\n", med(p, n)
	printf "  fi_pingpong -p tcp -e rdm -S 64, usec/xfer as it reports it (half a round trip) %5.2f   ratio %.2fx (median of per-round ratios)   target <= 1.2x   %s\n",
		lat, med(rl, n), verdict(med(rl, n) <= 1.2)
	printf "  fi_pingpong full round trip (2 x usec/xfer)  %7.2f   ratio %.2fx (like for like, median of per-round ratios)\n",
		2 * lat, med(rr, n)
	printf "  (a dataplane WRITE completes once the target has placed it: data there, ack back,\n"
	printf "   a full round trip, after client -> service on this side. fi_pingpong prints\n"
	printf "   elapsed / (iterations x 2), half of its send+receive round trip. The <= 1.2x\n"
	printf "   target sets our round trip against that half: matching fi_pingpong round trip\n"
	printf "   for round trip would read 2.00x against it.)\n"
}' "$dir/rounds"
[ -n "$ucx" ] || { echo "ucx_perftest log:"; tail -5 "$dir/ucx.log" 2>/dev/null || true; }

echo "== bypass: a segment of service a vs one of service c, both in $nsA (same host); CPUs: client $C_CPU, a's poller $A_CPU, c's poller $B_CPU"
fsvc "$nsA" a "$ipA" "$vA" 18515 "$A_CPU"
fsvc "$nsA" c "$ipA" "$vA" 18516 "$B_CPU" # a second service beside a
"$B/dp-bench" --socket "$dir/a.sock" --peer "$ipA:18516" --peer-socket "$dir/c.sock" \
	--cpu "$C_CPU" --service-cpu "$B_CPU" $busy $q bypass
stop_services

if [ -n "$q" ]; then shm_rounds "$rounds" 1; else shm_rounds "$rounds" ""; fi
