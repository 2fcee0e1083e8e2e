"""Output arrays recycled from run to run (the fresh per-call allocations of the buffer
assignment, codegen/buffers.py, for values that flow into a computation's result)."""
from __future__ import annotations

import sys

import numpy as np


class OutputPool:
    """Recycles output arrays the caller has dropped, like XLA's allocator reusing freed
    buffers: fresh pages cost a page fault each, which dominates memory-bound kernels.

    An array handed out is kept here; it is handed out again only when nothing but this pool
    references it (no user reference, no view of it alive)."""

    def __init__(self, per_key: int = 4) -> None:
        self.per_key = per_key
        self._arrays: dict[tuple, list] = {}

    def empty(self, dims: tuple[int, ...], dtype):
        """An uninitialized array of `dims` and `dtype`, recycled when possible."""
        key = (tuple(dims), np.dtype(dtype).str)
        pool = self._arrays.setdefault(key, [])
        for a in pool:
            # references: the pool's list, the loop variable, getrefcount's argument
            if sys.getrefcount(a) <= 3:
                return a
        a = np.empty(dims, dtype)
        if a.nbytes >= (1 << 16):
            if len(pool) >= self.per_key:
                pool.pop(0)
            pool.append(a)
        return a
