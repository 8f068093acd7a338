# SPDX-License-Identifier: MIT
"""Roles of the Mooncake caller tests: each a fresh interpreter that imports
TransferEngine as the caller does (dataplane.mooncake, or
``from mooncake.engine import TransferEngine`` through the shim), talks to
its own dataplaned through $DP_SOCKET, and exchanges JSON lines with the
test on stdin/stdout (addresses and session names, as the callers' own
side channels do)."""
import json
import os
import subprocess
import sys

PREAMBLE = r'''
import ctypes, json, os, sys
import numpy as np
if os.environ["MC_MODULE"] == "mooncake.engine":
    import mooncake
    assert mooncake.__dataplane_shim__
    from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode
else:
    from dataplane.mooncake import TransferEngine, TransferNotify, TransferOpcode

def send(**o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()

def recv():
    line = sys.stdin.readline()
    if not line:
        sys.exit("the test went away")
    return json.loads(line)

def pattern(seed, n):
    return ((np.arange(n, dtype=np.uint64) * 2654435761 + seed * 97) >> 7).astype(np.uint8)
'''


class Role:
    """One role process; send()/recv() JSON lines; finish() checks exit 0."""

    def __init__(self, code, service, mooncake_import, timeout=120, env=None):
        module, shim = mooncake_import
        path = [p for p in sys.path if p]
        if shim:
            path.insert(0, shim)
        env = dict(os.environ, DP_SOCKET=service.sock, MC_MODULE=module,
                   PYTHONPATH=os.pathsep.join(path), **(env or {}))
        self.timeout = timeout
        self.proc = subprocess.Popen([sys.executable, "-c", PREAMBLE + code], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def send(self, **o):
        self.proc.stdin.write(json.dumps(o) + "\n")
        self.proc.stdin.flush()

    def recv(self):
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(self.timeout)
            raise AssertionError(f"role exited {self.proc.returncode} without answering:\n"
                                 + self.proc.stderr.read())
        return json.loads(line)

    def finish(self):
        try:
            out, err = self.proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        assert self.proc.returncode == 0, f"role exited {self.proc.returncode}:\n{out}{err}"
        return out

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
