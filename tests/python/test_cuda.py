# SPDX-License-Identifier: MIT
"""GPU: CUDA tensors registered from torch, between two processes through
one service. Self-skips without torch or a GPU (run on the GPU host)."""
import os
import subprocess
import sys

import pytest

import dataplane as dp
from conftest import TOP

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)


def test_register_tensor_and_copy(client):
    t = torch.arange(1 << 20, dtype=torch.int32, device="cuda")
    g = client.register_cuda(t)
    assert g.kind == "cuda" and g.size == t.numel() * 4 and g.address == t.data_ptr()
    with pytest.raises(BufferError):
        memoryview(g)
    g2 = client.register_cuda(t.__cuda_array_interface__ and t)  # torch: data_ptr path
    g2.close()
    host = client.alloc(g.size)
    client.export(host, "t/host")
    seg = client.open("t/host")
    q = client.queue()
    torch.cuda.synchronize()
    q.write(g, 0, seg, 0, g.size, user_data=1)  # GPU -> host
    (c,) = q.wait(10)
    assert c.status == 0 and c.flags & dp.F_GPU
    import numpy as np
    a = np.frombuffer(host, np.int32)
    assert (a == np.arange(1 << 20, dtype=np.int32)).all()
    a[:] = 7
    q.read(g, 0, seg, 0, g.size)  # host -> GPU
    assert q.wait(10)[0].status == 0
    assert int(t.sum().item()) == 7 * (1 << 20)
    del a


def test_cuda_between_processes(service):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.run([sys.executable, os.path.join(TOP, "examples", "kv_transfer.py"),
                        "--socket", service.sock, "--cuda", "--blocks", "32"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "in GPU memory: ok" in p.stdout
