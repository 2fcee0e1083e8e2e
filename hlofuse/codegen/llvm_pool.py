"""LLVM work on the other cores: a persistent pool of worker processes that optimise and compile
kernel IR text to object bytes.

llvmlite releases the GIL during LLVM work but serialises all its calls behind one process-wide
lock (llvmlite/binding/ffi.py; `benchmarks/compile_time.py --llvm-threads` measures it: two
compiling threads keep one core busy), so threads cannot run two compilations at once;
processes can. The pool:

- starts lazily, the first time a compile has at least `MIN_KERNELS` kernels missing from the
  caches, and stays for the rest of the process (a worker's start, its imports of llvmlite and
  emitters/cpu/target.py, costs about a second once, not per compile);
- uses the 'forkserver' start method: workers are clean processes, not forks of a parent that
  may hold llvmlite's lock, JIT state or other threads;
- has `workers()` processes: `HLOFUSE_LLVM_PROCESSES` if set (0 turns the pool off), else one
  fewer than the machine's cores (this process keeps emitting IR meanwhile); fewer than two
  workers is no gain over the in-process worker thread, so the pool is not used then;
- runs exactly what the in-process path runs (`emitters/cpu/target.compile_ir_timed` on the same
  text with the same speed level, for the same host target machine), so an object is the same
  bytes whichever path compiled it (tests/codegen/test_llvm_pool.py).
"""
from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor

# Fewer kernels to compile than this are compiled in this process: below it the pool's round
# trips (pickling IR text and objects, one task each) and, the first time, its start are not
# repaid. A break-even estimate, not yet measured on a quiet many-core machine (issue 15).
MIN_KERNELS = 8

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None


def workers() -> int:
    """How many worker processes the pool has (0: no pool)."""
    env = os.environ.get("HLOFUSE_LLVM_PROCESSES", "").strip()
    if env:
        try:
            return max(0, int(env))
        except ValueError:
            raise ValueError(f"HLOFUSE_LLVM_PROCESSES must be a whole number, not {env!r}") from None
    return max(0, (os.cpu_count() or 1) - 1)


def use_pool(kernels: int) -> bool:
    """Whether `kernels` missing kernels are worth sending to the pool."""
    return kernels >= MIN_KERNELS and workers() >= 2


def _compile(text: str, speed_level: int) -> tuple[bytes, float, float]:
    """In a worker: (object bytes, seconds optimizing, seconds generating code)."""
    from ..emitters.cpu.target import compile_ir_timed

    return compile_ir_timed(text, speed_level)


def pool() -> ProcessPoolExecutor:
    """The process pool, started on first use."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(max_workers=max(1, workers()),
                                        mp_context=multiprocessing.get_context("forkserver"))
            atexit.register(shutdown)
        return _pool


def submit(text: str, speed_level: int) -> "Future[tuple[bytes, float, float]]":
    """Compile kernel IR `text` at `speed_level` in a worker; the future's result is
    (object bytes, seconds optimizing, seconds generating code)."""
    return pool().submit(_compile, text, speed_level)


def shutdown() -> None:
    """Stop the workers (the next `pool()` starts new ones)."""
    global _pool
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=True, cancel_futures=True)
            _pool = None
