# SPDX-License-Identifier: MIT
"""The dataplane package against a real dataplaned: every call, its errors,
descriptors singly, in lists, from numpy arrays, 10 000 at once."""
import asyncio
import errno
import gc
import os
import re
import threading
import time

import numpy as np
import pytest

import dataplane as dp


def sigstop(service):
    """Stops the service and waits until it is stopped (kill() returns first)."""
    os.kill(service.proc.pid, 19)  # SIGSTOP
    for _ in range(1000):
        with open(f"/proc/{service.proc.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] in "Tt":
                return
        time.sleep(0.001)
    raise AssertionError("the service did not stop")


def setup_pair(c, size=1 << 16, name="t/dst", access="rw"):
    src = c.alloc(size)
    dst = c.alloc(size)
    c.export(dst, name, access)
    seg = c.open(name, access=access if access != "rw" else "rw")
    return src, dst, seg


# ---- connecting ----

def test_connect_and_close(service):
    c = dp.Client(service.sock, name="py")
    assert not c.closed
    assert ":" in c.server_name
    assert "Client of" in repr(c)
    c.close()
    assert c.closed
    c.close()  # twice: no-op
    assert "closed" in repr(c)
    with pytest.raises(dp.ClosedError):
        c.alloc(10)
    with pytest.raises(dp.ClosedError):
        c.server_name
    with pytest.raises(dp.ClosedError):
        c.regions()
    with pytest.raises(ValueError):  # ClosedError is a ValueError too
        c.queue()


def test_connect_context_manager_and_env(service, monkeypatch):
    monkeypatch.setenv("DP_SOCKET", service.sock)
    with dp.Client() as c:
        r = c.alloc(4096)
        q = c.queue()
    assert c.closed and r.closed and q.closed
    with pytest.raises(dp.ClosedError):
        q.poll()


def test_connect_errors(tmp_path):
    with pytest.raises(dp.NotFoundError) as e:
        dp.Client(str(tmp_path / "none.sock"))
    assert e.value.errno == errno.ENOENT
    assert "dp_connect" in e.value.strerror and "ENOENT" in e.value.strerror
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, dp.DataplaneError)
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(str(tmp_path / "dead.sock"))  # bound, never listening
    with pytest.raises(dp.NoServiceError) as e:
        dp.Client(str(tmp_path / "dead.sock"))
    assert e.value.errno == errno.ECONNREFUSED and isinstance(e.value, ConnectionRefusedError)
    s.close()
    with pytest.raises(dp.DataplaneError) as e:
        dp.Client("/tmp/" + "x" * 200)
    assert e.value.errno == errno.ENAMETOOLONG
    with pytest.raises(TypeError):
        dp.Client(socket=12)


# ---- regions ----

def test_alloc_buffer_protocol(client):
    r = client.alloc(10000)
    assert r.kind == "host" and r.size == len(r) == 10000 and r.id >= 0 and r.address
    assert "10000 bytes" in repr(r)
    m = memoryview(r)
    assert m.nbytes == 10000 and not m.readonly
    a = np.frombuffer(r, dtype=np.uint8)
    a[:4] = [1, 2, 3, 4]
    assert bytes(m[:4]) == b"\x01\x02\x03\x04"  # zero-copy: the same memory
    assert a.ctypes.data == r.address
    assert r.views == 2
    m.release()
    del a
    assert r.views == 0
    r.close()
    assert r.closed and "closed" in repr(r)
    r.close()
    with pytest.raises(BufferError):
        memoryview(r)
    with pytest.raises(dp.ClosedError):
        r.address


def test_alloc_errors(client):
    with pytest.raises(dp.InvalidArgumentError) as e:
        client.alloc(0)
    assert e.value.errno == errno.EINVAL and "dp_alloc" in e.value.strerror
    with pytest.raises(OverflowError):
        client.alloc(-1)
    with pytest.raises(OverflowError):
        client.alloc(1 << 64)
    h = client.alloc(1 << 21, huge=True)
    assert h.size == 1 << 21
    assert client.regions()[-1] is h


def test_region_gc_frees(client):
    # Regions dropped without close() are freed: more than the client's
    # 1024-region table over the loop.
    for _ in range(1100):
        client.alloc(4096)
    assert len(client.regions()) == 0


def test_register_fd(client):
    fd = os.memfd_create("py", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 8192)
    r = client.register_fd(fd, 4096, 4096)
    assert r.kind == "fd" and r.size == 4096
    with pytest.raises(BufferError):
        memoryview(r)
    r.close()
    os.close(fd)
    fd = os.memfd_create("py-nosealing")
    os.ftruncate(fd, 4096)
    with pytest.raises(dp.PermissionDeniedError) as e:
        client.register_fd(fd, 4096)
    assert "MFD_ALLOW_SEALING" in e.value.strerror
    os.close(fd)
    with pytest.raises(dp.InvalidArgumentError):
        client.register_fd(-1, 4096)


def test_files(client, tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"filebytes" * 1000)
    fd = os.open(p, os.O_RDONLY)
    try:
        r = client.register_file(fd, 0, 0, access="r")
    except dp.NotSupportedError:
        pytest.skip("no io_uring in this service")
    finally:
        os.close(fd)
    assert r.kind == "file"
    assert r.size == len(r) == 9000  # length 0: the rest of the file, as resolved
    fd = os.open(p, os.O_RDONLY)
    r2 = client.register_file(fd, 1000, 0, access="r")
    assert r2.size == 8000
    os.close(fd)
    # An fd that is not open: a bad argument; the client goes on.
    with pytest.raises(dp.DataplaneError) as e:
        client.register_file(9999)
    assert e.value.errno == errno.EINVAL
    client.alloc(10).close()
    fd = os.open(p, os.O_RDONLY)
    with pytest.raises(dp.PermissionDeniedError):
        client.register_file(fd, access="rw")
    os.close(fd)
    with pytest.raises(dp.PermissionDeniedError) as e:  # the service has no --file-root
        client.open_file("f")
    assert "file-root" in e.value.strerror
    with pytest.raises(dp.DataplaneError) as e:
        client.open_file("x" * 300)
    assert e.value.errno == errno.ENAMETOOLONG


def test_file_root(make_service, tmp_path):
    (tmp_path / "data").write_bytes(bytes(range(256)) * 16)
    s = make_service("--file-root", str(tmp_path))
    with dp.Client(s.sock) as c:
        try:
            f = c.open_file("data", buffered=True)
        except dp.NotSupportedError:
            pytest.skip("no io_uring in this service")
        assert f.size == len(f) == 4096
        with pytest.raises(dp.NotFoundError):
            c.open_file("missing")
        dst = c.alloc(4096)
        c.export(f, "t/file", "r")
        seg = c.open("t/file", access="r")
        q = c.queue()
        q.read(dst, 0, seg, 0, 4096)
        (cqe,) = q.wait(5)
        assert cqe.status == 0 and cqe.flags & dp.F_FILE
        assert bytes(memoryview(dst)) == bytes(range(256)) * 16
        q.close()
        f.close()
        del cqe


def test_register_cuda_without_gpu_or_bad_args(client):
    with pytest.raises(TypeError):
        client.register_cuda(12345)  # a pointer needs length=
    with pytest.raises(TypeError):
        client.register_cuda(np.zeros(4))
    with pytest.raises((dp.NoDeviceError, dp.NotSupportedError, dp.InvalidArgumentError)) as e:
        client.register_cuda(0x1000, length=4096)  # not device memory (or no GPU at all)
    assert "dp_register_cuda" in e.value.strerror


# ---- segments ----

def test_export_open_unexport(client, service):
    r = client.alloc(4096)
    client.export(r, "t/seg")
    s = client.open("t/seg")
    assert s.handle >= 0 and s.name == "t/seg" and s.peer is None and "t/seg" in repr(s)
    s2 = client.open("t/seg", None, dp.ACCESS_READ)
    s2.close()
    s2.close()
    assert s2.closed
    with pytest.raises(dp.ExistsError):
        client.export(r, "t/seg")
    with pytest.raises(dp.InvalidArgumentError):
        client.export(r, "/bad//name")
    with pytest.raises(dp.InvalidArgumentError):
        client.export(r, "t/w", "w")  # WRITE alone is refused
    with pytest.raises(ValueError):
        client.export(r, "t/x", "rwx")
    with pytest.raises(dp.BadHandleError):
        client.export(999, "t/y")
    with pytest.raises(dp.NotFoundError) as e:
        client.open("t/none")
    assert "dp_segment_open" in e.value.strerror
    client.export(r, "t/ro", "r")
    with pytest.raises(dp.PermissionDeniedError):
        client.open("t/ro", access="rw")
    with pytest.raises(dp.UnreachableError):
        client.open("t/seg", peer="127.0.0.1:1")  # --provider none: no fabric
    with dp.Client(service.sock) as other:
        with pytest.raises(dp.PermissionDeniedError):
            other.unexport("t/seg")
    client.unexport("t/seg")
    with pytest.raises(dp.NotFoundError):
        client.unexport("t/seg")
    with pytest.raises(dp.InvalidArgumentError):
        client.unexport("a b")
    s.close()
    with pytest.raises(dp.ClosedError):
        dp.Batch(region=r, local_off=0, segment=s, target_off=0, length=1)


# ---- queues and transfers ----

def test_write_read_roundtrip(client):
    src, dst, seg = setup_pair(client)
    q = client.queue()
    assert q.depth > 0 and q.in_flight == 0 and "Queue depth" in repr(q)
    a = np.frombuffer(src, np.uint8)
    a[:100] = np.arange(100, dtype=np.uint8)
    q.write(src, 0, seg, 1000, 100, user_data=7)
    (c,) = q.wait(timeout=5)
    assert isinstance(c, dp.Completion)
    assert (c.user_data, c.status, c.bytes) == (7, 0, 100) and c.flags & dp.F_LOCAL
    assert bytes(memoryview(dst)[1000:1100]) == bytes(range(100))
    q.read(src.id, 5000, seg.handle, 1000, 100, 8)  # ids work as well as objects
    (c,) = q.wait(timeout=5)
    assert c.status == 0 and c.user_data == 8
    assert bytes(a[5000:5100]) == bytes(range(100))
    q.write(region=src, local_off=0, segment=seg, target_off=0, length=1)
    assert q.wait(5)[0].user_data == 0
    st = q.stats()
    assert st["submitted"] == 3 and st["completed"] == 3 and st["bytes"] == 201
    assert st["failed"] == 0 and st["in_flight"] == 0 and st["depth"] == q.depth
    del a
    q.close()
    q.close()


def test_write_argument_errors(client):
    src, dst, seg = setup_pair(client)
    q = client.queue()
    with pytest.raises(TypeError):
        q.write(src, 0, seg, 0)
    with pytest.raises(TypeError):
        q.write(src, 0, seg, 0, 1, 2, 3)
    with pytest.raises(TypeError):
        q.write(src, 0, seg, 0, 1, bogus=1)
    with pytest.raises(TypeError):
        q.write(src, 0.5, seg, 0, 1)
    with pytest.raises(OverflowError):
        q.write(src, -1, seg, 0, 1)
    with pytest.raises(OverflowError):
        q.write(src, 0, seg, 0, 1 << 64)
    with pytest.raises(OverflowError):
        q.write(1 << 32, 0, seg, 0, 1)
    assert q.in_flight == 0  # nothing reached the ring


def test_descriptor_errors(client):
    src, dst, seg = setup_pair(client, 4096)
    ro_dst = client.alloc(4096)
    client.export(ro_dst, "t/ro2", "r")
    ro = client.open("t/ro2", access="r")
    q = client.queue()
    q.write(src, 0, seg, 0, 4 << 30, user_data=1)  # a 4 GiB length reaches the service whole
    q.write(src, 4000, seg, 0, 200, user_data=2)
    q.write(12345, 0, seg, 0, 1, user_data=3)
    q.write(src, 0, ro, 0, 1, user_data=4)
    q.read(src, 0, seg, 4095, 2, user_data=5)
    got = {}
    while len(got) < 5:
        for c in q.wait(5):
            got[c.user_data] = c.status
    assert got == {1: -errno.EFAULT, 2: -errno.EFAULT, 3: -errno.EBADF, 4: -errno.EPERM,
                   5: -errno.EFAULT}
    assert q.stats()["failed"] == 5


def test_queue_depth_and_full(client):
    with pytest.raises(dp.InvalidArgumentError) as e:
        client.queue(depth=3)
    assert "dp_queue_create" in e.value.strerror
    src, dst, seg = setup_pair(client)
    q = client.queue(depth=4)
    assert q.depth == 4
    for i in range(4):
        q.write(src, 0, seg, 0, 8, user_data=i)
    with pytest.raises(dp.BusyError) as e:
        q.write(src, 0, seg, 0, 8)
    assert e.value.errno == errno.EAGAIN and isinstance(e.value, BlockingIOError)
    n = 0
    while n < 4:
        n += len(q.wait(5))
    # submit() takes what fits and says how many.
    ops = [(src, 0, seg, 0, 8, i) for i in range(10)]
    assert q.submit(ops) == 4
    assert q.submit(ops, start=4) == 0
    while q.in_flight:
        q.wait(5)
    assert q.submit(ops, 4) == 4
    with pytest.raises(IndexError):
        q.submit(ops, start=11)
    while q.in_flight:
        q.poll()


def test_poll_and_poll_into(client):
    src, dst, seg = setup_pair(client)
    q = client.queue(depth=64)
    assert q.poll() == []
    with pytest.raises(ValueError):
        q.poll(0)
    q.submit([(src, i * 8, seg, i * 8, 8, 100 + i) for i in range(10)])
    seen = []
    deadline = time.monotonic() + 5
    while len(seen) < 10 and time.monotonic() < deadline:
        seen += q.poll(3)
    assert sorted(c.user_data for c in seen) == list(range(100, 110))
    q.submit(dp.Batch(region=src, local_off=0, segment=seg, target_off=0, length=8,
                      user_data=np.arange(16, dtype=np.uint64)) if False else
             [(src, 0, seg, 0, 8, i) for i in range(16)])
    buf = np.zeros(32, dp.COMPLETION_DTYPE)
    n = 0
    while n < 16 and time.monotonic() < deadline:
        n += q.poll_into(buf[n:])
    assert n == 16 and sorted(buf["user_data"][:16]) == list(range(16))
    assert (buf["status"][:16] == 0).all() and (buf["bytes"][:16] == 8).all()
    with pytest.raises(ValueError):
        q.poll_into(bytearray(16))
    with pytest.raises(BufferError):
        q.poll_into(b"x" * 64)  # read-only


def test_wait_timeout_and_gil(client):
    q = client.queue()
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)
    t = threading.Thread(target=spin)
    t.start()
    t0 = time.monotonic()
    assert q.wait(timeout=0.3) == []
    took = time.monotonic() - t0
    stop.set()
    t.join()
    assert 0.25 <= took < 2
    assert len(ticks) > 50  # the other thread ran while wait() slept: the GIL was released
    with pytest.raises(ValueError):
        q.wait(-1)


def test_queue_busy_in_other_thread(client):
    q = client.queue()
    t = threading.Thread(target=q.wait, args=(0.5,))
    t.start()
    time.sleep(0.1)
    with pytest.raises(dp.BusyError):
        q.poll()
    with pytest.raises(dp.BusyError):
        q.stats()
    assert q.fileno() >= 0  # the fd never changes: allowed
    with pytest.raises(dp.BusyError):
        q.close()
    with pytest.raises(dp.BusyError):
        client.close()
    t.join()
    q.close()


def test_batch_forms(client):
    src, dst, seg = setup_pair(client, 1 << 16)
    b = dp.Batch([(src, 0, seg, 64, 8), (src.id, 8, seg.handle, 72, 8, 99)])
    assert len(b) == 2
    assert b[0] == (dp.OP_WRITE, src.id, 0, seg.handle, 64, 8, 0)
    assert b[1][-1] == 99
    assert memoryview(b).nbytes == 2 * dp.DESC_SIZE
    with pytest.raises(IndexError):
        b[2]
    r = dp.Batch(op="read", region=src, local_off=np.array([0, 64], np.int64), segment=seg,
                 target_off=[0, 64], length=np.uint32(8) if False else 8)
    assert len(r) == 2 and r[1][0] == dp.OP_READ and r[1][2] == 64 and r[1][6] == 1
    mixed = dp.Batch(op=np.array([dp.OP_WRITE, dp.OP_NOP], np.int32), region=src,
                     local_off=0, segment=seg, target_off=0, length=1)
    assert [x[0] for x in mixed] == [dp.OP_WRITE, dp.OP_NOP]
    one = dp.Batch(region=src, local_off=0, segment=seg, target_off=0, length=1)
    assert len(one) == 1
    with pytest.raises(ValueError):
        dp.Batch(region=src, local_off=[0, 1], segment=seg, target_off=[0, 1, 2], length=1)
    with pytest.raises(TypeError):
        dp.Batch(region=src, local_off=np.zeros(2), segment=seg, target_off=0, length=1)
    with pytest.raises(OverflowError):
        dp.Batch(region=src, local_off=np.array([-1]), segment=seg, target_off=0, length=1)
    with pytest.raises(TypeError):
        dp.Batch([(src, 0, seg)])
    with pytest.raises(TypeError):
        dp.Batch(region=src)
    with pytest.raises(TypeError):
        dp.Batch([(src, 0, seg, 0, 1)], region=src)
    with pytest.raises(ValueError):
        dp.Batch([(src, 0, seg, 0, 1)], op="copy")
    q = client.queue()
    assert q.run(mixed) == 2


def test_run_10000_descriptors_verified(client):
    """10 000 descriptors in one Batch (numpy columns), WRITE then READ
    back, every byte checked."""
    n, size = 10000, 64
    src, dst, seg = setup_pair(client, n * size)
    back = client.alloc(n * size)
    rng = np.random.default_rng(17)
    a = np.frombuffer(src, np.uint8)
    a[:] = rng.integers(0, 256, n * size, dtype=np.uint8)
    perm = rng.permutation(n).astype(np.uint64)  # each descriptor to a shuffled slot
    q = client.queue(depth=256)
    w = dp.Batch(region=src, local_off=np.arange(n, dtype=np.uint64) * size, segment=seg,
                 target_off=perm * size, length=size)
    assert q.run(w, timeout=60) == n
    d = np.frombuffer(dst, np.uint8).reshape(n, size)
    assert np.array_equal(d[perm], a.reshape(n, size))
    r = dp.Batch(op=dp.OP_READ, region=back, local_off=np.arange(n, dtype=np.uint64) * size,
                 segment=seg, target_off=perm * size, length=size)
    assert q.run(r, timeout=60) == n
    assert np.array_equal(np.frombuffer(back, np.uint8), a)
    st = q.stats()
    assert st["completed"] == 2 * n and st["bytes"] == 2 * n * size and st["failed"] == 0
    # the same from a list of tuples
    ops = [(src, i * size, seg, int(perm[i]) * size, size) for i in range(n)]
    d[:] = 0
    assert q.run(ops, timeout=60) == n
    assert np.array_equal(d[perm], a.reshape(n, size))
    del a, d


def test_run_errors(client, service):
    src, dst, seg = setup_pair(client, 4096)
    q = client.queue(depth=8)
    ops = [(src, 0, seg, 0, 8), (src, 0, seg, 4090, 8, 55), (src, 0, 4242, 0, 8, 56)]
    with pytest.raises(dp.TransferError) as e:
        q.run(ops)
    assert e.value.errno == errno.EFAULT
    assert sorted((c.user_data, c.status) for c in e.value.completions) == [
        (55, -errno.EFAULT), (56, -errno.EBADF)]
    assert q.in_flight == 0
    q.write(src, 0, seg, 0, 8)
    with pytest.raises(dp.BusyError):
        q.run(ops)
    q.wait(5)
    # A stopped service: run() gives up at its timeout, the descriptors stay in flight.
    sigstop(service)
    try:
        with pytest.raises(dp.DataplaneTimeoutError):
            q.run([(src, 0, seg, 0, 8)] * 4, timeout=0.3)
        assert q.in_flight == 4
    finally:
        os.kill(service.proc.pid, 18)  # SIGCONT
    n = 0
    while n < 4:
        n += len(q.wait(5))


def test_asyncio_wait_async(client):
    src, dst, seg = setup_pair(client)
    q = client.queue()
    assert isinstance(q.fileno(), int) and q.fileno() >= 0

    async def main():
        assert await q.wait_async(timeout=0.1) == []
        loop = asyncio.get_running_loop()
        # a write submitted from a callback while wait_async sleeps on the doorbell
        loop.call_later(0.05, lambda: q.write(src, 0, seg, 0, 64, user_data=5))
        t0 = loop.time()
        cqes = await q.wait_async(timeout=5)
        assert loop.time() - t0 < 1
        return cqes
    cqes = asyncio.run(main())
    assert [(c.user_data, c.status) for c in cqes] == [(5, 0)]
    # arm(): False while completions wait, True once idle
    q.write(src, 0, seg, 0, 8)
    deadline = time.monotonic() + 5
    while q.arm() and time.monotonic() < deadline:
        time.sleep(0.001)
        q.poll(1) and None
    assert len(q.poll()) + len(q.poll()) in (0, 1)
    assert q.arm() is True


def test_service_death(client, service):
    src, dst, seg = setup_pair(client)
    q = client.queue()
    sigstop(service)  # the write stays in flight
    q.write(src, 0, seg, 0, 8)
    service.proc.kill()
    service.proc.wait()
    with pytest.raises(dp.ConnectionLostError) as e:
        q.wait(5)
    assert e.value.errno == errno.ECONNRESET and isinstance(e.value, ConnectionResetError)
    with pytest.raises(dp.ConnectionLostError):
        client.alloc(4096)
    client.close()  # closing a dead client is fine


def test_strerror_last_error(client):
    assert "unknown region" in dp.strerror(-errno.EBADF)
    assert dp.strerror(errno.EBADF) == dp.strerror(-errno.EBADF)
    with pytest.raises(dp.NotFoundError):
        client.open("t/none")
    assert dp.last_error().startswith("dp_segment_open")


def test_threads_own_queues(client):
    src, dst, seg = setup_pair(client, 1 << 20)
    errors = []

    def worker(k):
        try:
            q = client.queue()
            ops = [(src, (k * 256 + i) * 64, seg, (k * 256 + i) * 64, 64) for i in range(256)]
            for _ in range(20):
                q.run(ops)
            q.close()
        except Exception as e:  # noqa
            errors.append(e)
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []


def test_help_reads_well():
    import pydoc
    text = pydoc.render_doc(dp, renderer=pydoc.plaintext)
    for word in ("Client", "Queue", "Region", "wait_async", "RegionInUseError",
                 "write(self, /, region, local_off, segment, target_off, length, user_data=0)"):
        assert word in text, word
    import inspect
    assert str(inspect.signature(dp.Queue.run)).startswith("(self, /, ops, timeout=None")
    assert str(inspect.signature(dp.Client)) == "(socket=None, name='python')"


def test_version_and_flags():
    """__version__ is DP_VERSION_STRING (dp_version.h, the only place it is
    written); the completion flags are the header's, F_SAME_HOST included."""
    top = os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(top, "libclient", "dp_version.h")) as f:
        want = re.search(r'#define DP_VERSION_STRING "([^"]+)"', f.read()).group(1)
    assert dp.__version__ == want
    assert (dp.F_LOCAL, dp.F_FABRIC, dp.F_GPU, dp.F_FILE, dp.F_SAME_HOST) == (1, 2, 4, 8, 16)
