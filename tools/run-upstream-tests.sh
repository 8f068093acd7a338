#!/bin/bash
# SPDX-License-Identifier: MIT
# Runs NIXL's and Mooncake's own Python tests and examples, unmodified, against
# this tree's import shims (dataplane.shim_nixl, dataplane.shims) and two
# dataplaned of this tree, and prints one line per test:
#
#   PASS|FAIL|SKIP|REFUSED  <project>  <test>  [reason]
#
# then a closing "N passed, N failed, N skipped" line (REFUSED counts as
# passed: a call dataplane refuses on purpose, refused with the reason it
# should give). Exit status 0 when nothing failed.
#
#   tools/run-upstream-tests.sh NIXL_CHECKOUT MOONCAKE_CHECKOUT
#
# A checkout is a directory of the project's tree (e.g. `git archive HEAD | tar -x`);
# "-" leaves that project out. Environment: B (build directory, default build:
# `make B=... all python` is run first), PYTHON (default /usr/bin/python3: numpy,
# pytest and torch (Debian: python3-torch) importable there), SAME_HOST=0 (the
# two services talk over tcp only, as between hosts; default 1: same-host
# sockets), KEEP=1 (keep the work directory and the services' logs).
# How the files are run copies their projects' CI: NIXL's .gitlab/test_python.sh
# (pytest test/python, the perf scripts, the examples, two-peer examples with a
# port-0 target whose port is read from its "MD listener is listening on port N"
# line), Mooncake's scripts/run_tests.sh (transfer_engine_target.py, then
# transfer_engine_initiator_test.py, with MC_METADATA_SERVER). What is skipped,
# and why: docs/python.md, "Upstream suites".
set -u
cd "$(dirname "$0")/.." || exit 1
TOP=$PWD

if [ $# -ne 2 ]; then
	echo "usage: $0 NIXL_CHECKOUT|- MOONCAKE_CHECKOUT|-" >&2
	exit 2
fi
NIXL=$1
MC=$2
for d in "$NIXL" "$MC"; do
	if [ "$d" != - ] && [ ! -d "$d" ]; then
		echo "$0: $d: not a directory" >&2
		exit 2
	fi
done
[ "$NIXL" = - ] || NIXL=$(cd "$NIXL" && pwd)
[ "$MC" = - ] || MC=$(cd "$MC" && pwd)
if [ "$NIXL" != - ] && [ ! -d "$NIXL/test/python" ]; then
	echo "$0: $NIXL has no test/python: not a NIXL checkout" >&2
	exit 2
fi
if [ "$MC" != - ] && [ ! -d "$MC/mooncake-wheel/tests" ]; then
	echo "$0: $MC has no mooncake-wheel/tests: not a Mooncake checkout" >&2
	exit 2
fi

B=${B:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
SAME_HOST=${SAME_HOST:-1}
make -s --no-print-directory B="$B" PYTHON="$PYTHON" all python >&2 || exit 1
BUILD=$(cd "$B" && pwd)
for m in numpy pytest; do
	if ! "$PYTHON" -c "import $m" 2>/dev/null; then
		echo "$0: $PYTHON cannot import $m (make deps)" >&2
		exit 1
	fi
done

WORK=$(mktemp -d /tmp/dp-upstream.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do
		kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
	done
	if [ "${KEEP:-0}" = 1 ]; then
		echo "work directory kept: $WORK" >&2
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PASSED=0 FAILED=0 SKIPPED=0
line() { # status project test [reason]
	printf '%-7s %-8s %s%s\n' "$1" "$2" "$3" "${4:+  ($4)}"
	case $1 in
	PASS | REFUSED) PASSED=$((PASSED + 1)) ;;
	FAIL) FAILED=$((FAILED + 1)) ;;
	SKIP) SKIPPED=$((SKIPPED + 1)) ;;
	esac
}

free_port() {
	"$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ---- two services ----
start_service() { # name
	local extra=(--no-same-host)
	[ "$SAME_HOST" = 1 ] && extra=(--same-host-socket "$WORK/$1.peer")
	"$BUILD/dataplaned" --socket "$WORK/$1.sock" --spin-us 20 --no-stats --provider tcp \
		--server-name 127.0.0.1 "${extra[@]}" >"$WORK/$1.log" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 500); do
		[ -S "$WORK/$1.sock" ] && return 0
		sleep 0.01
	done
	echo "$0: dataplaned $1 did not start:" >&2
	cat "$WORK/$1.log" >&2
	exit 1
}
start_service a
start_service b
SOCK_A=$WORK/a.sock
SOCK_B=$WORK/b.sock

# ---- the shims, and what the files need around them ----
SITE=$WORK/site
mkdir -p "$SITE" "$WORK/compat"
export PYTHONPATH="$SITE:$BUILD/python"
# torch 1.x (Debian 12's python3-torch) has no set_default_device, which NIXL's
# two-peer examples call with "cpu" (the default device anyway): a stand-in
# for that one call, only where torch lacks it; any other device is refused.
cat >"$WORK/compat/sitecustomize.py" <<'EOF'
import os
if os.environ.get("DP_TORCH1_COMPAT") == "1":
    import torch
    if not hasattr(torch, "set_default_device"):
        def set_default_device(device):
            if str(device) != "cpu":
                raise RuntimeError("torch %s has no set_default_device: 'cpu' only here"
                                   % torch.__version__)
        torch.set_default_device = set_default_device
EOF
HAVE_TORCH=0
"$PYTHON" -c 'import torch' 2>/dev/null && HAVE_TORCH=1
if [ "$NIXL" != - ]; then
	"$PYTHON" -m dataplane.shim_nixl install "$SITE" >"$WORK/shim-nixl.log" 2>&1 ||
		{ cat "$WORK/shim-nixl.log" >&2; exit 1; }
fi
if [ "$MC" != - ]; then
	"$PYTHON" -m dataplane.shims install mooncake --target "$SITE" >"$WORK/shim-mc.log" 2>&1 ||
		{ cat "$WORK/shim-mc.log" >&2; exit 1; }
fi

# junit XML -> one line per test (skips with pytest's reason; FAIL with the
# first line of the failure). Tests named in $EXPECT_REFUSED that failed
# with "$REFUSAL" in their message are REFUSED.
junit_lines() { # project prefix xml
	"$PYTHON" - "$@" <<'EOF'
import os, sys, xml.etree.ElementTree as ET
project, prefix, path = sys.argv[1:4]
refused = set(filter(None, os.environ.get("EXPECT_REFUSED", "").split(",")))
why = os.environ.get("REFUSAL", "")
try:
    root = ET.parse(path).getroot()
except (OSError, ET.ParseError) as e:
    print(f"FAIL\t{project}\t{prefix}(collection)\tno results: {e}")
    sys.exit()
for tc in root.iter("testcase"):
    name = prefix + tc.get("name")
    fail = tc.find("failure")
    if fail is None:
        fail = tc.find("error")
    skip = tc.find("skipped")
    if fail is not None:
        msg = (fail.get("message") or fail.text or "").strip().splitlines()
        msg = msg[0][:160] if msg else ""
        if tc.get("name") in refused and why and why in (fail.get("message") or "") + (fail.text or ""):
            print(f"REFUSED\t{project}\t{name}\t{msg}")
        else:
            print(f"FAIL\t{project}\t{name}\t{msg}")
    elif skip is not None:
        print(f"SKIP\t{project}\t{name}\t{(skip.get('message') or '').strip()[:160]}")
    else:
        print(f"PASS\t{project}\t{name}\t")
EOF
}

emit() { # tab-separated lines of status, project, name, reason from stdin
	local st proj name rest
	while IFS=$'\t' read -r st proj name rest; do
		line "$st" "$proj" "$name" "$rest"
	done
}

# A script's run: PASS on exit 0 with no ERROR log line (NIXL's examples log
# a failed check and may still exit 0), else FAIL with the last line.
script_result() { # project name rc log
	if [ "$3" = 0 ] && ! grep -q ' ERROR \|Traceback' "$4"; then
		line PASS "$1" "$2"
	else
		line FAIL "$1" "$2" "exit $3: $(grep -m1 ' ERROR \|Error' "$4" || tail -n1 "$4")"
	fi
}

# ---- NIXL ----
run_nixl() {
	local t=$NIXL/test/python ex=$NIXL/examples/python run=$WORK/nixl
	mkdir -p "$run"
	cd "$run" || exit 1
	export DP_SOCKET=$SOCK_A
	# NIXL's CI harness sets these before its Python steps (etcd started).
	export NIXL_ETCD_ENDPOINTS=${NIXL_ETCD_ENDPOINTS:-http://127.0.0.1:2379}
	timeout 600 "$PYTHON" -m pytest -q -p no:cacheprovider --junitxml="$WORK/nixl.xml" \
		"$t" >"$WORK/nixl-pytest.log" 2>&1
	emit < <(junit_lines nixl "test/python/" "$WORK/nixl.xml")
	local rc
	for mode in list array; do
		timeout 300 "$PYTHON" "$t/prep_xfer_perf.py" $mode >"$WORK/perf-$mode.log" 2>&1
		script_result nixl "test/python/prep_xfer_perf.py $mode" $? "$WORK/perf-$mode.log"
	done
	timeout 300 "$PYTHON" "$t/desc_perf.py" >"$WORK/desc_perf.log" 2>&1
	script_result nixl test/python/desc_perf.py $? "$WORK/desc_perf.log"

	timeout 120 "$PYTHON" "$ex/partial_md_example.py" --init-port "$(free_port)" \
		--target-port "$(free_port)" >"$WORK/partial_md.log" 2>&1
	script_result nixl "examples/python/partial_md_example.py --init-port --target-port" $? \
		"$WORK/partial_md.log"
	line SKIP nixl "examples/python/partial_md_example.py --etcd" \
		"needs an etcd server: dataplane agents exchange metadata peer to peer"
	timeout 120 "$PYTHON" "$ex/query_mem_example.py" >"$WORK/query_mem.log" 2>&1
	script_result nixl examples/python/query_mem_example.py $? "$WORK/query_mem.log"

	# NIXL's run_two_peers: a port-0 target on service a; its port from its
	# log line; the initiator on service b.
	mkdir -p "$WORK/telemetry"
	two_peers basic_two_peers.py
	two_peers expanded_two_peers.py NIXL_TELEMETRY_ENABLE=y NIXL_TELEMETRY_DIR="$WORK/telemetry"
	if [ -f "$WORK/telemetry/initiator" ]; then
		"$PYTHON" "$ex/telemetry_reader.py" --telemetry_path "$WORK/telemetry/initiator" \
			>"$WORK/telemetry_reader.log" 2>&1 &
		local tp=$!
		sleep 3
		kill -INT $tp
		wait $tp
		rc=$?
		local n
		n=$(awk '/Total events read:/ { print $NF }' "$WORK/telemetry_reader.log")
		if [ "$rc" = 0 ] && [ "${n:-0}" -gt 0 ]; then
			line PASS nixl examples/python/telemetry_reader.py "$n events"
		else
			line FAIL nixl examples/python/telemetry_reader.py "exit $rc, ${n:-no} events"
		fi
	else
		line FAIL nixl examples/python/telemetry_reader.py "no telemetry file"
	fi
	line SKIP nixl examples/python/nixl_gds_example.py \
		"GPUDirect Storage (GDS): hardware dataplane does not drive"
	line SKIP nixl examples/python/remote_storage_example \
		"GDS_MT storage backend: hardware dataplane does not drive"
	unset DP_SOCKET
	cd "$TOP" || exit 1
}

two_peers() { # script [ENV=val ...]
	local script=$1 ex=$NIXL/examples/python log=$WORK/target-$1.log
	shift
	if [ "$HAVE_TORCH" != 1 ]; then
		line SKIP nixl "examples/python/$script" "needs torch for $PYTHON"
		return
	fi
	DP_SOCKET=$SOCK_A DP_TORCH1_COMPAT=1 PYTHONPATH="$WORK/compat:$PYTHONPATH" \
		NIXL_LOG_LEVEL=INFO timeout 180 "$PYTHON" "$ex/$script" --mode=target \
		--ip=127.0.0.1 --port=0 2>"$log" >"$WORK/target-$script.out" &
	local tp=$! port=""
	for _ in $(seq 30); do
		port=$(awk '/MD listener is listening on port/ { print $NF; exit }' "$log")
		[ -n "$port" ] && break
		sleep 1
	done
	if [ -z "$port" ]; then
		kill $tp 2>/dev/null
		wait $tp 2>/dev/null
		line FAIL nixl "examples/python/$script" "the target reported no port in 30 s"
		return
	fi
	env "$@" DP_SOCKET="$SOCK_B" DP_TORCH1_COMPAT=1 PYTHONPATH="$WORK/compat:$PYTHONPATH" \
		timeout 180 "$PYTHON" "$ex/$script" --mode=initiator --ip=127.0.0.1 --port="$port" \
		>"$WORK/initiator-$script.log" 2>&1
	local rc=$?
	wait $tp
	local trc=$?
	cat "$WORK/target-$script.out" >>"$log"
	if [ $trc != 0 ] || grep -q ' ERROR \|Traceback' "$log"; then
		line FAIL nixl "examples/python/$script" "target: exit $trc, $(grep -m1 'ERROR\|Error' "$log")"
	else
		script_result nixl "examples/python/$script" $rc "$WORK/initiator-$script.log"
	fi
}

# ---- Mooncake ----
run_mooncake() {
	local t=$MC/mooncake-wheel/tests run=$WORK/mooncake
	mkdir -p "$run"
	cd "$run" || exit 1
	# Upstream CI's recipe (scripts/run_tests.sh), the files' own default
	# (127.0.0.1:2379: etcd), and redis naming.
	for meta in http://127.0.0.1:8080/metadata "" redis://127.0.0.1:6379; do
		local tname iname label=${meta:-127.0.0.1:2379}
		tname=127.0.0.1:$(free_port)
		iname=127.0.0.1:$(free_port)
		env -u MC_METADATA_SERVER ${meta:+MC_METADATA_SERVER=$meta} MC_FORCE_TCP=true \
			TARGET_SERVER_NAME=$tname DP_SOCKET="$SOCK_B" PYTHONUNBUFFERED=1 timeout 300 "$PYTHON" "$t/transfer_engine_target.py" \
			>"$WORK/mc-target.log" 2>&1 &
		local tp=$!
		for _ in $(seq 100); do
			grep -q "Target server ready" "$WORK/mc-target.log" && break
			kill -0 $tp 2>/dev/null || break
			sleep 0.1
		done
		env -u MC_METADATA_SERVER ${meta:+MC_METADATA_SERVER=$meta} MC_FORCE_TCP=true \
			TARGET_SERVER_NAME=$tname INITIATOR_SERVER_NAME=$iname DP_SOCKET="$SOCK_A" timeout 600 "$PYTHON" -m pytest \
			-q -p no:cacheprovider --junitxml="$WORK/mc.xml" \
			"$t/transfer_engine_initiator_test.py" >"$WORK/mc-initiator.log" 2>&1
		kill $tp 2>/dev/null
		wait $tp 2>/dev/null
		emit < <(junit_lines mooncake "transfer_engine_initiator_test.py[$label]::" "$WORK/mc.xml")
	done
	line SKIP mooncake "transfer_engine_target.py + initiator_test.py with P2PHANDSHAKE" \
		"the pair cannot run it, on Mooncake either: a P2PHANDSHAKE target takes a free port and does not print it"
	# mooncake.store and BufferPool are Mooncake Store: refused, with the reason.
	DP_SOCKET=$SOCK_A timeout 120 "$PYTHON" -m pytest -q -p no:cacheprovider \
		--junitxml="$WORK/mc-import.xml" "$t/test_import_structure.py" >"$WORK/mc-import.log" 2>&1
	export EXPECT_REFUSED=test_new_import_structure,test_top_level_buffer_pool_alias
	export REFUSAL="different product"
	emit < <(junit_lines mooncake "test_import_structure.py::" "$WORK/mc-import.xml")
	unset EXPECT_REFUSED REFUSAL
	if [ "$HAVE_TORCH" = 1 ]; then
		DP_SOCKET=$SOCK_A timeout 300 "$PYTHON" -m pytest -q -p no:cacheprovider \
			--junitxml="$WORK/mc-cuda.xml" "$t/test_transfer_on_cuda.py" >"$WORK/mc-cuda.log" 2>&1
		emit < <(junit_lines mooncake "test_transfer_on_cuda.py::" "$WORK/mc-cuda.xml")
	else
		line SKIP mooncake test_transfer_on_cuda.py "needs torch for $PYTHON"
	fi
	line SKIP mooncake test_transfer_on_hip.py "ROCm (HIP) GPUs: hardware dataplane does not drive"
	# The rest of mooncake-wheel/tests are other Mooncake products than the
	# Transfer Engine: named, not run.
	local f
	for f in "$t"/test_*.py; do
		f=$(basename "$f")
		case $f in
		test_import_structure.py | test_transfer_on_cuda.py | test_transfer_on_hip.py) ;;
		*)
			if grep -q "mooncake.store\|buffer_pool\|store_service\|structured_object_store\|meta_server\|offload\|replica" "$t/$f"; then
				line SKIP mooncake "$f" "Mooncake Store, not the Transfer Engine"
			elif grep -q "mooncake_ep\|ep_test_utils" "$t/$f"; then
				line SKIP mooncake "$f" "Mooncake EP (expert parallelism), not the Transfer Engine"
			else
				line SKIP mooncake "$f" "Mooncake's tooling (CLI, packaging, helpers), not the Transfer Engine"
			fi
			;;
		esac
	done
	cd "$TOP" || exit 1
}

[ "$NIXL" = - ] || run_nixl
[ "$MC" = - ] || run_mooncake
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" = 0 ]
