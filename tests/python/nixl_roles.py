# SPDX-License-Identifier: MIT
"""Roles of the NIXL-layer tests, each run as its own process against its own
service ($DP_SOCKET): `python3 nixl_roles.py ROLE DIR`. They call the agent
API the way vLLM's NixlConnector and NIXL's examples do, import it as
NIXL_IMPORT says ("dataplane": dataplane.nixl; "nixl": through the shim),
meet through files in DIR (the out-of-band handshake), and exit 0 only when
every byte and notification they check is right."""
import os
import pickle
import sys
import time

import numpy as np

if os.environ.get("NIXL_IMPORT", "dataplane") == "nixl":
    import nixl
    from nixl._api import nixl_agent, nixl_agent_config
    from nixl._bindings import nixlXferTelemetry
    assert "shim" in nixl.__file__ or os.path.exists(os.path.join(
        os.path.dirname(nixl.__file__), "_api.py"))
    import nixl._api
    assert nixl._api.nixl_agent.__module__ == "dataplane.nixl"
else:
    from dataplane.nixl import nixl_agent, nixl_agent_config, nixlXferTelemetry

DIR = sys.argv[2]
TIMEOUT = 30
BLOCKS, BLOCK = 32, 4096
LAYERS = 2


def put(name, data):
    tmp = os.path.join(DIR, name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(DIR, name))


def get(name):
    path = os.path.join(DIR, name)
    deadline = time.time() + TIMEOUT
    while not os.path.exists(path):
        assert time.time() < deadline, f"no {name}"
        time.sleep(0.01)
    with open(path, "rb") as f:
        return f.read()


def until(fn, what):
    deadline = time.time() + TIMEOUT
    while True:
        v = fn()
        if v:
            return v
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def wait_done(agent, handles, what):
    """check_xfer_state until every handle is DONE (ERR fails)."""
    pending = list(handles)
    deadline = time.time() + TIMEOUT
    while pending:
        for h in list(pending):
            state = agent.check_xfer_state(h)
            assert state in ("DONE", "PROC"), (what, state)
            if state == "DONE":
                pending.remove(h)
        assert time.time() < deadline, f"timed out waiting for {what}"


# Three requests: (D's block ids, P's block ids); D's are not P's.
REQS = {"req-a": ([0, 1, 2, 3], [10, 11, 12, 13]),
        "req-b": ([4, 5, 6], [31, 2, 17]),
        "req-c": ([7, 8, 9, 20, 21, 22, 23, 24], list(range(20, 28)))}


def pattern(layer, block, salt=0):
    return (layer * 97 + block * 31 + salt) & 0xFF


# ---- vLLM NixlConnector: P (producer) is read by D (consumer) ----

def vllm_producer():
    # The worker's agent, as NixlConnectorWorker makes it.
    agent = nixl_agent("prefill-" + str(os.getpid()),
                       nixl_agent_config(num_threads=4, capture_telemetry=True))
    caches = [np.empty((BLOCKS, BLOCK), np.uint8) for _ in range(LAYERS)]
    for layer, c in enumerate(caches):
        for b in range(BLOCKS):
            c[b] = pattern(layer, b)
    caches_data = [(c.ctypes.data, c.nbytes, 0, "") for c in caches]
    descs = agent.get_reg_descs(caches_data, "DRAM")
    agent.register_memory(descs, backends=["UCX"])
    blocks_data = [(c.ctypes.data + b * BLOCK, BLOCK, 0) for c in caches for b in range(BLOCKS)]
    src = agent.prep_xfer_dlist("NIXL_INIT_AGENT", agent.get_xfer_descs(blocks_data, "DRAM"))
    put("p.md", pickle.dumps({"agent_metadata": agent.get_agent_metadata(),
                              "kv_caches_base_addr": [c.ctypes.data for c in caches],
                              "num_blocks": BLOCKS, "block_len": BLOCK, "device_id": 0}))
    # _get_new_notifs: "req_id:tp_size" after D read each request; then the
    # blocks are freed (here: scribbled over at once).
    want = {"req-a", "req-b", "req-c"}
    seen, heartbeats, sender = set(), 0, None
    deadline = time.time() + TIMEOUT
    while (seen != want or heartbeats < 3) and time.time() < deadline:
        for name, notifs in agent.get_new_notifs().items():
            for notif in notifs:
                if notif.startswith(b"lease:"):
                    heartbeats += 1
                    sender = name
                    continue
                req_id, tp_size = notif.decode("utf-8").rsplit(":", 1)
                assert tp_size == "1" and req_id in want and req_id not in seen, notif
                seen.add(req_id)
                sender = name
                for c in caches:  # its blocks go back to the pool
                    c[REQS[req_id][1]] = 0xEE
                put("freed-" + req_id, b"")
    assert seen == want, seen
    assert heartbeats == 3, heartbeats
    assert sender == get("d.name").decode(), sender
    agent.release_dlist_handle(src)
    agent.deregister_memory(descs)
    put("p.done", b"")


def vllm_consumer():
    # capture_telemetry: get_xfer_telemetry below (NIXL raises without it).
    agent = nixl_agent("decode-" + str(os.getpid()),
                       nixl_agent_config(backends=["UCX"], capture_telemetry=True))
    put("d.name", agent.name.encode())
    caches = [np.zeros((BLOCKS, BLOCK), np.uint8) for _ in range(LAYERS)]
    descs = agent.get_reg_descs([(c.ctypes.data, c.nbytes, 0, "") for c in caches], "DRAM")
    agent.register_memory(descs)
    local_blocks = [(c.ctypes.data + b * BLOCK, BLOCK, 0) for c in caches for b in range(BLOCKS)]
    src = agent.prep_xfer_dlist("NIXL_INIT_AGENT", agent.get_xfer_descs(local_blocks, "DRAM"))
    meta = pickle.loads(get("p.md"))
    # bytes, as NIXL's; vLLM passes it back as the name everywhere below.
    remote = agent.add_remote_agent(meta["agent_metadata"])
    assert isinstance(remote, bytes) and remote.startswith(b"prefill-")
    assert agent.check_remote_metadata(remote)
    remote_blocks = [(base + b * meta["block_len"], BLOCK, meta["device_id"])
                     for base in meta["kv_caches_base_addr"] for b in range(meta["num_blocks"])]
    dst = agent.prep_xfer_dlist(remote, agent.get_xfer_descs(remote_blocks, "DRAM"))

    def desc_ids(block_ids):  # _get_block_descs_ids
        return (np.arange(LAYERS)[:, None] * BLOCKS + np.array(block_ids)[None, :]).flatten()

    reqs = REQS
    handles = {}
    for req_id, (local_ids, remote_ids) in reqs.items():
        h = agent.make_prepped_xfer("READ", src, desc_ids(local_ids), dst, desc_ids(remote_ids),
                                    notif_msg=f"{req_id}:1".encode())
        assert agent.transfer(h) in ("DONE", "PROC")
        handles[req_id] = h
    for req_id, h in handles.items():
        wait_done(agent, [h], req_id)
        tel = agent.get_xfer_telemetry(h)
        assert isinstance(tel, nixlXferTelemetry)
        n = len(reqs[req_id][0]) * LAYERS
        assert (tel.descCount, tel.totalBytes) == (n, n * BLOCK), tel
        assert tel.xferDuration >= 0 and tel.postDuration >= 0
        agent.release_xfer_handle(h)
    # The notification came after the bytes left P: P scribbles over its
    # blocks when it sees it, and what D read is still P's pattern.
    for req_id, (local_ids, remote_ids) in reqs.items():
        get("freed-" + req_id)
        for layer in range(LAYERS):
            for lb, rb in zip(local_ids, remote_ids):
                got = caches[layer][lb]
                assert (got == pattern(layer, rb)).all(), (req_id, layer, lb, rb, got[:4])
    # Heartbeats / lease renewals: send_notif alone.
    for i in range(3):
        agent.send_notif(remote, notif_msg=f"lease:{i}".encode())
    get("p.done")
    agent.release_dlist_handle(src)
    agent.release_dlist_handle(dst)
    agent.remove_remote_agent(remote)
    assert not agent.check_remote_metadata(remote)
    agent.deregister_memory(descs)


# ---- NIXL's examples: target and initiator, metadata by the listener ----

ROWS, ROW = 16, 128  # 16 rows of 32 float32


def example_target():
    port = int(get("port"))
    agent = nixl_agent("target", nixl_agent_config(True, True, port))
    tensor = np.ones((ROWS, ROW // 4), np.float32)
    reg_descs = agent.register_memory(tensor)
    assert reg_descs
    put("target.ready", b"")  # the example's target starts first
    base = tensor.ctypes.data
    rows = np.array([[base + i * ROW, ROW, 0] for i in range(ROWS)], np.uint64)
    target_descs = agent.get_xfer_descs(rows, "DRAM")
    until(lambda: agent.check_remote_metadata("initiator"), "the initiator's metadata")
    agent.send_notif("initiator", pickle.dumps((agent.get_serialized_descs(target_descs),
                                                (base, ROWS, ROW, 0, "cpu"))))
    expected_reads = {f"Read idx {s},{s + 4},{s + 8}".encode() for s in range(4)}
    expected_reads |= {m + b" again" for m in expected_reads}
    expected_reads.add(b"Done_reading")
    writes = 0
    deadline = time.time() + TIMEOUT
    while (expected_reads or writes < 2) and time.time() < deadline:
        for msg in agent.get_new_notifs().get("initiator", []):
            if msg in expected_reads:
                expected_reads.remove(msg)
            elif msg.startswith(b"Write"):
                writes += 1
            else:
                raise AssertionError(f"unexpected notification {msg!r}")
    assert not expected_reads and writes == 2, (expected_reads, writes)
    # The WRITEs put zeros into halves of rows 12..15, nothing else.
    assert (tensor[:12] == 1).all()
    for r in range(12, 16):
        half = tensor[r].reshape(2, -1)
        assert sorted([(half[0] == 0).all(), (half[1] == 0).all()]) == [False, True], r
        assert ((half == 0) | (half == 1)).all()
    until(lambda: not agent.check_remote_metadata("initiator"), "invalidation")
    agent.deregister_memory(reg_descs)
    agent.close()


def example_initiator():
    port = int(get("port"))
    get("target.ready")
    agent = nixl_agent("initiator", nixl_agent_config(True, True, 0))
    tensor = np.zeros((ROWS, ROW // 4), np.float32)
    reg_descs = agent.register_memory(tensor)
    agent.fetch_remote_metadata("target", "127.0.0.1", port)
    agent.send_local_metadata("127.0.0.1", port)
    notifs = until(lambda: agent.get_new_notifs(), "the target's descriptors")
    target_ser, layout = pickle.loads(notifs["target"][0])
    target_descs = agent.deserialize_descs(target_ser)
    until(lambda: agent.check_remote_metadata("target"), "the target's metadata")
    base = tensor.ctypes.data
    local = agent.get_xfer_descs([(base + i * ROW, ROW, 0) for i in range(ROWS)], "DRAM")
    local_side = agent.prep_xfer_dlist("", local)
    remote_side = agent.prep_xfer_dlist("target", target_descs)

    # make_prepped_xfer READs, four in parallel.
    reads = []
    for s in range(4):
        idxs = [s, s + 4, s + 8]
        reads.append(agent.make_prepped_xfer("READ", local_side, idxs, remote_side, idxs[::-1],
                                             f"Read idx {s},{s + 4},{s + 8}".encode()))
    for h in reads:
        assert agent.transfer(h) != "ERR"
    wait_done(agent, reads, "READs")
    assert (tensor[:12] == 1).all() and (tensor[12:] == 0).all()

    # initialize_xfer WRITEs: a tuple list, then a numpy N x 3 array.
    rbase, _, row, rdev, rmem = layout
    half = row // 2
    w0 = agent.initialize_xfer(
        "WRITE", agent.get_xfer_descs([(base + 12 * row, half, 0),
                                       (base + 13 * row + half, half, 0)], "cpu"),
        agent.get_xfer_descs([(rbase + 12 * row, half, rdev),
                              (rbase + 13 * row + half, half, rdev)], rmem),
        "target", b"Write tensors 12(first),13(second)")
    w1 = agent.initialize_xfer(
        "WRITE", agent.get_xfer_descs(np.array([[base + 14 * row + half, half, 0],
                                                [base + 15 * row, half, 0]], np.uint64), "cpu"),
        agent.get_xfer_descs(np.array([[rbase + 14 * row + half, half, rdev],
                                       [rbase + 15 * row, half, rdev]], np.uint64), rmem),
        "target", b"Write tensors 14(second),15(first)")
    for h in (w0, w1):
        assert agent.transfer(h) != "ERR"
    wait_done(agent, (w0, w1), "WRITEs")

    # Repost the READs with new notifications; initialize_xfer READ of all.
    tensor[:12] = 0
    for s, h in enumerate(reads):
        assert agent.transfer(h, f"Read idx {s},{s + 4},{s + 8} again".encode()) != "ERR"
    wait_done(agent, reads, "reposted READs")
    assert (tensor[:12] == 1).all()
    whole = agent.initialize_xfer("READ", local, target_descs, "target", "Done_reading")
    agent.transfer(whole)
    wait_done(agent, [whole], "READ of all")
    assert (tensor[:12] == 1).all()
    for r in range(12, 16):  # rows 12..15 came back with the halves written
        h = tensor[r].reshape(2, -1)
        assert sorted([(h[0] == 0).all(), (h[1] == 0).all()]) == [False, True], r

    agent.remove_remote_agent("target")
    for h in reads + [w0, w1, whole]:
        agent.release_xfer_handle(h)
    agent.release_dlist_handle(local_side)
    agent.release_dlist_handle(remote_side)
    agent.invalidate_local_metadata("127.0.0.1", port)
    agent.deregister_memory(reg_descs)
    agent.close()  # waits for the invalidation to go out


if __name__ == "__main__":
    globals()[sys.argv[1]]()
