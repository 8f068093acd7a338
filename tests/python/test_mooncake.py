# SPDX-License-Identifier: MIT
"""The Mooncake-shaped layer: transfer_sync_write/read and batches by address."""
import ctypes
import errno

import numpy as np

import dataplane as dp
from dataplane.mooncake import TransferEngine


def test_engine_roundtrip(service):
    with TransferEngine(socket=service.sock) as target, TransferEngine(socket=service.sock) as e:
        assert e.initialize("localhost", "P2PHANDSHAKE", "rdma", "") == 0
        assert ":" in e.get_local_hostname()
        tbuf = target.allocate_managed_buffer(1 << 16)
        assert tbuf and target.register_memory(tbuf, 1 << 16, name="kv/decode") == 0
        buf = e.allocate_managed_buffer(1 << 16)
        assert e.register_memory(buf + 100, 10) == 0  # inside a managed buffer: nothing to do
        ctypes.memmove(buf, b"0123456789" * 10, 100)
        assert e.transfer_sync_write("kv/decode", buf, 4096, 100) == 0
        t = np.frombuffer(target.buffer(tbuf), np.uint8)
        assert bytes(t[4096:4196]) == b"0123456789" * 10
        assert e.transfer_sync_read("kv/decode", buf + 1000, 4096 + 10, 10) == 0
        assert ctypes.string_at(buf + 1000, 10) == b"0123456789"
        n = 64
        srcs = [buf + i * 128 for i in range(n)]
        dsts = [8192 + (n - 1 - i) * 128 for i in range(n)]
        ctypes.memmove(buf, bytes(range(256)) * 32, 8192)
        assert e.batch_transfer_sync_write("kv/decode", srcs, dsts, [128] * n) == 0
        for i in range(n):
            assert bytes(t[dsts[i]:dsts[i] + 128]) == ctypes.string_at(srcs[i], 128)
        assert e.batch_transfer_sync_read("kv/decode", [buf + 16384], [8192], [128]) == 0
        assert ctypes.string_at(buf + 16384, 128) == ctypes.string_at(srcs[n - 1], 128)
        assert e.batch_transfer_sync_write("kv/decode", [], [], []) == 0
        # errors are negative errnos; last_error says why
        assert e.transfer_sync_write("kv/none", buf, 0, 8) == -errno.ENOENT
        assert isinstance(e.last_error, dp.NotFoundError)
        assert e.transfer_sync_write("kv/decode", buf, (1 << 16) - 4, 8) == -errno.EFAULT
        assert isinstance(e.last_error, dp.TransferError)
        assert e.transfer_sync_write("kv/decode", 0x1000, 0, 8) == -errno.EINVAL
        assert e.batch_transfer_sync_write("kv/decode", [buf], [0, 1], [8]) == -errno.EINVAL
        assert e.register_memory(0x1000, 4096) < 0  # neither managed nor GPU memory
        assert e.free_managed_buffer(buf, 1 << 16) == 0
        assert e.free_managed_buffer(buf, 1 << 16) == -errno.EINVAL
        del t
