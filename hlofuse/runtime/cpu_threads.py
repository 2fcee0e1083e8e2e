"""Threads on the host CPU: how many cores are free, the kernel thread pool, and BLAS's
thread count (OpenBLAS threads spin while waiting, so on a busy machine more threads than
free cores make a matmul many times slower)."""
from __future__ import annotations

import ctypes
import glob
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()
_idle = {"value": 1, "at": -1.0}
_blas = {"setter": None, "searched": False, "threads": None}


def available_cores() -> int:
    """Cores not busy with other work (refreshed twice a second)."""
    now = time.monotonic()
    if now - _idle["at"] > 0.5:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        try:
            busy = max(0.0, os.getloadavg()[0] - 1.0)  # minus this process's own runnable thread
        except OSError:
            busy = 0.0
        _idle.update(value=max(1, min(cores, round(cores - busy))), at=now)
    return _idle["value"]


def thread_pool() -> ThreadPoolExecutor:
    """The process-wide pool that runs kernel shares."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="hlofuse-cpu")
        return _pool


def _blas_setter():
    if _blas["searched"]:
        return _blas["setter"]
    _blas["searched"] = True
    try:
        import numpy

        libdir = os.path.join(os.path.dirname(os.path.dirname(numpy.__file__)), "numpy.libs")
        for path in glob.glob(os.path.join(libdir, "*openblas*.so*")):
            lib = ctypes.CDLL(path)
            for name in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                         "openblas_set_num_threads"):
                fn = getattr(lib, name, None)
                if fn is not None:
                    fn.argtypes = [ctypes.c_int]
                    _blas["setter"] = fn
                    return fn
    except OSError:
        pass
    return None


def set_blas_threads(n: int) -> None:
    """Make numpy's OpenBLAS use `n` threads (no-op when OpenBLAS is not found)."""
    if _blas["threads"] == n:
        return
    setter = _blas_setter()
    if setter is not None:
        setter(n)
        _blas["threads"] = n


def blas_thread_choices() -> list[int]:
    """Thread counts worth timing for a library call that may use BLAS: one, and every core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return sorted({1, cores})


class SplitTuner:
    """Chooses how many threads run one kernel by timing the choices on real calls.

    Whether splitting pays depends on the kernel's cost per element and on how busy the
    other cores are (a thread handed work on a loaded core may wait tens of microseconds
    to run): on this 2-core machine under load, softmax's exp-and-sum kernel runs 1.45x
    faster on two threads while its max and divide kernels run 10% slower. Each choice is
    timed `SAMPLES` times first; then the one with the lowest median runs, and every
    `REFRESH` calls another is timed again so the choice follows the load. The split never
    changes results: a work unit is always computed by one thread."""

    SAMPLES = 3
    REFRESH = 40

    def __init__(self, choices: list[int]) -> None:
        self.choices = choices
        self.times: dict[int, list[float]] = {c: [] for c in choices}
        self.calls = 0

    def choose(self) -> int:
        """The thread count for the next call."""
        if len(self.choices) == 1:
            return self.choices[0]
        self.calls += 1
        for c in self.choices:
            if len(self.times[c]) < self.SAMPLES:
                return c
        if self.calls % self.REFRESH == 0:
            return self.choices[(self.calls // self.REFRESH) % len(self.choices)]
        return min(self.choices, key=lambda c: sorted(self.times[c])[len(self.times[c]) // 2])

    def record(self, threads: int, seconds: float) -> None:
        """Record the wall time of a call that ran on `threads` threads."""
        ts = self.times[threads]
        ts.append(seconds)
        if len(ts) > 2 * self.SAMPLES - 1:
            del ts[0]


def split_choices(units: int, elements: int, min_elements: int) -> list[int]:
    """Thread counts worth trying for a kernel of `units` work units and `elements` elements
    in all: one, the free cores, and every core, each giving a thread at least `min_elements`."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cap = max(1, min(units, elements // max(min_elements, 1)))
    return sorted({1, min(available_cores(), cap), min(cores, cap)})
