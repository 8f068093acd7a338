# SPDX-License-Identifier: MIT
"""Mooncake's Python TransferEngine over dataplane engine sessions.

``dataplane.mooncake.TransferEngine`` has the names, argument order,
meanings and return values of ``mooncake.engine.TransferEngine`` for what
SGLang, vLLM's MooncakeConnector, checkpoint-engine and Mooncake's own tests
call, so they run unchanged (with the shim: ``python3 -m dataplane.shims
install mooncake``). An engine is one dataplane Client of the host's
dataplaned that is an engine session (docs/api.md "Engine sessions"): every
buffer it registers is reachable by peers at its own virtual address, and a
peer is named by its session, ``"host:port"`` (``get_rpc_port()``).
docs/python.md, "Mooncake layer", lists what differs from Mooncake.
"""

import collections
import ctypes
import enum
import errno
import logging
import os
import select
import struct
import threading
import time

from . import (OP_READ, OP_WRITE, Batch, Client, DataplaneError, DataplaneTimeoutError,
               InvalidArgumentError)

__all__ = ["TransferEngine", "TransferOpcode", "TransferNotify", "P2PHANDSHAKE"]

logger = logging.getLogger(__name__)

P2PHANDSHAKE = "P2PHANDSHAKE"
_DEFAULT_PORT = 12001  # Mooncake's port for a "host" without one
_METADATA_KINDS = ("redis", "etcd", "http", "https")  # Mooncake's metadata plugins
_NOTIFY_ENTRIES = 1024

# Notifications between engines carry a tag: a Mooncake TransferNotify
# (name and message), or the two halves of get_first_buffer_address().
# Bytes without a tag (a plain dataplane client's) are a message named by
# its sender's session.
_TAG_NOTIFY = b"\0mcN"
_TAG_ASK_FIRST = b"\0mcQ"
_TAG_FIRST = b"\0mcR"


class TransferOpcode(enum.IntEnum):
    """Mooncake's TransferOpcode: Read = 0, Write = 1."""
    Read = 0
    Write = 1


Read, Write = TransferOpcode.Read, TransferOpcode.Write


class TransferNotify:
    """TransferNotify(name="", msg=""): a notification as Mooncake has it,
    a name (the sender's choice; its session name for bytes sent by a plain
    dataplane client) and a message (str)."""

    __slots__ = ("name", "msg")

    def __init__(self, name="", msg=""):
        self.name, self.msg = name, msg

    def __repr__(self):
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"

    def __eq__(self, other):
        return (isinstance(other, TransferNotify)
                and (self.name, self.msg) == (other.name, other.msg))

    __hash__ = None


def _text(x):
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x).decode("utf-8", "surrogateescape")
    return str(x)


def _raw(x):
    if isinstance(x, str):
        return x.encode("utf-8", "surrogateescape")
    return bytes(x)


def _split_host(hostname):
    """Mooncake's parseHostNameWithPort: "host", "host:port", "[v6]:port"
    (and Ascend's "host:port:npu_N") -> (host, port or None)."""
    h = str(hostname)
    if h.startswith("["):
        end = h.find("]")
        host, rest = h[:end + 1], h[end + 1:]
        port = rest[1:] if rest.startswith(":") else ""
    else:
        parts = h.split(":")
        if len(parts) > 3 or (len(parts) == 3 and not parts[2].startswith("npu_")):
            return h, None  # a bare IPv6 address
        host = parts[0]
        port = parts[1] if len(parts) > 1 else ""
    return host, int(port) if port.isdigit() else None


# ---- CUDA, when libcudart is loadable (through ctypes) ----

class _PointerAttributes(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int),
                ("devicePointer", ctypes.c_void_p), ("hostPointer", ctypes.c_void_p),
                ("reserved", ctypes.c_long * 8)]


_cudart = None


def _cuda():
    """libcudart (the one the process has loaded, if any), or None."""
    global _cudart
    if _cudart is None:
        _cudart = False
        for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"):
            try:
                lib = ctypes.CDLL(name)
                lib.cudaPointerGetAttributes.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
                lib.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
                _cudart = lib
                break
            except (OSError, AttributeError):
                continue
    return _cudart or None


def _is_device_memory(addr):
    """True for device (or managed) memory by cudaPointerGetAttributes;
    False for host memory, also when CUDA is not there."""
    lib = _cuda()
    if lib is None:
        return False
    attr = _PointerAttributes()
    if lib.cudaPointerGetAttributes(ctypes.byref(attr), ctypes.c_void_p(addr)) != 0:
        lib.cudaGetLastError()  # CUDA < 11 calls plain host memory an error
        return False
    return attr.type in (2, 3)  # cudaMemoryTypeDevice, cudaMemoryTypeManaged


def _sync_stream(stream_ptr):
    lib = _cuda()
    if lib is None:
        if stream_ptr:
            raise RuntimeError("a CUDA stream was given but libcudart cannot be loaded")
        return
    rc = lib.cudaStreamSynchronize(ctypes.c_void_p(stream_ptr or None))
    if rc in (35, 100) and not stream_ptr:
        lib.cudaGetLastError()  # no driver or no device: no GPU work to wait for
        return
    if rc != 0:
        raise RuntimeError(f"cudaStreamSynchronize failed: CUDA error {rc}")


# ---- the engine's memory: registrations by address ----

class _Memory:
    """Regions of the engine by start address, in registration order (the
    order get_first_buffer_address answers from), and a sorted snapshot
    for finding the region of a local address."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_start = collections.OrderedDict()  # start -> (end, Region, managed)
        self._snap = None

    def add(self, start, end, region, managed):
        with self.lock:
            self.by_start[start] = (end, region, managed)
            self._snap = None

    def pop(self, start):
        with self.lock:
            self._snap = None
            return self.by_start.pop(start, None)

    def first(self):
        with self.lock:
            return next(iter(self.by_start), 0)

    def covering(self, addr, length):
        with self.lock:
            for start, (end, region, managed) in self.by_start.items():
                if start <= addr and addr + length <= end:
                    return start, end, region, managed
        return None

    def snapshot(self):
        import numpy as np
        snap = self._snap
        if snap is None:
            with self.lock:
                items = sorted((s, e, r.id) for s, (e, r, _) in self.by_start.items())
                snap = (np.array([s for s, _, _ in items], np.uint64),
                        np.array([e for _, e, _ in items], np.uint64),
                        np.array([i for _, _, i in items], np.uint32))
                self._snap = snap
        return snap

    def locate(self, buffers, lengths):
        """(region ids, offsets) of local [buffer, buffer + length) ranges,
        each inside one registration; InvalidArgumentError otherwise."""
        import numpy as np
        starts, ends, ids = self.snapshot()
        b = np.asarray(buffers, dtype=np.uint64)
        n = np.asarray(lengths, dtype=np.uint64)
        i = np.searchsorted(starts, b, side="right").astype(np.int64) - 1
        ok = i >= 0
        j = np.where(ok, i, 0)
        if len(starts):
            ok &= b + n <= ends[j]
        if not ok.all():
            bad = int(np.argmin(ok))
            raise InvalidArgumentError(
                errno.EINVAL, f"local buffer {int(b[bad]):#x} + {int(n[bad])} is not in memory "
                              "of this engine (register_memory or allocate_managed_buffer)")
        return ids[j], b - starts[j]


# ---- notifications: a thread takes them off the ring ----

class _Listener:
    """Takes the client's notifications as they come (the client's
    notification ring has one reader): TransferNotify for get_notifies(),
    and answers and replies of get_first_buffer_address(). Holds no
    reference to the engine, so an engine dropped without close() is still
    collected."""

    def __init__(self, client, memory):
        self.client, self.memory = client, memory
        self.notifies = collections.deque()
        self.replies = {}  # request id -> [threading.Event, address]
        self.segments = {}  # reply sessions
        self.stop_r, self.stop_w = os.pipe()
        self.thread = threading.Thread(target=self.run, name="dataplane-mooncake-notify",
                                       daemon=True)
        self.thread.start()

    def run(self):
        fd = self.client.notify_fileno()
        while True:
            # The 1 s slice covers a doorbell that rang before we slept.
            r, _, _ = select.select([fd, self.stop_r], [], [], 1.0)
            if self.stop_r in r:
                return
            try:
                # timeout 0: taken with the GIL held, never while another
                # thread's notify_recv is in its wait.
                while True:
                    msgs = self.client.notify_recv(0, 256)
                    if not msgs:
                        break
                    for m in msgs:
                        self.dispatch(m.sender, m.msg)
            except DataplaneError:
                return  # the client is closed or the service went away

    def dispatch(self, sender, msg):
        tag = msg[:4]
        if tag == _TAG_NOTIFY and len(msg) >= 6:
            (n,) = struct.unpack_from("<H", msg, 4)
            self.notifies.append(TransferNotify(_text(msg[6:6 + n]), _text(msg[6 + n:])))
        elif tag == _TAG_ASK_FIRST and len(msg) == 12:
            reply = _TAG_FIRST + msg[4:12] + struct.pack("<Q", self.memory.first())
            try:
                seg = self.segments.get(sender)
                if seg is None:
                    seg = self.segments[sender] = self.client.open_session(sender)
                self.client.notify_send(seg, reply)
            except DataplaneError:
                self.segments.pop(sender, None)
        elif tag == _TAG_FIRST and len(msg) == 20:
            rid, addr = struct.unpack_from("<QQ", msg, 4)
            waiter = self.replies.get(rid)
            if waiter is not None:
                waiter[1] = addr
                waiter[0].set()
        else:
            self.notifies.append(TransferNotify(sender, _text(msg)))

    def stop(self):
        os.write(self.stop_w, b"x")
        if self.thread is not threading.current_thread():
            self.thread.join()
        os.close(self.stop_r)
        os.close(self.stop_w)
        for s in self.segments.values():
            s.close()
        self.segments.clear()


# ---- asynchronous batches ----

class _AsyncBatch:
    __slots__ = ("batch", "n", "next", "left", "status", "deadline")

    def __init__(self, batch, n, deadline):
        self.batch, self.n, self.next, self.left = batch, n, 0, n
        self.status, self.deadline = 0, deadline


def _timeout_s(total_bytes):
    """Mooncake's: MC_TRANSFER_TIMEOUT seconds (at least 5, default 30)
    plus a second per GiB."""
    try:
        base = max(5, int(os.environ.get("MC_TRANSFER_TIMEOUT", "30")))
    except ValueError:
        base = 30
    return base + total_bytes / 1e9


class TransferEngine:
    """TransferEngine(): Mooncake's transfer engine, on the host's dataplaned.

    initialize() connects to the service ($DP_SOCKET, else the default
    socket; socket= here names another) and makes the engine a session.
    Calls return 0 (or a batch id, an address) on success and a negative
    errno (0 for a batch id or an address) on failure, as Mooncake returns
    -1 and 0; ``last_error`` holds the exception that explains the last
    failure. Thread-safe: each thread submits through its own queue."""

    TransferOpcode = TransferOpcode

    def __init__(self, *, socket=None, client=None):
        self._socket = socket
        self.client = client
        self._own = client is None
        self.last_error = None
        self._host = None
        self._port = 0
        self._session_id = ""
        self._mem = _Memory()
        self._lock = threading.Lock()  # segments, queues, async batches' table
        self._segments = {}
        self._tls = threading.local()
        self._queues = []
        self._listener = None
        self._alock = threading.Lock()  # the async queue
        self._aqueue = None
        self._async = collections.OrderedDict()  # batch id -> _AsyncBatch
        self._next_id = 1
        self._ask_id = 0

    # -- errors --

    def _fail(self, e):
        self.last_error = e
        if isinstance(e, DataplaneError):
            return -(e.errno or errno.EIO)
        return -errno.EINVAL

    def _call(self, fn, *args):
        try:
            fn(*args)
            return 0
        except (DataplaneError, ValueError, TypeError, OverflowError, RuntimeError) as e:
            return self._fail(e)

    # -- setup --

    def initialize(self, local_hostname, metadata_server, protocol, device_name):
        """Connects to the service and makes this engine a session. With
        metadata_server "P2PHANDSHAKE" the session takes any free port
        (get_rpc_port()) and peers name it f"{host}:{port}", host being
        local_hostname without a port. With a metadata server
        ("redis://...", "etcd://...", "http://...", or "host:port", which
        Mooncake reads as etcd) the session listens on local_hostname's port
        (12001 if it has none) and peers name it local_hostname, as
        Mooncake's metadata server has it; the server itself is not used
        (sessions are reached by address), which is logged. protocol and
        device_name are accepted and ignored (the service picks the path).
        0 or -errno."""
        return self._call(self._initialize, local_hostname, metadata_server)

    def initialize_ext(self, local_hostname, metadata_server, protocol, device_name,
                       metadata_type):
        """initialize() with the metadata server's kind apart, as Mooncake:
        a server without "://" is f"{metadata_type}://{server}"."""
        conn = str(metadata_server)
        if conn != P2PHANDSHAKE and "://" not in conn:
            conn = f"{metadata_type}://{conn}"
        return self.initialize(local_hostname, conn, protocol, device_name)

    def _initialize(self, local_hostname, metadata_server):
        if self._session_id:
            raise InvalidArgumentError(errno.EALREADY, "the engine is initialized already")
        host, port = _split_host(local_hostname)
        if not host:
            raise InvalidArgumentError(errno.EINVAL, "local_hostname is empty")
        meta = str(metadata_server)
        kind, sep, where = meta.partition("://")
        if not sep:  # Mooncake: a bare "host:port" is etcd
            kind, where = "etcd", meta
        if meta == P2PHANDSHAKE:
            port = 0
        elif kind in _METADATA_KINDS and where:
            port = port or _DEFAULT_PORT
            logger.info("metadata server %s (%s) is not used: peers reach this engine's "
                        "session by its address, %s:%d", meta, kind, host, port)
        else:
            raise InvalidArgumentError(
                errno.EINVAL,
                f"metadata server {meta!r}: dataplane takes \"P2PHANDSHAKE\" (sessions named "
                "host:port) or a metadata server of Mooncake's kinds (%s, or host:port for "
                "etcd), which it does not need: the session listens on local_hostname's port"
                % ", ".join(k + "://..." for k in _METADATA_KINDS))
        if self.client is None:
            self.client = Client(self._socket, name="mooncake")
        try:
            self.client.notify_open(_NOTIFY_ENTRIES)  # before the session: nothing missed
            self._port = self.client.session_create(port)
        except DataplaneError:
            if self._own:
                self.client.close()
                self.client = None
            raise
        self._host = host
        self._session_id = f"{host}:{self._port}"
        self._listener = _Listener(self.client, self._mem)

    def get_rpc_port(self):
        """The session's TCP port (0 before initialize)."""
        return self._port

    def get_local_hostname(self):
        """local_hostname as initialize() had it, without a port."""
        return self._host

    def get_session_id(self):
        """f"{host}:{get_rpc_port()}": the name peers pass as target_hostname."""
        return self._session_id

    def close(self):
        """Ends the session: queues, peers' handles, registrations, managed
        buffers and (if made here) the client. Mooncake does this when the
        engine is destroyed."""
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
        with self._lock:
            for s in self._segments.values():
                s.close()
            self._segments.clear()
            for q in self._queues:
                q.close()
            self._queues.clear()
            if self._aqueue is not None:
                self._aqueue.close()
                self._aqueue = None
        for start in list(self._mem.by_start):
            ent = self._mem.pop(start)
            if ent is not None:
                ent[1].close()
        if self._own and self.client is not None:
            self.client.close()
            self.client = None
        self._session_id, self._port = "", 0
        self._tls = threading.local()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self.client is not None:
                self.close()
        except Exception:
            pass

    def _need(self):
        if not self._session_id:
            raise InvalidArgumentError(errno.EINVAL, "the engine is not initialized")

    # -- memory --

    def allocate_managed_buffer(self, length):
        """Host memory of the engine (dp_alloc), registered in the session;
        its address, or 0."""
        try:
            self._need()
            r = self.client.alloc(int(length))
        except (DataplaneError, ValueError, TypeError, OverflowError) as e:
            self._fail(e)
            return 0
        self._mem.add(r.address, r.address + int(length), r, True)
        return r.address

    def free_managed_buffer(self, buffer_addr, length):
        """Frees a buffer of allocate_managed_buffer(). 0 or -errno."""
        ent = self._mem.by_start.get(buffer_addr)
        if ent is None or not ent[2]:
            return self._fail(InvalidArgumentError(
                errno.EINVAL, f"{buffer_addr:#x} is not a managed buffer of this engine"))
        self._mem.pop(buffer_addr)
        return self._call(ent[1].close)

    def _register(self, addr, length):
        self._need()
        addr, length = int(addr), int(length)
        if self._mem.covering(addr, length):
            return  # already in the session (a managed buffer, or registered)
        if _is_device_memory(addr):
            r = self.client._register_cuda(addr, length)
        else:
            r = self.client._register_mem(addr, length)
        self._mem.add(addr, addr + length, r, False)

    def register_memory(self, buffer_addr, capacity, location="*"):
        """Registers [buffer_addr, buffer_addr + capacity) of this process
        in the session: GPU memory (cudaMalloc, by cudaPointerGetAttributes)
        through dp_register_cuda, anything else through dp_register_mem.
        location is ignored. A range inside one already registered is 0;
        one overlapping it, -EEXIST. 0 or -errno."""
        return self._call(self._register, buffer_addr, capacity)

    def unregister_memory(self, buffer_addr):
        """Takes a registration out of the session (peers' descriptors to it
        fail from then on). 0 or -errno."""
        def unreg():
            ent = self._mem.by_start.get(buffer_addr)
            if ent is None or ent[2]:
                raise InvalidArgumentError(
                    errno.EINVAL, f"{buffer_addr:#x} is not the start of a registration")
            self._mem.pop(buffer_addr)
            ent[1].close()
        return self._call(unreg)

    def batch_register_memory(self, buffer_addresses, capacities, location="*"):
        """register_memory() of each; all or none. 0 or -errno."""
        def reg():
            if len(buffer_addresses) != len(capacities):
                raise InvalidArgumentError(errno.EINVAL, "buffer_addresses and capacities "
                                                         "differ in length")
            done = []
            try:
                for a, n in zip(buffer_addresses, capacities):
                    if not self._mem.covering(int(a), int(n)):
                        self._register(a, n)
                        done.append(int(a))
            except BaseException:
                for a in done:
                    self._mem.pop(a)[1].close()
                raise
        return self._call(reg)

    def batch_unregister_memory(self, buffer_addresses):
        """unregister_memory() of each; the first failure's -errno."""
        rc = 0
        for a in buffer_addresses:
            r = self.unregister_memory(a)
            rc = rc or r
        return rc

    def write_bytes_to_buffer(self, dest_address, src_ptr, length):
        """Copies length bytes of src_ptr (bytes or str) to host address
        dest_address. 0."""
        data = _raw(src_ptr)
        ctypes.memmove(dest_address, data, min(int(length), len(data)))
        return 0

    def read_bytes_from_buffer(self, source_address, length):
        """length bytes at host address source_address."""
        return ctypes.string_at(source_address, int(length))

    # -- peers --

    def _segment(self, target):
        target = str(target)
        with self._lock:
            seg = self._segments.get(target)
        if seg is None:
            name = target
            if _split_host(target)[1] is None:
                name = f"{target}:{_DEFAULT_PORT}"
            seg = self.client.open_session(name)
            with self._lock:
                old = self._segments.setdefault(target, seg)
            if old is not seg:
                seg.close()
                seg = old
        return seg

    def _forget(self, target, e):
        """A peer that left, or never was: the next call opens it again."""
        if isinstance(e, DataplaneError) and e.errno in (errno.ECONNRESET, errno.EHOSTUNREACH,
                                                         errno.ECONNREFUSED, errno.ENOENT):
            with self._lock:
                seg = self._segments.pop(str(target), None)
            if seg is not None:
                try:
                    seg.close()
                except DataplaneError:
                    pass

    def send_probe(self, peer_server_name):
        """0 when peer_server_name opens as a session, else -errno."""
        try:
            self._need()
            self._segment(peer_server_name)
            return 0
        except DataplaneError as e:
            self._forget(peer_server_name, e)
            return self._fail(e)

    def warmup_efa_segment(self, segment_name):
        """Opens the peer (nothing else to warm up). 0 or -errno."""
        return self.send_probe(segment_name)

    def get_first_buffer_address(self, segment_name):
        """The address of the first registration (in registration order) of
        engine segment_name still registered, as Mooncake's first buffer of
        the segment; this engine's own is answered here, a peer's by asking
        it with a notification (5 s). 0 when there is none or no answer."""
        try:
            self._need()
            if str(segment_name) in (self._session_id, self.client.session_name):
                return self._mem.first()
            seg = self._segment(segment_name)
            with self._lock:
                self._ask_id += 1
                rid = self._ask_id
            waiter = [threading.Event(), 0]
            self._listener.replies[rid] = waiter
            try:
                self.client.notify_send(seg, _TAG_ASK_FIRST + struct.pack("<Q", rid))
                if not waiter[0].wait(5.0):
                    raise DataplaneTimeoutError(errno.ETIMEDOUT,
                                                f"{segment_name} did not answer in 5 s")
            finally:
                self._listener.replies.pop(rid, None)
            return waiter[1]
        except DataplaneError as e:
            self._forget(segment_name, e)
            self._fail(e)
            return 0

    # -- transfers --

    def _queue(self):
        q = getattr(self._tls, "queue", None)
        if q is None or q.closed:
            q = self.client.queue()
            self._tls.queue = q
            with self._lock:
                self._queues.append(q)
        return q

    def _drop_queue(self):
        q = getattr(self._tls, "queue", None)
        self._tls.queue = None
        if q is not None:
            with self._lock:
                if q in self._queues:
                    self._queues.remove(q)
            try:
                q.close()
            except DataplaneError:
                pass

    def _batch(self, op, seg, buffers, peer_addresses, lengths, user_data=None):
        import numpy as np
        n = len(buffers)
        if not (n == len(peer_addresses) == len(lengths)):
            raise InvalidArgumentError(errno.EINVAL, "buffers, peer_buffer_addresses and "
                                                     "lengths differ in length")
        regions, offs = self._mem.locate(buffers, lengths)
        cols = {} if user_data is None else {"user_data": user_data}
        return Batch(op=op, region=regions, local_off=offs, segment=seg.handle,
                     target_off=np.asarray(peer_addresses, dtype=np.uint64),
                     length=np.asarray(lengths, dtype=np.uint64), **cols)

    def _sync(self, op, target, buffers, peer_addresses, lengths, notify=None):
        self._need()
        try:
            seg = self._segment(target)
            if len(buffers) or len(peer_addresses) or len(lengths):
                b = self._batch(op, seg, buffers, peer_addresses, lengths)
                q = self._queue()
                try:
                    q.run(b, _timeout_s(sum(int(n) for n in lengths)))
                except DataplaneTimeoutError:
                    self._drop_queue()  # its descriptors are still in flight
                    raise
            if notify is not None:
                name, msg = _raw(notify.name), _raw(notify.msg)
                self.client.notify_send(seg, _TAG_NOTIFY + struct.pack("<H", len(name))
                                        + name + msg)
        except DataplaneError as e:
            self._forget(target, e)
            raise

    def transfer_sync_write(self, target_hostname, buffer, peer_buffer_address, length,
                            transport_hint=""):
        """Copies length bytes at local address buffer to address
        peer_buffer_address of session target_hostname; returns when they
        are there. 0 or -errno."""
        return self._call(self._sync, OP_WRITE, target_hostname, [buffer],
                          [peer_buffer_address], [length])

    def transfer_sync_read(self, target_hostname, buffer, peer_buffer_address, length,
                           transport_hint=""):
        """Copies length bytes at the peer's address to local address
        buffer. 0 or -errno."""
        return self._call(self._sync, OP_READ, target_hostname, [buffer],
                          [peer_buffer_address], [length])

    def batch_transfer_sync_write(self, target_hostname, buffers, peer_buffer_addresses,
                                  lengths, transport_hint=""):
        """Many writes to one peer, any of its registrations: one Batch, one
        C call (GIL released). 0 or the first failure's -errno."""
        return self._call(self._sync, OP_WRITE, target_hostname, buffers,
                          peer_buffer_addresses, lengths)

    def batch_transfer_sync_read(self, target_hostname, buffers, peer_buffer_addresses,
                                 lengths, transport_hint=""):
        """Many reads from one peer; as batch_transfer_sync_write."""
        return self._call(self._sync, OP_READ, target_hostname, buffers,
                          peer_buffer_addresses, lengths)

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address, length, opcode,
                      notify=None, transport_hint=""):
        """One transfer of opcode (TransferOpcode.Read or Write), then, if
        notify (a TransferNotify) is given, notify to the peer, whose
        get_notifies() returns it once the bytes are in place. 0 or -errno."""
        return self._call(self._sync, _op(opcode), target_hostname, [buffer],
                          [peer_buffer_address], [length], notify)

    def batch_transfer_sync(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                            opcode, notify=None, transport_hint=""):
        """A batch of opcode, then notify; as transfer_sync."""
        return self._call(self._sync, _op(opcode), target_hostname, buffers,
                          peer_buffer_addresses, lengths, notify)

    # -- asynchronous --

    def _async_submit(self, op, target, buffers, peer_addresses, lengths):
        import numpy as np
        try:
            self._need()
            seg = self._segment(target)
            with self._lock:
                bid = self._next_id
                self._next_id += 1
            n = len(buffers)
            ud = (np.uint64(bid) << np.uint64(32)) + np.arange(n, dtype=np.uint64)
            b = self._batch(op, seg, buffers, peer_addresses, lengths, user_data=ud)
            ab = _AsyncBatch(b, n, time.monotonic() + _timeout_s(sum(int(x) for x in lengths)))
            with self._alock:
                if self._aqueue is None:
                    self._aqueue = self.client.queue()
                self._async[bid] = ab
                self._pump(0)
            return bid
        except (DataplaneError, ValueError, TypeError, OverflowError) as e:
            self._forget(target, e)
            self._fail(e)
            return 0

    def _pump(self, wait_s):
        """Under _alock: submits what the async queue takes, in batch order,
        and reaps; waits up to wait_s for a completion."""
        q = self._aqueue
        for ab in self._async.values():
            while ab.next < ab.n:
                k = q.submit(ab.batch, ab.next)
                if k == 0:
                    break
                ab.next += k
            if ab.next < ab.n:
                break
        if not q.in_flight:
            return
        cqes = q.wait(wait_s) if wait_s else q.poll()
        for c in cqes:
            ab = self._async.get(c.user_data >> 32)
            if ab is None:
                continue  # a batch given up on (failed, timed out)
            ab.left -= 1
            if c.status and not ab.status:
                ab.status = c.status

    def batch_transfer_async_write(self, target_hostname, buffers, peer_buffer_addresses,
                                   lengths, transport_hint=""):
        """Submits the writes and returns at once: a batch id for
        get_batch_transfer_status(), 0 on failure."""
        return self._async_submit(OP_WRITE, target_hostname, buffers, peer_buffer_addresses,
                                  lengths)

    def batch_transfer_async_read(self, target_hostname, buffers, peer_buffer_addresses,
                                  lengths, transport_hint=""):
        """The reads, as batch_transfer_async_write."""
        return self._async_submit(OP_READ, target_hostname, buffers, peer_buffer_addresses,
                                  lengths)

    def batch_transfer_async(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                             opcode, transport_hint=""):
        return self._async_submit(_op(opcode), target_hostname, buffers,
                                  peer_buffer_addresses, lengths)

    def transfer_submit_write(self, target_hostname, buffer, peer_buffer_address, length,
                              transport_hint=""):
        """One write, submitted: a batch id for transfer_check_status(), 0
        on failure."""
        return self._async_submit(OP_WRITE, target_hostname, [buffer], [peer_buffer_address],
                                  [length])

    def get_batch_transfer_status(self, batch_ids):
        """Waits until every batch completed: 0, or at the first failure or
        timeout its -errno. The ids are spent either way."""
        ids = [int(i) for i in batch_ids]
        with self._alock:
            if any(i not in self._async for i in ids):
                for i in ids:
                    self._async.pop(i, None)
                return self._fail(InvalidArgumentError(errno.EINVAL, "an unknown batch id"))
        rc = 0
        while True:
            with self._alock:
                try:
                    self._pump(0.01)
                except DataplaneError as e:
                    rc = self._fail(e)
                now = time.monotonic()
                pending = []
                for i in ids:
                    ab = self._async[i]
                    if ab.status and not rc:
                        rc = self._fail(DataplaneError(-ab.status, f"batch {i}: a transfer "
                                                                   "failed"))
                    elif ab.left and now > ab.deadline and not rc:
                        rc = self._fail(DataplaneTimeoutError(errno.ETIMEDOUT,
                                                              f"batch {i} timed out"))
                    elif ab.left:
                        pending.append(i)
                if rc or not pending:
                    for i in ids:
                        self._async.pop(i, None)
                    return rc

    def transfer_check_status(self, batch_id):
        """1: completed, 0: in flight, -1: failed, -2: timed out (the id is
        spent at 1 and -1, as Mooncake's)."""
        with self._alock:
            ab = self._async.get(int(batch_id))
            if ab is None:
                self._fail(InvalidArgumentError(errno.EINVAL, "an unknown batch id"))
                return -1
            try:
                self._pump(0)
            except DataplaneError as e:
                self._fail(e)
            if ab.status:
                self._fail(DataplaneError(-ab.status, "the transfer failed"))
                del self._async[int(batch_id)]
                return -1
            if not ab.left:
                del self._async[int(batch_id)]
                return 1
            return -2 if time.monotonic() > ab.deadline else 0

    # -- stream-ordered (Mooncake's CUDA builds) --

    def _on_cuda(self, op, target, buffers, peers, lengths, stream_ptr):
        _sync_stream(stream_ptr)
        rc = self._call(self._sync, op, target, buffers, peers, lengths)
        if rc:
            raise RuntimeError(f"transfer to {target} failed: {self.last_error}")

    def transfer_write_on_cuda(self, target_hostname, buffer, peer_buffer_address, length,
                               stream_ptr=0, transport_hint=""):
        """The write after the work queued on stream_ptr: synchronizes the
        stream, then writes and returns when the bytes are there, so work
        queued on the stream afterwards sees them. RuntimeError on failure."""
        self._on_cuda(OP_WRITE, target_hostname, [buffer], [peer_buffer_address], [length],
                      stream_ptr)

    def transfer_read_on_cuda(self, target_hostname, buffer, peer_buffer_address, length,
                              stream_ptr=0, transport_hint=""):
        """The read, as transfer_write_on_cuda."""
        self._on_cuda(OP_READ, target_hostname, [buffer], [peer_buffer_address], [length],
                      stream_ptr)

    def batch_transfer_write_on_cuda(self, target_hostname, buffers, peer_buffer_addresses,
                                     lengths, stream_ptr=0, transport_hint=""):
        self._on_cuda(OP_WRITE, target_hostname, buffers, peer_buffer_addresses, lengths,
                      stream_ptr)

    def batch_transfer_read_on_cuda(self, target_hostname, buffers, peer_buffer_addresses,
                                    lengths, stream_ptr=0, transport_hint=""):
        self._on_cuda(OP_READ, target_hostname, buffers, peer_buffer_addresses, lengths,
                      stream_ptr)

    # -- notifications --

    def get_notifies(self):
        """The notifications that arrived since the last call, oldest first:
        a list of TransferNotify."""
        out = []
        lst = self._listener
        if lst is not None:
            while lst.notifies:
                out.append(lst.notifies.popleft())
        return out


def _op(opcode):
    if int(opcode) == TransferOpcode.Write:
        return OP_WRITE
    if int(opcode) == TransferOpcode.Read:
        return OP_READ
    raise InvalidArgumentError(errno.EINVAL, f"opcode {opcode!r}: TransferOpcode.Read or Write")
