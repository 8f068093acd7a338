#!/bin/sh
# bench-local.sh BUILD [dp-bench args] - P3..P5: starts a private dataplaned
# (one poller pinned to CPU 1, spinning), runs dp-bench pinned to CPU 0 side by
# side with its peers, stops the service. dp-bench then measures the stats
# region's overhead with services of its own (--dataplaned), on the same CPU.
set -eu
B=${1:-build}
shift || true
dir=$(mktemp -d /tmp/dp-bench-XXXXXX)
trap 'kill $svc 2>/dev/null; wait $svc 2>/dev/null; rm -rf "$dir"' EXIT
cpus=$(nproc)
pcpu=$((cpus > 1 ? 1 : 0))
"$B/dataplaned" --socket "$dir/dp.sock" --cpus $pcpu --spin-us 1000000 --log-level warn &
svc=$!
for _ in $(seq 100); do [ -S "$dir/dp.sock" ] && break; sleep 0.05; done
echo "dataplaned: poller on CPU $pcpu; dp-bench on CPU 0; $(nproc) CPUs, $(uname -r)" >&2
"$B/dp-bench" --socket "$dir/dp.sock" --cpu 0 --dataplaned "$B/dataplaned" --service-cpu $pcpu "$@"
