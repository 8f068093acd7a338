# SPDX-License-Identifier: MIT
"""NIXL's low-level Python binding (``nixl._bindings``) over dataplane.nixl.

NIXL's tests and some callers drive ``nixlAgent`` directly, with the C++
API's names (registerMem, createXferReq, postXferReq, getXferStatus, ...),
integer handles and status returns; failures raise NIXL's exception classes.
Here a ``nixlAgent`` is one agent core of dataplane.nixl (one dataplane
Client that is an engine session), the same that ``nixl_agent`` drives, so
both behave alike. The shim's ``nixl/_bindings.py`` is this module itself.
"""

import enum

from dataplane import nixl as _n
from dataplane.nixl import (  # noqa: F401
    BLK_SEG, DEFAULT_COMM_PORT, DRAM_SEG, FILE_SEG, NIXL_INIT_AGENT, NIXL_READ, NIXL_WRITE,
    OBJ_SEG, VRAM_SEG, nixl_mem_t, nixl_status_t, nixl_xfer_op_t, nixlAgentConfig,
    nixlBackendError, nixlCancelledError, nixlInvalidParamError, nixlMismatchError,
    nixlNoTelemetryError, nixlNotAllowedError, nixlNotFoundError, nixlNotPostedError,
    nixlNotSupportedError, nixlRegDList, nixlRemoteDisconnectError, nixlRepostActiveError,
    nixlUnknownError, nixlXferDList, nixlXferTelemetry)

globals().update(nixl_status_t.__members__)  # NIXL_SUCCESS, NIXL_IN_PROG, ...


class nixl_thread_sync_t(enum.IntEnum):
    NIXL_THREAD_SYNC_NONE = 0
    NIXL_THREAD_SYNC_STRICT = 1
    NIXL_THREAD_SYNC_RW = 2
    NIXL_THREAD_SYNC_DEFAULT = 3


globals().update(nixl_thread_sync_t.__members__)


class nixl_cost_t(enum.IntEnum):
    NIXL_COST_ANALYTICAL_BACKEND = 0


NIXL_COST_ANALYTICAL_BACKEND = nixl_cost_t.NIXL_COST_ANALYTICAL_BACKEND

# prep_mem_view and nixlRemoteDList are UCX's GPU device API: not here.
HAVE_UCX_GPU_DEVICE_API = False


class nixlRemoteDList(_n._DList):
    """Remote descriptors (addr, len, devId, agent name): listed for NIXL's
    imports; only prepMemView takes them, which is not here."""

    def __init__(self, type, descs=0):
        self._agents = []
        super().__init__(type, descs)

    def _row(self, d):
        if len(d) != 4:
            raise ValueError("a remote descriptor is (addr, len, devId, agent name)")
        self._agents.append(str(d[3]))
        return (int(d[0]), int(d[1]), int(d[2]))

    def __getitem__(self, i):
        return super().__getitem__(i) + (self._agents[i],)


_OPS = {NIXL_READ: "READ", NIXL_WRITE: "WRITE"}


def _status(state):
    if state == "DONE":
        return nixl_status_t.NIXL_SUCCESS
    if state == "PROC":
        return nixl_status_t.NIXL_IN_PROG
    raise nixlBackendError("NIXL_ERR_BACKEND")


class nixlAgent:
    """NIXL's nixlAgent(name, nixlAgentConfig): an empty name is ValueError,
    as NIXL's (std::invalid_argument)."""

    def __init__(self, name, config):
        self._core = _n._AgentCore(name, config)
        self._handles = {}  # int -> prepared dlist or transfer handle
        self._by_backend = {}  # backend handle -> name

    def _get(self, h, kind):
        obj = self._handles.get(int(h))
        if not isinstance(obj, kind):
            raise nixlInvalidParamError(f"0x{int(h):x} is not a {kind.__name__} of this agent")
        return obj

    def _keep(self, obj):
        self._handles[obj._handle] = obj
        return obj._handle

    def _names(self, backends):
        return [self._by_backend[b] for b in backends if b in self._by_backend]

    # -- plugins and backends --

    def getAvailPlugins(self):
        return list(self._core.get_plugin_list())

    def getPluginParams(self, type):
        mems = self._core.get_plugin_mem_types(type)
        if not mems:
            raise nixlNotFoundError(f"no plugin {type!r}")
        return {}, mems

    def getBackendParams(self, backend):
        name = self._by_backend.get(backend)
        if name is None:
            raise nixlNotFoundError("not a backend of this agent")
        return self._core.get_backend_params(name), self._core.get_backend_mem_types(name)

    def createBackend(self, type, initParams={}):
        h = self._core.create_backend(type, initParams)
        self._by_backend[h] = type
        return h

    # -- memory --

    def registerMem(self, descs, backends=[]):
        self._core.register_memory(descs)
        return nixl_status_t.NIXL_SUCCESS

    def deregisterMem(self, descs, backends=[]):
        self._core.deregister_memory(descs)
        return nixl_status_t.NIXL_SUCCESS

    def queryMem(self, descs, backend):
        name = self._by_backend.get(backend)
        if name is None:
            raise nixlNotFoundError("not a backend of this agent")
        return self._core.query_memory(descs, name)

    # -- metadata --

    def getLocalMD(self):
        return self._core.get_agent_metadata()

    def getLocalPartialMD(self, descs, inc_conn_info=False, backends=[]):
        return self._core.get_partial_agent_metadata(descs, inc_conn_info)

    def loadRemoteMD(self, remote_metadata):
        return self._core.add_remote_agent(remote_metadata)

    def invalidateRemoteMD(self, remote_agent):
        self._core.remove_remote_agent(remote_agent)
        return nixl_status_t.NIXL_SUCCESS

    def checkRemoteMD(self, remote_name, descs):
        ok = self._core.check_remote_metadata(remote_name, descs)
        return nixl_status_t.NIXL_SUCCESS if ok else nixl_status_t.NIXL_ERR_NOT_FOUND

    def makeConnection(self, remote_agent, backends=[]):
        self._core.make_connection(remote_agent)
        return nixl_status_t.NIXL_SUCCESS

    def sendLocalMD(self, ip_addr="", port=0):
        self._core.send_local_metadata(ip_addr, port)

    def sendLocalPartialMD(self, descs, inc_conn_info=False, backends=[], ip_addr="", port=0,
                           label=""):
        self._core.send_partial_agent_metadata(descs, inc_conn_info, [], ip_addr, port, label)

    def fetchRemoteMD(self, remote_agent, ip_addr="", port=0, label=""):
        self._core.fetch_remote_metadata(remote_agent, ip_addr, port, label)

    def invalidateLocalMD(self, ip_addr="", port=0):
        self._core.invalidate_local_metadata(ip_addr, port)

    # -- transfers --

    def prepXferDlist(self, *args, backend=[]):
        """prepXferDlist(agent_name, descs, backends=[]) or prepXferDlist(descs,
        backends=[]) (local): a handle."""
        if args and isinstance(args[0], str):
            name, descs = args[0], args[1]
        else:
            name, descs = NIXL_INIT_AGENT, args[0]
        return self._keep(self._core.prep_xfer_dlist(name, descs))

    def makeXferReq(self, operation, local_side, local_indices, remote_side, remote_indices,
                    notif_msg="", backend=[], skip_desc_merg=False):
        h = self._core.make_prepped_xfer(
            _OPS[nixl_xfer_op_t(operation)], self._get(local_side, _n.nixl_prepped_dlist_handle),
            local_indices, self._get(remote_side, _n.nixl_prepped_dlist_handle), remote_indices,
            notif_msg)
        return self._keep(h)

    def createXferReq(self, operation, local_descs, remote_descs, remote_agent, notif_msg="",
                      backend=[]):
        h = self._core.initialize_xfer(_OPS[nixl_xfer_op_t(operation)], local_descs,
                                       remote_descs, remote_agent, notif_msg)
        return self._keep(h)

    def estimateXferCost(self, req_handle):
        raise nixlNotSupportedError("estimateXferCost: no cost model here")

    def postXferReq(self, reqh, notif_msg=""):
        return _status(self._core.transfer(self._get(reqh, _n.nixl_xfer_handle), notif_msg))

    def getXferStatus(self, reqh):
        return _status(self._core.check_xfer_state(self._get(reqh, _n.nixl_xfer_handle)))

    def getXferTelemetry(self, reqh):
        return self._core.get_xfer_telemetry(self._get(reqh, _n.nixl_xfer_handle))

    def queryXferBackend(self, reqh):
        self._get(reqh, _n.nixl_xfer_handle)
        return next(iter(self._by_backend), 0)

    def releaseXferReq(self, reqh):
        self._get(reqh, _n.nixl_xfer_handle).release()
        del self._handles[int(reqh)]
        return nixl_status_t.NIXL_SUCCESS

    def releasedDlistH(self, handle):
        self._get(handle, _n.nixl_prepped_dlist_handle).release()
        del self._handles[int(handle)]
        return nixl_status_t.NIXL_SUCCESS

    def prepMemView(self, dlist, backends=[]):
        raise nixlNotSupportedError("prepMemView: UCX's GPU device API, not here "
                                    "(HAVE_UCX_GPU_DEVICE_API is False)")

    def releaseMemView(self, mvh):
        raise nixlNotSupportedError("releaseMemView: UCX's GPU device API, not here")

    # -- notifications --

    def getNotifs(self, notif_map, backends=[]):
        for name, msgs in self._core.get_new_notifs().items():
            notif_map.setdefault(name, []).extend(msgs)
        return notif_map

    def genNotif(self, remote_agent, msg, backends=[]):
        self._core.send_notif(remote_agent, msg)
        return nixl_status_t.NIXL_SUCCESS

