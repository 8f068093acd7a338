# SPDX-License-Identifier: MIT
"""examples/kv_transfer.py: prefill -> decode through exported segments,
host memory here, torch CUDA tensors where torch.cuda is available."""
import os
import subprocess
import sys

import pytest

from conftest import TOP


def run_example(sock, *extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([sys.executable, os.path.join(TOP, "examples", "kv_transfer.py"),
                           "--socket", sock, *extra], env=env, capture_output=True, text=True,
                          timeout=120)


def test_kv_transfer_host(service):
    p = run_example(service.sock, "--blocks", "64", "--block-bytes", "4096")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "decode: request 42: 64 KV blocks of 4096 B in host memory: ok" in p.stdout
