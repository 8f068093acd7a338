#!/bin/sh
# bench-instr.sh BUILD - the deterministic cost figure: instructions per 64 B
# local WRITE in the service's poller thread, counted by callgrind over one
# dp-bench rate run (batch 32). Counts do not move with the machine's noise:
# every change to the hot path reports this figure (docs/benchmarks.md).
set -eu
B=${1:-build}
command -v valgrind >/dev/null || { echo "bench-instr: needs valgrind" >&2; exit 1; }
dir=$(mktemp -d /tmp/dp-instr-XXXXXX)
trap 'kill $svc 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$dir"; true' EXIT
valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$dir/cg.%p" \
	"$B/dataplaned" --socket "$dir/dp.sock" --pollers 1 --provider none --spin-us 0 \
	--no-stats --log-level warn 2>"$dir/vg.log" &
svc=$!
i=0
while [ ! -S "$dir/dp.sock" ]; do
	i=$((i + 1)); [ $i -le 600 ] || { cat "$dir/vg.log"; exit 1; }; sleep 0.1
done
"$B/dp-bench" --socket "$dir/dp.sock" --quick --no-peers --json rate >"$dir/rate.json" 2>"$dir/rate.txt"
kill -TERM $svc; wait $svc || true
n=$(sed -n 's/.*"descriptors": *\([0-9]*\).*/\1/p' "$dir/rate.json" | head -1)
# The poller is the service's second thread (-02 file).
f=$(ls "$dir"/cg.*-02 | head -1)
ir=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$f")
echo "service poller: $ir instructions for ${n:-?} descriptors"
[ -n "$n" ] && awk -v ir="$ir" -v n="$n" 'BEGIN { printf "service: %.1f instructions per 64 B WRITE (poller thread, batch 32, --no-stats)\n", ir / n }'
exit 0
