#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench-python.py --socket PATH [--quick] [--json] - the Python side of
`make bench-python` (tools/bench-python.sh runs it beside dp-bench, on the
same service and CPU):
  rate     64 B local WRITEs in batches of 32, submitted (one prepared Batch
           per submit, one C call) and reaped (poll_into, no object per
           completion) in the loop of dp-bench's P4 (submit, then reap what
           came, while descriptors are in flight)
  run      the same batch through Queue.run(): submit 32, wait for all 32,
           raise on any failure (the one-call form), per batch
  latency  one 64 B WRITE, one outstanding, submit to completion seen
           (busy-polled, like dp-bench's P3); p50
Every transfer's bytes are checked after the timed runs, as dp-bench does."""
import argparse
import json
import sys
import time

import numpy as np

import dataplane as dp


def setup(c, size):
    src = c.alloc(size, huge=True)
    dst = c.alloc(size, huge=True)
    np.frombuffer(src, np.uint8)[:] = (np.arange(size) * 131 + 7).astype(np.uint8)
    c.export(dst, "bench/python")
    return src, dst, c.open("bench/python")


def verify(src, dst, n):
    with memoryview(src) as a, memoryview(dst) as b:
        if a[:n] != b[:n]:
            sys.exit("bench-python: DATA MISMATCH after the timed run")


def rate(q, batch, total):
    buf = np.zeros(256, dp.COMPLETION_DTYPE)
    sent = done = 0
    t0 = time.perf_counter_ns()
    while done < total:
        if sent < total:
            sent += q.submit(batch)
        done += q.poll_into(buf)
    t = time.perf_counter_ns() - t0
    while q.in_flight:  # the last submit may overshoot total by < 32
        q.poll_into(buf)
    return done / t * 1e9


def per_run(q, batch, rounds):
    t0 = time.perf_counter_ns()
    for _ in range(rounds):
        q.run(batch)
    return (time.perf_counter_ns() - t0) / rounds


def latency(q, src, seg, n):
    buf = np.zeros(1, dp.COMPLETION_DTYPE)
    lat = np.zeros(n, np.int64)
    write, poll_into, now = q.write, q.poll_into, time.perf_counter_ns
    for i in range(n // 10 + n):
        off = (i % 64) * 64
        t0 = now()
        write(src, off, seg, off, 64, i)
        while not poll_into(buf):
            pass
        if i >= n // 10:
            lat[i - n // 10] = now() - t0
    lat.sort()
    return lat


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    total = 1000000 if a.quick else 10000000
    nlat = 20000 if a.quick else 200000
    with dp.Client(a.socket, name="bench-python") as c:
        src, dst, seg = setup(c, 4096)
        q = c.queue(256)  # dp-bench's depth
        batch = dp.Batch(region=src, local_off=np.arange(32, dtype=np.uint64) * 64, segment=seg,
                         target_off=np.arange(32, dtype=np.uint64) * 64, length=64)
        rate(q, batch, total // 10)  # warm-up, as dp-bench
        r = rate(q, batch, total)
        verify(src, dst, 2048)
        run_ns = per_run(q, batch, total // 320)
        np.frombuffer(dst, np.uint8)[:] = 0
        lat = latency(q, src, seg, nlat)
        verify(src, dst, 4096)
        st = q.stats()
        if st["failed"]:
            sys.exit(f"bench-python: {st['failed']} transfers failed")
        q.close()
        seg.close()
        del batch
    out = {"rate_desc_per_s": r, "batch32_ns": 32e9 / r, "run_batch32_ns": run_ns,
           "p50_ns": int(lat[len(lat) // 2]), "p99_ns": int(lat[len(lat) * 99 // 100]),
           "descriptors": total, "samples": nlat,
           "python": sys.version.split()[0]}
    print(json.dumps(out) if a.json else out)


if __name__ == "__main__":
    main()
