# SPDX-License-Identifier: MIT
"""NIXL's Python agent API (``nixl._api``) over dataplane's engine sessions.

``nixl_agent`` has the calls, arguments and return conventions of NIXL's
agent as vLLM's NixlConnector and NIXL's examples use it; one agent is one
dataplane Client that is an engine session, so every registration is
reachable by peers at its own address, as NIXL's are. A transfer of N
descriptors is one Batch; its notification is sent alone after all N
completed (the notification then never overtakes a descriptor). FILE
descriptors move to and from memory through the service's file engine. The
agent itself is ``_AgentCore``, which both ``nixl_agent`` and the low-level
``nixlAgent`` of dataplane.nixl_bindings (``nixl._bindings``) drive. What
differs from NIXL: docs/python.md, "NIXL layer". ``python3 -m
dataplane.shim_nixl install DIR`` makes ``from nixl._api import nixl_agent``
load this module.
"""

import collections
import ctypes
import enum
import json
import logging
import math
import os
import socket as _socket
import struct
import sys
import threading
import time

import numpy as np

import dataplane as _dp

logger = logging.getLogger(__name__)


def _native_logger():
    """NIXL's core library logs to stderr at NIXL_LOG_LEVEL (default WARN);
    tools read its lines there (NIXL's CI harness takes a target's port from
    "MD listener is listening on port N"). This logger is that stream."""
    log = logging.getLogger("dataplane.nixl.native")
    if not log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(levelname).1s%(asctime)s.%(msecs)03d %(process)d "
                                         "nixl] %(message)s", datefmt="%m%d %H:%M:%S"))
        log.addHandler(h)
        log.propagate = False
        level = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
                 "WARN": logging.WARNING, "WARNING": logging.WARNING, "ERROR": logging.ERROR,
                 "FATAL": logging.CRITICAL}
        log.setLevel(level.get(os.environ.get("NIXL_LOG_LEVEL", "WARN").upper(),
                               logging.WARNING))
    return log


native_log = _native_logger()

DEFAULT_COMM_PORT = 8888
NIXL_INIT_AGENT = "NIXL_INIT_AGENT"


class nixl_mem_t(enum.IntEnum):
    DRAM_SEG = 0
    VRAM_SEG = 1
    BLK_SEG = 2
    OBJ_SEG = 3
    FILE_SEG = 4


DRAM_SEG, VRAM_SEG, BLK_SEG, OBJ_SEG, FILE_SEG = (nixl_mem_t.DRAM_SEG, nixl_mem_t.VRAM_SEG,
                                                  nixl_mem_t.BLK_SEG, nixl_mem_t.OBJ_SEG,
                                                  nixl_mem_t.FILE_SEG)
_MEM_NAMES = {"DRAM": DRAM_SEG, "VRAM": VRAM_SEG, "FILE": FILE_SEG, "BLOCK": BLK_SEG,
              "OBJ": OBJ_SEG, "cpu": DRAM_SEG, "cuda": VRAM_SEG}


class nixl_xfer_op_t(enum.IntEnum):
    NIXL_READ = 0
    NIXL_WRITE = 1


NIXL_READ, NIXL_WRITE = nixl_xfer_op_t.NIXL_READ, nixl_xfer_op_t.NIXL_WRITE


class nixl_status_t(enum.IntEnum):
    NIXL_IN_PROG = 1
    NIXL_SUCCESS = 0
    NIXL_ERR_NOT_POSTED = -1
    NIXL_ERR_INVALID_PARAM = -2
    NIXL_ERR_BACKEND = -3
    NIXL_ERR_NOT_FOUND = -4
    NIXL_ERR_MISMATCH = -5
    NIXL_ERR_NOT_ALLOWED = -6
    NIXL_ERR_REPOST_ACTIVE = -7
    NIXL_ERR_UNKNOWN = -8
    NIXL_ERR_NOT_SUPPORTED = -9
    NIXL_ERR_REMOTE_DISCONNECT = -10
    NIXL_ERR_CANCELED = -11
    NIXL_ERR_NO_TELEMETRY = -12


globals().update(nixl_status_t.__members__)


class nixl_thread_sync_t(enum.Enum):
    """Accepted for NIXL's config; an agent is safe to call from several
    threads whatever the mode (one lock)."""
    NIXL_THREAD_SYNC_NONE = 0
    NIXL_THREAD_SYNC_STRICT = 1
    NIXL_THREAD_SYNC_RW = 2
    NIXL_THREAD_SYNC_DEFAULT = 3


# ---- errors: NIXL's exception classes, by status ----

class _NixlError(Exception):
    status = NIXL_ERR_UNKNOWN


def _error(name, status):
    cls = type(name, (_NixlError,), {"status": status})
    cls.__module__ = __name__
    return cls


nixlNotPostedError = _error("nixlNotPostedError", NIXL_ERR_NOT_POSTED)
nixlInvalidParamError = _error("nixlInvalidParamError", NIXL_ERR_INVALID_PARAM)
nixlBackendError = _error("nixlBackendError", NIXL_ERR_BACKEND)
nixlNotFoundError = _error("nixlNotFoundError", NIXL_ERR_NOT_FOUND)
nixlMismatchError = _error("nixlMismatchError", NIXL_ERR_MISMATCH)
nixlNotAllowedError = _error("nixlNotAllowedError", NIXL_ERR_NOT_ALLOWED)
nixlRepostActiveError = _error("nixlRepostActiveError", NIXL_ERR_REPOST_ACTIVE)
nixlUnknownError = _error("nixlUnknownError", NIXL_ERR_UNKNOWN)
nixlNotSupportedError = _error("nixlNotSupportedError", NIXL_ERR_NOT_SUPPORTED)
nixlRemoteDisconnectError = _error("nixlRemoteDisconnectError", NIXL_ERR_REMOTE_DISCONNECT)
nixlCancelledError = _error("nixlCancelledError", NIXL_ERR_CANCELED)
nixlNoTelemetryError = _error("nixlNoTelemetryError", NIXL_ERR_NO_TELEMETRY)


def _nixl_error(e):
    """The NIXL exception for a dataplane error (raised from it)."""
    if isinstance(e, _NixlError):
        return e
    if isinstance(e, _dp.NotFoundError):
        cls = nixlNotFoundError
    elif isinstance(e, (_dp.InvalidArgumentError, _dp.OutOfBoundsError, _dp.ExistsError)):
        cls = nixlInvalidParamError
    elif isinstance(e, (_dp.ConnectionLostError, _dp.UnreachableError, _dp.NoServiceError)):
        cls = nixlRemoteDisconnectError
    elif isinstance(e, _dp.NotSupportedError):
        cls = nixlNotSupportedError
    else:
        cls = nixlBackendError
    err = cls(str(e))
    err.__cause__ = e
    return err


# ---- descriptor lists ----

def _mem(t):
    """A memory type from its name or number; an unknown name is a KeyError,
    as NIXL's lookup in its table of names."""
    if isinstance(t, str):
        try:
            return _MEM_NAMES[t]
        except KeyError:
            raise KeyError(f"unknown memory type {t!r}: one of {', '.join(_MEM_NAMES)}") from None
    return nixl_mem_t(int(t))


class _DList:
    """A list of (addr, len, devId) descriptors of one memory type, held as an
    N x 3 uint64 array."""

    def __init__(self, type, descs=0):
        self._type = _mem(type)
        if isinstance(descs, int):
            self._descs = np.zeros((descs, 3), np.uint64)
            return
        if isinstance(descs, np.ndarray):
            if descs.ndim != 2 or descs.shape[1] != 3:
                raise ValueError("descs must be a Nx3 numpy array")
            if descs.dtype not in (np.uint64, np.int64):
                raise ValueError("descs must be a Nx3 numpy array of uint64 or int64")
            self._descs = np.ascontiguousarray(descs, dtype=np.uint64).copy()
            return
        rows = []
        for d in descs:
            if not isinstance(d, tuple):
                raise TypeError("Each descriptor must be a tuple when provided as a list")
            rows.append(self._row(d))
        self._descs = np.array(rows, dtype=np.uint64).reshape(len(rows), 3)

    def _row(self, d):
        if len(d) != 3:
            raise ValueError("Each descriptor tuple must have exactly 3 elements")
        return (int(d[0]), int(d[1]), int(d[2]))

    def getType(self):
        return self._type

    def descCount(self):
        return len(self._descs)

    def isEmpty(self):
        return len(self._descs) == 0

    def __len__(self):
        return len(self._descs)

    def __bool__(self):  # NIXL's lists are always true, empty or not
        return True

    def __getitem__(self, i):
        a, n, d = self._descs[i]
        return (int(a), int(n), int(d))

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __setitem__(self, i, desc):
        row = self._row(desc)
        self._descs[i] = row

    def addDesc(self, desc):
        self._descs = np.vstack([self._descs, np.array([self._row(desc)], np.uint64)])

    append = addDesc

    def index(self, desc):
        """The position of desc (compared as NIXL does, by address, length
        and device); ValueError when it is not there."""
        for i in range(len(self)):
            if self[i][:3] == tuple(int(x) for x in desc[:3]):
                return i
        raise ValueError(f"{desc!r} is not in the list")

    def remDesc(self, index):
        if not -len(self) <= index < len(self):
            raise IndexError("descriptor index out of range")
        self._descs = np.delete(self._descs, index, axis=0)

    def clear(self):
        self._descs = np.zeros((0, 3), np.uint64)

    def print(self):
        """Writes the list to stdout, one descriptor a line, as NIXL's print()."""
        sys.stdout.write(self._text() + "\n")
        sys.stdout.flush()

    def _text(self):
        lines = [f"DescList of mem type {self._type.name}"]
        lines += ["  Desc (%d, %d) from devID %d" % tuple(int(x) for x in r) for r in self._descs]
        return "\n".join(lines)

    def __eq__(self, other):
        return (type(self) is type(other) and self._type == other._type
                and np.array_equal(self._descs, other._descs))

    def __repr__(self):
        return f"{type(self).__name__}({self._type.name}, {len(self)} descriptors)"


class nixlXferDList(_DList):
    """Transfer descriptors: (addr, len, devId)."""


class nixlRegDList(_DList):
    """Registration descriptors: (addr, len, devId, metaInfo); metaInfo is kept
    and has no meaning here."""

    def __init__(self, type, descs=0):
        self._meta = []
        self._owners = []
        super().__init__(type, descs)
        if len(self._meta) < len(self._descs):
            self._meta += [""] * (len(self._descs) - len(self._meta))
        self._owners = [None] * len(self._descs)

    def _row(self, d):
        if len(d) not in (3, 4):
            raise ValueError("a registration descriptor is (addr, len, devId[, metaInfo])")
        meta = d[3] if len(d) == 4 else ""
        if isinstance(meta, (bytes, bytearray)):
            meta = bytes(meta).decode("utf-8", "surrogateescape")
        self._meta.append(str(meta))
        return (int(d[0]), int(d[1]), int(d[2]))

    def __getitem__(self, i):
        return super().__getitem__(i) + (self._meta[i],)

    def __setitem__(self, i, desc):
        super().__setitem__(i, desc)
        self._meta[i] = self._meta.pop()
        self._owners[i] = None

    def addDesc(self, desc):
        super().addDesc(desc)
        self._owners.append(None)

    append = addDesc

    def remDesc(self, index):
        super().remDesc(index)
        del self._meta[index]
        del self._owners[index]

    def clear(self):
        super().clear()
        self._meta, self._owners = [], []

    def trim(self):
        """The same descriptors without their metaInfo, as a nixlXferDList
        (NIXL's trim())."""
        return nixlXferDList(self._type, self._descs)

    def _text(self):
        lines = [f"DescList of mem type {self._type.name}"]
        lines += ["  Desc (%d, %d) from devID %d, Metadata: %s" % (*(int(x) for x in r), m)
                  for r, m in zip(self._descs, self._meta)]
        return "\n".join(lines)

    def __getstate__(self):
        return {"_type": self._type, "_descs": self._descs, "_meta": self._meta}

    def __setstate__(self, st):
        self.__dict__.update(st)
        self._owners = [None] * len(self._descs)


class nixlXferTelemetry:
    """One transfer's times in microseconds (startTime since the epoch,
    postDuration, xferDuration: post to completion), totalBytes, descCount."""

    def __init__(self, startTime=0, postDuration=0, xferDuration=0, totalBytes=0, descCount=0):
        self.startTime = startTime
        self.postDuration = postDuration
        self.xferDuration = xferDuration
        self.totalBytes = totalBytes
        self.descCount = descCount

    def __repr__(self):
        return ("nixlXferTelemetry(startTime=%d, postDuration=%d, xferDuration=%d, "
                "totalBytes=%d, descCount=%d)" % (self.startTime, self.postDuration,
                                                   self.xferDuration, self.totalBytes,
                                                   self.descCount))


def _torch_tensor(obj):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _tensor_desc(t):
    if not t.is_contiguous():
        return None
    dev = t.get_device()
    return ("DRAM" if dev == -1 else "VRAM",
            (t.data_ptr(), t.numel() * t.element_size(), max(dev, 0)))


# ---- configuration and handles ----

class nixl_agent_config:
    """NIXL's agent configuration. enable_listen_thread and listen_port start
    the metadata listener (send_local_metadata / fetch_remote_metadata);
    backends are created at the agent's start (the service behind each);
    capture_telemetry keeps transfers' telemetry (NIXL_TELEMETRY_ENABLE, when
    set, decides instead); enable_prog_thread, num_threads and sync_mode are
    accepted and have no effect (the service makes progress; any thread may
    call, one lock)."""

    def __init__(self, enable_prog_thread=True, enable_listen_thread=False,
                 listen_port=DEFAULT_COMM_PORT, capture_telemetry=False, num_threads=0,
                 backends=("UCX",), sync_mode=None):
        if sync_mode is not None and not isinstance(sync_mode, nixl_thread_sync_t):
            raise TypeError("sync_mode must be a nixl_thread_sync_t (got %r)"
                            % type(sync_mode).__name__)
        self.backends = list(backends)
        self.enable_pthread = enable_prog_thread
        self.enable_listen = enable_listen_thread
        self.port = listen_port
        self.capture_telemetry = capture_telemetry
        self.num_threads = num_threads
        self.sync_mode = sync_mode


class nixlAgentConfig:
    """NIXL's low-level agent configuration (nixl._bindings.nixlAgentConfig),
    positional as NIXL's constructors. dpSocket is a dataplane extension: the
    service's socket (None: $DP_SOCKET, then the usual paths)."""

    def __init__(self, useProgThread=True, useListenThread=False, listenPort=0,
                 syncMode=nixl_thread_sync_t.NIXL_THREAD_SYNC_DEFAULT.value, pthrDelay=0,
                 lthrDelay=100000, etcdWatchTimeout=5000000, captureTelemetry=False):
        self.useProgThread = useProgThread
        self.useListenThread = useListenThread
        self.listenPort = listenPort
        self.syncMode = syncMode
        self.pthrDelay = pthrDelay
        self.lthrDelay = lthrDelay
        self.etcdWatchTimeout = etcdWatchTimeout
        self.captureTelemetry = captureTelemetry
        self.dpSocket = None


nixl_backend_handle = int


class nixl_prepped_dlist_handle:
    """A descriptor list prepared by prep_xfer_dlist: local (region ids and
    offsets) or remote (addresses in a remote agent's session)."""

    def __init__(self, agent, value, remote, region, off, addr, length, mem=DRAM_SEG):
        self._handle = int(value)
        self._agent = agent
        self._released = False
        self._remote = remote  # None: local; else the remote agent's name
        self._region, self._off, self._addr, self._len = region, off, addr, length
        self._mem = mem  # FILE: file region ids and offsets in them, on this agent

    def __repr__(self):
        return f"nixl_prepped_dlist_handle(0x{self._handle:x}, released={self._released})"

    def release(self):
        self._released = True


class nixl_xfer_handle:
    """A transfer request: one Batch, posted again by each transfer()."""

    def __init__(self, agent, value, batch, n, nbytes, segment, remote, notif, op="write"):
        self._handle = int(value)
        self._op = op
        self._agent = agent
        self._released = False
        self._batch, self._n, self._bytes = batch, n, nbytes
        self._segment, self._remote, self._notif = segment, remote, notif
        self._state = "INIT"  # INIT, PROC, DONE, ERR
        self._submitted = self._left = 0
        self._failed = []
        self._error = None
        self._owned = ()
        self._t0 = self._t_post = self._t_done = 0.0
        # DRAM <-> FILE: (bounce Region, addresses, bounce offsets, lengths, to_file)
        self._stage = None

    @property
    def failures(self):
        """dataplane extension: the failed Completions (or the exception) of the
        last transfer."""
        return self._error or list(self._failed)

    def __repr__(self):
        return f"nixl_xfer_handle(0x{self._handle:x}, released={self._released})"

    def release(self):
        if not self._released:
            self._agent._release_xfer(self, wait=True)

    def __del__(self):
        try:
            if not self._released:
                self._agent._release_xfer(self, wait=False)
        except Exception:
            pass


class _Remote:
    """What add_remote_agent learned: the agent's session and registrations."""

    def __init__(self, name, session, regs):
        self.name, self.session = name, session
        self.table = _RegTable(regs)
        self.segment = None


class _RegTable:
    """Registrations by memory type, for finding which one holds a range."""

    def __init__(self, regs):
        self.regs = list(regs)  # (addr, len, dev, mem, payload)
        self.by_mem = {}
        for mem in {r[3] for r in self.regs}:
            rs = sorted((r for r in self.regs if r[3] == mem), key=lambda r: r[0])
            self.by_mem[mem] = (np.array([r[0] for r in rs], np.uint64),
                                np.array([r[0] + r[1] for r in rs], np.uint64),
                                [r[4] for r in rs])

    def locate(self, mem, addr, length):
        """Index (into by_mem[mem]) of the registration holding each range;
        nixlNotFoundError for the first that none holds."""
        starts, ends, _ = self.by_mem.get(mem, (np.zeros(0, np.uint64),) * 2 + ([],))
        idx = np.searchsorted(starts, addr, side="right").astype(np.int64) - 1
        ok = idx >= 0
        ok[ok] = addr[ok] + length[ok] <= ends[idx[ok]]
        if not ok.all():
            i = int(np.argmin(ok))
            raise nixlNotFoundError("descriptor %d (0x%x, %d bytes, %s) is in no registration"
                                    % (i, int(addr[i]), int(length[i]), nixl_mem_t(mem).name))
        return idx


_MD_MAGIC = b"dataplane-nixl-md/1\n"
# A notification is framed with the sender's agent name, so that the receiver
# names its sender as NIXL does even before (or without) loading its metadata.
_NOTIF_MAGIC = b"\xffdpnx"


def _frame(name, msg):
    if isinstance(msg, str):
        msg = msg.encode()
    out = _NOTIF_MAGIC + bytes([len(name)]) + name + bytes(msg)
    if len(out) > _dp.NOTIFY_MSG_MAX:
        raise nixlInvalidParamError("a notification of %d bytes: at most %d with this agent's "
                                    "name" % (len(msg), _dp.NOTIFY_MSG_MAX + len(msg) - len(out)))
    return out


def _unframe(msg):
    if msg.startswith(_NOTIF_MAGIC) and len(msg) > len(_NOTIF_MAGIC):
        n = msg[len(_NOTIF_MAGIC)]
        start = len(_NOTIF_MAGIC) + 1
        if len(msg) >= start + n:
            return msg[start:start + n].decode("utf-8", "replace"), msg[start + n:]
    return None, msg


# ---- the agent ----

# ---- telemetry files (NIXL_TELEMETRY_DIR) ----
#
# NIXL's layout, which its telemetry_reader maps: a header (write_pos,
# read_pos: size_t; version, expected_version: u32; capacity, mask: size_t)
# and capacity 16-byte events (u32 type, 4 bytes pad, u64 value), one writer
# (the agent) and one reader (the tool). The writer stores an event, then
# write_pos; the reader reads write_pos, then the event, then stores read_pos.
# Python's mmap stores happen in program order and x86 keeps them so; on other
# architectures a reader may see write_pos before the event (a stale event,
# never a crash).

_TELEMETRY_VERSION = 4
_EV = {"TX_BYTES": 0, "RX_BYTES": 1, "TX_REQUESTS_NUM": 2, "RX_REQUESTS_NUM": 3,
       "MEMORY_REGISTERED": 4, "MEMORY_DEREGISTERED": 5, "XFER_TIME": 6, "XFER_POST_TIME": 7,
       "EVENTS_DROPPED": 20}
_EV_ERR = 8 - NIXL_ERR_NOT_POSTED  # AGENT_ERR_NOT_POSTED (8) .. AGENT_ERR_NO_TELEMETRY (19)
_HDR = struct.Struct("=QQIIQQ")
_EVENT = struct.Struct("=I4xQ")


class _TelemetryFile:
    """The agent's telemetry file DIR/<agent name>, written as NIXL's ring."""

    def __init__(self, path, capacity):
        import mmap
        self.path = path
        self.cap = capacity
        size = _HDR.size + _EVENT.size * capacity
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        _HDR.pack_into(self._map, 0, 0, 0, _TELEMETRY_VERSION, _TELEMETRY_VERSION, capacity,
                       capacity - 1)
        self.dropped = 0

    def add(self, kind, value):
        if self._map is None:
            return
        w, r = struct.unpack_from("=QQ", self._map, 0)
        nxt = (w + 1) & (self.cap - 1)
        if nxt == r:
            self.dropped += 1
            return
        _EVENT.pack_into(self._map, _HDR.size + w * _EVENT.size, kind, int(value))
        struct.pack_into("=Q", self._map, 0, nxt)  # publishes the event stored above

    def close(self):
        if self._map is not None:
            if self.dropped:
                self._map_drop()
            self._map.close()
            self._map = None

    def _map_drop(self):
        n, self.dropped = self.dropped, 0
        self.add(_EV["EVENTS_DROPPED"], n)


def _telemetry_open(agent_name):
    """The agent's telemetry file when NIXL_TELEMETRY_DIR is set, else None
    (telemetry kept in the process only, as NIXL without a sink)."""
    d = os.environ.get("NIXL_TELEMETRY_DIR")
    if not d:
        return None
    try:
        cap = int(os.environ.get("NIXL_TELEMETRY_BUFFER_SIZE", "4096"))
    except ValueError:
        cap = 4096
    cap = 1 << max(1, (max(cap, 2) - 1).bit_length())  # a power of two: the mask
    path = os.path.join(d, agent_name)
    try:
        os.makedirs(d, exist_ok=True)
        return _TelemetryFile(path, cap)
    except OSError as e:
        logger.warning("telemetry file %s: %s; telemetry stays in the process", path, e)
        return None


# Backend plugins by name: what NIXL's plugins of that name do, the service
# does (network plugins: DRAM and VRAM between agents; POSIX: files, here
# query_memory). Plugins for hardware dataplane does not drive are refused at
# create_backend with the reason; any other name is unknown, as in NIXL.
_PLUGINS = {"UCX": ["DRAM", "VRAM"], "UCX_MO": ["DRAM", "VRAM"], "LIBFABRIC": ["DRAM", "VRAM"],
            "UCCL": ["DRAM", "VRAM"], "MOONCAKE": ["DRAM", "VRAM"], "DATAPLANE": ["DRAM", "VRAM"],
            "POSIX": ["DRAM", "FILE"]}
_NOT_DRIVEN = {
    "GDS": "GPUDirect Storage (cuFile)", "GDS_MT": "GPUDirect Storage (cuFile)",
    "OBJ": "object stores (S3)", "AZURE_BLOB": "object stores (Azure Blob)",
    "HF3FS": "the 3FS file system", "GUSLI": "GUSLI block devices",
    "GPUNETIO": "DOCA GPUNetIO", "MOCK_DRAM": "NIXL's test plugins",
}


def _telemetry_wanted(capture):
    """NIXL_TELEMETRY_ENABLE, when set, decides; else the config's
    capture_telemetry."""
    env = os.environ.get("NIXL_TELEMETRY_ENABLE")
    if env is None or env == "":
        return bool(capture)
    return env.strip().lower() in ("y", "yes", "1", "true", "on")


class _AgentCore:
    """The agent itself: one dataplane Client that is an engine session. NIXL's
    low-level nixlAgent (dataplane.nixl_bindings) and its nixl_agent both
    drive one of these; its calls have nixl_agent's names and conventions.

    cfg is a nixlAgentConfig; its dpSocket (a dataplane extension; default
    $DP_SOCKET, then the usual paths) names the service to connect to."""

    def __init__(self, agent_name, cfg):
        if not isinstance(agent_name, str):
            raise TypeError("an agent name is a str")
        self._closed = True  # until the client is there
        self.name = agent_name
        self._bname = agent_name.encode()
        if not self._bname:
            raise ValueError("an agent name must not be empty")
        if len(self._bname) > 255:
            raise nixlInvalidParamError("an agent name is 1 to 255 bytes")
        self.notifs = {}
        self.plugin_list = list(_PLUGINS)
        self.backends = {}
        self.backend_mems = {}
        self.backend_options = {}
        self.nixl_mems = dict(_MEM_NAMES)
        self.nixl_ops = {"WRITE": NIXL_WRITE, "READ": NIXL_READ}
        self._telemetry = _telemetry_wanted(getattr(cfg, "captureTelemetry", False))
        self._lock = threading.RLock()
        self._regs = []  # (addr, len, dev, mem, Region)
        self._local = _RegTable([])
        self._remotes = {}
        self._by_session = {}
        self._ids = 0
        self._inflight = {}
        self._pending = collections.deque()
        self._self_segment = None
        self._listener = None
        self._exchanges = []
        self._telemetry_file = None
        try:
            self._client = _dp.Client(getattr(cfg, "dpSocket", None), name=agent_name[:60])
            for entries in (4096, 256):
                try:
                    self._client.notify_open(entries)
                    break
                except _dp.InvalidArgumentError:
                    continue
            # A session with no registration when a peer opens it cannot be
            # sent notifications through that handle (ENOENT, even after
            # registrations came): a page of the agent's own keeps it from
            # ever being empty.
            self._anchor = self._client.alloc(4096)
            self._client.session_create(0)
            try:
                self._q = self._client.queue(4096)
            except _dp.InvalidArgumentError:
                self._q = self._client.queue(0)
        except _dp.DataplaneError as e:
            raise _nixl_error(e) from e
        self._closed = False
        self.session_name = self._client.session_name
        self.listen_port = None
        if getattr(cfg, "useListenThread", False):
            port = int(getattr(cfg, "listenPort", DEFAULT_COMM_PORT))
            self._listener = _Listener(self, port)
            self.listen_port = self._listener.port
            # NIXL's line, which its CI harness reads a port-0 target's port
            # from: INFO for a port the system chose, DEBUG otherwise.
            native_log.log(logging.INFO if port == 0 else logging.DEBUG,
                           "MD listener is listening on port %d", self.listen_port)
        if self._telemetry:
            self._telemetry_file = _telemetry_open(agent_name)
        logger.info("dataplane NIXL agent %s: session %s", agent_name, self.session_name)

    # -- backends and plugins: the service behind every name NIXL knows --

    def get_plugin_list(self):
        return self.plugin_list

    def get_plugin_mem_types(self, backend):
        return list(_PLUGINS.get(backend, []))

    def get_plugin_params(self, backend):
        return {}

    def get_backend_mem_types(self, backend):
        return self.backend_mems.get(backend, [])

    def get_backend_params(self, backend):
        return self.backend_options.get(backend, {})

    def create_backend(self, backend, initParams={}):
        if backend not in _PLUGINS:
            why = _NOT_DRIVEN.get(backend)
            raise nixlNotFoundError(
                f"backend {backend!r}: " + (f"needs {why}, which dataplane does not drive"
                                            if why else "no such plugin (known: %s)"
                                            % ", ".join(_PLUGINS)))
        with self._lock:
            self.backends.setdefault(backend, len(self.backends) + 1)
            self.backend_mems[backend] = list(_PLUGINS[backend])
            self.backend_options[backend] = dict(initParams)
        logger.info("Backend %s was instantiated", backend)
        return self.backends[backend]

    # -- descriptor lists --

    def get_xfer_descs(self, descs, mem_type=None):
        return self._descs(nixlXferDList, descs, mem_type)

    def get_reg_descs(self, descs, mem_type=None):
        return self._descs(nixlRegDList, descs, mem_type)

    def _descs(self, cls, descs, mem_type):
        other = nixlRegDList if cls is nixlXferDList else nixlXferDList
        if isinstance(descs, cls):
            return descs
        if isinstance(descs, other):
            logger.error("%s given where a %s is needed", other.__name__, cls.__name__)
            return None
        if _torch_tensor(descs):
            descs = [descs]
        if isinstance(descs, np.ndarray) and not (mem_type is not None and descs.ndim == 2
                                                  and descs.shape[1] == 3):
            if cls is nixlRegDList:  # memory itself (a dataplane extension)
                return self._reg_of_buffer(descs)
            logger.error("a Nx3 numpy array and a mem_type are needed")
            return None
        if isinstance(descs, np.ndarray):
            return cls(_mem(mem_type), descs)
        descs = list(descs)
        if not descs:
            if mem_type is None:
                logger.error("an empty descriptor list needs a mem_type")
                return None
            return cls(mem_type, [])
        if isinstance(descs[0], tuple):
            if mem_type is None:
                logger.error("Please specify a mem type if not using Tensors")
                return None
            mem = _mem(mem_type)  # an unknown name: KeyError, as NIXL
            sizes = (3,) if cls is nixlXferDList else (3, 4)
            if any(not isinstance(d, tuple) or len(d) not in sizes for d in descs):
                logger.error("%s-tuple list needed for %s", " or ".join(map(str, sizes)),
                             "transfer" if cls is nixlXferDList else "registration")
                return None
            return cls(mem, descs)
        if _torch_tensor(descs[0]):
            rows, kind, owners = [], None, []
            for t in descs:
                d = _tensor_desc(t)
                if d is None:
                    logger.error("Please use a list of contiguous Tensors")
                    return None
                if kind is not None and d[0] != kind:
                    return None
                kind = d[0]
                rows.append(d[1])
                owners.append(t)
            out = cls(kind, rows)
            if cls is nixlRegDList:
                out._owners = owners
            return out
        logger.error("unsupported descriptor list %r", type(descs[0]).__name__)
        return None

    def _reg_of_buffer(self, arr):
        view = memoryview(arr)
        if view.readonly or not view.c_contiguous:
            logger.error("register a writable, C-contiguous numpy array")
            return None
        out = nixlRegDList(DRAM_SEG, [(arr.ctypes.data, view.nbytes, 0)])
        out._owners = [arr]
        return out

    # -- registration --

    def register_memory(self, reg_list, mem_type=None, backends=[]):
        descs = self.get_reg_descs(reg_list, mem_type)
        if descs is None:
            raise nixlInvalidParamError("could not make registration descriptors of that")
        mem = descs.getType()
        if mem not in (DRAM_SEG, VRAM_SEG, FILE_SEG):
            raise nixlNotSupportedError(f"{mem.name} memory (block devices, object stores) is "
                                        "not supported here")
        done = []
        with self._lock:
            try:
                for i in range(len(descs)):
                    addr, n, dev = (int(x) for x in descs._descs[i])
                    owner = descs._owners[i] if i < len(descs._owners) else None
                    if mem == VRAM_SEG:
                        region = self._client._register_cuda(addr, n, owner)
                    elif mem == FILE_SEG:
                        region = self._register_file(dev, addr, n)
                    else:
                        region = self._client._register_mem(addr, n, owner)
                    done.append((addr, n, dev, int(mem), region))
            except _dp.DataplaneError as e:
                for r in done:
                    r[4].close()
                raise _nixl_error(e) from e
            self._regs += done
            self._local = self._table()
            self._event("MEMORY_REGISTERED", sum(r[1] for r in done))
        return descs

    def _register_file(self, fd, offset, length):
        """A FILE descriptor (offset, length, fd) as a file region of the
        service (dp_register_file: it takes its own copy of the fd); read-write
        when the fd allows it, else read-only. Length 0: to the file's end."""
        try:
            return self._client.register_file(fd, offset, length, access="rw")
        except _dp.PermissionDeniedError:
            return self._client.register_file(fd, offset, length, access="r")

    def _table(self):
        """The local registrations that have addresses (FILE ones have none)."""
        return _RegTable([r for r in self._regs if r[3] != FILE_SEG])

    def _file_ranges(self, fd, off, length):
        """The file region of this agent's FILE registration of fd holding
        each (off, length), and the offset in it; nixlNotFoundError for the
        first that none holds."""
        regs = [r for r in self._regs if r[3] == FILE_SEG and r[2] == fd]
        ids = np.zeros(len(off), np.uint64)
        at = np.zeros(len(off), np.uint64)
        for i, (o, n) in enumerate(zip(off.tolist(), length.tolist())):
            for r in regs:
                if r[0] <= o and o + n <= r[0] + r[4].size:
                    ids[i], at[i] = r[4].id, o - r[0]
                    break
            else:
                raise nixlNotFoundError("FILE descriptor %d (offset %d, %d bytes, fd %d) is in "
                                        "no registration" % (i, o, n, fd))
        return ids, at

    def deregister_memory(self, dereg_list, backends=[]):
        descs = self.get_reg_descs(dereg_list)
        if descs is None:
            raise nixlInvalidParamError("not a registration descriptor list")
        mem = int(descs.getType())
        with self._lock:
            keep, gone = list(self._regs), []
            for addr, n, dev in descs._descs.tolist():
                for r in keep:
                    if (r[0] == addr and r[1] == n and r[3] == mem
                            and (mem != FILE_SEG or r[2] == dev)):
                        keep.remove(r)
                        gone.append(r)
                        break
                else:
                    raise nixlNotFoundError("0x%x (%d bytes) is not registered" % (addr, n))
            for r in gone:
                r[4].close()
            self._regs = keep
            self._local = self._table()
            self._event("MEMORY_DEREGISTERED", sum(r[1] for r in gone))

    def query_memory(self, reg_list, backend, mem_type=None):
        """For FILE descriptors (their metaInfo a path), as NIXL's POSIX
        backend: a dict of the file's size, mode and mtime (decimal strings),
        or None where it cannot be stat'ed."""
        descs = self.get_reg_descs(reg_list, mem_type)
        if backend not in self.backends:
            raise ValueError(f"Backend '{backend}' not found. Available backends: "
                             f"{list(self.backends)}")
        if descs is None:
            raise nixlInvalidParamError("could not make registration descriptors of that")
        if "FILE" not in self.backend_mems.get(backend, []) or descs.getType() != FILE_SEG:
            raise nixlNotSupportedError(f"query_memory: backend {backend} answers for FILE "
                                        "descriptors only" if "FILE" in
                                        self.backend_mems.get(backend, []) else
                                        f"query_memory: backend {backend} has no storage")
        out = []
        for i in range(len(descs)):
            path = descs._meta[i]
            try:
                st = os.stat(path) if path else None
            except OSError:
                st = None
            out.append(None if st is None else {"size": str(st.st_size), "mode": str(st.st_mode),
                                                "mtime": str(int(st.st_mtime))})
        return out

    def _event(self, kind, value):
        if self._telemetry_file is not None:
            self._telemetry_file.add(_EV[kind] if isinstance(kind, str) else kind, value)

    # -- metadata --

    def _metadata(self, regs):
        # Files stay with their agent (no peer reaches a file region).
        body = {"name": self.name, "session": self.session_name,
                "regs": [[r[0], r[1], r[2], r[3]] for r in regs if r[3] != FILE_SEG]}
        return _MD_MAGIC + json.dumps(body, separators=(",", ":")).encode()

    def get_agent_metadata(self):
        with self._lock:
            return self._metadata(self._regs)

    def get_partial_agent_metadata(self, descs, inc_conn_info=False, backends=[]):
        with self._lock:
            want = {(a, n, int(descs.getType())) for a, n, _ in descs._descs.tolist()}
            return self._metadata([r for r in self._regs if (r[0], r[1], r[3]) in want])

    @staticmethod
    def _parse_metadata(metadata):
        if isinstance(metadata, str):
            metadata = metadata.encode()
        metadata = bytes(metadata)
        if not metadata.startswith(_MD_MAGIC):
            raise nixlInvalidParamError("not the metadata of a dataplane NIXL agent")
        try:
            body = json.loads(metadata[len(_MD_MAGIC):])
            name, session = body["name"], body["session"]
            regs = [(int(a), int(n), int(d), int(nixl_mem_t(m)), None)
                    for a, n, d, m in body["regs"]]
        except (ValueError, KeyError, TypeError) as e:
            raise nixlInvalidParamError(f"bad agent metadata: {e}") from None
        if not isinstance(name, str) or not isinstance(session, str) or not name:
            raise nixlInvalidParamError("bad agent metadata: name or session")
        if any(a < 0 or n < 0 or a + n > 2**64 for a, n, _, _, _ in regs):
            raise nixlInvalidParamError("bad agent metadata: a registration out of range")
        return name, session, regs

    def add_remote_agent(self, metadata):
        name, session, regs = self._parse_metadata(metadata)
        with self._lock:
            old = self._remotes.get(name)
            rec = _Remote(name, session, regs)
            if old is not None and old.session == session:
                rec.segment = old.segment
            elif old is not None and old.segment is not None:
                old.segment.close()
            if rec.segment is None:
                try:
                    rec.segment = self._client.open_session(session)
                except _dp.DataplaneError as e:
                    raise _nixl_error(e) from e
            self._remotes[name] = rec
            self._by_session[session] = name
        return name.encode()

    def remove_remote_agent(self, agent):
        agent = _agent_name(agent)
        with self._lock:
            rec = self._remotes.pop(agent, None)
            if rec is None:
                raise nixlNotFoundError(f"no remote agent {agent!r}")
            if self._by_session.get(rec.session) == agent:
                del self._by_session[rec.session]
            if rec.segment is not None:
                rec.segment.close()

    def check_remote_metadata(self, agent, descs=None):
        agent = _agent_name(agent)
        with self._lock:
            rec = self._remotes.get(agent)
            if rec is None:
                return False
            if descs is None or len(descs) == 0:
                return True
            try:
                rec.table.locate(int(descs.getType()), descs._descs[:, 0], descs._descs[:, 1])
                return True
            except nixlNotFoundError:
                return False

    def make_connection(self, remote_agent, backends=[]):
        remote_agent = _agent_name(remote_agent)
        with self._lock:
            if remote_agent not in self._remotes:
                raise nixlNotFoundError(f"no remote agent {remote_agent!r}")

    def send_local_metadata(self, ip_addr="", port=DEFAULT_COMM_PORT):
        self._peer_call(ip_addr, port, b"L", self.get_agent_metadata())

    def send_partial_agent_metadata(self, descs, inc_conn_info=False, backends=[], ip_addr="",
                                    port=DEFAULT_COMM_PORT, label=""):
        self._peer_call(ip_addr, port, b"L", self.get_partial_agent_metadata(descs))

    def fetch_remote_metadata(self, remote_agent, ip_addr="", port=DEFAULT_COMM_PORT, label=""):
        self._peer_call(ip_addr, port, b"F", _agent_name(remote_agent).encode())

    def invalidate_local_metadata(self, ip_addr="", port=DEFAULT_COMM_PORT):
        self._peer_call(ip_addr, port, b"I", self._bname)

    def _peer_call(self, ip, port, op, payload):
        if not ip:
            raise nixlNotSupportedError("no central metadata server: give ip_addr and port")
        t = threading.Thread(target=_peer_exchange, args=(self, ip, port, op, payload),
                             daemon=True, name="nixl-md-" + op.decode())
        t.start()
        self._exchanges = [x for x in self._exchanges if x.is_alive()] + [t]

    # -- preparing transfers --

    def prep_xfer_dlist(self, agent_name, xfer_list, mem_type=None, backends=[]):
        agent_name = _agent_name(agent_name)
        descs = self.get_xfer_descs(xfer_list, mem_type)
        if descs is None:
            raise nixlInvalidParamError("could not make transfer descriptors of that")
        mem = int(descs.getType())
        addr = descs._descs[:, 0].copy()
        length = descs._descs[:, 1].copy()
        with self._lock:
            self._ids += 1
            if mem == FILE_SEG:
                return self._prep_files(agent_name, descs, addr, length)
            if agent_name in ("", NIXL_INIT_AGENT):
                idx = self._local.locate(mem, addr, length)
                if len(idx):
                    starts, _, regions = self._local.by_mem[mem]
                    ids = np.array([regions[i].id for i in idx], np.uint64)
                    off = addr - starts[idx]
                else:
                    ids = off = np.zeros(0, np.uint64)
                return nixl_prepped_dlist_handle(self, self._ids, None, ids, off, addr, length,
                                                 mem)
            table = self._local if agent_name == self.name else self._remote(agent_name).table
            table.locate(mem, addr, length)
            return nixl_prepped_dlist_handle(self, self._ids, agent_name, None, None, addr,
                                             length, mem)

    def _prep_files(self, agent_name, descs, addr, length):
        """FILE descriptors (offset, length, fd) are the far side of a
        transfer with this agent's own name, as NIXL's POSIX backend takes
        them: the local side is DRAM or VRAM."""
        if agent_name != self.name:
            raise nixlNotSupportedError(
                "FILE descriptors go on the remote side with this agent's own name (%r), as "
                "NIXL's POSIX backend takes them; files of other agents are not reachable"
                % self.name)
        dev = descs._descs[:, 2]
        ids = np.zeros(len(addr), np.uint64)
        off = np.zeros(len(addr), np.uint64)
        for fd in np.unique(dev).tolist():
            sel = dev == fd
            ids[sel], off[sel] = self._file_ranges(int(fd), addr[sel], length[sel])
        return nixl_prepped_dlist_handle(self, self._ids, agent_name, ids, off, addr, length,
                                         FILE_SEG)

    def _remote(self, name):
        rec = self._remotes.get(name)
        if rec is None:
            raise nixlNotFoundError(f"no remote agent {name!r} (add_remote_agent first)")
        return rec

    def _segment_of(self, name):
        if name == self.name and name not in self._remotes:
            if self._self_segment is None:
                self._self_segment = self._client.open_session(self.session_name)
            return self._self_segment
        return self._remote(name).segment

    def make_prepped_xfer(self, operation, local_xfer_side, local_indices, remote_xfer_side,
                          remote_indices, notif_msg=b"", backends=[], skip_desc_merge=False):
        op = "read" if self.nixl_ops[operation] == NIXL_READ else "write"  # else KeyError
        loc, rem = local_xfer_side, remote_xfer_side
        if loc._remote is not None or rem._remote is None:
            raise nixlInvalidParamError("want a local (NIXL_INIT_AGENT) and a remote dlist handle")
        if loc._released or rem._released:
            raise nixlInvalidParamError("a released dlist handle")
        li = np.asarray(local_indices, dtype=np.int64).ravel()
        ri = np.asarray(remote_indices, dtype=np.int64).ravel()
        if len(li) != len(ri):
            raise nixlInvalidParamError("%d local and %d remote indices" % (len(li), len(ri)))
        for idx, side in ((li, loc), (ri, rem)):
            if len(idx) and (idx.min() < 0 or idx.max() >= len(side._addr)):
                raise nixlInvalidParamError("an index outside the prepared list")
        length = loc._len[li]
        if not np.array_equal(length, rem._len[ri]):
            i = int(np.argmax(length != rem._len[ri]))
            raise nixlInvalidParamError("descriptor pair %d: %d bytes local, %d remote"
                                        % (i, int(length[i]), int(rem._len[ri][i])))
        if rem._mem == FILE_SEG:
            return self._file_xfer(op, loc, li, rem, ri, length, notif_msg)
        with self._lock:
            try:
                seg = self._segment_of(rem._remote)
            except _dp.DataplaneError as e:
                raise _nixl_error(e) from e
            self._ids += 1
            xid = self._ids & 0xFFFFFFFF
            batch = None
            if len(li):
                ud = (np.uint64(xid) << np.uint64(32)) + np.arange(len(li), dtype=np.uint64)
                batch = _dp.Batch(op=op, region=loc._region[li], local_off=loc._off[li],
                                  segment=seg, target_off=rem._addr[ri], length=length,
                                  user_data=ud)
            _frame(self._bname, _as_bytes(notif_msg))
            return nixl_xfer_handle(self, xid, batch, len(li), int(length.sum()), seg,
                                    rem._remote, _as_bytes(notif_msg), op)

    def _file_xfer(self, op, loc, li, rem, ri, length, notif_msg):
        """DRAM or VRAM <-> FILE through the service's file engine (io_uring).
        Each descriptor has the file region as its local region and this
        agent's own session as its segment: dataplane's READ then moves
        memory into the file, its WRITE the file into memory (docs/files.md).
        VRAM is addressed in the session directly (the service stages it if
        it has a GPU). DRAM registered by address is the caller's memory,
        which the service reaches with process_vm_readv/writev, not io_uring:
        the bytes go through a bounce buffer of the agent's own (dp_alloc),
        copied in before a WRITE's descriptors go and out after a READ's
        completed."""
        dp_op = "read" if op == "write" else "write"
        with self._lock:
            try:
                seg = self._segment_of(self.name)
            except _dp.DataplaneError as e:
                raise _nixl_error(e) from e
            self._ids += 1
            xid = self._ids & 0xFFFFFFFF
            batch = stage = None
            if len(li):
                target = loc._addr[li]
                if loc._mem == DRAM_SEG:
                    boff = np.concatenate(([0], np.cumsum(length)[:-1])).astype(np.uint64)
                    total = int(length.sum())
                    try:
                        bounce = self._client.alloc(max(total, 1))
                    except _dp.DataplaneError as e:
                        raise _nixl_error(e) from e
                    stage = (bounce, target.tolist(), boff.tolist(), length.tolist(),
                             op == "write")
                    target = np.uint64(bounce.address) + boff
                ud = (np.uint64(xid) << np.uint64(32)) + np.arange(len(li), dtype=np.uint64)
                batch = _dp.Batch(op=dp_op, region=rem._region[ri], local_off=rem._off[ri],
                                  segment=seg, target_off=target, length=length, user_data=ud)
            _frame(self._bname, _as_bytes(notif_msg))
            h = nixl_xfer_handle(self, xid, batch, len(li), int(length.sum()), seg, self.name,
                                 _as_bytes(notif_msg), op)
            h._stage = stage
            return h

    def initialize_xfer(self, operation, local_descs, remote_descs, remote_agent, notif_msg=b"",
                        backends=[]):
        self.nixl_ops[operation]  # an unknown operation: KeyError, before anything else
        loc = self.prep_xfer_dlist(NIXL_INIT_AGENT, local_descs)
        rem = self.prep_xfer_dlist(remote_agent, remote_descs)
        if len(loc._addr) != len(rem._addr):
            raise nixlInvalidParamError("%d local and %d remote descriptors"
                                        % (len(loc._addr), len(rem._addr)))
        idx = np.arange(len(loc._addr))
        h = self.make_prepped_xfer(operation, loc, idx, rem, idx, notif_msg)
        h._owned = (loc, rem)
        return h

    def estimate_xfer_cost(self, req_handle):
        raise nixlNotSupportedError("estimate_xfer_cost")

    # -- transfers --

    def transfer(self, handle, notif_msg=b""):
        with self._lock:
            if handle._released:
                raise nixlInvalidParamError("a released transfer handle")
            if handle._state == "PROC":
                raise nixlRepostActiveError("the transfer is still in progress")
            if notif_msg:
                _frame(self._bname, notif_msg)
                handle._notif = _as_bytes(notif_msg)
            handle._state = "PROC"
            handle._submitted, handle._left = 0, handle._n
            handle._failed, handle._error = [], None
            handle._t0 = time.time()
            t = time.perf_counter()
            if handle._stage is not None and handle._stage[4]:  # memory -> bounce -> file
                _bounce_copy(handle._stage, to_bounce=True)
            self._inflight[handle._handle] = handle
            if handle._n == 0:
                self._finish(handle)
            else:
                self._pending.append(handle)
                self._progress()
            handle._t_post = time.perf_counter() - t
            # Here, not in _finish: a transfer may finish inside the post.
            self._event("XFER_POST_TIME", math.ceil(handle._t_post * 1e6))
            return _STATE[handle._state]

    def check_xfer_state(self, handle):
        with self._lock:
            if handle._state == "INIT":
                raise nixlNotPostedError("the transfer was never posted")
            if handle._state == "PROC":
                self._progress()
            return _STATE[handle._state]

    def _progress(self):
        """Submits what the queue takes, reaps what completed, until neither
        moves."""
        q = self._q
        while True:
            moved = False
            while self._pending:
                h = self._pending[0]
                try:
                    k = q.submit(h._batch, start=h._submitted)
                except _dp.DataplaneError as e:
                    self._pending.popleft()
                    h._error = _nixl_error(e)
                    h._left -= h._n - h._submitted
                    h._submitted = h._n
                    if h._left == 0:
                        self._finish(h)
                    continue
                h._submitted += k
                moved |= k > 0
                if h._submitted < h._n:
                    break
                self._pending.popleft()
            try:
                cqes = q.poll()
            except _dp.DataplaneError as e:
                for h in list(self._inflight.values()):
                    h._error = _nixl_error(e)
                    h._left = 0
                    self._finish(h)
                self._pending.clear()
                return
            for c in cqes:
                h = self._inflight.get(c.user_data >> 32)
                if h is None:
                    continue
                if c.status:
                    h._failed.append(c)
                h._left -= 1
                if h._left == 0:
                    self._finish(h)
            if not cqes and not moved:
                return

    def _finish(self, h):
        del self._inflight[h._handle]
        ok = h._error is None and not h._failed
        if ok and h._stage is not None and not h._stage[4] and not h._released:
            _bounce_copy(h._stage, to_bounce=False)  # file -> bounce -> memory
        h._t_done = time.time()
        if h._error is None and not h._failed and h._notif and not h._released:
            try:
                self._client.notify_send(h._segment, _frame(self._bname, h._notif))
            except _dp.DataplaneError as e:
                h._error = _nixl_error(e)
        if h._error is not None or h._failed:
            h._state = "ERR"
            self._event(_EV_ERR + int(getattr(h._error, "status", NIXL_ERR_BACKEND)), 1)
            if h._failed:
                c = h._failed[0]
                logger.error("transfer 0x%x: %d of %d descriptors failed, first: %s",
                             h._handle, len(h._failed), h._n, _dp.strerror(c.status))
        else:
            h._state = "DONE"
            if self._telemetry_file is not None:
                rx = h._op == "read"
                self._event("RX_BYTES" if rx else "TX_BYTES", h._bytes)
                self._event("RX_REQUESTS_NUM" if rx else "TX_REQUESTS_NUM", 1)
                self._event("XFER_TIME", math.ceil((h._t_done - h._t0) * 1e6))

    def get_xfer_telemetry(self, handle):
        if not self._telemetry:
            raise nixlNoTelemetryError("telemetry is off: capture_telemetry=True in the config, "
                                       "or NIXL_TELEMETRY_ENABLE=y")
        if handle._state == "INIT":
            raise nixlNoTelemetryError("the transfer was never posted")
        end = handle._t_done if handle._state != "PROC" else time.time()
        # Whole microseconds, rounded up: a post or transfer that took any
        # time at all is never reported as 0.
        post = math.ceil(handle._t_post * 1e6)
        return nixlXferTelemetry(int(handle._t0 * 1e6), post,
                                 max(post, math.ceil((end - handle._t0) * 1e6)), handle._bytes,
                                 handle._n)

    def query_xfer_backend(self, handle):
        return next(iter(self.backends), "DATAPLANE")

    def release_xfer_handle(self, handle):
        handle.release()

    def release_dlist_handle(self, handle):
        handle.release()

    def _release_xfer(self, h, wait):
        """Drops a transfer: descriptors not yet submitted never are, and no
        notification is sent; with wait, returns once those in flight
        completed (their memory may then be freed)."""
        with self._lock:
            if h._released:
                return
            h._released = True
            if h._state == "PROC":
                if h in self._pending:
                    self._pending.remove(h)
                h._left -= h._n - h._submitted
                h._submitted = h._n
                if h._left == 0:
                    self._finish(h)
            deadline = time.monotonic() + 30
            while wait and h._state == "PROC" and time.monotonic() < deadline:
                self._progress()
                if h._state == "PROC":
                    time.sleep(0.0005)
            for d in h._owned:
                d.release()
            if h._stage is not None and h._state != "PROC":
                h._stage[0].close()
                h._stage = None

    # -- notifications --

    def get_new_notifs(self, backends=[]):
        return self._take_notifs({})

    def update_notifs(self, backends=[]):
        self.notifs = self._take_notifs(self.notifs)
        return self.notifs

    def _take_notifs(self, out):
        try:
            msgs = self._client.notify_recv(0, 1 << 30)
        except _dp.DataplaneError as e:
            raise _nixl_error(e) from e
        for m in msgs:
            if not m.notification.flags & _dp.NOTIFY_F_MSG:
                continue
            name, body = _unframe(m.msg)
            if name is None:
                name = self._by_session.get(m.sender, m.sender)
            out.setdefault(name, []).append(body)
        return out

    def check_remote_xfer_done(self, remote_agent_name, lookup_tag, backends=[],
                               tag_is_prefix=True):
        remote_agent_name = _agent_name(remote_agent_name)
        self.update_notifs()
        for msg in self.notifs.get(remote_agent_name, []):
            if msg.startswith(lookup_tag) if tag_is_prefix else lookup_tag in msg:
                self.notifs[remote_agent_name].remove(msg)
                return True
        return False

    def send_notif(self, remote_agent_name, notif_msg, backend=None):
        remote_agent_name = _agent_name(remote_agent_name)
        msg = _frame(self._bname, notif_msg)
        with self._lock:
            seg = self._segment_of(remote_agent_name)
            try:
                self._client.notify_send(seg, msg)
            except _dp.DataplaneError as e:
                raise _nixl_error(e) from e

    # -- serialization (as NIXL: pickle) --

    def get_serialized_descs(self, descs):
        import pickle
        return pickle.dumps(descs)

    def deserialize_descs(self, serialized_descs):
        import pickle
        return pickle.loads(serialized_descs)

    # -- lifetime (close is a dataplane extension; NIXL frees at destruction) --

    def close(self):
        """Stops the listener, drops transfers (waiting for those in flight),
        and closes the client: its registrations and session end."""
        if self._closed:
            return
        self._closed = True
        for t in self._exchanges:
            t.join(5)
        if self._listener is not None:
            self._listener.stop()
        for h in list(self._inflight.values()):
            self._release_xfer(h, wait=True)
        self._client.close()
        if self._telemetry_file is not None:
            self._telemetry_file.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class nixl_agent:
    """NIXL's agent (nixl._api.nixl_agent): made, as NIXL's, of a low-level
    nixlAgent (nixl._bindings) from a nixlAgentConfig, then the config's
    backends. Every call is the agent core's (_AgentCore).

    ``socket`` (a dataplane extension; default $DP_SOCKET, then the usual
    paths) names the service to connect to."""

    def __init__(self, agent_name, nixl_conf=None, instantiate_all=False, *, socket=None):
        from dataplane import nixl_bindings
        if nixl_conf and instantiate_all:
            instantiate_all = False
            logger.warning("Ignoring instantiate_all based on the provided config in agent "
                           "creation.")
        if not nixl_conf:
            nixl_conf = nixl_agent_config()
        default_sync = (nixl_thread_sync_t.NIXL_THREAD_SYNC_STRICT if nixl_conf.enable_listen
                        else nixl_thread_sync_t.NIXL_THREAD_SYNC_NONE)
        cfg = nixlAgentConfig()
        cfg.useProgThread = nixl_conf.enable_pthread
        cfg.useListenThread = nixl_conf.enable_listen
        cfg.listenPort = nixl_conf.port
        cfg.syncMode = (nixl_conf.sync_mode or default_sync).value
        cfg.captureTelemetry = nixl_conf.capture_telemetry
        cfg.dpSocket = socket
        # Looked up at call time, as NIXL's _api does: a test may wrap it.
        self.agent = nixl_bindings.nixlAgent(agent_name, cfg)
        self._core = self.agent._core
        self.name = agent_name
        for b in (self._core.plugin_list if instantiate_all else nixl_conf.backends):
            if b in _PLUGINS:
                self._core.create_backend(b, {})
            else:
                logger.warning("Skipping backend registration %s due to the missing plugin%s.",
                               b, " (needs %s, which dataplane does not drive)" % _NOT_DRIVEN[b]
                               if b in _NOT_DRIVEN else "")
        logger.info("Initialized NIXL agent: %s", agent_name)

    def __getattr__(self, name):
        core = self.__dict__.get("_core")
        if core is None:
            raise AttributeError(name)
        return getattr(core, name)

    def __repr__(self):
        return f"nixl_agent({self.name!r})"


_STATE = {"PROC": "PROC", "DONE": "DONE", "ERR": "ERR"}


def _bounce_copy(stage, to_bounce):
    """Copies a DRAM <-> FILE transfer's memory into its bounce buffer, or out."""
    bounce, addrs, boffs, lengths, _ = stage
    base = bounce.address
    for a, o, n in zip(addrs, boffs, lengths):
        if to_bounce:
            ctypes.memmove(base + o, a, n)
        else:
            ctypes.memmove(a, base + o, n)


def _agent_name(name):
    """An agent name as str: add_remote_agent returns bytes, as NIXL's, and
    callers pass that back where NIXL takes a std::string."""
    if isinstance(name, (bytes, bytearray)):
        return bytes(name).decode("utf-8", "surrogateescape")
    return name


def _as_bytes(msg):
    if isinstance(msg, str):
        return msg.encode()
    return bytes(msg) if msg else b""


# ---- metadata exchange between agents (NIXL's listener thread) ----
#
# One request per TCP connection: op (1 byte), length (4 bytes, big endian),
# payload. L: load this metadata; F: send me yours (answered with length and
# metadata); I: forget the agent named in the payload.

_MD_LIMIT = 64 << 20


def _recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        b = s.recv(n - len(buf))
        if not b:
            raise ConnectionError("peer closed")
        buf += b
    return bytes(buf)


def _peer_exchange(agent, ip, port, op, payload, tries=100):
    for i in range(tries):
        try:
            with _socket.create_connection((ip, port), timeout=5) as s:
                s.sendall(op + struct.pack(">I", len(payload)) + payload)
                if op == b"F":
                    (n,) = struct.unpack(">I", _recv_exact(s, 4))
                    if n > _MD_LIMIT:
                        raise ValueError("metadata too large")
                    agent.add_remote_agent(_recv_exact(s, n))
            return
        except (OSError, ValueError, _NixlError) as e:
            if i == tries - 1 or isinstance(e, (ValueError, _NixlError)):
                logger.error("metadata %s to %s:%d failed: %s", op.decode(), ip, port, e)
                return
            time.sleep(0.1)


class _Listener:
    def __init__(self, agent, port):
        import weakref
        self._agent = weakref.ref(agent)
        self._sock = _socket.create_server(("", port), reuse_port=False)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="nixl-listener")
        self._thread.start()

    def stop(self):
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(2)
        self._sock.close()

    def _run(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except _socket.timeout:
                continue
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(5)
                    self._serve(conn)
                except Exception as e:  # a bad peer never stops the listener
                    logger.warning("metadata listener: %s", e)

    def _serve(self, conn):
        agent = self._agent()
        if agent is None:
            return
        op = _recv_exact(conn, 1)
        (n,) = struct.unpack(">I", _recv_exact(conn, 4))
        if n > _MD_LIMIT:
            raise ValueError("request too large")
        payload = _recv_exact(conn, n)
        if op == b"L":
            agent.add_remote_agent(payload)
        elif op == b"F":
            md = agent.get_agent_metadata()
            conn.sendall(struct.pack(">I", len(md)) + md)
        elif op == b"I":
            try:
                agent.remove_remote_agent(payload.decode())
            except nixlNotFoundError:
                pass
