#!/bin/sh
# bench-file.sh BUILD [file-bench args] - P11: starts a private dataplaned
# (one poller pinned to CPU 0), reads a 1 GiB file through it with
# file-bench (which mostly sleeps in dp_wait) pinned to CPU 1, and runs fio
# pinned to the poller's CPU on the same file in the same run; stops the
# service. The poller and fio share CPU 0 because other dataplaned
# instances (test runs) pin their pollers to the highest CPU by default.
# The file lives in $DP_BENCH_DIR (default /var/tmp: /tmp is often tmpfs,
# which has no O_DIRECT).
set -eu
B=${1:-build}
shift || true
dir=${DP_BENCH_DIR:-/var/tmp}
work=$(mktemp -d "$dir/dp-bench-file-XXXXXX")
svc=
trap '[ -n "$svc" ] && kill $svc 2>/dev/null; [ -n "$svc" ] && wait $svc 2>/dev/null; rm -rf "$work"' EXIT
avail=$(df -Pk "$work" | awk 'NR==2 {print $4}')
if [ "$avail" -lt $((3 * 1024 * 1024)) ]; then
	echo "bench-file: less than 3 GiB free in $dir (set DP_BENCH_DIR)" >&2
	exit 1
fi
cpus=$(nproc)
pcpu=0
ccpu=$((cpus > 1 ? 1 : 0))
# The placement (a cache-line ping-pong between the two CPUs), before the
# service starts.
"$B/dp-bench" --cpu $ccpu --service-cpu $pcpu placement
"$B/dataplaned" --socket "$work/dp.sock" --provider none --cpus $pcpu --log-level warn &
svc=$!
for _ in $(seq 100); do [ -S "$work/dp.sock" ] && break; sleep 0.05; done
echo "dataplaned: poller on CPU $pcpu; file-bench on CPU $ccpu; fio on CPU $pcpu; $cpus CPUs, $(uname -r)"
echo "file system: $(df -P "$work" | awk 'NR==2 {print $1}') ($(stat -f -c %T "$work")), $(fio --version)"
"$B/file-bench" --socket "$work/dp.sock" --file "$work/p11.dat" --cpu $ccpu --fio-cpu $pcpu "$@"
