# SPDX-License-Identifier: MIT
"""vLLM's MooncakeConnector (vllm/distributed/kv_transfer/kv_connector/v1/
mooncake/mooncake_connector.py) on dataplane: both workers
batch_register_memory() their KV caches (K and V of each layer apart, side
by side in one tensor); decode sends prefill its hostname, get_rpc_port(),
kv_caches_base_addr and each request's block ids; prefill pushes the
blocks, contiguous ones merged, with batch_transfer_sync_write from a
thread pool (vLLM's sender executor, one call per request, all at once).
Roles in separate processes on two services, same host and over the
fabric; through dataplane.mooncake and the mooncake shim."""
from mooncake_roles import Role

LAYERS, BLOCKS, BLOCK = 6, 96, 2048

COMMON = f"""
LAYERS, BLOCKS, BLOCK = {LAYERS}, {BLOCKS}, {BLOCK}
engine = TransferEngine()
hostname = "127.0.0.1"
assert engine.initialize(hostname, "P2PHANDSHAKE", "tcp", "") == 0
rpc_port = engine.get_rpc_port()
caches = [np.zeros((2, BLOCKS, BLOCK), np.uint8) for _ in range(LAYERS)]  # K, V
kv_data_ptrs, kv_data_lens = [], []
for c in caches:
    for half in (c[0], c[1]):
        kv_data_ptrs.append(half.ctypes.data)
        kv_data_lens.append(half.nbytes)
assert engine.batch_register_memory(kv_data_ptrs, kv_data_lens) == 0
"""

DECODE = COMMON + r"""
send(remote_hostname=hostname, remote_port=rpc_port, kv_caches_base_addr=kv_data_ptrs)
reqs = recv()["req_blocks"]
for rid, (src_blocks, dst_blocks) in reqs.items():
    for i, c in enumerate(caches):
        for kv in (0, 1):
            for s, d in zip(src_blocks, dst_blocks):
                want = pattern((i * 2 + kv) * 1000 + s, BLOCK)
                assert (c[kv, d] == want).all(), (rid, i, kv, s, d)
send(ok=True)
"""

PREFILL = COMMON + r"""
from concurrent.futures import ThreadPoolExecutor
for i, c in enumerate(caches):
    for kv in (0, 1):
        for b in range(BLOCKS):
            c[kv, b] = pattern((i * 2 + kv) * 1000 + b, BLOCK)
meta = recv()
req_blocks = recv()["req_blocks"]
remote_session = f"{meta['remote_hostname']}:{meta['remote_port']}"

def build(src_blocks, dst_blocks):  # _build_transfer_params: merge contiguous
    groups, start = [], 0
    for k in range(1, len(src_blocks) + 1):
        if (k == len(src_blocks) or src_blocks[k] != src_blocks[k - 1] + 1
                or dst_blocks[k] != dst_blocks[k - 1] + 1):
            groups.append((src_blocks[start], dst_blocks[start], k - start))
            start = k
    src, dst, lens = [], [], []
    for p_base, d_base in zip(kv_data_ptrs, meta["kv_caches_base_addr"]):
        for s, d, n in groups:
            src.append(p_base + s * BLOCK)
            dst.append(d_base + d * BLOCK)
            lens.append(n * BLOCK)
    return src, dst, lens

def _send_blocks(src, dst, lens):
    return engine.batch_transfer_sync_write(remote_session, src, dst, lens)

with ThreadPoolExecutor(max_workers=10, thread_name_prefix="vllm-mooncake-sender") as ex:
    futs = [ex.submit(_send_blocks, *build(s, d)) for s, d in req_blocks.values()]
    assert [f.result() for f in futs] == [0] * len(futs), engine.last_error
send(done=True)
"""


def test_prefill_pushes_blocks_to_decode(service_pair, mooncake_import):
    a, b = service_pair
    req_blocks = {}
    for r in range(8):
        dst = list(range(r * 12, r * 12 + 12))
        src = [(r * 7 + k * (1 if k < 6 else 3)) % BLOCKS for k in range(12)]
        req_blocks[f"req-{r}"] = [src, dst]
    decode = Role(DECODE, b, mooncake_import)
    prefill = Role(PREFILL, a, mooncake_import)
    try:
        prefill.send(**decode.recv())
        prefill.send(req_blocks=req_blocks)
        assert prefill.recv() == {"done": True}
        decode.send(req_blocks=req_blocks)
        assert decode.recv() == {"ok": True}
        prefill.finish()
        decode.finish()
    finally:
        prefill.kill()
        decode.kill()
