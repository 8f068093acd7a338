# SPDX-License-Identifier: MIT
"""Client.register: memory the process already has (dp_register_mem), moved
by the service with process_vm_readv/writev, no copy into shared memory."""
import numpy as np
import pytest

import dataplane as dp


def _exported(client, size, name):
    dst = client.alloc(size)
    client.export(dst, name)
    return dst, client.open(name)


def test_numpy_array_both_ways(client):
    a = np.zeros(1 << 20, dtype=np.uint8)
    a[:] = np.arange(a.size, dtype=np.uint64).astype(np.uint8)
    r = client.register(a)
    assert r.kind == "mem" and r.size == a.nbytes
    dst, seg = _exported(client, 1 << 20, "reg/np")
    q = client.queue()
    q.write(r, 0, seg, 0, a.nbytes, user_data=1)
    (c,) = q.wait(timeout=10)
    assert c.status == 0 and c.bytes == a.nbytes and c.flags & dp.F_LOCAL
    assert bytes(memoryview(dst)) == a.tobytes()
    memoryview(dst)[:4] = b"abcd"
    q.read(r, 100, seg, 0, 4, user_data=2)
    (c,) = q.wait(timeout=10)
    assert c.status == 0 and a[100:104].tobytes() == b"abcd"
    q.close()
    r.close()


def test_bytearray_is_held_until_close(client):
    b = bytearray(b"x" * 4096)
    r = client.register(b)
    with pytest.raises(BufferError):
        b.extend(b"more")  # the region holds it: no resize under the service
    r.close()
    b.extend(b"more")
    assert len(b) == 4100


def test_refusals(client):
    with pytest.raises(ValueError):
        client.register(b"read-only bytes")
    with pytest.raises(ValueError):
        client.register(np.zeros((64, 64), dtype=np.uint8)[:, ::2])  # not contiguous
    with pytest.raises(ValueError):
        client.register(bytearray())
    with pytest.raises(TypeError):
        client.register(12345)


def test_torch_cpu_tensor_if_available(client):
    torch = pytest.importorskip("torch")
    t = torch.arange(4096, dtype=torch.int32)
    r = client.register(t)
    dst, seg = _exported(client, t.numel() * 4, "reg/torch")
    q = client.queue()
    q.write(r, 0, seg, 0, t.numel() * 4, user_data=1)
    (c,) = q.wait(timeout=10)
    assert c.status == 0
    assert np.frombuffer(dst, np.int32).tolist() == list(range(4096))
    q.close()
    r.close()
