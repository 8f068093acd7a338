#!/bin/sh
# bench-python.sh [BUILD_DIR] - `make bench-python`: Python vs C on one
# dataplaned of its own (poller pinned to SERVICE_CPU, --spin-us 1 s,
# --provider none), both clients pinned to CLIENT_CPU, in one run:
#   batch of 32 64 B WRITEs, submitted and reaped (dp-bench rate vs
#     tools/bench-python.py rate), ns per batch; target Python <= 1.5x C
#   single 64 B WRITE p50, one outstanding (dp-bench latency vs
#     bench-python.py latency)
# ROUNDS rounds (default 3), C and Python alternating; medians printed.
# QUICK=0 for dp-bench's full sizes (10 M descriptors, 200 k samples).
# Prints the placement (dp-bench's cache-line ping-pong) first.
set -eu
B=${1:-build}
PYTHON=${PYTHON:-python3}
cpus=$(nproc)
ccpu=${CLIENT_CPU:-0}
pcpu=${SERVICE_CPU:-$((cpus > 1 ? 1 : 0))}
rounds=${ROUNDS:-3}
quick=--quick
[ "${QUICK:-1}" = 0 ] && quick=
tmp=$(mktemp -d /tmp/dp-bench-python-XXXXXX)
svc=
cleanup() {
	[ -n "$svc" ] && kill "$svc" 2>/dev/null && wait "$svc" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

"$B/dataplaned" --socket "$tmp/dp.sock" --cpus "$pcpu" --spin-us 1000000 --log-level warn \
	--provider none >"$tmp/dataplaned.log" 2>&1 &
svc=$!
i=0
while [ ! -S "$tmp/dp.sock" ]; do
	i=$((i + 1))
	[ $i -le 200 ] || { cat "$tmp/dataplaned.log"; echo "bench-python: no service" >&2; exit 1; }
	sleep 0.05
done
echo "bench-python: clients on CPU $ccpu, dataplaned's poller on CPU $pcpu; $cpus CPUs, $(uname -r), $($PYTHON -c 'import sys; print("Python", sys.version.split()[0])')"
"$B/dp-bench" --socket "$tmp/dp.sock" --cpu "$ccpu" --service-cpu "$pcpu" placement 2>&1 |
	grep '^placement' || true
r=1
while [ $r -le "$rounds" ]; do
	"$B/dp-bench" --socket "$tmp/dp.sock" --cpu "$ccpu" --service-cpu "$pcpu" --no-peers \
		--json $quick rate 2>/dev/null >"$tmp/c-rate.$r"
	"$B/dp-bench" --socket "$tmp/dp.sock" --cpu "$ccpu" --service-cpu "$pcpu" --no-peers \
		--json $quick latency 2>/dev/null >"$tmp/c-lat.$r"
	PYTHONPATH="$B/python" taskset -c "$ccpu" "$PYTHON" tools/bench-python.py \
		--socket "$tmp/dp.sock" --json $quick >"$tmp/py.$r"
	r=$((r + 1))
done
"$PYTHON" - "$tmp" "$rounds" <<'PY'
import json, statistics as st, sys
d, n = sys.argv[1], int(sys.argv[2])
load = lambda f: json.load(open(f"{d}/{f}"))
c_batch = st.median(32e9 / load(f"c-rate.{r}")["rate"]["desc_per_s"] for r in range(1, n + 1))
c_p50 = st.median(load(f"c-lat.{r}")["latency"]["p50_ns"] for r in range(1, n + 1))
py = [load(f"py.{r}") for r in range(1, n + 1)]
p_batch = st.median(x["batch32_ns"] for x in py)
p_run = st.median(x["run_batch32_ns"] for x in py)
p_p50 = st.median(x["p50_ns"] for x in py)
ratio = p_batch / c_batch
print(f"batch of 32 64 B WRITEs, submitted and reaped (median of {n} rounds, ns per batch):")
print(f"  C (dp-bench rate)          {c_batch:9.0f} ns   ({32e3 / c_batch:.2f} M desc/s)")
print(f"  Python (submit+poll_into)  {p_batch:9.0f} ns   ({32e3 / p_batch:.2f} M desc/s)")
print(f"  ratio Python/C             {ratio:9.2f}x   target <= 1.5x   {'PASS' if ratio <= 1.5 else 'MISS'}")
print(f"  Python Queue.run(batch)    {p_run:9.0f} ns   (submit 32, wait for all 32; {p_run / c_batch:.2f}x C's pipelined batch)")
print(f"single 64 B WRITE, one outstanding, p50 (median of {n} rounds):")
print(f"  C (dp-bench latency)       {c_p50 / 1e3:9.2f} us")
print(f"  Python (write+poll_into)   {p_p50 / 1e3:9.2f} us")
print(f"  ratio Python/C             {p_p50 / c_p50:9.2f}x")
PY
