#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch-check.py BUILD [default|expandable|expandable-noipc] - torch CUDA tensors
registered with dp_register_cuda (through libdataplane.so and ctypes, so that
it runs with any Python that has torch, without building the extension for
it) and moved between two dataplaned of this host by engine session: the
owner's tensor is written and read by its own device addresses, from another
service (DP_CQE_F_SAME_HOST) and from its own (DP_CQE_F_LOCAL); bytes
checked with torch.equal, bandwidth of 64 MiB WRITEs printed.

The allocator is chosen before torch is imported: `default` (cudaMalloc
segments), `expandable` (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True:
cuMemCreate + cuMemMap pieces), `expandable-noipc` (the same with
TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC=0: pieces without a shareable handle,
which dp_register_cuda must refuse with -EINVAL and a text that names the
setting). Exit 0 when every check held, 1 otherwise, 77 without a GPU."""
import ctypes as C
import os
import subprocess
import sys
import tempfile
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
MODE = sys.argv[2] if len(sys.argv) > 2 else "default"
if MODE.startswith("expandable"):
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    os.environ["TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC"] = "0" if MODE.endswith("noipc") else "1"

import torch  # noqa: E402

if not torch.cuda.is_available():
    print("torch-check: no CUDA device")
    sys.exit(77)


class Desc(C.Structure):
    _fields_ = [("opcode", C.c_uint8), ("flags", C.c_uint8), ("reserved0", C.c_uint16),
                ("region", C.c_uint32), ("local_off", C.c_uint64), ("segment", C.c_uint32),
                ("reserved1", C.c_uint32), ("target_off", C.c_uint64), ("len", C.c_uint64),
                ("user_data", C.c_uint64), ("submit_ns", C.c_uint64), ("notify", C.c_uint64)]


class Cqe(C.Structure):
    _fields_ = [("user_data", C.c_uint64), ("status", C.c_int32), ("flags", C.c_uint32),
                ("bytes", C.c_uint64), ("reserved", C.c_uint64)]


LOCAL, SAME_HOST, GPU = 1, 16, 4
lib = C.CDLL(os.path.join(BUILD, "libdataplane.so.1"))
lib.dp_last_error.restype = C.c_char_p
lib.dp_session_name.restype = C.c_char_p
lib.dp_session_name.argtypes = [C.c_void_p]
lib.dp_register_mem.argtypes = [C.c_void_p, C.c_void_p, C.c_size_t]
lib.dp_alloc.argtypes = [C.c_void_p, C.c_size_t, C.c_uint, C.POINTER(C.c_void_p)]
for f in ("dp_register_cuda", "dp_register_mem", "dp_session_create", "dp_session_open", "dp_queue_create",
          "dp_submit", "dp_wait", "dp_alloc", "dp_close", "dp_free"):
    getattr(lib, f).restype = C.c_int
lib.dp_register_cuda.argtypes = [C.c_void_p, C.c_void_p, C.c_size_t]
lib.dp_session_open.argtypes = [C.c_void_p, C.c_char_p, C.c_uint]
lib.dp_session_create.argtypes = [C.c_void_p, C.c_uint]
lib.dp_submit.argtypes = [C.c_void_p, C.POINTER(Desc), C.c_uint]
lib.dp_wait.argtypes = [C.c_void_p, C.POINTER(Cqe), C.c_uint, C.c_int]
lib.dp_queue_create.argtypes = [C.c_void_p, C.c_uint32, C.POINTER(C.c_void_p)]
failures = []


def check(ok, what):
    print(("  ok   " if ok else "  FAIL ") + what)
    if not ok:
        failures.append(what)


def connect(sock, name):
    c = C.c_void_p()
    rc = lib.dp_connect(sock.encode(), name.encode(), C.byref(c))
    if rc < 0:
        sys.exit("torch-check: dp_connect %s: %s" % (sock, lib.dp_last_error().decode()))
    return c


def run(q, write, region, seg, addr, n, ud=1):
    d = Desc(opcode=1 if write else 2, region=region, segment=seg, target_off=addr, len=n,
             user_data=ud)
    t0 = time.perf_counter()
    while lib.dp_submit(q, C.byref(d), 1) == 0:
        pass
    c = Cqe()
    while lib.dp_wait(q, C.byref(c), 1, 30000) == 0:
        pass
    return c, time.perf_counter() - t0


def main():
    tmp = tempfile.mkdtemp(prefix="dp-torch-")
    svcs, socks = [], []
    for i in range(2):
        sock = os.path.join(tmp, "s%d.sock" % i)
        svcs.append(subprocess.Popen(
            [os.path.join(BUILD, "dataplaned"), "--socket", sock, "--provider", "tcp",
             "--server-name", "127.0.0.1", "--same-host-socket", sock + ".peer",
             "--log-level", "warn"]))
        socks.append(sock)
    for s in socks:
        for _ in range(200):
            if os.path.exists(s):
                break
            time.sleep(0.05)
    try:
        return checks(socks)
    finally:
        for p in svcs:
            p.terminate()
            p.wait()


def checks(socks):
    n = 64 << 20
    print("torch-check: torch %s, %s, allocator %s (PYTORCH_CUDA_ALLOC_CONF=%s, "
          "TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC=%s)" % (
              torch.__version__, torch.cuda.get_device_name(0), MODE,
              os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
              os.environ.get("TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC", "")))
    a, b = connect(socks[0], "torch-a"), connect(socks[1], "torch-b")
    # Grow the allocator first, so that the tensors below sit inside a
    # segment (expandable: pieces mapped side by side), not alone.
    pad = torch.empty(3 * n + 12345, dtype=torch.uint8, device="cuda")
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    dst = torch.zeros(n, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    del pad
    rs = lib.dp_register_cuda(a, C.c_void_p(src.data_ptr()), n)
    if MODE.endswith("noipc"):
        err = lib.dp_last_error().decode()
        check(rs == -22, "an unshareable expandable segment is refused -EINVAL (%d)" % rs)
        check("TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC" in err or "POSIX" in err,
              "and the text names the setting: %s" % err)
        return 0 if not failures else 1
    check(rs >= 0, "dp_register_cuda of a torch tensor (%s)" % (
        "ok" if rs >= 0 else lib.dp_last_error().decode()))
    port = lib.dp_session_create(b, 0)
    check(port > 0, "dp_session_create")
    rd = lib.dp_register_cuda(b, C.c_void_p(dst.data_ptr()), n)
    check(rd >= 0, "the owner's tensor in its session (%s)" % (
        "ok" if rd >= 0 else lib.dp_last_error().decode()))
    if failures:
        return 1
    name = lib.dp_session_name(b)
    q = C.c_void_p()
    lib.dp_queue_create(a, 64, C.byref(q))
    seg = lib.dp_session_open(a, name, 3)
    check(seg >= 0, "dp_session_open(%s)" % name.decode())
    c, _ = run(q, True, rs, seg, dst.data_ptr() + 4096, n - 8192)
    torch.cuda.synchronize()
    check(c.status == 0 and c.flags & SAME_HOST and c.flags & GPU,
          "WRITE into the other service's client's tensor by address (status %d, flags %#x)"
          % (c.status, c.flags))
    check(torch.equal(dst[4096:n - 4096], src[:n - 8192]), "its bytes")
    times = [run(q, True, rs, seg, dst.data_ptr(), n)[1] for _ in range(10)]
    times.sort()
    bw = n / times[5] / 1e9
    back = torch.zeros(1 << 20, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    rk = lib.dp_register_cuda(a, C.c_void_p(back.data_ptr()), 1 << 20)
    c, _ = run(q, False, rk, seg, dst.data_ptr() + 100, 1 << 20)
    torch.cuda.synchronize()
    check(c.status == 0 and torch.equal(back, src[100:100 + (1 << 20)]),
          "READ by address from the other service's client's tensor (status %d)" % c.status)
    # The owner's own session from the owner: the local engine.
    rb = lib.dp_register_cuda(b, C.c_void_p(src.data_ptr()), n)
    qb = C.c_void_p()
    lib.dp_queue_create(b, 8, C.byref(qb))
    self_seg = lib.dp_session_open(b, name, 3)
    dst.zero_()
    torch.cuda.synchronize()
    c, _ = run(qb, True, rb, self_seg, dst.data_ptr(), n)
    torch.cuda.synchronize()
    check(c.status == 0 and c.flags & LOCAL and c.flags & GPU,
          "the owner writes its own session's tensor: the local engine (flags %#x)" % c.flags)
    check(torch.equal(dst, src), "its bytes")
    # A pinned host tensor of the owner's (cudaHostAlloc), registered as memory
    # the process already has: written by address from the other service.
    pinned = torch.zeros(1 << 20, dtype=torch.uint8, pin_memory=True)
    rp = lib.dp_register_mem(b, C.c_void_p(pinned.data_ptr()), 1 << 20)
    check(rp >= 0, "dp_register_mem of a pinned tensor (%s)" % (
        "ok" if rp >= 0 else lib.dp_last_error().decode()))
    hp = C.c_void_p()
    rh = lib.dp_alloc(a, 4096, 0, C.byref(hp))
    C.memset(hp, 0x77, 4096)
    c, _ = run(q, True, rh, seg, pinned.data_ptr() + 64, 4096)
    check(c.status == 0 and bool((pinned[64:64 + 4096] == 0x77).all()),
          "WRITE host -> the other service's client's pinned tensor by address (status %d, "
          "flags %#x)" % (c.status, c.flags))
    # checkpoint-engine's read: the peer's pinned pool into a GPU tensor, and
    # back (the vm engine through pinned buffers; several slices).
    c, _ = run(q, True, rs, seg, pinned.data_ptr(), 1 << 20)
    torch.cuda.synchronize()
    check(c.status == 0 and c.flags & SAME_HOST and c.flags & GPU and
          torch.equal(pinned, src[:1 << 20].cpu()),
          "WRITE GPU -> the other service's client's pinned tensor (status %d, flags %#x)"
          % (c.status, c.flags))
    back.zero_()
    torch.cuda.synchronize()
    c, _ = run(q, False, rk, seg, pinned.data_ptr(), 1 << 20)
    torch.cuda.synchronize()
    check(c.status == 0 and c.flags & GPU and torch.equal(back, src[:1 << 20]),
          "READ the other service's client's pinned tensor into a GPU tensor (status %d, "
          "flags %#x)" % (c.status, c.flags))
    print("  64 MiB WRITE GPU -> GPU across services by session, %s allocator: %.1f GB/s "
          "(median of 10)" % (MODE, bw))
    lib.dp_close(a)
    lib.dp_close(b)
    return 0 if not failures else 1


sys.exit(main())
