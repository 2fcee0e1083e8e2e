"""Output arrays recycled from run to run (the fresh per-call allocations of the buffer
assignment, codegen/buffers.py, for values that flow into a computation's result)."""
from __future__ import annotations

import math
import sys

import numpy as np

# Output arrays start on a cache line, as XLA's allocator places its buffers. numpy's own large
# arrays start 16 or 48 bytes into one (malloc's header), so every 64-byte vector store of a
# kernel writing them straddled two lines: a split store each.
ALIGN = 64
_POOLED_BYTES = 1 << 16  # smaller arrays are cheap to allocate fresh


def aligned_empty(dims: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialized C-contiguous array starting on a 64-byte boundary (a view of a slightly
    larger byte buffer, its `base`)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(dims) * dtype.itemsize
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + nbytes].view(dtype).reshape(dims)


class OutputPool:
    """Recycles output arrays the caller has dropped, like XLA's allocator reusing freed
    buffers: fresh pages cost a page fault each, which dominates memory-bound kernels.

    An array handed out is kept here; it is handed out again only when nothing but this pool
    references it (no user reference, no view of it alive). A view the user made of it refers
    to the byte buffer underneath (numpy points a view at the array that owns the memory), so
    both the array's and the buffer's references are counted."""

    def __init__(self, per_key: int = 4) -> None:
        self.per_key = per_key
        self._arrays: dict[tuple, list[np.ndarray]] = {}

    def empty(self, dims: tuple[int, ...], dtype):
        """An uninitialized array of `dims` and `dtype`, recycled when possible; arrays of 64 KB
        and more start on a cache line."""
        dt = np.dtype(dtype)
        key = (tuple(dims), dt.str)
        pool = self._arrays.get(key)
        for a in pool or ():
            # a: the pool's list, the loop variable, getrefcount's argument;
            # its buffer: a's base reference, getrefcount's argument (the attribute read)
            if sys.getrefcount(a) <= 3 and sys.getrefcount(a.base) <= 2:
                return a
        # math.prod, not np.prod: this runs on every call of every executable (a microsecond
        # or two of numpy's reduction machinery per small output was most of a call's overhead)
        if dt.itemsize * math.prod(dims) < _POOLED_BYTES:
            return np.empty(dims, dt)
        pool = self._arrays.setdefault(key, [])
        a = aligned_empty(key[0], dt)
        if len(pool) >= self.per_key:
            pool.pop(0)
        pool.append(a)
        return a
