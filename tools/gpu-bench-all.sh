#!/bin/sh
# gpu-bench-all.sh [BUNDLE] - on the GPU host, from the repository root: the
# reference-host benchmarks of docs/benchmarks.md from a bundle (docs/gpu.md,
# "Running on the H200"), each under a timeout, none started after DEADLINE
# seconds (default 400; one whose timeout would pass it is skipped). The log goes to $OUT/bench.txt (else
# /tmp/gpu-bench-all.log). Services' pollers on CPUs 1-3, clients on 0.
set -u
D=${1:-gpu-bundle}
B=$D/bin
export LD_LIBRARY_PATH=$PWD/$D/lib DP_BUILD=$PWD/$B PATH=$PWD/$B:$PATH
L=${OUT:+$OUT/bench.txt}
L=${L:-/tmp/gpu-bench-all.log}
T0=$(date +%s)
DEADLINE=${DEADLINE:-400}
el() { echo $(($(date +%s) - T0)); }
t() {
	to=$1
	shift
	echo "=== $* (t+$(el)s)" >>"$L"
	if [ $(($(el) + to)) -gt "$DEADLINE" ]; then
		echo "skipped (past DEADLINE)" >>"$L"
		return
	fi
	timeout "$to" "$@" >>"$L" 2>&1
	echo "rc=$?" >>"$L"
}
nvidia-smi -L >>"$L" 2>&1
[ -e "$B/python" ] || ln -s ../python "$B/python"
mkdir -p /tmp/gpu-bench-all-logs
t 120 env SVC_LOG=info KEEP_LOGS=/tmp/gpu-bench-all-logs sh "$B/bench-gpu.sh" "$B" pages
t 120 env SVC_LOG=info KEEP_LOGS=/tmp/gpu-bench-all-logs sh "$B/bench-gpu.sh" "$B" pages --depth 4096
# The pages lane's account of each run (gpu_cuda.c: batches, pages a batch, launch cost).
grep -h "page batches" /tmp/gpu-bench-all-logs/*.log >>"$L" 2>/dev/null
t 70 python3 "$B/bench-serving.py" "$B" --gpu
t 45 env A_CPU=1 B_CPU=2 C_CPU=3 SPIN=1000000 ROUNDS=3 sh "$B/bench-fabric.sh" "$B" shm
t 40 sh "$B/bench-gpu.sh" "$B" p10
t 40 sh "$B/bench-gpu.sh" "$B" vmm
t 60 env A_CPU=1 B_CPU=2 C_CPU=0 sh "$B/bench-session.sh" "$B"
t 50 env A_CPU=1 B_CPU=2 C_CPU=0 sh "$B/bench-vmtarget.sh" "$B"
t 60 python3 "$B/bench-serving.py" "$B"
echo "=== done (t+$(el)s)" >>"$L"
