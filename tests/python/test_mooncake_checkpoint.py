# SPDX-License-Identifier: MIT
"""MoonshotAI checkpoint-engine's P2P weight update (checkpoint_engine/
p2p_store.py, ps.py) on dataplane: an owner rank registers its pinned
memory pool with batch_register_memory and publishes
p2p_store_addr = f"{ip}:{get_rpc_port()}" with the pool's pointers; a
receiver rank registers its H2D buffer and fills it with one
batch_transfer_sync_read of bucket ranges by the owner's addresses
(_copy_to_buffer). Host memory stands for the pinned pool and the GPU
buffer here. The seed's case too: a rank that owns the bucket reads (and
writes) its own session, the completion path local. Then
batch_unregister_memory, after which the owner's ranges fail."""
import pytest

from mooncake_roles import Role

POOL = [1 << 20, 3 << 19, 1 << 18]  # memory buffers of the pool
BUCKET = 1 << 20

COMMON = f"""
POOL, BUCKET = {POOL}, {BUCKET}
engine = TransferEngine()
ip = "127.0.0.1"
for _ in range(8):
    if engine.initialize(ip, "P2PHANDSHAKE", "rdma", "mlx5_0") == 0:
        break
else:
    raise RuntimeError("fail to initialize transfer engine")
addr = f"{{ip}}:{{engine.get_rpc_port()}}"
named = {{}}

def register_named_tensors(tensors):
    named.update(tensors)
    assert engine.batch_register_memory([t.ctypes.data for t in tensors.values()],
                                        [t.nbytes for t in tensors.values()]) == 0

def unregister_named_tensors(names):
    assert engine.batch_unregister_memory([named[n].ctypes.data for n in names]) == 0
    for n in names:
        del named[n]

def copy_to_buffer(target_addr, ptrs, ranges, buffer):  # ps.py _copy_to_buffer
    buf_ptrs, remote_ptrs, lens, offset = [], [], [], 0
    for idx, off, size in ranges:
        buf_ptrs.append(buffer.ctypes.data + offset)
        remote_ptrs.append(ptrs[idx][0] + off)
        lens.append(size)
        offset += size
    return engine.batch_transfer_sync_read(target_addr, buf_ptrs, remote_ptrs, lens)

RANGES = [(0, 4096, 65536), (1, 0, 1 << 19), (2, 12345, 100000), (0, 1 << 19, 300000)]

def expect(ranges):
    out = []
    for idx, off, size in ranges:
        out.append(pattern(idx, POOL[idx])[off:off + size])
    return np.concatenate(out)
"""

OWNER = COMMON + r"""
pool = [pattern(i, n) for i, n in enumerate(POOL)]
register_named_tensors({f"memory_pool_ckpt_{i}": b for i, b in enumerate(pool)})
send(p2p_store_addr=addr, metas=[(b.ctypes.data, b.nbytes) for b in pool])
assert recv() == {"unregister": True}
unregister_named_tensors([f"memory_pool_ckpt_{i}" for i in range(len(pool))])
send(unregistered=True)
recv()
"""

RECEIVER = COMMON + r"""
h2d = np.zeros(BUCKET, np.uint8)
register_named_tensors({"__ipc_buffer__": h2d})
m = recv()
n = sum(s for _, _, s in RANGES)
assert copy_to_buffer(m["p2p_store_addr"], m["metas"], RANGES, h2d) == 0, engine.last_error
assert (h2d[:n] == expect(RANGES)).all()
send(read=True)
assert recv() == {"again": True}
assert copy_to_buffer(m["p2p_store_addr"], m["metas"], RANGES[:1], h2d) < 0
unregister_named_tensors(["__ipc_buffer__"])
send(done=True)
"""

SELF = COMMON + r"""
pool = [pattern(i, n) for i, n in enumerate(POOL)]
register_named_tensors({f"memory_pool_ckpt_{i}": b for i, b in enumerate(pool)})
h2d = np.zeros(BUCKET, np.uint8)
register_named_tensors({"__ipc_buffer__": h2d})
metas = [(b.ctypes.data, b.nbytes) for b in pool]
n = sum(s for _, _, s in RANGES)
assert copy_to_buffer(addr, metas, RANGES, h2d) == 0, engine.last_error
assert (h2d[:n] == expect(RANGES)).all()
# and writes into its own pool through its session
h2d[:4096] = 7
assert engine.batch_transfer_sync_write(addr, [h2d.ctypes.data], [metas[2][0] + 8192], [4096]) == 0
assert (pool[2][8192:8192 + 4096] == 7).all()
unregister_named_tensors(["__ipc_buffer__"] + [f"memory_pool_ckpt_{i}" for i in range(3)])
send(done=True)
"""


def test_receiver_reads_owner_pool(service_pair, mooncake_import):
    a, b = service_pair
    owner = Role(OWNER, b, mooncake_import)
    receiver = Role(RECEIVER, a, mooncake_import)
    try:
        receiver.send(**owner.recv())
        assert receiver.recv() == {"read": True}
        owner.send(unregister=True)
        assert owner.recv() == {"unregistered": True}
        receiver.send(again=True)
        assert receiver.recv() == {"done": True}
        owner.send(bye=True)
        receiver.finish()
        owner.finish()
    finally:
        receiver.kill()
        owner.kill()


def test_rank_reads_its_own_session(service, mooncake_import):
    rank = Role(SELF, service, mooncake_import)
    try:
        assert rank.recv() == {"done": True}
        rank.finish()
    finally:
        rank.kill()
