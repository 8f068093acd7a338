#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""kv_transfer.py - prefill -> decode KV block transfer between two processes
through one dataplaned (docs/python.md, "Example").

The decode process owns the KV cache: NUM_BLOCKS blocks of BLOCK_BYTES,
host memory from Client.alloc, or with --cuda a torch CUDA tensor
registered with Client.register_cuda. It exports the cache as segment
"kv/decode-<pid>". The prefill process computes (here: fills) the KV of a
request into its own blocks, opens the decode segment and WRITEs its
blocks into the block slots the decode process assigned, all in one Batch,
then tells decode which request landed. Decode checks every byte.

"Landed" is a notification (docs/api.md "Notifications"): prefill submits
the request's blocks, reaps them, then WRITEs the last block again with
notify=<request id>; decode sleeps on its notification ring and, when the
notification comes, the bytes of every block are in place. The pipe only
carries the segment's name and the slots from decode to prefill.

usage: kv_transfer.py [--socket PATH] [--blocks N] [--block-bytes B] [--cuda]
exit 0 when decode saw the right bytes, 1 otherwise.
"""
import argparse
import multiprocessing as mp
import os
import sys

import dataplane as dp

NUM_BLOCKS = 64


def block_pattern(request, block, nbytes):
    """The bytes prefill writes for (request, block): easy to check."""
    seed = (request * 131 + block * 7) & 0xFF
    return bytes((seed + i) & 0xFF for i in range(256)) * (nbytes // 256)


def decode(args, conn):
    with dp.Client(args.socket, name="decode") as c:
        size = NUM_BLOCKS * args.block_bytes
        if args.cuda:
            import torch
            cache = torch.zeros(size, dtype=torch.uint8, device="cuda")
            region = c.register_cuda(cache)
        else:
            region = c.alloc(size)
        name = f"kv/decode-{os.getpid()}"
        c.notify_open()  # before the export: nothing can be missed
        c.export(region, name, "rw")
        slots = list(range(NUM_BLOCKS - 1, NUM_BLOCKS - 1 - args.blocks, -1))  # any order
        conn.send((name, c.server_name, slots))
        notes = c.notify_wait(timeout=30)  # "landed"
        if not notes:
            print("decode: no notification within 30 s")
            sys.exit(1)
        request = notes[0].value
        ok = notes[0].segment == name
        for i, slot in enumerate(slots):
            off = slot * args.block_bytes
            if args.cuda:
                got = bytes(cache[off:off + args.block_bytes].cpu().numpy())
            else:
                with memoryview(region) as m:
                    got = bytes(m[off:off + args.block_bytes])
            ok &= got == block_pattern(request, i, args.block_bytes)
        print(f"decode: request {request}: {args.blocks} KV blocks of {args.block_bytes} B "
              f"in {'GPU' if args.cuda else 'host'} memory: {'ok' if ok else 'MISMATCH'}")
        c.unexport(name)
        region.close()
    sys.exit(0 if ok else 1)  # the parent reads the exit code


def prefill(args, conn):
    name, peer, slots = conn.recv()
    with dp.Client(args.socket, name="prefill") as c:
        size = args.blocks * args.block_bytes
        request = 42
        data = b"".join(block_pattern(request, i, args.block_bytes) for i in range(args.blocks))
        if args.cuda:
            import torch
            kv = torch.frombuffer(bytearray(data), dtype=torch.uint8).cuda()
            torch.cuda.synchronize()  # the source is complete before dp submits
            region = c.register_cuda(kv)
        else:
            region = c.alloc(size)
            with memoryview(region) as m:
                m[:] = data
        # peer=None: the decode process uses this service; another host's
        # decode would pass its service's name (conn carried it) as peer.
        seg = c.open(name, None if peer == c.server_name else peer, "w")
        q = c.queue()
        batch = dp.Batch(region=region, local_off=[i * args.block_bytes for i in range(args.blocks)],
                         segment=seg, target_off=[s * args.block_bytes for s in slots],
                         length=args.block_bytes)
        q.run(batch, timeout=30)  # one submission; returns when every block landed
        # The request id rides on one more WRITE (the last block, again),
        # issued after every other completion was reaped: decode's
        # notification then covers all of them (docs/api.md, "Notifications").
        last = args.blocks - 1
        q.write(region, last * args.block_bytes, seg, slots[last] * args.block_bytes,
                args.block_bytes, notify=request)
        (done,) = q.wait(timeout=30)
        if done.status:
            sys.exit(f"prefill: the notifying WRITE failed: {dp.strerror(done.status)}")
        print(f"prefill: wrote {args.blocks} blocks ({size} B) into {name}")
        q.close()
        seg.close()
        region.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", help="dataplaned's socket (default $DP_SOCKET, ...)")
    ap.add_argument("--blocks", type=int, default=16, help="KV blocks of the request (<= 64)")
    ap.add_argument("--block-bytes", type=int, default=64 << 10, help="bytes per block (x256)")
    ap.add_argument("--cuda", action="store_true", help="KV blocks in torch CUDA tensors")
    args = ap.parse_args()
    if not 0 < args.blocks <= NUM_BLOCKS or args.block_bytes % 256:
        ap.error("--blocks 1..64, --block-bytes a multiple of 256")
    ctx = mp.get_context("spawn")  # CUDA and fork do not mix
    a, b = ctx.Pipe()
    d = ctx.Process(target=decode, args=(args, a))
    p = ctx.Process(target=prefill, args=(args, b))
    d.start()  # decode's first message (segment, service, slots) goes to prefill
    p.start()
    p.join(60)
    d.join(60)
    ok = d.exitcode == 0 and p.exitcode == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
