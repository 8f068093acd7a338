# SPDX-License-Identifier: MIT
"""dataplane: move bytes between processes through a host's dataplaned.

The Python binding of libclient (docs/python.md; the C API is docs/api.md).
A Client connects to the service; it allocates or registers memory
(Regions), exports regions as named segments and opens segments by name
(on this service or on a peer), and moves bytes through a Queue: write()
copies local region -> segment, read() segment -> local region, Batch and
submit()/run() take many descriptors in one C call. Completions come back by
poll(), wait() (sleeps with the GIL released) or ``await queue.wait_async()``.

    import dataplane, numpy as np
    with dataplane.Client(name="demo") as c:
        src = c.alloc(1 << 20)
        dst = c.alloc(1 << 20)
        c.export(dst, "demo/dst")
        seg = c.open("demo/dst")
        q = c.queue()
        np.frombuffer(src, np.uint8)[:5] = list(b"hello")
        q.write(src, 0, seg, 0, 5, user_data=1)
        (cqe,) = q.wait(timeout=1)
        assert cqe.status == 0 and bytes(memoryview(dst)[:5]) == b"hello"
        del ...  # views of src/dst must go before the client closes

Lifetime: a region's memory is only reachable through the buffer protocol
(memoryview, numpy.frombuffer, torch.frombuffer); each view keeps the
Region, and the Region its Client, alive, and Region.close()/Client.close()
refuse (RegionInUseError) while views exist, so no view can outlive the
memory. Errors raise DataplaneError subclasses carrying errno and
libclient's dp_last_error() text. dataplane.mooncake is Mooncake's
TransferEngine on engine sessions (dataplane.shims installs it as
mooncake.engine, opt-in).
"""

import asyncio as _asyncio
import collections as _collections
import builtins as _builtins
import errno as _errno

from . import _dataplane
from ._dataplane import (
    ABI_VERSION,
    ACCESS_READ,
    ACCESS_RW,
    ACCESS_WRITE,
    COMPLETION_SIZE,
    DESC_SIZE,
    F_FABRIC,
    F_FILE,
    F_SAME_HOST,
    VERSION as _VERSION,
    F_GPU,
    F_LOCAL,
    OP_NOP,
    OP_READ,
    OP_WRITE,
    SEGMENT_NAME_MAX,
    Batch,
    Client,
    Completion,
    Queue,
    Region,
    Segment,
    last_error,
    strerror,
)

__all__ = [
    "Client", "Queue", "Region", "Segment", "Batch", "Completion",
    "DataplaneError", "ClosedError", "RegionInUseError", "BusyError", "TransferError",
    "ConnectionLostError", "NotFoundError", "NoServiceError", "PermissionDeniedError",
    "ExistsError", "DataplaneTimeoutError", "InvalidArgumentError", "BadHandleError",
    "OutOfBoundsError", "NotSupportedError", "NoDeviceError", "UnreachableError",
    "LimitError", "ProtocolError",
    "OP_WRITE", "OP_READ", "OP_NOP", "ACCESS_READ", "ACCESS_WRITE", "ACCESS_RW",
    "F_LOCAL", "F_FABRIC", "F_GPU", "F_FILE", "F_SAME_HOST", "ABI_VERSION", "SEGMENT_NAME_MAX",
    "DESC_SIZE", "COMPLETION_SIZE", "COMPLETION_DTYPE", "strerror", "last_error",
    "cuda_pointer", "Notification", "NOTIFY_F_LOCAL", "NOTIFY_F_FABRIC", "NOTIFY_F_SAME_HOST",
    "Message", "NOTIFY_F_MSG", "NOTIFY_F_READ", "NOTIFY_F_ALONE", "NOTIFY_MSG_MAX",
]

__version__ = _VERSION  # DP_VERSION_STRING (dp_version.h)


# ---- errors ----

class DataplaneError(OSError):
    """A libclient call failed. ``errno`` is the positive errno, ``strerror``
    what it meant for that call (dp_last_error(), e.g. "dp_segment_open: no
    segment of that name ... (ENOENT)"). Subclasses by errno below; most
    are also the matching builtin (``except FileNotFoundError`` works)."""


class ConnectionLostError(DataplaneError, ConnectionResetError):
    """ECONNRESET: the service went away (or a segment's owner left); close
    the client and connect again."""


class NoServiceError(DataplaneError, ConnectionRefusedError):
    """ECONNREFUSED: no service listens on that socket."""


class NotFoundError(DataplaneError, FileNotFoundError):
    """ENOENT: no such segment, file, or socket."""


class PermissionDeniedError(DataplaneError, PermissionError):
    """EPERM / EACCES: access beyond an export's, a file outside --file-root, ..."""


class ExistsError(DataplaneError, FileExistsError):
    """EEXIST: the segment name is taken."""


class DataplaneTimeoutError(DataplaneError, TimeoutError):
    """ETIMEDOUT: the service, a peer or the directory did not answer in time,
    or Queue.run() did not finish within its timeout."""


class InvalidArgumentError(DataplaneError, ValueError):
    """EINVAL: a bad name, depth, length or access mode."""


class BadHandleError(DataplaneError):
    """EBADF: a region, segment or queue the service does not know."""


class ClosedError(BadHandleError, ValueError):
    """The object (or its client) is closed: no call reaches libclient."""


class OutOfBoundsError(DataplaneError, IndexError):
    """EFAULT: offset + length beyond the region or the segment."""


class NotSupportedError(DataplaneError):
    """ENOTSUP: not built for it (CUDA), or a transfer the service does not do."""


class NoDeviceError(NotSupportedError):
    """ENODEV: no usable GPU here, or the service sees none."""


class UnreachableError(DataplaneError, ConnectionError):
    """EHOSTUNREACH: the peer service (or the cluster directory) cannot be reached."""


class LimitError(DataplaneError):
    """ENOSPC, EDQUOT, EMFILE, EUSERS: a limit of the client or the service."""


class ProtocolError(DataplaneError):
    """EPROTONOSUPPORT, EBADMSG, EPROTO: library and service do not match, or
    a ring was overwritten."""


class BusyError(DataplaneError, BlockingIOError):
    """EBUSY / EAGAIN: a queue with no room (reap first), an object in use by
    another thread, the service's lookups all in flight (try again)."""


class RegionInUseError(BusyError, BufferError):
    """A region (or the client of one) with buffer views alive cannot close:
    release the views (del the arrays, memoryview.release()) first."""


class TransferError(DataplaneError):
    """Descriptors completed with a failure status (Queue.run(), the
    Mooncake layer). ``completions``: the failed Completion objects; errno
    is the first one's."""

    def __init__(self, errno, strerror, completions=()):
        super().__init__(errno, strerror)
        self.completions = list(completions)


_ERRNO_CLASSES = {
    _errno.ECONNRESET: ConnectionLostError,
    _errno.ECONNREFUSED: NoServiceError,
    _errno.ENOENT: NotFoundError,
    _errno.EPERM: PermissionDeniedError,
    _errno.EACCES: PermissionDeniedError,
    _errno.EEXIST: ExistsError,
    _errno.ETIMEDOUT: DataplaneTimeoutError,
    _errno.EINVAL: InvalidArgumentError,
    _errno.EBADF: BadHandleError,
    _errno.EFAULT: OutOfBoundsError,
    _errno.ENOTSUP: NotSupportedError,
    _errno.ENODEV: NoDeviceError,
    _errno.EHOSTUNREACH: UnreachableError,
    _errno.ENOSPC: LimitError,
    _errno.EDQUOT: LimitError,
    _errno.EMFILE: LimitError,
    _errno.EUSERS: LimitError,
    _errno.EPROTONOSUPPORT: ProtocolError,
    _errno.EBADMSG: ProtocolError,
    _errno.EPROTO: ProtocolError,
    _errno.EBUSY: BusyError,
    _errno.EAGAIN: BusyError,
}

_dataplane._init_errors(_ERRNO_CLASSES, DataplaneError, ClosedError, RegionInUseError,
                        BusyError, TransferError)


# ---- numpy view of completions (Queue.poll_into) ----

def __getattr__(name):
    if name == "COMPLETION_DTYPE":
        import numpy
        dt = numpy.dtype([("user_data", "<u8"), ("status", "<i4"), ("flags", "<u4"),
                          ("bytes", "<u8"), ("reserved", "<u8")])
        assert dt.itemsize == COMPLETION_SIZE
        globals()["COMPLETION_DTYPE"] = dt
        return dt
    raise AttributeError(f"module 'dataplane' has no attribute {name!r}")


# ---- CUDA memory ----

def cuda_pointer(obj, length=None):
    """(device pointer, length in bytes) of a CUDA tensor or array: a torch
    tensor (data_ptr(), contiguous), an object with __cuda_array_interface__
    (CuPy, Numba, torch), or an int pointer with length."""
    if isinstance(obj, int):
        if length is None:
            raise TypeError("a raw device pointer needs length=")
        return obj, int(length)
    if hasattr(obj, "data_ptr") and hasattr(obj, "element_size"):  # torch.Tensor
        if not getattr(obj, "is_cuda", False):
            raise ValueError("not a CUDA tensor (register host memory with Client.alloc)")
        if not obj.is_contiguous():
            raise ValueError("the tensor is not contiguous")
        n = obj.numel() * obj.element_size()
        return obj.data_ptr(), n if length is None else int(length)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError("want a CUDA tensor, an object with __cuda_array_interface__, "
                        "or an int device pointer with length=")
    ptr = cai["data"][0]
    shape = cai.get("shape", ())
    itemsize = int(cai["typestr"][2:])
    n = itemsize
    for s in shape:
        n *= s
    strides = cai.get("strides")
    if strides is not None:
        want, expect = itemsize, []
        for s in reversed(shape):
            expect.append(want)
            want *= s
        if tuple(reversed(expect)) != tuple(strides):
            raise ValueError("the array is not C-contiguous")
    return ptr, n if length is None else int(length)


def _register_cuda(self, obj, length=None):
    """register_cuda(obj, length=None)

    Registers GPU memory (dp_register_cuda): a CUDA torch tensor (through
    data_ptr()), any object with __cuda_array_interface__, or an int device
    pointer with length. The memory must come from cudaMalloc (PyTorch's
    caching allocator is cudaMalloc underneath). The region keeps obj alive;
    close the region before freeing the memory otherwise. It has no host
    buffer. Ordering: synchronize the GPU work that writes a source (or
    touches a destination) before submitting (docs/gpu.md)."""
    ptr, n = cuda_pointer(obj, length)
    return self._register_cuda(ptr, n, None if isinstance(obj, int) else obj)


Client.register_cuda = _register_cuda


def _register(self, obj):
    """register(obj)

    Registers memory this process already has, without copying it
    (dp_register_mem; docs/api.md "Memory the caller already has"): any
    writable, C-contiguous buffer (bytearray, numpy array, mmap,
    memoryview) or a torch CPU tensor. The service reads and writes it
    with process_vm_readv/writev: slower than Client.alloc memory (about
    0.5-0.8x its bandwidth on the dev machine) but nothing is copied in
    first. The buffer is held (exported) while the region lives, so it
    cannot be resized or freed under the service; close the region to let
    it go. GPU tensors: register_cuda()."""
    if hasattr(obj, "is_cuda") and hasattr(obj, "numpy"):
        if obj.is_cuda:
            raise ValueError("a CUDA tensor: use register_cuda()")
        obj = obj.numpy()
    view = memoryview(obj)
    if view.readonly:
        raise ValueError("register() needs writable memory")
    if not view.c_contiguous:
        raise ValueError("register() needs C-contiguous memory")
    view = view.cast("B")
    if not view.nbytes:
        raise ValueError("register() needs at least one byte")
    import ctypes as _ctypes

    addr = _ctypes.addressof(_ctypes.c_char.from_buffer(view))
    return self._register_mem(addr, view.nbytes, view)


Client.register = _register


# ---- notifications (docs/api.md "Notifications") ----

Notification = _collections.namedtuple(
    "Notification", "value offset len flags dropped sender segment")
Notification.__doc__ = """A notification on the owner's ring: the WRITE's notify
value, where its bytes went in the segment (offset, len), the path (flags:
NOTIFY_F_LOCAL, NOTIFY_F_FABRIC, NOTIFY_F_SAME_HOST), how many were dropped
for a full ring so far, the sender's client id (0 through the fabric) and
the segment's name. The bytes are in place when it is seen."""
NOTIFY_F_LOCAL, NOTIFY_F_FABRIC, NOTIFY_F_SAME_HOST = 1, 2, 16
NOTIFY_F_MSG, NOTIFY_F_READ, NOTIFY_F_ALONE = 32, 64, 128
NOTIFY_MSG_MAX = 4096

Message = _collections.namedtuple("Message", "sender msg notification")
Message.__doc__ = """A notification as notify_recv() returns it: the sender's
name (str: its session's "host:port", else "<server name>/<client id>"; ""
for a 64-bit notification), the bytes it carries (bytes; b"" for a 64-bit
one) and the Notification itself (flags NOTIFY_F_MSG, with NOTIFY_F_READ
when it came with a READ, NOTIFY_F_ALONE when sent by notify_send)."""


def _notify_poll(self, max=64):
    """notify_poll(max=64) -> list of Notification, without blocking."""
    return [Notification(*t) for t in self._notify_take(max, -1)]


def _notify_wait(self, timeout=None, max=64):
    """notify_wait(timeout=None, max=64) -> list of Notification

    Sleeps on the notification doorbell (the GIL released) until at least
    one notification arrives, or timeout seconds ([] then)."""
    ms = -1 if timeout is None else _builtins.max(0, int(timeout * 1000))
    if ms < 0:
        ms = 2**31 - 1
    return [Notification(*t) for t in self._notify_take(max, ms)]


def _notify_recv(self, timeout=0, max=64):
    """notify_recv(timeout=0, max=64) -> list of Message

    Notifications of both forms, with their senders and bytes, in ring
    order; waits up to timeout seconds (None: forever; the GIL released)
    for the first."""
    ms = -1 if timeout is None else _builtins.max(0, int(timeout * 1000))
    return [Message(t[0], t[1], Notification(*t[2:]))
            for t in self._notify_recv(max, ms)]


def _get_new_notifs(self, timeout=0):
    """get_new_notifs(timeout=0) -> {sender: [bytes, ...]}

    Takes what notify_recv() returns and groups the bytes by sender, in
    arrival order (NIXL's get_new_notifs)."""
    out = {}
    for m in self.notify_recv(timeout, 1 << 30):
        out.setdefault(m.sender, []).append(m.msg)
    return out


Client.notify_poll = _notify_poll
Client.notify_wait = _notify_wait
Client.notify_recv = _notify_recv
Client.get_new_notifs = _get_new_notifs


# ---- asyncio ----

async def _wait_async(self, timeout=None, max=None):
    """wait_async(timeout=None, max=None)

    As wait(), for asyncio: awaits the queue's doorbell (fileno()) with
    loop.add_reader instead of blocking the loop. Returns a list of
    Completion, empty on timeout. Looks at the service's liveness every
    0.2 s (ConnectionLostError when it died with descriptors in flight)."""
    cqes = self.poll(max)
    if cqes:
        return cqes
    loop = _asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    fd = self.fileno()
    while True:
        if not self.arm():
            cqes = self.poll(max)
            if cqes:
                return cqes
            continue
        fut = loop.create_future()
        loop.add_reader(fd, lambda: fut.done() or fut.set_result(None))
        try:
            left = 0.2 if deadline is None else min(0.2, _builtins.max(0.0, deadline - loop.time()))
            await _asyncio.wait([fut], timeout=left)
        finally:
            loop.remove_reader(fd)
        cqes = self.poll(max)  # disarms, drains the doorbell
        if cqes:
            return cqes
        if deadline is not None and loop.time() >= deadline:
            return []


Queue.wait_async = _wait_async
