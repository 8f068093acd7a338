# SPDX-License-Identifier: MIT
"""Every call NIXL's own Python suite (test/python: test_nixl_api.py,
test_nixl_bindings.py, prep_xfer_perf.py, desc_perf.py) and its examples
(partial_md_example, query_mem_example, basic/expanded_two_peers under its CI
harness, telemetry_reader) make that the replays in test_nixl_api.py and
test_nixl_flows.py do not: the low-level nixlAgent of nixl._bindings,
nixl._utils, nixl.logging and the listener's log line, descriptor list
methods (trim, print, remDesc, clear), NIXL's exception and return types,
query_memory, telemetry switches and telemetry files. CI cannot fetch NIXL;
tools/run-upstream-tests.sh runs the real files where a checkout is there."""
import ctypes
import errno
import mmap
import os
import pickle
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

from dataplane import nixl as N
from dataplane import nixl_bindings as B
from dataplane import nixl_utils as U


@pytest.fixture
def dp_socket(service, monkeypatch):
    """Agents made with no socket argument, as NIXL's tests make them, find
    the service through $DP_SOCKET."""
    monkeypatch.setenv("DP_SOCKET", service.sock)
    for var in ("NIXL_TELEMETRY_ENABLE", "NIXL_TELEMETRY_DIR"):
        monkeypatch.delenv(var, raising=False)
    return service.sock


def until(fn, what, timeout=10):
    deadline = time.time() + timeout
    while not (got := fn()):
        assert time.time() < deadline, what
    return got


def settle(agent, h, timeout=10):
    """The transfer's state once it is no longer "PROC"."""
    deadline = time.time() + timeout
    while (st := agent.check_xfer_state(h)) == "PROC":
        assert time.time() < deadline, "the transfer did not finish"
    return st


def test_descriptor_list_methods(capfd):
    descs = [(1000, 105, 0), (2000, 30, 0), (1010, 20, 0)]
    t = B.nixlXferDList(B.DRAM_SEG, descs)
    t.print()
    out = capfd.readouterr().out
    assert "DescList of mem type DRAM_SEG" in out and "Desc (2000, 30) from devID 0" in out
    assert pickle.loads(pickle.dumps(t)) == t
    t.remDesc(1)
    assert t.descCount() == 2 and t[0] == descs[0] and t[1] == descs[2]
    assert t.index((1010, 20, 0)) == 1
    with pytest.raises(IndexError):
        t.remDesc(2)
    t[1] = (3000, 1, 0)
    assert t[1] == (3000, 1, 0)
    t.clear()
    assert t.isEmpty() and bool(t)
    t.addDesc((2000, 100, 0))
    assert t.descCount() == 1
    # A registration list: metaInfo as str (bytes decoded), trim() drops it.
    r = B.nixlRegDList(B.DRAM_SEG)
    r.addDesc((4096, 64, 0, "dead"))
    r.append((8192, 32, 1, b"beef"))
    assert r[1] == (8192, 32, 1, "beef")
    x = r.trim()
    assert isinstance(x, B.nixlXferDList) and x.getType() == B.DRAM_SEG
    assert list(x) == [(4096, 64, 0), (8192, 32, 1)]
    r.remDesc(0)
    assert r.descCount() == 1 and r[0] == (8192, 32, 1, "beef")
    r.print()
    assert "Metadata: beef" in capfd.readouterr().out
    r.clear()
    assert r.isEmpty() and r.trim().descCount() == 0


def test_utils_memory():
    addr = U.malloc_passthru(256)
    other = U.malloc_passthru(256)
    try:
        assert addr % 4096 == 0
        U.ba_buf(addr, 256)
        assert ctypes.string_at(addr, 256) == b"\xba" * 256
        ctypes.memmove(other, addr, 256)
        U.verify_transfer(addr, other, 256)
        ctypes.memset(other + 200, 0, 1)
        with pytest.raises(AssertionError, match="byte 200"):
            U.verify_transfer(addr, other, 256)
    finally:
        U.free_passthru(addr)
        U.free_passthru(other)


def test_low_level_agent(dp_socket, monkeypatch, tmp_path):
    """test_nixl_bindings.test_agent's sequence: the C++ API's names, integer
    handles, status returns, bytes names, a notification with a NUL."""
    monkeypatch.setenv("NIXL_TELEMETRY_ENABLE", "y")
    monkeypatch.setenv("NIXL_TELEMETRY_DIR", str(tmp_path))
    cfg = B.nixlAgentConfig()
    cfg.useProgThread = False
    with pytest.raises(ValueError):
        B.nixlAgent("", cfg)
    a1, a2 = B.nixlAgent("Agent1", cfg), B.nixlAgent("Agent2", cfg)
    assert "UCX" in a1.getAvailPlugins() and "GDS" not in a1.getAvailPlugins()
    ucx1, ucx2 = a1.createBackend("UCX", {}), a2.createBackend("UCX", {})
    assert a1.getBackendParams(ucx1) == ({}, ["DRAM", "VRAM"])
    with pytest.raises(B.nixlNotFoundError):
        a1.createBackend("GDS_MT", {})
    with pytest.raises(B.nixlNotFoundError):
        a1.getPluginParams("UVX")
    size = 256
    addr1, addr2 = U.malloc_passthru(size), U.malloc_passthru(size)
    try:
        U.ba_buf(addr1, size)
        ctypes.memset(addr2, 0, size)
        r1, r2 = B.nixlRegDList(B.DRAM_SEG), B.nixlRegDList(B.DRAM_SEG)
        r1.addDesc((addr1, size, 0, "dead"))
        r2.addDesc((addr2, size, 0, "dead"))
        assert a1.registerMem(r1, [ucx1]) == B.NIXL_SUCCESS
        assert a2.registerMem(r2, [ucx2]) == B.NIXL_SUCCESS
        assert a1.loadRemoteMD(a2.getLocalMD()) == b"Agent2"
        assert a2.loadRemoteMD(a1.getLocalMD()) == b"Agent1"
        x = B.nixlXferDList(B.DRAM_SEG)
        assert a1.checkRemoteMD("Agent2", x) == B.NIXL_SUCCESS
        assert a1.checkRemoteMD("Agent9", x) == B.NIXL_ERR_NOT_FOUND
        src, dst = B.nixlXferDList(B.DRAM_SEG), B.nixlXferDList(B.DRAM_SEG)
        src.addDesc((addr1 + 8, 8, 0))
        dst.addDesc((addr2 + 8, 8, 0))
        h = a1.createXferReq(B.NIXL_WRITE, src, dst, "Agent2", "n\0tification")
        assert h != 0
        status = a1.postXferReq(h)
        assert status in (B.NIXL_SUCCESS, B.NIXL_IN_PROG)
        notifs = {}
        deadline = time.time() + 10
        while status != B.NIXL_SUCCESS or not notifs:
            assert time.time() < deadline
            if status != B.NIXL_SUCCESS:
                status = a1.getXferStatus(h)
            if not notifs:
                notifs = a2.getNotifs(notifs)
        U.verify_transfer(addr1 + 8, addr2 + 8, 8)
        assert ctypes.string_at(addr2, 8) == b"\0" * 8  # nothing outside the range
        assert notifs == {"Agent1": [b"n\0tification"]}
        tel = a1.getXferTelemetry(h)
        assert (tel.descCount, tel.totalBytes) == (1, 8)
        assert tel.startTime > 0 and tel.xferDuration >= tel.postDuration > 0
        assert a1.releaseXferReq(h) == B.NIXL_SUCCESS
        with pytest.raises(B.nixlInvalidParamError):  # released: not a handle any more
            a1.getXferStatus(h)
        # Prepared lists: local and remote handles, then a request by index.
        lo = a1.prepXferDlist(src)
        rem = a1.prepXferDlist("Agent2", dst, [])
        h2 = a1.makeXferReq(B.NIXL_READ, lo, [0], rem, [0], "")
        assert a1.postXferReq(h2) in (B.NIXL_SUCCESS, B.NIXL_IN_PROG)
        until(lambda: a1.getXferStatus(h2) == B.NIXL_SUCCESS, "the READ")
        with pytest.raises(B.nixlInvalidParamError):  # a dlist handle is no request
            a1.postXferReq(lo)
        for hh in (h2,):
            a1.releaseXferReq(hh)
        assert a1.releasedDlistH(lo) == a1.releasedDlistH(rem) == B.NIXL_SUCCESS
        a1.genNotif("Agent2", b"alone")
        assert until(lambda: a2.getNotifs({}), "genNotif") == {"Agent1": [b"alone"]}
        with pytest.raises(B.nixlNotSupportedError):
            a1.prepMemView(x)
        with pytest.raises(B.nixlNotSupportedError):
            a1.estimateXferCost(h)
        assert a1.deregisterMem(r1, [ucx1]) == B.NIXL_SUCCESS
        assert a2.deregisterMem(r2, [ucx2]) == B.NIXL_SUCCESS
        assert a1.invalidateRemoteMD("Agent2") == B.NIXL_SUCCESS
        with pytest.raises(B.nixlNotFoundError):
            a1.invalidateRemoteMD("Agent2")
    finally:
        a1._core.close()
        a2._core.close()
        U.free_passthru(addr1)
        U.free_passthru(addr2)


@pytest.mark.parametrize("sync_mode", [None] + list(N.nixl_thread_sync_t))
@pytest.mark.parametrize("enable_listen", [True, False])
def test_agent_made_through_bindings(dp_socket, monkeypatch, sync_mode, enable_listen):
    """nixl_agent makes its low-level agent through nixl._bindings.nixlAgent
    looked up at call time (NIXL's sync-mode test wraps it); the mode NIXL
    picks when none is given: STRICT with the listener, else NONE."""
    captured = {}
    real = B.nixlAgent

    def spy(name, cfg):
        captured["syncMode"] = cfg.syncMode
        return real(name, cfg)

    monkeypatch.setattr(B, "nixlAgent", spy)
    a = N.nixl_agent("sync", N.nixl_agent_config(sync_mode=sync_mode,
                                                 enable_listen_thread=enable_listen,
                                                 listen_port=0))
    try:
        want = (sync_mode or (N.nixl_thread_sync_t.NIXL_THREAD_SYNC_STRICT if enable_listen
                              else N.nixl_thread_sync_t.NIXL_THREAD_SYNC_NONE)).value
        assert captured["syncMode"] == want
        assert (a.listen_port is not None) == enable_listen
    finally:
        a.close()


def test_invalid_names_raise_as_nixl(dp_socket):
    a = N.nixl_agent("a", N.nixl_agent_config(backends=[]))
    try:
        with pytest.raises(KeyError):
            a.make_prepped_xfer("RD", 0, [], 0, [])
        lst = B.nixlXferDList(B.DRAM_SEG)
        with pytest.raises(KeyError):  # before the unknown agent is looked at
            a.initialize_xfer("WR", lst, lst, "nobody")
        assert a.get_xfer_descs([(1, 2, 3, 4)]) is None
        assert a.get_reg_descs([(1, 2, 3)]) is None
        with pytest.raises(KeyError):
            a.get_xfer_descs([(1, 2, 3)], mem_type="V-RAM")
        with pytest.raises(KeyError):
            a.get_reg_descs([(1, 2, 3, 4)], mem_type="V-RAM")
        assert a.backends == {}
    finally:
        a.close()


def _telemetry_agents(conf_capture):
    a = N.nixl_agent("t1", N.nixl_agent_config(capture_telemetry=conf_capture))
    b = N.nixl_agent("t2", N.nixl_agent_config())
    src, dst = U.malloc_passthru(128), U.malloc_passthru(128)
    U.ba_buf(src, 128)
    a.register_memory(a.get_reg_descs([(src, 128, 0, "")], "DRAM"))
    b.register_memory(b.get_reg_descs([(dst, 128, 0, "")], "DRAM"))
    a.add_remote_agent(b.get_agent_metadata())
    h = a.initialize_xfer("WRITE", a.get_xfer_descs([(src, 64, 0), (src + 64, 64, 0)], "DRAM"),
                          a.get_xfer_descs([(dst, 64, 0), (dst + 64, 64, 0)], "DRAM"), "t2",
                          b"telem_msg")
    assert a.transfer(h) in ("DONE", "PROC")
    until(lambda: a.check_xfer_state(h) == "DONE", "the transfer")
    until(lambda: b.check_remote_xfer_done("t1", b"telem_msg"), "the notification")
    U.verify_transfer(src, dst, 128)
    return a, b, h, (src, dst)


@pytest.mark.parametrize("env,capture,kept", [
    (None, False, False), (None, True, True), ("y", False, True), ("no", True, False)])
def test_telemetry_switches(dp_socket, monkeypatch, env, capture, kept):
    """NIXL_TELEMETRY_ENABLE decides when set; else capture_telemetry."""
    if env is not None:
        monkeypatch.setenv("NIXL_TELEMETRY_ENABLE", env)
    a, b, h, mem = _telemetry_agents(capture)
    try:
        if kept:
            tel = a.get_xfer_telemetry(h)
            assert (tel.descCount, tel.totalBytes) == (2, 128)
            assert tel.startTime > 0 and tel.xferDuration >= tel.postDuration > 0
        else:
            with pytest.raises(N.nixlNoTelemetryError):
                a.get_xfer_telemetry(h)
    finally:
        a.release_xfer_handle(h)
        a.close()
        b.close()
        for m in mem:
            U.free_passthru(m)


def _read_ring(path):
    """NIXL's telemetry ring, read as its telemetry_reader reads it."""
    with open(path, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
    w, r, version, expected, cap, mask = struct.unpack_from("=QQIIQQ", m, 0)
    assert (version, expected, mask) == (4, 4, cap - 1) and cap & (cap - 1) == 0
    assert os.path.getsize(path) == 40 + 16 * cap
    events = []
    while r != w:
        kind, value = struct.unpack_from("=I4xQ", m, 40 + 16 * r)
        events.append((kind, value))
        r = (r + 1) & mask
    m.close()
    return events


def test_telemetry_file(dp_socket, monkeypatch, tmp_path):
    monkeypatch.setenv("NIXL_TELEMETRY_ENABLE", "yes")
    monkeypatch.setenv("NIXL_TELEMETRY_DIR", str(tmp_path / "tel"))
    monkeypatch.setenv("NIXL_TELEMETRY_BUFFER_SIZE", "100")  # rounded up to 128
    a, b, h, mem = _telemetry_agents(False)
    try:
        events = _read_ring(tmp_path / "tel" / "t1")
        kinds = [k for k, _ in events]
        # MEMORY_REGISTERED 128, then TX_BYTES 128, TX_REQUESTS_NUM 1, XFER_TIME,
        # XFER_POST_TIME (µs, > 0).
        assert events[0] == (4, 128)
        assert (0, 128) in events and (2, 1) in events
        assert 6 in kinds and 7 in kinds and all(v > 0 for k, v in events if k in (6, 7))
        assert all(k not in kinds for k in (1, 3))  # nothing was read
        a.deregister_memory(a.get_reg_descs([(mem[0], 128, 0, "")], "DRAM"))
        assert _read_ring(tmp_path / "tel" / "t1")[-1] == (5, 128)
        assert (tmp_path / "tel" / "t2").exists()
    finally:
        a.release_xfer_handle(h)
        a.close()
        b.close()
        for m in mem:
            U.free_passthru(m)


def test_query_memory(dp_socket, tmp_path):
    f1, f2 = tmp_path / "one", tmp_path / "two"
    f1.write_bytes(b"Test content for queryMem file 1")
    f2.write_bytes(b"x" * 5)
    a = N.nixl_agent("q", N.nixl_agent_config(enable_prog_thread=False, backends=[]))
    try:
        with pytest.raises(ValueError, match="POSIX"):  # not created yet
            a.query_memory([(0, 0, 0, str(f1))], "POSIX", mem_type="FILE")
        a.create_backend("POSIX", a.get_plugin_params("POSIX"))
        resp = a.query_memory([(0, 0, 0, str(f1)), (0, 0, 0, str(tmp_path / "none")),
                               (0, 0, 0, str(f2))], "POSIX", mem_type="FILE")
        assert resp[1] is None
        assert resp[0]["size"] == "32" and resp[2]["size"] == "5"
        assert int(resp[0]["mode"]) == os.stat(f1).st_mode
        assert resp[0]["mtime"] == str(int(os.stat(f1).st_mtime))
        assert a.query_memory(B.nixlRegDList(B.FILE_SEG), "POSIX") == []
        a.create_backend("UCX")
        with pytest.raises(N.nixlNotSupportedError, match="no storage"):
            a.query_memory([(0, 0, 0, str(f1))], "UCX", mem_type="FILE")
        with pytest.raises(N.nixlNotSupportedError, match="FILE descriptors only"):
            a.query_memory([(0, 0, 0, str(f1))], "POSIX", mem_type="DRAM")
        # The low-level call, as NIXL's test_query_mem makes it.
        cfg = B.nixlAgentConfig()
        cfg.useProgThread = cfg.useListenThread = False
        low = B.nixlAgent("test_agent", cfg)
        params, mems = low.getPluginParams("POSIX")
        assert mems == ["DRAM", "FILE"]
        be = low.createBackend("POSIX", params)
        d = B.nixlRegDList(B.FILE_SEG)
        assert low.queryMem(d, be) == []
        d.addDesc((0, 0, 0, str(f2)))
        assert low.queryMem(d, be)[0]["size"] == "5"
        low._core.close()
    finally:
        a.close()


def _python(code, env):
    e = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          timeout=60)


def test_listener_line_and_logging(dp_socket):
    """NIXL's CI harness starts a target with --port=0 and NIXL_LOG_LEVEL=INFO
    and reads its port from stderr's "MD listener is listening on port N"
    (the last field); nixl.logging's loggers write INFO to stdout."""
    code = ("import sys; from dataplane.nixl import nixl_agent, nixl_agent_config; "
            "from dataplane.nixl_logging import get_logger; "
            "a = nixl_agent('t', nixl_agent_config(True, True, 0)); "
            "get_logger('_example').info('hello from the example'); "
            "print('port', a.listen_port); a.close()")
    r = _python(code, {"NIXL_LOG_LEVEL": "INFO"})
    assert r.returncode == 0, r.stderr
    port = int(r.stdout.split("port ")[1])
    lines = [ln for ln in r.stderr.splitlines() if "MD listener is listening on port" in ln]
    assert len(lines) == 1 and lines[0].split()[-1] == str(port) and port > 0
    assert "NIXL INFO" in r.stdout and "hello from the example" in r.stdout
    # Default (WARN): no line on stderr; INFO still on stdout.
    r = _python(code, {"NIXL_LOG_LEVEL": ""})
    assert r.returncode == 0, r.stderr
    assert "MD listener" not in r.stderr and "hello from the example" in r.stdout
    r = _python(code, {"NIXL_LOG_LEVEL": "ERROR"})
    assert "hello from the example" not in r.stdout


def test_names_returned_as_bytes_work_everywhere(dp_socket):
    """add_remote_agent returns bytes (NIXL's std::string); vLLM passes that
    back to prep_xfer_dlist, send_notif and remove_remote_agent."""
    a, b = N.nixl_agent("a"), N.nixl_agent("b")
    buf = np.zeros(4096, np.uint8)
    try:
        b.register_memory(buf)
        name = a.add_remote_agent(b.get_agent_metadata())
        assert name == b"b"
        assert a.check_remote_metadata(name)
        a.make_connection(name)
        a.prep_xfer_dlist(name, [(buf.ctypes.data, 16, 0)], "DRAM").release()
        a.send_notif(name, b"hi")
        assert until(lambda: b.get_new_notifs(), "the notification") == {"a": [b"hi"]}
        a.remove_remote_agent(name)
        assert not a.check_remote_metadata("b")
    finally:
        a.close()
        b.close()


def test_file_descriptors(dp_socket, tmp_path):
    """NIXL's POSIX flow: FILE descriptors (offset, length, fd) registered,
    then the far side, with the agent's own name, of WRITEs (memory -> file)
    and READs (file -> memory) that go through the service's file engine."""
    a = N.nixl_agent("posix", N.nixl_agent_config(backends=["POSIX"]))
    path = tmp_path / "f.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    ro = None
    try:
        n = 64 * 4096 + 100  # whole pages and a ragged tail
        src = ((np.arange(n) * 7 + 3) % 251).astype(np.uint8)
        back = np.zeros(n, np.uint8)
        a.register_memory(src)
        a.register_memory(back)
        try:
            freg = a.register_memory([(0, n + 4096, fd, "f.bin")], "FILE")
        except N.nixlNotSupportedError as e:  # a kernel that refuses io_uring (docs/files.md)
            pytest.skip(f"the service has no file engine: {e}")
        assert "f.bin" not in str(a.get_agent_metadata())  # files stay with their agent
        assert N._AgentCore._parse_metadata(a.get_agent_metadata())[2] == [
            (src.ctypes.data, n, 0, 0, None), (back.ctypes.data, n, 0, 0, None)]
        # Descriptors of mixed sizes at odd file offsets (+7), out of order.
        cuts = [0, 4096, 5000, 3 * 4096 + 1, 40 * 4096, n]
        mem = [(src.ctypes.data + s, e - s, 0) for s, e in zip(cuts, cuts[1:])]
        fil = [(s + 7, e - s, fd) for s, e in zip(cuts, cuts[1:])]
        h = a.initialize_xfer("WRITE", a.get_xfer_descs(mem[::-1], "DRAM"),
                              a.get_xfer_descs(fil[::-1], "FILE"), "posix")
        assert a.transfer(h) in ("DONE", "PROC")
        assert settle(a, h) == "DONE"
        data = path.read_bytes()
        assert data[:7] == b"\0" * 7 and data[7:7 + n] == src.tobytes()
        # READ back through prepared lists, by index.
        lo = a.prep_xfer_dlist("", a.get_xfer_descs(
            [(back.ctypes.data + s, e - s, 0) for s, e in zip(cuts, cuts[1:])], "DRAM"))
        fi = a.prep_xfer_dlist("posix", a.get_xfer_descs(fil, "FILE"))
        k = len(fil)
        h2 = a.make_prepped_xfer("READ", lo, list(range(k)), fi, list(range(k)))
        a.transfer(h2)
        assert settle(a, h2) == "DONE"
        assert (back == src).all()
        # Again after the file changed: the READ reposted sees the new bytes.
        os.pwrite(fd, b"\xee" * 10, 7 + 4096)
        a.transfer(h2)
        assert settle(a, h2) == "DONE"
        assert (back[4096:4106] == 0xEE).all() and (back[4106:] == src[4106:]).all()
        # Errors: a range past the registration, FILE on the local side or
        # for another agent, a read-only fd written.
        with pytest.raises(N.nixlNotFoundError, match="FILE descriptor 0"):
            a.prep_xfer_dlist("posix", [(n, 8192, fd)], "FILE")
        with pytest.raises(N.nixlNotFoundError):
            a.prep_xfer_dlist("posix", [(0, 8, fd + 1000)], "FILE")
        with pytest.raises(N.nixlNotSupportedError, match="own name"):
            a.prep_xfer_dlist("someone", [(0, 8, fd)], "FILE")
        with pytest.raises(N.nixlNotSupportedError, match="remote side"):
            a.prep_xfer_dlist("", [(0, 8, fd)], "FILE")  # files are never the local side
        ro = os.open(path, os.O_RDONLY)
        a.register_memory([(0, 4096, ro, "")], "FILE")
        w = a.initialize_xfer("WRITE", a.get_xfer_descs([(src.ctypes.data, 16, 0)], "DRAM"),
                              a.get_xfer_descs([(0, 16, ro)], "FILE"), "posix")
        a.transfer(w)
        assert settle(a, w) == "ERR"
        assert w.failures[0].status == -errno.EPERM
        r = a.initialize_xfer("READ", a.get_xfer_descs([(back.ctypes.data, 9, 0)], "DRAM"),
                              a.get_xfer_descs([(7, 9, ro)], "FILE"), "posix")
        back[:16] = 0
        a.transfer(r)
        assert settle(a, r) == "DONE"
        assert (back[:9] == src[:9]).all() and (back[9:16] == 0).all()
        for x in (h, h2, w, r):
            a.release_xfer_handle(x)
        a.deregister_memory(freg)
        with pytest.raises(N.nixlNotFoundError):
            a.prep_xfer_dlist("posix", [(0, 8, fd)], "FILE")
        with pytest.raises(N.nixlNotSupportedError, match="block devices"):
            a.register_memory([(0, 8, 0)], "BLOCK")
    finally:
        a.close()
        os.close(fd)
        if ro is not None:
            os.close(ro)


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_partial_metadata_by_listener(dp_socket):
    """partial_md_example.py: partial metadata sent to a peer's listener,
    one list at a time; a list not yet sent is NOT_FOUND; then invalidation
    by the listener; an empty tag matches any notification."""
    tport, iport = _free_port(), _free_port()
    target = N.nixl_agent("target", N.nixl_agent_config(True, True, tport))
    init = N.nixl_agent("initiator", N.nixl_agent_config(True, True, iport))
    mem = [U.malloc_passthru(256) for _ in range(30)]
    try:
        for i, m in enumerate(mem):
            ctypes.memset(m, i, 256)
        t1 = target.get_reg_descs([(m, 256, 0, "test") for m in mem[:10]], "DRAM")
        t2 = target.get_reg_descs([(m, 256, 0, "test") for m in mem[10:20]], "DRAM")
        x1, x2 = t1.trim(), t2.trim()
        assert target.register_memory(t1) is not None
        assert target.register_memory(t2) is not None
        ir = init.get_reg_descs([(m, 256, 0, "test") for m in mem[20:]], "DRAM")
        assert init.register_memory(ir) is not None
        target.send_partial_agent_metadata(t1, True, ["UCX"], "127.0.0.1", iport)
        until(lambda: init.check_remote_metadata("target", x1), "the partial metadata")
        assert not init.check_remote_metadata("target", x2)
        h1 = init.initialize_xfer("READ", ir.trim(), x1, "target", b"UUID1")
        assert init.transfer(h1) != "ERR"
        assert settle(init, h1) == "DONE"
        until(lambda: target.check_remote_xfer_done("initiator", b"UUID1"), "UUID1")
        for i in range(10):
            assert ctypes.string_at(mem[20 + i], 256) == bytes([i]) * 256
        with pytest.raises(N.nixlNotFoundError):
            init.initialize_xfer("READ", ir.trim(), x2, "target", b"UUID2")
        target.send_partial_agent_metadata(t2, True, ["UCX"], "127.0.0.1", iport)
        until(lambda: init.check_remote_metadata("target", x2), "the second list")
        h2 = init.initialize_xfer("READ", ir.trim(), x2, "target", b"UUID2")
        init.transfer(h2)
        assert settle(init, h2) == "DONE"
        for i in range(10):
            assert ctypes.string_at(mem[20 + i], 256) == bytes([10 + i]) * 256
        init.send_notif("target", b"whatever")
        until(lambda: target.check_remote_xfer_done("initiator", b""), "any notification")
        target.invalidate_local_metadata("127.0.0.1", iport)
        until(lambda: not init.check_remote_metadata("target"), "the invalidation")
        init.release_xfer_handle(h1)
        init.release_xfer_handle(h2)
    finally:
        init.close()
        target.close()
        for m in mem:
            U.free_passthru(m)


def test_torch_tensors_as_nixl_takes_them(dp_socket):
    """test_noncontiguous_tensor and the two-peer examples' rows of a 2-D
    CPU tensor (torch where installed: Debian's python3-torch)."""
    torch = pytest.importorskip("torch")
    a = N.nixl_agent("torch")
    try:
        t = torch.arange(8).reshape(2, 4)
        nc = torch.transpose(t, 0, 1)
        assert not nc.is_contiguous()
        assert a.get_reg_descs(nc) is None and a.get_xfer_descs(nc) is None
        x = torch.arange(160, dtype=torch.float32).reshape(10, 16)
        reg = a.register_memory(x)
        assert reg and reg.getType() == N.DRAM_SEG
        rows = a.get_xfer_descs([x[i, :] for i in range(10)])
        assert rows.descCount() == 10 and rows[3] == (x[3].data_ptr(), 64, 0)
        y = torch.zeros((10, 16), dtype=torch.float32)
        a.register_memory(y)
        lo = a.prep_xfer_dlist("", a.get_xfer_descs([y[i, :] for i in range(10)]))
        me = a.prep_xfer_dlist("torch", rows)
        h = a.make_prepped_xfer("READ", lo, list(range(10)), me, list(range(10))[::-1])
        a.transfer(h)
        assert settle(a, h) == "DONE" and torch.equal(y, x.flip(0))  # row i <- row 9 - i
        a.release_xfer_handle(h)
        a.deregister_memory(reg)
    finally:
        a.close()
