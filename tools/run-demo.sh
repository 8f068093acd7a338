#!/bin/sh
# run-demo.sh BUILD - `make run`: start dataplaned with default settings (on a
# private socket, so a production service is never disturbed), run the demo
# client against it, stop the service with SIGTERM and report its exit code.
set -eu
B=${1:-build}
dir=$(mktemp -d /tmp/dataplane-run-XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$B/dataplaned" --socket "$dir/dataplane.sock" 2>"$dir/log" &
svc=$!
for _ in $(seq 100); do [ -S "$dir/dataplane.sock" ] && break; sleep 0.05; done
sed 's/^/  [dataplaned] /' "$dir/log"
rc=0
"$B/dp-demo" "$dir/dataplane.sock" || rc=$?
kill -TERM $svc
svc_rc=0
wait $svc || svc_rc=$?
tail -n 3 "$dir/log" | sed 's/^/  [dataplaned] /'
echo "dataplaned exited with status $svc_rc"
[ $rc -eq 0 ] && [ $svc_rc -eq 0 ]
