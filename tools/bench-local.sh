#!/bin/sh
# bench-local.sh BUILD [dp-bench args] - P3..P5, then the stats overhead.
# dp-bench (pinned to CLIENT_CPU, default 0) starts a private dataplaned of
# its own for each measurement (one poller pinned to SERVICE_CPU, default 1,
# spinning), stops it, and then runs the peer on the same CPUs with no
# dataplaned of ours alive: fi_pingpong's server on SERVICE_CPU and its
# client on CLIENT_CPU, the io_uring NOPs and memcpy on CLIENT_CPU. Each
# peer's output says which CPUs each side used and which dataplaned
# processes (anyone's) were alive; every run starts with the placement (a
# cache-line ping-pong between the two CPUs).
set -eu
B=${1:-build}
shift || true
cpus=$(nproc)
ccpu=${CLIENT_CPU:-0}
pcpu=${SERVICE_CPU:-$((cpus > 1 ? 1 : 0))}
echo "bench-local: dp-bench on CPU $ccpu, its dataplaned's poller on CPU $pcpu (stopped before each peer runs); $cpus CPUs, $(uname -r)" >&2
exec "$B/dp-bench" --cpu "$ccpu" --dataplaned "$B/dataplaned" --service-cpu "$pcpu" "$@"
