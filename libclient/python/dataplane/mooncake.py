# SPDX-License-Identifier: MIT
"""A Mooncake-shaped layer over dataplane: TransferEngine with
transfer_sync_write/read and their batch variants by (address, length), so
engines written against Mooncake's Python TransferEngine switch with few
changes (docs/python.md, "Mooncake layer").

Differences from Mooncake, all of them where dataplane names memory
differently:

* Local memory is addressed by address, as in Mooncake, but must lie in
  memory of this engine: a buffer from allocate_managed_buffer(), or GPU
  memory given to register_memory(addr, length) (cudaMalloc memory). Host
  memory the process already has cannot be registered yet (issue 17,
  "Memory the caller already has").
* The target is a segment name, ``"name"`` (this service, or the cluster
  directory) or ``"name@host:port"`` (a peer service), not a hostname; and
  peer_buffer_address is the byte offset in that segment, not a virtual
  address of the peer. register_memory(addr, length, name=...) exports a
  buffer under a name for peers to target.
* Calls return 0 or a negative errno, like Mooncake's; last_error holds the
  exception that explains the last failure.
"""

import bisect

from . import OP_READ, OP_WRITE, Batch, Client, DataplaneError

__all__ = ["TransferEngine"]


class TransferEngine:
    """TransferEngine(client=None, *, socket=None, name="mooncake", depth=0)

    One Client (made here unless given) and one Queue. Not thread-safe: use
    one engine per thread, or a lock."""

    def __init__(self, client=None, *, socket=None, name="mooncake", depth=0):
        self._own = client is None
        self._socket, self._name, self._depth = socket, name, depth
        self.client = client
        self.queue = None
        self.last_error = None
        self._bases = []   # sorted start addresses of known memory
        self._spans = {}   # start -> (end, region)
        self._managed = {}  # start -> Region (allocate_managed_buffer)
        self._segments = {}  # target string -> Segment
        if client is not None:
            self.queue = client.queue(depth)

    # -- setup --

    def initialize(self, local_hostname=None, metadata_server=None, protocol=None,
                   device_name=None):
        """Connects (Mooncake's arguments are accepted and ignored: the
        service is the host's dataplaned). Returns 0 or -errno."""
        return self._call(self._connect)

    def _connect(self):
        if self.client is None:
            self.client = Client(self._socket, name=self._name)
        if self.queue is None:
            self.queue = self.client.queue(self._depth)

    def get_local_hostname(self):
        """The service's "host:port" (what peers use after '@')."""
        self._connect()
        return self.client.server_name

    def close(self):
        """Closes the queue, segments, buffers and (if made here) the client."""
        for s in self._segments.values():
            s.close()
        self._segments.clear()
        if self.queue is not None:
            self.queue.close()
        for r in list(self._managed.values()):
            r.close()
        self._managed.clear()
        self._bases, self._spans = [], {}
        if self._own and self.client is not None:
            self.client.close()
        self.client = self.queue = None

    def __enter__(self):
        self._connect()
        return self

    def __exit__(self, *exc):
        self.close()

    # -- memory --

    def _add(self, start, size, region):
        bisect.insort(self._bases, start)
        self._spans[start] = (start + size, region)

    def _find(self, addr, length):
        i = bisect.bisect_right(self._bases, addr) - 1
        if i >= 0:
            start = self._bases[i]
            end, region = self._spans[start]
            if addr + length <= end:
                return region, addr - start
        raise DataplaneError(22, f"address {addr:#x} + {length} is not in memory registered "
                                 "with this engine (allocate_managed_buffer or "
                                 "register_memory)")

    def allocate_managed_buffer(self, length):
        """Allocates host memory shared with the service; returns its address
        (0 on failure). memoryview: buffer(addr)."""
        self._connect()
        try:
            r = self.client.alloc(length)
        except DataplaneError as e:
            self.last_error = e
            return 0
        self._managed[r.address] = r
        self._add(r.address, r.size, r)
        return r.address

    def free_managed_buffer(self, addr, length=None):
        """Frees a buffer of allocate_managed_buffer. Returns 0 or -errno."""
        r = self._managed.pop(addr, None)
        if r is None:
            return -22
        self._bases.remove(addr)
        del self._spans[addr]
        return self._call(r.close)

    def buffer(self, addr):
        """The Region of a managed buffer (its buffer protocol gives views)."""
        return self._managed[addr]

    def register_memory(self, addr, length, name=None, access="rw"):
        """Makes [addr, addr+length) usable: inside a managed buffer nothing
        is to do; otherwise it must be cudaMalloc GPU memory, registered here
        (dp_register_cuda). name: also export it (the whole buffer or GPU
        range) under that segment name. Returns 0 or -errno."""
        def reg():
            self._connect()
            try:
                region, _ = self._find(addr, length)
            except DataplaneError:
                region = self.client.register_cuda(addr, length)
                self._add(addr, length, region)
            if name is not None:
                self.client.export(region, name, access)
        return self._call(reg)

    def unregister_memory(self, addr):
        """Forgets GPU memory of register_memory (dp_free). Returns 0 or -errno."""
        if addr not in self._spans or addr in self._managed:
            return 0 if addr in self._managed else -22
        _, region = self._spans.pop(addr)
        self._bases.remove(addr)
        return self._call(region.close)

    # -- transfers --

    def _segment(self, target):
        s = self._segments.get(target)
        if s is None:
            name, _, peer = target.partition("@")
            s = self.client.open(name, peer or None, "rw")
            self._segments[target] = s
        return s

    def _call(self, fn, *args):
        try:
            fn(*args)
            return 0
        except DataplaneError as e:
            self.last_error = e
            return -(e.errno or 5)

    def _batch(self, op, target, buffers, peer_addrs, lengths):
        self._connect()
        if not (len(buffers) == len(peer_addrs) == len(lengths)):
            raise DataplaneError(22, "buffers, peer_buffer_addresses and lengths differ in "
                                     "length")
        if not buffers:
            return
        seg = self._segment(target)
        regions, offs = [], []
        for b, n in zip(buffers, lengths):
            r, off = self._find(b, n)
            regions.append(r.id)
            offs.append(off)
        b = Batch(op=op, region=regions, local_off=offs, segment=seg.handle,
                  target_off=list(peer_addrs), length=list(lengths))
        self.queue.run(b)

    def transfer_sync_write(self, target, buffer, peer_buffer_address, length):
        """Copies length bytes at local address buffer to offset
        peer_buffer_address of segment target; returns 0 or -errno."""
        return self._call(self._batch, OP_WRITE, target, [buffer], [peer_buffer_address],
                          [length])

    def transfer_sync_read(self, target, buffer, peer_buffer_address, length):
        """Copies length bytes at offset peer_buffer_address of segment target
        to local address buffer; returns 0 or -errno."""
        return self._call(self._batch, OP_READ, target, [buffer], [peer_buffer_address],
                          [length])

    def batch_transfer_sync_write(self, target, buffers, peer_buffer_addresses, lengths):
        """Many writes to one target in one submission; 0 or -errno (the
        first failure's; last_error.completions lists every failed one)."""
        return self._call(self._batch, OP_WRITE, target, buffers, peer_buffer_addresses,
                          lengths)

    def batch_transfer_sync_read(self, target, buffers, peer_buffer_addresses, lengths):
        """Many reads from one target in one submission; as the write."""
        return self._call(self._batch, OP_READ, target, buffers, peer_buffer_addresses,
                          lengths)

