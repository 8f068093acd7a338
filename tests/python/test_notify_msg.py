# SPDX-License-Identifier: MIT
"""Notifications that carry bytes and the sender's name from Python:
write(..., notify=b"...") and read(..., notify=b"..."), notify_send alone,
and the owner's notify_recv / get_new_notifs."""
import errno

import pytest

import dataplane as dp


def test_bytes_on_write_read_and_alone(client, service):
    owner = dp.Client(service.sock, name="owner")
    try:
        owner.notify_open(256)
        dst = owner.alloc(1 << 16)
        owner.export(dst, "m/kv")
        src = client.alloc(1 << 16)
        seg = client.open("m/kv")
        q = client.queue()
        for size in (0, 1, dp.NOTIFY_MSG_MAX):
            msg = bytes((i * 7 + size) & 0xff for i in range(size))
            memoryview(src)[:8] = b"kvblock!"
            q.write(src, 0, seg, 4096, 8, user_data=1, notify=msg)
            (c,) = q.wait(timeout=5)
            assert c.status == 0
            (m,) = owner.notify_recv(timeout=5)
            assert isinstance(m, dp.Message)
            assert m.msg == msg
            n = m.notification
            assert n.flags == dp.NOTIFY_F_LOCAL | dp.NOTIFY_F_MSG
            assert (n.offset, n.len, n.segment, n.value) == (4096, 8, "m/kv", 0)
            assert m.sender == "%s/%d" % (client.server_name, n.sender)
            assert bytes(memoryview(dst)[4096:4104]) == b"kvblock!"

            q.read(src, 64, seg, 4096, 8, user_data=2, notify=bytearray(msg))
            (c,) = q.wait(timeout=5)
            assert c.status == 0
            (m,) = owner.notify_recv(timeout=5)
            assert m.msg == msg
            assert m.notification.flags == dp.NOTIFY_F_LOCAL | dp.NOTIFY_F_MSG | dp.NOTIFY_F_READ

            client.notify_send(seg, msg)
            (m,) = owner.notify_recv(timeout=5)
            assert m.msg == msg
            assert m.notification.flags == (dp.NOTIFY_F_LOCAL | dp.NOTIFY_F_MSG
                                            | dp.NOTIFY_F_ALONE)
            assert (m.notification.offset, m.notification.len) == (0, 0)
        assert owner.notify_recv() == []
        q.close()
    finally:
        owner.close()


def test_too_long_and_grouped_by_sender(client, service):
    owner = dp.Client(service.sock, name="owner")
    try:
        owner.notify_open(1024)
        dst = owner.alloc(4096)
        owner.export(dst, "m/big")
        src = client.alloc(4096)
        seg = client.open("m/big")
        q = client.queue()
        big = b"x" * (dp.NOTIFY_MSG_MAX + 1)
        with pytest.raises(dp.DataplaneError) as e:
            q.write(src, 0, seg, 0, 8, notify=big)
        assert e.value.errno == errno.EMSGSIZE
        assert "4096" in dp.last_error()
        with pytest.raises(dp.DataplaneError):
            client.notify_send(seg, big)
        assert q.in_flight == 0
        # A 64-bit one and bytes, in order; grouped by sender.
        q.write(src, 0, seg, 0, 8, notify=7)
        q.wait(timeout=5)
        for i in range(20):
            if i % 2:
                client.notify_send(seg, b"req-%d" % i)
            else:
                q.write(src, 0, seg, 0, 8, notify=b"req-%d" % i)
                q.wait(timeout=5)
        (first,) = owner.notify_recv(timeout=5, max=1)
        assert (first.sender, first.msg, first.notification.value) == ("", b"", 7)
        got = owner.get_new_notifs(timeout=5)
        (sender,) = got
        assert sender.startswith(client.server_name + "/")
        assert got[sender] == [b"req-%d" % i for i in range(20)]
        q.close()
    finally:
        owner.close()
