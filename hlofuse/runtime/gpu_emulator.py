"""Host execution of GPU grids: the emulated kernels compiled for the CPU, and a driver that
runs every block and thread of a launch.

An emulated kernel (codegen/kernels/gpu_skeleton.py) is `void k(i8* ptrs..., i64 block_begin,
i64 block_end)` and runs the threads of blocks [block_begin, block_end) one after another.
`run_grid` splits a launch's blocks over a pool of OS threads (ctypes releases the GIL), so
blocks really run concurrently and the kernels' atomics (atomicrmw / cmpxchg on the host)
are exercised with real contention, as on a GPU.
"""
from __future__ import annotations

import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import llvmlite.binding as llvm

from .jit import JitModule

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def workers() -> int:
    """OS threads used to run a grid (at least 2, so atomics always see concurrency)."""
    return max(2, os.cpu_count() or 1)


def _thread_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="hlofuse-grid")
        return _pool


class EmulatedModule:
    """Emulated kernels of one program (optimized for the host by codegen/gpu.py) loaded in a JIT."""

    def __init__(self, llmod: llvm.ModuleRef) -> None:
        self.llvm_ir = str(llmod)
        self._jit = JitModule(llmod)

    def function(self, name: str, n_pointers: int):
        """The ctypes function of emulated kernel `name` taking `n_pointers` buffers."""
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * n_pointers), ctypes.c_int64, ctypes.c_int64)
        return proto(self._jit.address(name))


def run_grid(fn, pointers: list[int], grid: int) -> None:
    """Run blocks [0, grid) of emulated kernel `fn`, split into contiguous ranges over the pool."""
    if grid <= 0:
        return
    n = min(grid, workers())
    if n == 1:
        fn(*pointers, 0, grid)
        return
    bounds = [grid * c // n for c in range(n + 1)]
    futures = [_thread_pool().submit(fn, *pointers, bounds[c], bounds[c + 1]) for c in range(n)]
    for f in futures:
        f.result()
