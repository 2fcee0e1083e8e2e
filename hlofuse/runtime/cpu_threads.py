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


def fit_blas_threads() -> None:
    """Set numpy's OpenBLAS to use the free cores (no-op when OpenBLAS is not found)."""
    n = available_cores()
    if _blas["threads"] == n:
        return
    setter = _blas_setter()
    if setter is not None:
        setter(n)
        _blas["threads"] = n
