# SPDX-License-Identifier: MIT
"""Lifetimes: views vs close (the close refuses while views exist), objects
after their client closed, processes that exit with work in flight."""
import gc
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import dataplane as dp
from conftest import run_python


def test_region_close_refuses_while_viewed(client):
    r = client.alloc(4096)
    a = np.frombuffer(r, np.uint8)
    with pytest.raises(dp.RegionInUseError) as e:
        r.close()
    assert isinstance(e.value, BufferError) and "view" in e.value.strerror
    assert not r.closed
    a[0] = 42  # still mapped, still usable
    del a
    gc.collect()
    r.close()
    assert r.closed


def test_client_close_refuses_while_viewed(client):
    r = client.alloc(4096)
    m = memoryview(r)
    with pytest.raises(dp.RegionInUseError):
        client.close()
    assert not client.closed
    q = client.queue()  # the client stays usable
    m[0] = 1
    m.release()
    client.close()
    assert client.closed and r.closed and q.closed


def test_views_keep_region_and_client_alive(service):
    c = dp.Client(service.sock)
    r = c.alloc(1 << 20)
    a = np.frombuffer(r, np.uint8)
    del r, c  # the view holds the region, the region the client
    gc.collect()
    a[:] = 7  # would fault if the memory were unmapped
    assert int(a.sum()) == 7 << 20
    del a
    gc.collect()


def test_torch_view_if_available(client):
    """torch.frombuffer keeps a reference to the Region and releases its
    buffer view at once: close() cannot refuse, so the memory must outlive
    the close until the tensor goes."""
    torch = pytest.importorskip("torch")
    r = client.alloc(4096)
    t = torch.frombuffer(r, dtype=torch.uint8)
    t[0] = 5
    assert memoryview(r)[0] == 5
    r.close()
    # Deregistered, still mapped: the tensor reads and writes its memory.
    assert int(t[0]) == 5
    t[4095] = 7
    assert int(t.sum()) == 12
    with pytest.raises(BufferError):
        memoryview(r)
    del t
    gc.collect()


def test_reference_without_view_outlives_close(client):
    """The same without torch: a holder of the Region (as torch.frombuffer
    holds it) reads the memory through ctypes after close()."""
    import ctypes

    r = client.alloc(4096)
    with memoryview(r) as m:
        m[0] = 9
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    r.close()
    assert ctypes.string_at(addr, 1) == b"\x09"
    del r
    gc.collect()


def test_closed_client_objects_raise(service):
    c = dp.Client(service.sock)
    r = c.alloc(4096)
    dst = c.alloc(4096)
    c.export(dst, "t/x")
    s = c.open("t/x")
    q = c.queue()
    c.close()
    for fn in (lambda: q.write(r, 0, s, 0, 1), lambda: q.poll(), lambda: q.wait(0),
               lambda: q.submit([]), lambda: q.run([]), lambda: q.fileno(), lambda: q.arm(),
               lambda: q.stats(), lambda: r.address, lambda: memoryview(r),
               lambda: c.open("t/x"), lambda: c.export(0, "y"), lambda: c.unexport("y"),
               lambda: c.register_fd(0, 1), lambda: c.open_file("x"),
               lambda: c.register_file(0), lambda: c._register_cuda(1, 1)):
        with pytest.raises((dp.ClosedError, BufferError)):
            fn()
    assert r.closed and s.closed and q.closed and q.in_flight == 0
    r.close(), s.close(), q.close()  # no-ops
    with pytest.raises(dp.ClosedError):
        dp.Batch(region=r, local_off=0, segment=0, target_off=0, length=1)


EXIT_WITH_WORK = r"""
import os, sys, dataplane as dp
c = dp.Client(sys.argv[1] if len(sys.argv) > 1 else os.environ["SOCK"])
src = c.alloc(1 << 20); dst = c.alloc(1 << 20)
c.export(dst, "t/exit-" + str(os.getpid()))
seg = c.open("t/exit-" + str(os.getpid()))
q = c.queue(depth=1024)
view = memoryview(src)  # a view alive at exit too
n = q.submit([(src, (i % 256) * 4096, seg, (i % 256) * 4096, 4096) for i in range(1024)])
print(n, flush=True)
if os.environ.get("HOW") == "_exit":
    os._exit(0)
if os.environ.get("HOW") == "kill":
    os.kill(os.getpid(), 9)
sys.exit(0)  # normal interpreter exit, descriptors and a view alive
"""


@pytest.mark.parametrize("how", ["exit", "_exit", "kill"])
def test_process_exit_with_work_in_flight(service, how):
    for _ in range(3):
        p = run_python(EXIT_WITH_WORK, {"SOCK": service.sock, "HOW": how})
        assert p.returncode == (-9 if how == "kill" else 0), p.stderr
        assert int(p.stdout.split()[0]) > 0
    assert service.alive()
    # The service serves the next client as before.
    with dp.Client(service.sock) as c:
        src = c.alloc(4096)
        dst = c.alloc(4096)
        c.export(dst, "t/after")
        s = c.open("t/after")
        q = c.queue()
        memoryview(src)[:3] = b"abc"
        assert q.run([(src, 0, s, 0, 3)]) == 1
        m = memoryview(dst)
        assert bytes(m[:3]) == b"abc"
        m.release()
