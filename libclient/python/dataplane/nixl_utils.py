# SPDX-License-Identifier: MIT
"""NIXL's test helpers (``nixl._utils``): raw memory for descriptors given by
address. Memory is 4096-aligned (what storage I/O with O_DIRECT wants), from
the C library's aligned_alloc, and must be given back with free_passthru."""

import ctypes

_libc = ctypes.CDLL(None, use_errno=True)
_libc.aligned_alloc.restype = ctypes.c_void_p
_libc.aligned_alloc.argtypes = (ctypes.c_size_t, ctypes.c_size_t)
_libc.free.argtypes = (ctypes.c_void_p,)
_ALIGN = 4096


def malloc_passthru(size):
    """An address of size bytes (rounded up to 4096 for aligned_alloc);
    MemoryError when there is none."""
    if size < 0:
        raise ValueError("a size is >= 0")
    addr = _libc.aligned_alloc(_ALIGN, max(_ALIGN, -(-size // _ALIGN) * _ALIGN))
    if not addr:
        raise MemoryError(f"aligned_alloc({size})")
    return addr


def free_passthru(addr):
    _libc.free(addr)


def ba_buf(addr, size):
    """Fills size bytes at addr with 0xba."""
    ctypes.memset(addr, 0xBA, size)


def verify_transfer(addr1, addr2, size):
    """AssertionError unless the size bytes at addr1 and addr2 are equal."""
    a, b = ctypes.string_at(addr1, size), ctypes.string_at(addr2, size)
    if a != b:
        i = next(k for k in range(size) if a[k] != b[k])
        raise AssertionError(f"byte {i} differs: {a[i]:#x} at {addr1 + i:#x}, "
                             f"{b[i]:#x} at {addr2 + i:#x}")
