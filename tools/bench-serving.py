#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench-serving.py BUILD [--gpu] - KV pages the way serving engines move them, through
the Python layers and through the C API, side by side (make bench-serving).

SGLang-shaped: 32 layers x K and V x 512 pages of 16 KiB at scattered page
indices, prefill -> decode by the decode's addresses, one batch:
  - the C API: dp-bench serving (one C program, --json);
  - dataplane.mooncake: TransferEngine.batch_transfer_sync_write, one call;
  - dataplane.nixl (when the package has it): initialize_xfer + transfer;
  - the peer: memcpy of the same pages in one process (dp-bench prints it).
vLLM-shaped: the same pages pushed per request (16 requests of 2048
descriptors each) through the Mooncake layer.
Bulk posting: 100 000 64 B WRITEs in one dataplane.Batch, q.run() (one C
call), against the C API's own rate (dp-bench rate): the Python-side cost
per descriptor is the difference (target <= 100 ns).

Services: one dataplaned (both engines its clients), then two of this host
(the decode's memory mapped: the same-host path). CPUs: the client on 0,
the services' pollers on 1 (a 2-CPU machine) or 2 and 3. Host memory only:
the GPU rows run on the GPU host (docs/benchmarks.md)."""
import json
import os
import subprocess
import sys
import tempfile
import time

ARGS = [a for a in sys.argv[1:] if a != "--gpu"]
GPU = "--gpu" in sys.argv[1:]
BUILD = os.path.abspath(ARGS[0] if ARGS else "build")
sys.path.insert(0, os.path.join(BUILD, "python"))
import numpy as np  # noqa: E402

import dataplane  # noqa: E402
from dataplane.mooncake import TransferEngine  # noqa: E402

LAYERS, PAGES, PAGE = 32, 512, 16 << 10
NCPU = os.cpu_count() or 1
CPU_A, CPU_B = (1, 1) if NCPU < 4 else (2, 3)
os.sched_setaffinity(0, {0})


def start(tmp, name, cpu, more=()):
    sock = os.path.join(tmp, name + ".sock")
    p = subprocess.Popen([os.path.join(BUILD, "dataplaned"), "--socket", sock,
                          "--provider", "tcp", "--server-name", "127.0.0.1",
                          "--same-host-socket", sock + ".peer", "--cpus", str(cpu),
                          "--log-level", "warn", *more],
                         preexec_fn=lambda: os.sched_setaffinity(0, range(NCPU)))
    for _ in range(200):
        if os.path.exists(sock):
            return p, sock
        time.sleep(0.05)
    sys.exit("bench-serving: dataplaned did not start")


def c_api(sock, peer_sock=None, peer=None):
    cmd = [os.path.join(BUILD, "dp-bench"), "--socket", sock, "--cpu", "0", "--json"]
    if peer_sock:
        cmd += ["--peer", peer, "--peer-socket", peer_sock]
    out = subprocess.run(cmd + ["serving"], capture_output=True, text=True, check=True,
                         preexec_fn=lambda: os.sched_setaffinity(0, range(NCPU)))
    return json.loads(out.stdout)["serving"]


def perm():
    rng = np.random.default_rng(42)
    return rng.permutation(PAGES)


class Mem:
    """The KV layers: numpy arrays (host), or with --gpu torch CUDA tensors."""

    def __init__(self, gpu):
        self.torch = None
        if gpu:
            import torch
            self.torch = torch

    def layers(self, n, fill):
        if self.torch:
            t = self.torch
            out = [t.full((PAGES * PAGE,), (i + 1) if fill else 0, dtype=t.uint8,
                          device="cuda") for i in range(n)]
            t.cuda.synchronize()
            return out
        return [np.full(PAGES * PAGE, (i + 1) if fill else 0, dtype=np.uint8)
                for i in range(n)]

    def addr(self, a):
        return a.data_ptr() if self.torch else a.ctypes.data

    def page_is(self, a, page, value):
        v = a[page * PAGE:(page + 1) * PAGE]
        if self.torch:
            return bool((v == value).all().item())
        return bool((v == value).all())

    def peer_ms(self, src, dst, p):
        """The same pages in one process: torch's index copy, one kernel per
        layer (GPU), or numpy's fancy-index copy (host); median of 5."""
        times = []
        idx = self.torch.as_tensor(p, device="cuda") if self.torch else p
        for r in range(6):
            t0 = time.perf_counter()
            for s_, d_ in zip(src, dst):
                d_.view(PAGES, PAGE)[idx] = s_.view(PAGES, PAGE)
            if self.torch:
                self.torch.cuda.synchronize()
            if r:
                times.append(time.perf_counter() - t0)
        return sorted(times)[len(times) // 2] * 1e3


def mooncake(sock_pre, sock_dec, shape, mem):
    os.environ["DP_SOCKET"] = sock_dec
    dec = TransferEngine()
    assert dec.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    os.environ["DP_SOCKET"] = sock_pre
    pre = TransferEngine()
    assert pre.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    session = "127.0.0.1:%d" % dec.get_rpc_port()
    n = 2 * LAYERS
    src, dst = mem.layers(n, True), mem.layers(n, False)
    for a in src:
        assert pre.register_memory(mem.addr(a), PAGES * PAGE) == 0
    for a in dst:
        assert dec.register_memory(mem.addr(a), PAGES * PAGE) == 0
    p = perm()
    bufs = np.concatenate([mem.addr(a) + np.arange(PAGES, dtype=np.uint64) * PAGE
                           for a in src]).astype(np.uint64)
    peers = np.concatenate([mem.addr(a) + p.astype(np.uint64) * PAGE
                            for a in dst]).astype(np.uint64)
    lens = np.full(len(bufs), PAGE, dtype=np.uint64)
    times = []
    for r in range(6):
        t0 = time.perf_counter()
        if shape == "sglang":
            rc = pre.batch_transfer_sync_write(session, bufs.tolist(), peers.tolist(),
                                               lens.tolist())
        else:  # vllm: one batch per request, 16 requests
            step = len(bufs) // 16
            rc = 0
            for k in range(0, len(bufs), step):
                rc = rc or pre.batch_transfer_sync_write(
                    session, bufs[k:k + step].tolist(), peers[k:k + step].tolist(),
                    lens[k:k + step].tolist())
        dt = time.perf_counter() - t0
        assert rc == 0, rc
        if r:
            times.append(dt)
    for i in (0, n - 1):
        assert mem.page_is(dst[i], p[7], i + 1)
    pre.close() if hasattr(pre, "close") else None
    dec.close() if hasattr(dec, "close") else None
    return sorted(times)[len(times) // 2] * 1e3


def nixl(sock_pre, sock_dec, mem):
    try:
        from dataplane import nixl as nx
    except ImportError:
        return None
    os.environ["DP_SOCKET"] = sock_dec
    dec = nx.nixl_agent("decode", nx.nixl_agent_config())
    os.environ["DP_SOCKET"] = sock_pre
    pre = nx.nixl_agent("prefill", nx.nixl_agent_config())
    n = 2 * LAYERS
    kind = "VRAM" if mem.torch else "DRAM"
    src, dst = mem.layers(n, True), mem.layers(n, False)
    pre.register_memory([(mem.addr(a), PAGES * PAGE, 0, "") for a in src], kind)
    dec.register_memory([(mem.addr(a), PAGES * PAGE, 0, "") for a in dst], kind)
    name = pre.add_remote_agent(dec.get_agent_metadata())
    p = perm()
    local = np.stack([np.concatenate([mem.addr(a) + np.arange(PAGES, dtype=np.uint64) * PAGE
                                      for a in src]),
                      np.full(n * PAGES, PAGE, dtype=np.uint64),
                      np.zeros(n * PAGES, dtype=np.uint64)], axis=1)
    remote = np.stack([np.concatenate([mem.addr(a) + p.astype(np.uint64) * PAGE
                                       for a in dst]),
                       np.full(n * PAGES, PAGE, dtype=np.uint64),
                       np.zeros(n * PAGES, dtype=np.uint64)], axis=1)
    ld = pre.get_xfer_descs(local, kind)
    rd = pre.get_xfer_descs(remote, kind)
    times = []
    for r in range(6):
        t0 = time.perf_counter()
        h = pre.initialize_xfer("WRITE", ld, rd, name, b"")
        state = pre.transfer(h)
        while state == "PROC":
            state = pre.check_xfer_state(h)
        dt = time.perf_counter() - t0
        assert state == "DONE", state
        pre.release_xfer_handle(h)
        if r:
            times.append(dt)
    assert mem.page_is(dst[3], p[9], 4)
    return sorted(times)[len(times) // 2] * 1e3


def bulk(sock):
    """100 000 64 B WRITEs in one Batch, one q.run(): ns per descriptor."""
    c = dataplane.Client(sock, name="bulk")
    src, dst = c.alloc(1 << 20), c.alloc(1 << 20)
    c.export(dst, "bench-serving-bulk")
    seg = c.open("bench-serving-bulk")
    q = c.queue(256)
    n = 100_000
    offs = (np.arange(n, dtype=np.uint64) * 64) % (1 << 20)
    b = dataplane.Batch(op="write", region=src, local_off=offs, segment=seg,
                        target_off=offs, length=64)
    best = None
    for _ in range(5):
        t0 = time.perf_counter()
        q.run(b, timeout=60)
        dt = (time.perf_counter() - t0) / n * 1e9
        best = dt if best is None else min(best, dt)
    c.close()
    return best


def c_rate(sock):
    out = subprocess.run([os.path.join(BUILD, "dp-bench"), "--socket", sock, "--cpu", "0",
                          "--json", "--quick", "rate"], capture_output=True, text=True,
                         check=True, preexec_fn=lambda: os.sched_setaffinity(0, range(NCPU)))
    r = json.loads(out.stdout)["rate"]
    ops = r.get("desc_per_s")
    return 1e9 / ops if ops else None


def main():
    tmp = tempfile.mkdtemp(prefix="dp-bench-serving-")
    print("bench-serving: %d CPUs; client on CPU 0, pollers on %d and %d; %d layers x K,V x "
          "%d pages of %d KiB = %d descriptors, %d MiB" % (
              NCPU, CPU_A, CPU_B, LAYERS, PAGES, PAGE >> 10, 2 * LAYERS * PAGES,
              2 * LAYERS * PAGES * PAGE >> 20))
    pa, sa = start(tmp, "a", CPU_A)
    try:
        cap = c_api(sa)
        host = Mem(False)
        rows = [("one service", cap, mooncake(sa, sa, "sglang", host),
                 mooncake(sa, sa, "vllm", host), nixl(sa, sa, host))]
        per = bulk(sa)
        crate = c_rate(sa)
    finally:
        pa.terminate()
        pa.wait()
    pa, sa = start(tmp, "a", CPU_A)
    pb, sb = start(tmp, "b", CPU_B, ("--rpc-port", "18790"))
    try:
        cap2 = c_api(sa, sb, "127.0.0.1:18790")
        rows.append(("two services, same host", cap2, mooncake(sa, sb, "sglang", host),
                     mooncake(sa, sb, "vllm", host), nixl(sa, sb, host)))
    finally:
        for p in (pa, pb):
            p.terminate()
            p.wait()
    print("%-26s %10s %10s %18s %18s %16s" % ("ms (median of 5)", "memcpy", "C API",
                                              "mooncake sglang", "mooncake vllm", "nixl"))
    for name, c, ms, mv, nx in rows:
        print("%-26s %10.2f %10.2f %10.2f (%.2fx) %10.2f (%.2fx) %16s" % (
            name, c["memcpy_ms"], c["c_api_ms"], ms, c["c_api_ms"] / ms, mv,
            c["c_api_ms"] / mv,
            "-" if nx is None else "%.2f (%.2fx)" % (nx, c["c_api_ms"] / nx)))
    print("(x: the C API's time over the layer's: target >= 0.9x)")
    if crate:
        print("bulk: 100 000 64 B WRITEs in one Batch through q.run(): %.1f ns/descriptor; the "
              "C API (dp-bench rate) %.1f ns: Python-side cost %.1f ns/descriptor (target <= 100)"
              % (per, crate, per - crate))
    else:
        print("bulk: 100 000 64 B WRITEs in one Batch through q.run(): %.1f ns/descriptor "
              "(the C API's rate not read)" % per)


def main_gpu():
    """--gpu: the same shapes in torch CUDA tensors (GPU -> GPU pages by the
    decode's addresses) through the two layers, against torch's own index
    copy of the same pages in one process (one kernel per layer). The C
    API's GPU pages are gpu-bench pages' (tools/bench-gpu.sh BIN pages)."""
    try:
        mem = Mem(True)
        if not mem.torch.cuda.is_available():
            raise ImportError("no CUDA device")
    except ImportError as e:
        print("bench-serving --gpu: skipped (%s)" % e)
        return
    tmp = tempfile.mkdtemp(prefix="dp-bench-serving-")
    n = 2 * LAYERS
    print("bench-serving --gpu: %s, torch %s; %d CPUs; client on CPU 0, pollers on %d and "
          "%d; %d layers x K,V x %d pages of %d KiB = %d descriptors, %d MiB, GPU -> GPU" % (
              mem.torch.cuda.get_device_name(0), mem.torch.__version__, NCPU, CPU_A, CPU_B,
              LAYERS, PAGES, PAGE >> 10, n * PAGES, n * PAGES * PAGE >> 20))
    src, dst = mem.layers(n, True), mem.layers(n, False)
    peer = mem.peer_ms(src, dst, perm())
    del src, dst
    rows = []
    for name, two in (("one service", False), ("two services, same host", True)):
        pa, sa = start(tmp, "a", CPU_A)
        procs, sb = [pa], sa
        if two:
            pb, sb = start(tmp, "b", CPU_B, ("--rpc-port", "18791"))
            procs.append(pb)
        try:
            rows.append((name, mooncake(sa, sb, "sglang", mem), mooncake(sa, sb, "vllm", mem),
                         nixl(sa, sb, mem)))
        finally:
            for p in procs:
                p.terminate()
                p.wait()
    gb = n * PAGES * PAGE / 1e6
    print("%-26s %16s %18s %18s %18s" % ("ms (median of 5)", "torch index copy",
                                         "mooncake sglang", "mooncake vllm", "nixl"))
    for name, ms, mv, nx in rows:
        print("%-26s %16.2f %10.2f (%.0f GB/s) %10.2f (%.0f GB/s) %18s" % (
            name, peer, ms, gb / ms, mv, gb / mv,
            "-" if nx is None else "%.2f (%.0f GB/s)" % (nx, gb / nx)))
    print("(torch index copy: %.0f GB/s in one process)" % (gb / peer))


main_gpu() if GPU else main()
