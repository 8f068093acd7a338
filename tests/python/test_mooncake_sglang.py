# SPDX-License-Identifier: MIT
"""SGLang's Mooncake disaggregation (python/sglang/srt/disaggregation/mooncake/)
on dataplane: decode registers its KV pages per layer and its aux buffer
(register_memory(ptr, len) each) and tells prefill its session
f"{host}:{get_rpc_port()}" and pointers; prefill writes a request's pages of
every layer at decode's addresses in one batch_transfer_sync_write (pages
grouped into contiguous runs), then the aux slot with transfer_sync_write;
a second request goes the older way, one batch per layer from a thread pool
sharing one engine. Roles in separate processes on two services, same host
and over the fabric; through dataplane.mooncake and the mooncake shim."""
import random

from mooncake_roles import Role

LAYERS, PAGES, ITEM, AUX = 8, 64, 4096, 512

COMMON = f"""
LAYERS, PAGES, ITEM, AUX = {LAYERS}, {PAGES}, {ITEM}, {AUX}
e = TransferEngine()
assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0
session_id = f"127.0.0.1:{{e.get_rpc_port()}}"
kv = [np.zeros(PAGES * ITEM, np.uint8) for _ in range(LAYERS)]
aux = np.zeros(PAGES * AUX, np.uint8)
for a in kv + [aux]:
    assert e.register_memory(a.ctypes.data, a.nbytes) == 0
"""

DECODE = COMMON + r"""
send(session=session_id, kv_ptrs=[a.ctypes.data for a in kv], aux_ptrs=[aux.ctypes.data])
for req in recv()["requests"]:
    for l in range(LAYERS):
        for s, d in zip(req["src"], req["dst"]):
            got = kv[l][d * ITEM:(d + 1) * ITEM]
            assert (got == pattern(l * 1000 + s, ITEM)).all(), (req["room"], l, s, d)
    a = aux[req["aux"] * AUX:(req["aux"] + 1) * AUX]
    assert (a == pattern(9000 + req["room"], AUX)).all()
send(ok=True)
"""

PREFILL = COMMON + r"""
from concurrent.futures import ThreadPoolExecutor
for l in range(LAYERS):
    for p in range(PAGES):
        kv[l][p * ITEM:(p + 1) * ITEM] = pattern(l * 1000 + p, ITEM)
for p in range(PAGES):
    aux[p * AUX:(p + 1) * AUX] = pattern(9000 + p, AUX)

def runs(src, dst):  # SGLang's group_concurrent_contiguous
    out, i = [], 0
    while i < len(src):
        j = i + 1
        while j < len(src) and src[j] == src[j - 1] + 1 and dst[j] == dst[j - 1] + 1:
            j += 1
        out.append((src[i], dst[i], j - i))
        i = j
    return out

def layer_descs(l, req, dst_ptrs):
    s_ptr, d_ptr = kv[l].ctypes.data, dst_ptrs[l]
    return [(s_ptr + s * ITEM, d_ptr + d * ITEM, n * ITEM) for s, d, n in runs(req["src"], req["dst"])]

d = recv()
one, layered = recv()["requests"]
# All layers in one call.
descs = [x for l in range(LAYERS) for x in layer_descs(l, one, d["kv_ptrs"])]
srcs, dsts, lens = map(list, zip(*descs))
assert e.batch_transfer_sync_write(d["session"], srcs, dsts, lens) == 0, e.last_error
room = one["room"]
assert e.transfer_sync_write(d["session"], aux.ctypes.data + room * AUX,
                             d["aux_ptrs"][0] + one["aux"] * AUX, AUX) == 0
# One batch per layer, from a thread pool sharing the engine.
def process_layer(l):
    srcs, dsts, lens = map(list, zip(*layer_descs(l, layered, d["kv_ptrs"])))
    return e.batch_transfer_sync_write(d["session"], srcs, dsts, lens)
with ThreadPoolExecutor(4) as ex:
    assert list(ex.map(process_layer, range(LAYERS))) == [0] * LAYERS
room = layered["room"]
assert e.transfer_sync_write(d["session"], aux.ctypes.data + room * AUX,
                             d["aux_ptrs"][0] + layered["aux"] * AUX, AUX) == 0
# A failed transfer is a negative return, not an exception: an address
# outside decode's registrations.
assert e.transfer_sync_write(d["session"], srcs[0], 4096, 64) < 0
send(done=True)
"""


def test_prefill_writes_decode_pages(service_pair, mooncake_import):
    a, b = service_pair
    rnd = random.Random(34)
    reqs = []
    for room, first in ((3, 0), (11, 32)):
        # decode's pages of the two requests apart; runs of contiguous pages
        # on both sides, and scattered ones
        dst = list(range(first, first + 8)) + sorted(rnd.sample(range(first + 8, first + 32), 12))
        src = list(range(40, 48)) + sorted(rnd.sample(range(PAGES), 12))
        reqs.append(dict(room=room, src=src, dst=dst, aux=room + 1))
    decode = Role(DECODE, b, mooncake_import)
    prefill = Role(PREFILL, a, mooncake_import)
    try:
        info = decode.recv()
        assert info["session"].startswith("127.0.0.1:")
        prefill.send(**info)
        prefill.send(requests=reqs)
        assert prefill.recv() == {"done": True}
        decode.send(requests=reqs)
        assert decode.recv() == {"ok": True}
        prefill.finish()
        decode.finish()
    finally:
        prefill.kill()
        decode.kill()
