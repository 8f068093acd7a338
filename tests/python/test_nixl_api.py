# SPDX-License-Identifier: MIT
"""dataplane.nixl's calls one by one, in one process on one service:
descriptor lists from tuples, numpy N x 3 and numpy memory, registration and
its errors, metadata, loopback, return conventions (DONE/PROC/ERR, repost
while active), notifications keyed by agent name, the import shim's
install/refuse/uninstall, and CUDA tensors (skipped without torch.cuda)."""
import os
import pickle
import subprocess
import sys
import time

import numpy as np
import pytest

from dataplane import nixl as N


@pytest.fixture
def agents(service):
    made = []

    def make(name, conf=None):
        a = N.nixl_agent(name, conf, socket=service.sock)
        made.append(a)
        return a
    yield make
    for a in made:
        a.close()


def wait_state(agent, h, timeout=10):
    deadline = time.time() + timeout
    while (st := agent.check_xfer_state(h)) == "PROC":
        assert time.time() < deadline
    return st


def test_descriptor_lists(agents):
    a = agents("a")
    buf = np.zeros(4096, np.uint8)
    t = a.get_xfer_descs([(buf.ctypes.data, 64, 0), (buf.ctypes.data + 64, 32, 0)], "DRAM")
    assert isinstance(t, N.nixlXferDList) and t.descCount() == 2 and len(t) == 2
    assert t.getType() == N.DRAM_SEG and t[1] == (buf.ctypes.data + 64, 32, 0)
    arr = np.array([[buf.ctypes.data, 64, 0], [buf.ctypes.data + 64, 32, 0]], np.uint64)
    assert a.get_xfer_descs(arr, "cpu") == t
    assert a.get_xfer_descs(t) is t
    r = a.get_reg_descs([(buf.ctypes.data, 4096, 0, "meta")], "DRAM")
    assert r[0] == (buf.ctypes.data, 4096, 0, "meta")
    assert a.get_reg_descs(arr, "DRAM").descCount() == 2
    # As NIXL: wrong shapes and missing mem types give None (logged), not lists.
    assert a.get_xfer_descs([(1, 2, 0)]) is None
    assert a.get_xfer_descs(arr) is None
    assert a.get_xfer_descs(r) is None and a.get_reg_descs(t) is None
    empty = N.nixlXferDList(N.DRAM_SEG)
    assert empty.isEmpty() and bool(empty)
    assert pickle.loads(a.get_serialized_descs(t)) == t
    assert a.deserialize_descs(a.get_serialized_descs(r)) == r
    with pytest.raises(ValueError):
        N.nixlXferDList(N.DRAM_SEG, np.zeros((2, 2), np.uint64))
    with pytest.raises(KeyError):  # an unknown memory type, as NIXL's table lookup
        a.get_xfer_descs([(1, 2, 0)], "SSD")
    with pytest.raises(KeyError):
        a.get_reg_descs(arr, "V-RAM")
    # Tuples of the wrong size give None (logged), as NIXL; registration
    # takes 3-tuples too (an extension).
    assert a.get_xfer_descs([(1, 2, 0, "m")], "DRAM") is None
    assert a.get_reg_descs([(1, 2)], "DRAM") is None
    assert a.get_reg_descs([(1, 2, 0)], "DRAM")[0] == (1, 2, 0, "")


def test_register_forms_and_errors(agents):
    a = agents("a")
    arr = np.zeros((8, 512), np.uint8)
    own = np.zeros(8192, np.uint8)
    r1 = a.register_memory(arr)  # numpy memory itself
    assert r1[0][:2] == (arr.ctypes.data, arr.nbytes)
    r2 = a.register_memory([(own.ctypes.data, 4096, 0)], "DRAM")  # 3-tuples
    r3 = a.register_memory(a.get_reg_descs([(own.ctypes.data + 4096, 4096, 0, "")], "DRAM"))
    md = N._AgentCore._parse_metadata(a.get_agent_metadata())
    assert md[0] == "a" and md[1] == a.session_name and len(md[2]) == 3
    with pytest.raises(N.nixlInvalidParamError):  # overlaps a registration
        a.register_memory([(own.ctypes.data + 100, 10, 0)], "DRAM")
    with pytest.raises(N.nixlInvalidParamError):
        a.register_memory(np.zeros(8, np.uint8)[::2])
    with pytest.raises(N.nixlNotSupportedError):
        a.register_memory([(own.ctypes.data, 10, 0)], "BLOCK")
    with pytest.raises(N.nixlInvalidParamError):  # FILE: fd 0 is no regular file
        a.register_memory([(0, 10, 0)], "FILE")
    # A local descriptor outside every registration: NOT_FOUND at prep.
    with pytest.raises(N.nixlNotFoundError):
        a.prep_xfer_dlist("", [(own.ctypes.data + 4000, 200, 0)], "DRAM")
    a.prep_xfer_dlist("", [(own.ctypes.data + 4000, 96, 0)], "DRAM").release()
    a.deregister_memory(r2)
    with pytest.raises(N.nixlNotFoundError):
        a.deregister_memory(r2)
    with pytest.raises(N.nixlNotFoundError):
        a.prep_xfer_dlist("", [(own.ctypes.data, 16, 0)], "DRAM")
    a.deregister_memory(r3)
    a.deregister_memory(r1)
    assert N._AgentCore._parse_metadata(a.get_agent_metadata())[2] == []


def test_metadata_errors_and_partial(agents):
    a, b = agents("a"), agents("b")
    with pytest.raises(N.nixlInvalidParamError):
        a.add_remote_agent(b"garbage")
    with pytest.raises(N.nixlInvalidParamError):
        a.add_remote_agent(N._MD_MAGIC + b'{"name":"x","session":"s","regs":[[1]]}')
    with pytest.raises(N.nixlNotFoundError):
        a.remove_remote_agent("b")
    with pytest.raises(N.nixlNotFoundError):
        a.prep_xfer_dlist("b", [(0, 1, 0)], "DRAM")
    with pytest.raises(N.nixlNotFoundError):
        a.send_notif("b", b"x")
    assert not a.check_remote_metadata("b")
    x, y = np.zeros(4096, np.uint8), np.zeros(4096, np.uint8)
    rx = b.register_memory(x)
    b.register_memory(y)
    assert a.add_remote_agent(b.get_partial_agent_metadata(rx)) == b"b"  # bytes, as NIXL
    assert a.check_remote_metadata("b")
    assert a.check_remote_metadata("b", a.get_xfer_descs([(x.ctypes.data, 4096, 0)], "DRAM"))
    assert not a.check_remote_metadata("b", a.get_xfer_descs([(y.ctypes.data, 1, 0)], "DRAM"))
    with pytest.raises(N.nixlNotFoundError):  # not in the metadata loaded
        a.prep_xfer_dlist("b", [(y.ctypes.data, 16, 0)], "DRAM")
    assert a.add_remote_agent(b.get_agent_metadata()) == b"b"  # loading again updates
    a.prep_xfer_dlist("b", [(y.ctypes.data, 16, 0)], "DRAM")
    a.prep_xfer_dlist(b"b", [(y.ctypes.data, 16, 0)], "DRAM")  # the name as returned
    with pytest.raises(N.nixlNotSupportedError):
        a.send_local_metadata()  # no central metadata server


def test_states_repost_loopback_and_notifs(agents):
    a, b = agents("a"), agents("b")
    src = np.arange(1 << 16, dtype=np.uint32).view(np.uint8)
    dst = np.zeros(1 << 18, np.uint8)
    a.register_memory(src)
    b.register_memory(dst)
    a.add_remote_agent(b.get_agent_metadata())
    b.add_remote_agent(a.get_agent_metadata())
    n = 64
    local = np.array([[src.ctypes.data + i * 4096, 4096, 0] for i in range(n)], np.uint64)
    remote = np.array([[dst.ctypes.data + (n - 1 - i) * 4096, 4096, 0] for i in range(n)],
                      np.uint64)
    h = a.initialize_xfer("WRITE", a.get_xfer_descs(local, "DRAM"),
                          a.get_xfer_descs(remote, "DRAM"), "b", "all:64")
    with pytest.raises(N.nixlNotPostedError):
        a.check_xfer_state(h)
    assert a.transfer(h) in ("DONE", "PROC")
    st = a.check_xfer_state(h)
    if st == "PROC":
        with pytest.raises(N.nixlRepostActiveError):
            a.transfer(h)
    assert wait_state(a, h) == "DONE"
    for i in range(n):
        assert (dst[(n - 1 - i) * 4096:(n - i) * 4096] == src[i * 4096:(i + 1) * 4096]).all()
    deadline = time.time() + 5
    got = {}
    while not got and time.time() < deadline:
        got = b.get_new_notifs()
    assert got == {"a": [b"all:64"]}
    # Reposted with a new message; then READ back from b by a (loopback of
    # b's memory is not needed: a reads b).
    assert a.transfer(h, b"again") != "ERR"
    assert wait_state(a, h) == "DONE"
    assert b.check_remote_xfer_done("a", b"aga")
    assert not b.check_remote_xfer_done("a", b"aga")
    # A failing transfer: b's memory deregistered under a's handle -> ERR,
    # and no notification.
    b.deregister_memory(b.get_reg_descs([(dst.ctypes.data, dst.nbytes, 0, "")], "DRAM"))
    assert a.transfer(h, b"never") in ("ERR", "PROC")
    assert wait_state(a, h) == "ERR"
    assert h.failures and all(c.status < 0 for c in h.failures)
    time.sleep(0.2)
    assert b.get_new_notifs() == {}
    a.release_xfer_handle(h)
    # Loopback: the agent's own name as the remote side.
    lo = a.prep_xfer_dlist("", a.get_xfer_descs(local[:2], "DRAM"))
    me = a.prep_xfer_dlist("a", a.get_xfer_descs(local[2:4], "DRAM"))
    h2 = a.make_prepped_xfer("READ", lo, [0, 1], me, [1, 0])
    a.transfer(h2)
    assert wait_state(a, h2) == "DONE"
    assert (src[:4096] == np.arange(3 * 1024, 4 * 1024, dtype=np.uint32).view(np.uint8)).all()
    with pytest.raises(N.nixlInvalidParamError):  # lengths differ
        a.make_prepped_xfer("READ", lo, [0], a.prep_xfer_dlist(
            "a", [(src.ctypes.data, 8, 0)], "DRAM"), [0])
    with pytest.raises(KeyError):  # an unknown operation, as NIXL's table lookup
        a.make_prepped_xfer("COPY", lo, [0], me, [0])
    with pytest.raises(N.nixlInvalidParamError):
        a.make_prepped_xfer("READ", lo, [0, 1], me, [0])
    # Empty transfer: DONE at once, its notification still sent (vLLM sends
    # its own send_notif instead, which works too).
    h3 = a.make_prepped_xfer("WRITE", lo, [], me, [], notif_msg=b"empty")
    assert a.transfer(h3) == "DONE"


def test_notifs_from_plain_clients_and_unknown_agents(agents, service):
    import dataplane as dp
    a, b = agents("a"), agents("b")
    # b never loaded a's metadata: the frame names a anyway (vLLM's P).
    a.add_remote_agent(b.get_agent_metadata())
    a.send_notif("b", "text is encoded")
    deadline = time.time() + 5
    got = {}
    while not got and time.time() < deadline:
        got = b.get_new_notifs()
    assert got == {"a": [b"text is encoded"]}
    most = 4090 - len(b"a")
    a.send_notif("b", b"m" * most)
    with pytest.raises(N.nixlInvalidParamError):
        a.send_notif("b", b"m" * (most + 1))
    deadline = time.time() + 5
    got = {}
    while not got and time.time() < deadline:
        got = b.get_new_notifs()
    assert got == {"a": [b"m" * most]}
    # A plain dataplane client's message is keyed by its session name.
    with dp.Client(service.sock, name="plain") as c:
        seg = c.open_session(b.session_name)
        c.notify_send(seg, b"raw")
        deadline = time.time() + 5
        got = {}
        while not got and time.time() < deadline:
            got = b.get_new_notifs()
        (sender,) = got
        assert got[sender] == [b"raw"] and sender.startswith(c.server_name)


def test_config_backends_and_telemetry(agents):
    conf = N.nixl_agent_config(enable_prog_thread=False, num_threads=8, backends=["UCX", "GDS"],
                               capture_telemetry=True,
                               sync_mode=N.nixl_thread_sync_t.NIXL_THREAD_SYNC_RW)
    a = agents("a", conf)
    # GDS is hardware dataplane does not drive: skipped at start with a
    # warning, refused by create_backend, as NIXL does without its plugin.
    assert set(a.backends) == {"UCX"} and "UCX" in a.get_plugin_list()
    assert "GDS" not in a.get_plugin_list()
    with pytest.raises(N.nixlNotFoundError, match="GPUDirect Storage"):
        a.create_backend("GDS")
    with pytest.raises(N.nixlNotFoundError, match="no such plugin"):
        a.create_backend("UVX")
    assert a.get_plugin_mem_types("UVX") == [] and a.get_plugin_params("UVX") == {}
    assert a.get_backend_mem_types("UVX") == [] and a.get_backend_params("UVX") == {}
    a.create_backend("LIBFABRIC", {"x": "1"})
    assert a.get_backend_params("LIBFABRIC") == {"x": "1"}
    assert a.get_backend_mem_types("UCX") == ["DRAM", "VRAM"]
    assert a.get_plugin_mem_types("POSIX") == ["DRAM", "FILE"]
    with pytest.raises(TypeError):
        N.nixl_agent_config(sync_mode="strict")
    with pytest.raises(N.nixlInvalidParamError):
        N.nixl_agent("x" * 256, None)
    with pytest.raises(ValueError):  # as NIXL (std::invalid_argument)
        N.nixl_agent("", None)


def _run(args, extra_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [p for p in extra_path] + [p for p in sys.path if p]))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env)


def test_shim_install_refuse_uninstall(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    r = _run(["-m", "dataplane.shim_nixl", "install", str(site)], [])
    assert r.returncode == 0, r.stderr
    code = ("from nixl._api import nixl_agent, nixl_agent_config; "
            "from nixl._bindings import nixlXferTelemetry, nixlBackendError, NIXL_SUCCESS; "
            "from nixl.logging import get_logger; import nixl; "
            "import nixl._bindings as b, nixl._utils as u, dataplane.nixl_bindings as db; "
            "print(nixl_agent.__module__, NIXL_SUCCESS == 0, nixl.DEFAULT_COMM_PORT, "
            "b is db, u.__name__, get_logger('_api').name, b.HAVE_UCX_GPU_DEVICE_API)")
    r = _run(["-c", code], [str(site)])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["dataplane.nixl", "True", "8888", "True", "dataplane.nixl_utils",
                                "nixl.api", "False"]
    # Installing again is fine; status names it.
    assert _run(["-m", "dataplane.shim_nixl", "install", str(site)], [str(site)]).returncode == 0
    assert "dataplane shim" in _run(["-m", "dataplane.shim_nixl", "status"], [str(site)]).stdout
    # A real NIXL elsewhere on the path: install says so, exits 1, writes nothing.
    real = tmp_path / "real"
    (real / "nixl").mkdir(parents=True)
    (real / "nixl" / "__init__.py").write_text("REAL = True\n")
    other = tmp_path / "other"
    other.mkdir()
    r = _run(["-m", "dataplane.shim_nixl", "install", str(other)], [str(real)])
    assert r.returncode == 1 and str(real / "nixl") in r.stderr, (r.stdout, r.stderr)
    assert not (other / "nixl").exists()
    # A directory's own non-shim nixl is never overwritten or removed.
    r = _run(["-m", "dataplane.shim_nixl", "install", str(real)], [])
    assert r.returncode == 1 and (real / "nixl" / "__init__.py").read_text() == "REAL = True\n"
    assert _run(["-m", "dataplane.shim_nixl", "uninstall", str(real)], []).returncode == 1
    assert (real / "nixl" / "__init__.py").exists()
    r = _run(["-m", "dataplane.shim_nixl", "uninstall", str(site)], [])
    assert r.returncode == 0 and not (site / "nixl").exists()
    assert _run(["-m", "dataplane.shim_nixl", "bogus"], []).returncode == 2


def _cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@pytest.mark.skipif(_cuda() is None, reason="needs torch and a CUDA device")
def test_cuda_tensors_read_and_write(agents):
    torch = _cuda()
    a, b = agents("a"), agents("b")
    src = torch.arange(1 << 16, dtype=torch.int32, device="cuda")
    dst = torch.zeros(1 << 16, dtype=torch.int32, device="cuda")
    host = torch.zeros(1 << 16, dtype=torch.int32)
    ra = a.register_memory(src)
    assert ra.getType() == N.VRAM_SEG
    b.register_memory(dst)
    a.register_memory(host)
    torch.cuda.synchronize()
    b.add_remote_agent(a.get_agent_metadata())
    rows = [src[i * 4096:(i + 1) * 4096] for i in range(16)]
    drows = [dst[i * 4096:(i + 1) * 4096] for i in range(16)]
    h = b.initialize_xfer("READ", b.get_xfer_descs(drows), b.get_xfer_descs(rows), "a", b"r")
    b.transfer(h)
    assert wait_state(b, h) == "DONE"
    assert torch.equal(dst, src)
    # VRAM to DRAM of another agent: a writes its GPU rows into its own host
    # tensor through loopback.
    lo = a.prep_xfer_dlist("", a.get_xfer_descs(rows))
    me = a.prep_xfer_dlist("a", a.get_xfer_descs([host[i * 4096:(i + 1) * 4096]
                                                  for i in range(16)]))
    assert me is not None and lo is not None
    h2 = a.make_prepped_xfer("WRITE", lo, list(range(16)), me, list(range(16)))
    a.transfer(h2)
    assert wait_state(a, h2) == "DONE"
    assert torch.equal(host, src.cpu())
