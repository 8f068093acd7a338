# SPDX-License-Identifier: MIT
"""Notifications from Python: write(..., notify=value) and the owner's
notify_open / notify_poll / notify_wait / notify_fileno."""
import asyncio
import select

import pytest

import dataplane as dp


def test_notification_after_the_bytes(client, service):
    owner = dp.Client(service.sock, name="owner")
    try:
        owner.notify_open(64)
        dst = owner.alloc(1 << 16)
        owner.export(dst, "n/kv")
        src = client.alloc(1 << 16)
        seg = client.open("n/kv")
        q = client.queue()
        memoryview(src)[:8] = b"kvblock!"
        q.write(src, 0, seg, 4096, 8, user_data=1, notify=42)
        (c,) = q.wait(timeout=5)
        assert c.status == 0
        (n,) = owner.notify_wait(timeout=5)
        assert isinstance(n, dp.Notification)
        assert (n.value, n.offset, n.len, n.segment) == (42, 4096, 8, "n/kv")
        assert n.flags == dp.NOTIFY_F_LOCAL and n.dropped == 0
        assert bytes(memoryview(dst)[4096:4104]) == b"kvblock!"
        assert owner.notify_poll() == []
        # Order of one queue's small WRITEs is kept.
        for i in range(10):
            q.write(src, 0, seg, i * 8, 8, user_data=i, notify=100 + i)
        got = []
        while len(got) < 10:
            got += owner.notify_wait(timeout=5)
        assert [n.value for n in got] == list(range(100, 110))
        q.close()
    finally:
        owner.close()


def test_notify_errors(client):
    src = client.alloc(4096)
    dst = client.alloc(4096)
    client.export(dst, "n/err")
    seg = client.open("n/err")
    q = client.queue()
    with pytest.raises(ValueError):
        q.read(src, 0, seg, 0, 8, notify=1)
    with pytest.raises(dp.DataplaneError):
        client.notify_poll()  # no ring opened: EBADF
    with pytest.raises(dp.InvalidArgumentError):
        client.notify_open(3)  # not a power of two
    q.close()


def test_notify_fileno_in_an_event_loop(client, service):
    owner = dp.Client(service.sock, name="owner")
    try:
        owner.notify_open()
        dst = owner.alloc(4096)
        owner.export(dst, "n/loop")
        src = client.alloc(4096)
        seg = client.open("n/loop")
        q = client.queue()

        async def main():
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            loop.add_reader(owner.notify_fileno(), lambda: fut.done() or fut.set_result(None))
            q.write(src, 0, seg, 0, 64, notify=7)
            await asyncio.wait_for(fut, 5)
            loop.remove_reader(owner.notify_fileno())
            return owner.notify_poll()

        got = asyncio.run(main())
        assert [n.value for n in got] == [7]
        q.wait(timeout=5)
        q.close()
    finally:
        owner.close()
