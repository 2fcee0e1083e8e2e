"""Threads on the host CPU: how many run a kernel, the OpenMP runtime that runs them, and BLAS's
thread count.

Compiled code splits a kernel over threads through libgomp, GCC's OpenMP runtime (a kept
thread runtime, shipped with gcc on Debian as libgomp1): the driver (codegen/driver.py) calls
`GOMP_parallel`, which runs a function on n threads of its pool. The most threads a kernel may
use is fixed per process, not tuned by timing: `HLOFUSE_CPU_THREADS` when set, else every core
this process may run on (a call uses fewer while other work keeps cores busy: below). Without
libgomp, kernels run on the calling thread: serial stand-ins for the three OpenMP entry points
are compiled once and registered under the same names.

numpy's OpenBLAS (used by the library rules that still run in numpy) is set to the same
thread count once, when the first program loads.

A parallel region pays only where a core is idle to run its second thread. On a busy machine
(more runnable tasks than cores) libgomp's worker waits on the run queue for a time slice while
the calling thread takes the chunks, then the caller waits at the region's end until the worker
has been scheduled and found nothing left: f32[3072,2048] GELU on the 2-core host at load 4-7
took 1.7-1.8 ms on one thread and a median of 1.8-7.2 ms on two, its worker computing 1-2 of 8
chunks (benchmarks/thread_split.py; docs/native_runtime.md, "Two threads on a busy host"). So
unless `HLOFUSE_CPU_THREADS` fixes the count, a program runs its kernels on the idle cores of
the moment: `IdleThreads` reads the machine's runnable tasks (/proc/loadavg) at most every
IDLE_SAMPLE_S seconds and allows one thread (the caller's) plus one per core nothing else is
running on. Which threads compute a unit never changes a result (codegen/driver.py), so
neither does this. The rule is opt-in (`HLOFUSE_IDLE_CORES=1`, see `idle_cores_rule`): on a
shared host it read other processes' runnable tasks as cores lost to us and kept the process
on one thread where a worker sharing a core would still have gained.

libgomp is not fork-safe: a child made by fork() that starts an OpenMP team after its parent ran
one waits forever. So in a forked child every program, loaded before the fork or after it, runs
its kernels on the calling thread (`os.register_at_fork`); processes made by spawn or
forkserver are unaffected.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading
import time
import weakref

import llvmlite.binding as llvm
from llvmlite import ir

from ..hlo.errors import InputError
from .openmp_env import default_wait_policy, workers_spin

_lock = threading.Lock()
_state: dict = {"registered": False, "openmp": None, "engines": [], "blas": None, "forked": False}
_drivers: "weakref.WeakSet" = weakref.WeakSet()  # loaded drivers whose thread count a fork resets


def track(driver) -> None:
    """Remember `driver` (with a `serial()` method) so a fork makes it run on one thread."""
    _drivers.add(driver)


def _after_fork_in_child() -> None:
    _state["forked"] = True
    for driver in list(_drivers):
        driver.serial()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def cpu_threads() -> int:
    """Threads a kernel may use: `HLOFUSE_CPU_THREADS`, else the cores this process may use."""
    text = os.environ.get("HLOFUSE_CPU_THREADS", "").strip()
    if text:
        try:
            n = int(text)
        except ValueError:
            raise InputError(f"HLOFUSE_CPU_THREADS={text!r}: expected a positive integer") from None
        if n < 1:
            raise InputError(f"HLOFUSE_CPU_THREADS={text!r}: expected a positive integer")
        return n
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# How often IdleThreads samples the machine's runnable tasks: reading /proc/loadavg costs 5-30 us
# (a busy machine: more), a program's call as little as 4 us; kernels that open regions take
# 80 us and more (codegen/region_cost.py), so a sample is amortised over many of them.
IDLE_SAMPLE_S = 0.02


def threads_pinned() -> bool:
    """Whether the user fixed the thread count (`HLOFUSE_CPU_THREADS`)."""
    return bool(os.environ.get("HLOFUSE_CPU_THREADS", "").strip())


def idle_cores_rule() -> bool:
    """Whether calls take the idle cores of the moment (`IdleThreads`): only when the user asks
    for it (`HLOFUSE_IDLE_CORES=1`) and has not fixed the count. Off by default: the runnable
    count is the machine's, so on a shared host any other runnable task kept hlofuse on one
    thread, where a worker sharing a core with it still gains (keras-hub GPT-2 1.12-1.18x
    XLA's time, haiku's LSTM 1.18-1.45x, in the all-models run at load 1.3-2.2, against 0.90x
    and 0.98x with the count fixed at two). XLA's and IREE's workers in the same process are
    not the cause: they took no CPU during hlofuse's calls (benchmarks/thread_split.py
    --after; docs/native_runtime.md, "Other runtimes' threads")."""
    return os.environ.get("HLOFUSE_IDLE_CORES", "").strip() == "1" and not threads_pinned()


def runnable_tasks(path: str = "/proc/loadavg") -> int | None:
    """Tasks runnable on the machine now (on a CPU or waiting for one), the calling thread
    included: the numerator of /proc/loadavg's fourth field; None where it cannot be read."""
    try:
        with open(path, "rb") as f:
            return int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


class IdleThreads:
    """The threads a parallel region can use right now, at most `limit`: the calling thread
    plus one per core with nothing runnable on it (online cores less runnable tasks, the caller
    among them), sampled at most every IDLE_SAMPLE_S seconds (`clock`: time.monotonic).

    Only where this process may run on every online core: the runnable count is the machine's,
    so under a narrower affinity mask (a cpuset, taskset) it says nothing about our cores and
    the count stays `limit`; likewise where /proc/loadavg cannot be read, and where the user
    made libgomp's threads spin while they wait (OMP_WAIT_POLICY=active, or a GOMP_SPINCOUNT
    other than runtime/openmp_env.py's 0): our own spinning workers would count as busy cores
    and the process would keep itself on one thread."""

    def __init__(self, limit: int, clock=None, runnable=runnable_tasks) -> None:
        self.limit = limit
        self._clock = clock or time.monotonic
        self._runnable = runnable
        online = os.cpu_count() or 1
        mine = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else online
        self._online = online if mine == online and not workers_spin() else None
        self._at = float("-inf")
        self._now = limit

    def __call__(self) -> int:
        """The thread count for the next call."""
        if self.limit <= 1 or self._online is None:
            return self.limit
        t = self._clock()
        if t - self._at >= IDLE_SAMPLE_S:
            self._at = t
            running = self._runnable()
            if running is None:
                self._now = self.limit
            else:
                self._now = max(1, min(self.limit, 1 + self._online - max(running, 1)))
        return self._now


def _load_libgomp():
    default_wait_policy()  # before libgomp loads (runtime/openmp_env.py)
    # libgomp by its soname first (the loader finds it, or has it already when libdnnl loaded
    # it); ctypes.util.find_library runs an ldconfig subprocess (milliseconds of a cached
    # compile in a new process), so it is asked only when the soname does not load.
    for name in ("libgomp.so.1", None):
        name = name or ctypes.util.find_library("gomp")
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _serial_openmp() -> dict[str, int]:
    """Addresses of serial GOMP_parallel / omp_get_thread_num / omp_get_num_threads."""
    from ..emitters.cpu.target import new_host_target_machine

    i8p = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    m = ir.Module(name="hlofuse_serial_openmp")
    m.triple = llvm.get_process_triple()
    body = ir.FunctionType(ir.VoidType(), [i8p])
    par = ir.Function(m, ir.FunctionType(ir.VoidType(), [body.as_pointer(), i8p, i32, i32]), "hlofuse_serial_parallel")
    b = ir.IRBuilder(par.append_basic_block("entry"))
    b.call(par.args[0], [par.args[1]])
    b.ret_void()
    for name, value in (("hlofuse_serial_thread_num", 0), ("hlofuse_serial_num_threads", 1)):
        f = ir.Function(m, ir.FunctionType(i32, []), name)
        ir.IRBuilder(f.append_basic_block("entry")).ret(i32(value))
    llmod = llvm.parse_assembly(str(m))
    engine = llvm.create_mcjit_compiler(llmod, new_host_target_machine())
    engine.finalize_object()
    _state["engines"].append(engine)
    return {"GOMP_parallel": engine.get_function_address("hlofuse_serial_parallel"),
            "omp_get_thread_num": engine.get_function_address("hlofuse_serial_thread_num"),
            "omp_get_num_threads": engine.get_function_address("hlofuse_serial_num_threads")}


def register_openmp() -> bool:
    """Make GOMP_parallel, omp_get_thread_num and omp_get_num_threads resolvable by compiled
    code (libgomp's, or serial stand-ins); True when libgomp runs them on real threads."""
    with _lock:
        if not _state["registered"]:
            lib = _load_libgomp()
            if lib is not None:
                addrs = {name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                         for name in ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads")}
                _state["openmp"] = lib
            else:
                addrs = _serial_openmp()
            for name, addr in addrs.items():
                llvm.add_symbol(name, addr)
            _state["registered"] = True
        return _state["openmp"] is not None


def kernel_threads() -> int:
    """Threads compiled kernels split over: `cpu_threads()`, or 1 without libgomp or in a
    forked child (see the module's doc)."""
    if not register_openmp() or _state["forked"]:
        return 1
    return cpu_threads()


def _blas_setter():
    import numpy

    libdir = os.path.join(os.path.dirname(os.path.dirname(numpy.__file__)), "numpy.libs")
    for path in glob.glob(os.path.join(libdir, "*openblas*.so*")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                return fn
    return None


def set_blas_threads(n: int) -> None:
    """Make numpy's OpenBLAS use `n` threads (once per value; no-op without OpenBLAS)."""
    with _lock:
        if _state["blas"] == n:
            return
        setter = _blas_setter()
        if setter is not None:
            setter(n)
        _state["blas"] = n
