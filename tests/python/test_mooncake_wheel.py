# SPDX-License-Identifier: MIT
"""The calls of Mooncake's own wheel tests (mooncake-wheel/tests/
transfer_engine_target.py, transfer_engine_initiator_test.py) and its
notifications, on dataplane: a target with a managed buffer found by
get_first_buffer_address(), an initiator writing and reading it back by
bytes buffers, in batches, asynchronously, by transfer_submit_write, with
notifications (transfer_sync / batch_transfer_sync with a TransferNotify ->
get_notifies()), send_probe. Two processes on two services, same host and
fabric, both imports. Then the API's edges in one process."""
import errno
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from mooncake_roles import Role

TARGET = r"""
# As Mooncake's scripts: MC_METADATA_SERVER (default here P2PHANDSHAKE; upstream
# CI's recipe is http://127.0.0.1:8080/metadata, a server that need not run).
meta = os.environ.get("MC_METADATA_SERVER", "P2PHANDSHAKE")
local = os.environ.get("TARGET_SERVER_NAME", "127.0.0.1")
target = TransferEngine()
assert target.initialize(local, meta, "tcp", "") == 0
name = f"127.0.0.1:{target.get_rpc_port()}"
assert meta == "P2PHANDSHAKE" or name == local  # a metadata server: named as given
buffer_addr = target.get_first_buffer_address(name)
assert buffer_addr == 0  # nothing registered yet
buffer_addr = target.allocate_managed_buffer(4 << 20)
assert buffer_addr != 0
assert target.get_first_buffer_address(name) == buffer_addr
send(name=name, buffer_addr=buffer_addr)
while True:
    m = recv()
    if m.get("notifies"):
        import time
        got = []
        for _ in range(500):
            got += [(n.name, n.msg) for n in target.get_notifies()]
            if len(got) >= m["notifies"]:
                break
            time.sleep(0.01)
        send(notifies=got)
    elif m.get("peek"):
        send(bytes=target.read_bytes_from_buffer(buffer_addr + m["peek"][0], m["peek"][1]).hex())
    else:
        break
"""

INITIATOR = r"""
import random, string
meta = os.environ.get("MC_METADATA_SERVER", "P2PHANDSHAKE")
local = os.environ.get("INITIATOR_SERVER_NAME", "127.0.0.1:12347")
adaptor = TransferEngine()
assert adaptor.initialize(local, meta, "tcp", "") == 0
initiator_server_name = local
if meta == "P2PHANDSHAKE":
    initiator_server_name = local.rpartition(":")[0] + ":" + str(adaptor.get_rpc_port())
t = recv()
target_server_name = t["name"]

def rnd(n):
    return "".join(random.choices(string.ascii_letters + string.digits + string.punctuation,
                                  k=n)).encode()

src_addr = adaptor.get_first_buffer_address(initiator_server_name)
assert src_addr == 0
src_addr = adaptor.allocate_managed_buffer(4 << 20)
dst_addr = adaptor.get_first_buffer_address(target_server_name)
assert dst_addr == t["buffer_addr"], (dst_addr, t)

for i in range(50):  # test_random_write_circle_times
    data = rnd(random.randint(16, 256))
    assert adaptor.write_bytes_to_buffer(src_addr, data, len(data)) == 0
    assert adaptor.transfer_sync_write(target_server_name, src_addr, dst_addr, len(data)) == 0
    assert adaptor.write_bytes_to_buffer(src_addr, bytes(len(data)), len(data)) == 0
    assert adaptor.transfer_sync_read(target_server_name, src_addr, dst_addr, len(data)) == 0
    assert adaptor.read_bytes_from_buffer(src_addr, len(data)) == data

srcs = [src_addr + i * 1024 for i in range(100)]
dsts = [dst_addr + i * 1024 for i in range(100)]
for asynchronous in (False, True):  # test_batch_write_read, test_async_batch_write_read
    for _ in range(3):
        data = [rnd(random.randint(32, 128)) for _ in range(100)]
        lens = [len(d) for d in data]
        for s, d in zip(srcs, data):
            assert adaptor.write_bytes_to_buffer(s, d, len(d)) == 0
        if asynchronous:
            bid = adaptor.batch_transfer_async_write(target_server_name, srcs, dsts, lens)
            assert bid != 0
            assert adaptor.get_batch_transfer_status([bid]) == 0
        else:
            assert adaptor.batch_transfer_sync_write(target_server_name, srcs, dsts, lens) == 0
        for s, n in zip(srcs, lens):
            adaptor.write_bytes_to_buffer(s, bytes(n), n)
        if asynchronous:
            bid = adaptor.batch_transfer_async_read(target_server_name, srcs, dsts, lens)
            assert bid != 0
            assert adaptor.get_batch_transfer_status([bid]) == 0
        else:
            assert adaptor.batch_transfer_sync_read(target_server_name, srcs, dsts, lens) == 0
        for s, d in zip(srcs, data):
            assert adaptor.read_bytes_from_buffer(s, len(d)) == d

# several async batches in flight, waited for together
ids = []
for k in range(4):
    adaptor.write_bytes_to_buffer(src_addr + (1 << 20) + k * 65536, bytes([k + 1]) * 65536, 65536)
    ids.append(adaptor.batch_transfer_async_write(
        target_server_name, [src_addr + (1 << 20) + k * 65536], [dst_addr + (1 << 20) + k * 65536],
        [65536]))
assert 0 not in ids and adaptor.get_batch_transfer_status(ids) == 0
send(peek=[(1 << 20) + 3 * 65536, 4])
assert recv()["bytes"] == "04040404"

# transfer_submit_write + transfer_check_status
adaptor.write_bytes_to_buffer(src_addr, b"submitted", 9)
bid = adaptor.transfer_submit_write(target_server_name, src_addr, dst_addr + 4096, 9)
assert bid != 0
import time
for _ in range(1000):
    st = adaptor.transfer_check_status(bid)
    if st != 0:
        break
    time.sleep(0.001)
assert st == 1
send(peek=[4096, 9])
assert bytes.fromhex(recv()["bytes"]) == b"submitted"

# test_async_submit_to_unknown_peer_returns_zero, send_probe
assert adaptor.batch_transfer_async_write("unreachable_peer:9", [0], [0], [16]) == 0
assert adaptor.transfer_submit_write("unreachable_peer:9", 0, 0, 16) == 0
assert adaptor.send_probe(target_server_name) == 0
assert adaptor.send_probe("127.0.0.1:9") != 0

# notifications: with a transfer, with a batch, and a read's
adaptor.write_bytes_to_buffer(src_addr, b"kv", 2)
assert adaptor.transfer_sync(target_server_name, src_addr, dst_addr, 2, TransferOpcode.Write,
                             TransferNotify(initiator_server_name, "req-1 done")) == 0
assert adaptor.batch_transfer_sync(target_server_name, srcs[:3], dsts[:3], [8, 8, 8],
                                   TransferEngine.TransferOpcode.Write,
                                   notify=TransferNotify("prefill-0", "req-2")) == 0
assert adaptor.transfer_sync(target_server_name, src_addr, dst_addr, 2, TransferOpcode.Read,
                             TransferNotify("reader", "\u00e9t\u00e9")) == 0
assert adaptor.transfer_sync(target_server_name, src_addr, dst_addr, 2, 1) == 0
send(notifies=3)
assert recv()["notifies"] == [[initiator_server_name, "req-1 done"], ["prefill-0", "req-2"],
                              ["reader", "\u00e9t\u00e9"]]
send(bye=True)
"""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_initiator_and_target(service_pair, mooncake_import):
    _initiator_and_target(service_pair, mooncake_import, {})


def test_initiator_and_target_http_recipe(service_pair, mooncake_shim):
    """Upstream CI's recipe: MC_METADATA_SERVER=http://127.0.0.1:8080/metadata
    (nothing listens there: sessions are reached by address), each engine
    named by its host:port."""
    env = {"MC_METADATA_SERVER": "http://127.0.0.1:8080/metadata",
           "TARGET_SERVER_NAME": f"127.0.0.1:{_free_port()}",
           "INITIATOR_SERVER_NAME": f"127.0.0.1:{_free_port()}"}
    _initiator_and_target(service_pair, ("mooncake.engine", mooncake_shim), env)


def _initiator_and_target(service_pair, mooncake_import, env):
    a, b = service_pair
    target = Role(TARGET, b, mooncake_import, env=env)
    initiator = Role(INITIATOR, a, mooncake_import, env=env)
    try:
        initiator.send(**target.recv())
        while True:
            m = initiator.recv()
            target.send(**m)
            if m.get("bye"):
                break
            initiator.send(**target.recv())
        target.finish()
        initiator.finish()
    finally:
        initiator.kill()
        target.kill()


# ---- the API's edges, one process ----

@pytest.fixture
def engine(service, monkeypatch):
    from dataplane.mooncake import TransferEngine
    monkeypatch.setenv("DP_SOCKET", service.sock)
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0
    yield e
    e.close()


def test_edges(engine):
    from dataplane import DataplaneError
    from dataplane.mooncake import TransferEngine
    e = engine
    me = f"127.0.0.1:{e.get_rpc_port()}"
    assert e.get_local_hostname() == "127.0.0.1" and e.get_session_id() == me
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") < 0  # twice
    a = np.zeros(1 << 16, np.uint8)
    b = np.zeros(1 << 16, np.uint8)
    assert e.batch_register_memory([a.ctypes.data, b.ctypes.data], [a.nbytes, b.nbytes]) == 0
    assert e.get_first_buffer_address(me) == a.ctypes.data
    assert e.register_memory(a.ctypes.data + 64, 64) == 0  # inside one: nothing to do
    a[:5] = list(b"12345")
    assert e.transfer_sync_write(me, a.ctypes.data, b.ctypes.data + 10, 5) == 0
    assert bytes(b[10:15]) == b"12345"
    # a local buffer outside the engine's memory, length mismatch, bad peer
    c = np.zeros(64, np.uint8)
    assert e.transfer_sync_write(me, c.ctypes.data, b.ctypes.data, 8) == -errno.EINVAL
    assert isinstance(e.last_error, ValueError) and "not in memory" in str(e.last_error)
    assert e.batch_transfer_sync_write(me, [a.ctypes.data], [0, 1], [8]) == -errno.EINVAL
    assert e.transfer_sync_write(me, a.ctypes.data, 4096, 8) == -errno.EFAULT
    assert e.transfer_sync_write("127.0.0.1:9", a.ctypes.data, 0, 8) < 0
    assert isinstance(e.last_error, DataplaneError)
    assert e.batch_transfer_sync_write(me, [], [], []) == 0
    # stream-ordered forms on host memory (stream 0: nothing to wait for without CUDA)
    e.transfer_write_on_cuda(me, a.ctypes.data, b.ctypes.data + 100, 5)
    assert bytes(b[100:105]) == b"12345"
    with pytest.raises(RuntimeError):
        e.batch_transfer_read_on_cuda(me, [a.ctypes.data], [4096], [8])
    # unregistered: peers' (and its own) descriptors to it fail
    assert e.unregister_memory(b.ctypes.data) == 0
    assert e.unregister_memory(b.ctypes.data) == -errno.EINVAL
    assert e.transfer_sync_write(me, a.ctypes.data, b.ctypes.data, 8) < 0
    assert e.batch_unregister_memory([a.ctypes.data]) == 0
    assert e.get_first_buffer_address(me) == 0
    m = e.allocate_managed_buffer(8192)
    assert m and e.get_first_buffer_address(me) == m
    assert e.unregister_memory(m) == -errno.EINVAL  # managed: free_managed_buffer
    assert e.free_managed_buffer(m, 8192) == 0 and e.free_managed_buffer(m, 8192) < 0
    assert e.get_batch_transfer_status([12345]) == -errno.EINVAL
    assert e.transfer_check_status(12345) == -1
    e2 = TransferEngine()
    assert e2.transfer_sync_write(me, 0, 0, 1) == -errno.EINVAL  # not initialized


@pytest.mark.parametrize("server", ["redis://127.0.0.1:6379", "etcd://127.0.0.1:2379",
                                    "127.0.0.1:2379", "http://127.0.0.1:8080/metadata",
                                    "https://meta.example:443/metadata"])
def test_metadata_servers(service, monkeypatch, caplog, server):
    """Every kind of Mooncake metadata server is taken and not used (logged):
    the session listens on local_hostname's port, peers name it so."""
    import logging
    from dataplane.mooncake import TransferEngine
    monkeypatch.setenv("DP_SOCKET", service.sock)
    e = TransferEngine()
    for bad in ("zookeeper://127.0.0.1:2181", "etcd://", ""):
        assert e.initialize("127.0.0.1", bad, "rdma", "") == -errno.EINVAL, bad
        assert "P2PHANDSHAKE" in str(e.last_error) and "http://" in str(e.last_error)
    port = _free_port()
    name = f"127.0.0.1:{port}"
    with caplog.at_level(logging.INFO, logger="dataplane.mooncake"):
        assert e.initialize(name, server, "tcp", "") == 0, e.last_error
    assert any("is not used" in r.getMessage() and server in r.getMessage()
               for r in caplog.records)
    assert e.get_rpc_port() == port and e.get_session_id() == name
    f = TransferEngine()  # the same name twice: its port is taken
    assert f.initialize_ext(name, "127.0.0.1:6379", "tcp", "", "redis") < 0
    f.close()
    g = TransferEngine()
    assert g.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    x = np.arange(256, dtype=np.uint8)
    y = np.zeros(256, np.uint8)
    assert e.register_memory(y.ctypes.data, 256) == 0 and g.register_memory(x.ctypes.data, 256) == 0
    assert g.transfer_sync_write(name, x.ctypes.data, y.ctypes.data, 256) == 0
    assert (y == x).all()
    g.close()
    e.close()


def test_shim_refuses_the_store(mooncake_shim):
    """mooncake.store and the buffer pools are Mooncake Store, another
    product: importing them fails with that reason; mooncake.engine works."""
    code = ("import mooncake.engine\n"
            "from mooncake.engine import TransferEngine, TransferOpcode\n"
            "assert mooncake.engine.TransferEngine is TransferEngine\n"
            "for stmt in ('from mooncake.store import MooncakeDistributedStore',\n"
            "             'from mooncake import BufferPool, RegisteredBufferPool'):\n"
            "    try:\n"
            "        exec(stmt)\n"
            "    except ImportError as e:\n"
            "        print('refused:', e)\n"
            "    else:\n"
            "        raise SystemExit('imported: ' + stmt)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([mooncake_shim] + [p for p in sys.path
                                                                          if p]))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and all("different product" in ln and "Mooncake Store" in ln
                                   for ln in lines), lines


def test_cuda_memory_and_stream(engine):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    e = engine
    me = e.get_session_id()
    src = torch.arange(1 << 20, dtype=torch.uint8, device="cuda")
    dst = torch.zeros(1 << 20, dtype=torch.uint8, device="cuda")
    assert e.batch_register_memory([src.data_ptr(), dst.data_ptr()], [src.numel(), dst.numel()]) == 0
    assert e.transfer_sync_write(me, src.data_ptr(), dst.data_ptr(), 1 << 20) == 0
    assert torch.equal(src, dst)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        src.fill_(7)  # queued on s: the transfer must come after it
    e.transfer_write_on_cuda(me, src.data_ptr(), dst.data_ptr(), 1 << 20, s.cuda_stream)
    assert int(dst.min()) == 7
    assert e.batch_unregister_memory([src.data_ptr(), dst.data_ptr()]) == 0
