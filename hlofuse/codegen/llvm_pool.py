"""Where LLVM's work on kernels runs: lanes, each compiling one kernel's IR text at a time, fed
from one queue in the order the kernels are emitted.

llvmlite releases the GIL during LLVM work but serialises all its calls behind one process-wide
lock (llvmlite/binding/ffi.py, numba/llvmlite#318; `benchmarks/compile_time.py --llvm-threads`
measures it: two compiling threads keep one core busy, no faster than one), so one process runs
one LLVM compilation at a time. The lanes are therefore

- one *thread lane* in this process: a thread of a `ThreadPoolExecutor` that calls LLVM itself
  (the GIL is free meanwhile, so the calling thread keeps emitting the next kernels' IR);
- `processes()` *process lanes*: threads of the same executor that hand their kernel to a
  `ProcessPoolExecutor` of that many workers and wait (`HLOFUSE_LLVM_PROCESSES` if set, 0 turns
  the pool off; else `lanes() - 1` from three lanes up, one on two lanes while a core is spare,
  see `lanes()` and `processes()`), used only when the missing kernels make at least
  `MIN_TASKS` modules to compile (codegen/cpu.py compiles small kernels in groups).

Every lane thread takes the next kernel when it is free and runs it on the thread lane when that
lane is idle, else in a worker process, so the slow kernels (convolutions) do not queue behind
each other on one lane. Which lane compiled a kernel changes nothing visible: a worker runs
exactly what the thread lane runs (`compile_timed` on the same text at the same level for the
same host target machine), so an object is the same bytes whichever lane
compiled it, and results are collected in the kernels' order (tests/codegen/test_llvm_pool.py).
An exception raised by a kernel's compilation reaches the caller from that kernel's future: the
exception itself from the thread lane, a copy of it (same type and message, the worker's
traceback as its cause) from a worker.

The process pool starts the first time it is used, or earlier, when a compile that will
probably use it begins (`prestart`, called by compiler.compile after a module-cache miss, before
the passes: `probably_pooled`), and stays for the rest of the process. A worker warms itself as
it starts (`_warm`: its imports of llvmlite, emitters/cpu/target.py and hlofuse's package, and
the target machines), so a prestarted worker's start overlaps the passes and planning instead of
the first kernels' LLVM work. It uses the 'forkserver' start method: workers are clean processes,
not forks of a parent that may hold llvmlite's lock, JIT state, libgomp's threads or other
threads. Python starts a forkserver or spawned process by importing the parent's main module
first (`if __name__ == "__main__":` is what keeps a script from running again there); the
workers need nothing from it, so processes are started with a blank stand-in for the main
module (`submit`): a user's script that compiles at import time is not run again in a worker.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import multiprocessing
import multiprocessing.util
import os
import sys
import threading
import types
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterator

from ..runtime.cpu_threads import cpu_threads

# Fewer LLVM modules to compile than this (kernel groups, codegen/cpu.py llvm_tasks) are
# compiled in this process: below it the pool's round trips (pickling IR text and objects, one
# task each) and, the first time, its start are not repaid. Measured on this 2-core machine
# while quiet (load 1.1-1.4, fresh process per compile, two rounds, wall s without / with one
# worker): GPT-2 (15 kernels, 2 groups) 0.63, 0.65 / 0.82, 0.78 and BERT (13, 2) 0.60, 0.62 /
# 0.75, 0.74, slower; equinox MLP train (27, 4) 0.82, 0.80 / 0.66, 0.70, flax MNIST CNN train
# (45, 6) 1.44, 1.47 / 1.09, 1.08, ResNet-50 (48, 7) 1.41, 1.47 / 1.24, 1.25, MobileNetV2 (62,
# 10) 2.18, 2.18 / 1.64, 1.66, faster. Not yet measured on a quiet many-core machine.
MIN_TASKS = 3
# A module with at least this many distinct hero signatures (`hero_signatures`) probably makes
# MIN_TASKS LLVM modules or more, so its compile starts the pool before the passes (`prestart`).
# Measured on the models of the lead's set and testdata/jax (planned cold, every kernel missing):
# the ones that use the pool (>= 17 distinct kernels) have 11 (equinox MLP train, 27 kernels, 4
# groups), 23 (flax MNIST CNN train, 45), 24 (ResNet-50, 39), 33 (MobileNetV2, 53), 48 (haiku
# ResNet-18 train, 205); the ones that do not have at most 9 (GPT-2 9 with 15 kernels, equinox
# attention block 7 with 14, flax MNIST CNN 6 with 7, every testdata/jax module 8 or fewer).
# Instruction counts do not separate them (GPT-2 827 instructions and 2 groups, equinox's MLP
# step 279 and 4). A wrong guess either way costs little: too late, the worker starts on its
# first kernel as before; too early, an idle worker's start (~0.15 CPU-s on the spare core).
PRESTART_HEROES = 10
# From this many lanes (cores, or HLOFUSE_CPU_THREADS) every lane beyond the thread lane has a
# worker; two lanes have one only while a core is spare (see `processes`).
MIN_LANES = 3

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_thread_lane = threading.Lock()  # held while this process's own LLVM compiles a kernel
# What a new worker is told the main module is (see `submit`): a module with no file or spec,
# which multiprocessing's spawn preparation does not import in the child.
_BLANK_MAIN = types.ModuleType("__main__")


def lanes() -> int:
    """How many kernels LLVM may compile at once: one per core this process may use, at most
    `HLOFUSE_CPU_THREADS` (runtime/cpu_threads.py: the bound on this process's threads)."""
    return max(1, cpu_threads())


def processes() -> int:
    """How many worker processes the pool has (0: no pool): `HLOFUSE_LLVM_PROCESSES` if set,
    else one per lane beyond the thread lane where there are at least `MIN_LANES` lanes, and
    on two lanes one worker while the machine has a core to spare (`spare_core`).

    Two lanes, measured on a 2-core machine (docs/compile_time.md), fresh process per compile:
    at load 1.8-2.3 one worker cut cold compiles by 23-37% (haiku's ResNet-18 step 7.2 -> 4.6 s,
    MobileNetV2 3.0 -> 2.0 s, ResNet-50 1.9 -> 1.5 s; GPT-2's 15 kernels the same), while at
    load 9.5-11, the cores busy with other work, it made none faster and cost 8-35% more CPU
    (its start, about 0.3-0.4 s of CPU once per process, and the pickling)."""
    env = os.environ.get("HLOFUSE_LLVM_PROCESSES", "").strip()
    if env:
        try:
            return max(0, int(env))
        except ValueError:
            raise ValueError(f"HLOFUSE_LLVM_PROCESSES must be a whole number, not {env!r}") from None
    n = lanes()
    if n >= MIN_LANES:
        return n - 1
    return 1 if n == 2 and spare_core() else 0


def spare_core() -> bool:
    """Whether the machine has had fewer runnable tasks than the cores this process may use,
    on average over the last minute (`os.getloadavg`; this process's own work included): a
    worker then gets a core of its own instead of taking the thread lane's share. False where
    the load average is unknown."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return False
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return load < cores


def use_pool(tasks: int) -> bool:
    """Whether `tasks` LLVM modules to compile are worth compiling in worker processes too."""
    return tasks >= MIN_TASKS and processes() >= 1


def hero_signatures(module, stop: int | None = None) -> int:
    """Distinct (opcode, shape, operand shapes) of `module`'s instructions whose registry row is
    a reduction or an `other` op with operands (dots, convolutions, reductions, sorts, library
    calls: the heroes fusion does not merge into each other, hence about one kernel each; the
    kind comes from hlo/opcodes.py), over every computation, before the passes. Counting stops
    at `stop` (the caller only compares with it)."""
    from ..hlo.opcodes import op_info

    seen: set = set()
    for comp in module.computations:
        for inst in comp.instructions:
            if not inst.operands:
                continue
            info = op_info(inst.opcode)
            if info.kind not in ("reduce", "other") or info.bookkeeping:
                continue
            seen.add((inst.opcode, str(inst.shape), tuple(str(o.shape) for o in inst.operands)))
            if stop is not None and len(seen) >= stop:
                return len(seen)
    return len(seen)


def probably_pooled(module) -> bool:
    """Whether compiling `module` (an HloModule before the passes, every kernel still to be
    compiled) will probably use the pool: workers allowed (`processes`) and at least
    PRESTART_HEROES hero signatures."""
    return processes() >= 1 and hero_signatures(module, PRESTART_HEROES) >= PRESTART_HEROES


def _warm() -> None:
    """A new worker's initializer: what its first `compile_timed` would do before any LLVM work
    (import the emitters' target module, hence hlofuse's package, and llvmlite; make both
    target machines), done as the worker starts. An error here is left to the first task, which
    meets it again and reports it with its traceback (an initializer that raises would break
    the pool instead)."""
    try:
        from ..emitters.cpu.target import host_target_machine

        target_machine(KERNEL_CODEGEN_LEVEL)
        target_machine(SMALL_CODEGEN_LEVEL)
        target_machine(UNOPTIMIZED)
        host_target_machine()
    except Exception:  # noqa: BLE001 - reported by the first task instead
        pass


def _ready() -> bool:
    """The task `prestart` submits: makes the executor start a worker (which warms itself)."""
    return True


def prestart() -> bool:
    """Start the pool's workers, unless the pool is off (`processes` 0) or already started, so
    that they are warm when the first kernels reach them; returns whether it set about it.

    The start runs on a thread of its own (`_start_workers`) and the call returns at once:
    starting the forkserver waits for a new Python process to be ready to fork (50-195 ms of
    wall time at load 6, 4 ms of CPU), which would otherwise delay the passes it is meant to run
    beside. A kernel submitted meanwhile waits for the pool's lock, then for the same start."""
    count = processes()
    if count < 1 or _pool is not None:
        return False
    threading.Thread(target=_start_workers, args=(count,), name="hlofuse-llvm-prestart", daemon=True).start()
    return True


def _start_workers(count: int) -> None:
    """Start the pool and its `count` workers, unless it was started meanwhile: the executor
    starts a worker per submitted task while none is idle (forkserver), so one `_ready` task per
    worker starts them all."""
    with _lock:
        if _pool is not None:
            return
        with _blank_main():
            executor = _started()
            for _ in range(count):
                executor.submit(_ready)


@contextlib.contextmanager
def _blank_main() -> Iterator[None]:
    """`sys.modules["__main__"]` is the blank stand-in inside the block (see `submit`); call
    under `_lock`."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = _BLANK_MAIN
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


# The level of code that only calls and copies (the native driver, codegen/driver.py): parsed
# and verified, its locals put in registers (SROA), then InstCombine and SimplifyCFG, and machine
# code from LLVM's fast instruction selector and register allocator (a target machine at O0).
# Haiku's ResNet-18 step's driver (17,000 instructions, 1,400 calls): 0.19 s of CPU against
# 1.33 s at O2 (0.09 s without the three passes).
UNOPTIMIZED = 0


# The code generator's level for optimized kernels: LLVM's CodeGenOpt::Aggressive (3), as the O3
# target machine's. CodeGenOpt::Less (1: mainly no post-RA list scheduler) cut code generation
# about 10% (haiku's ResNet-18 step 1.84 -> 1.66 CPU-s, MobileNetV2 0.50 -> 0.45) and left the
# models' run time within noise, but the softmax workload's row kernel (exp, max and sum over
# 2048-element rows) ran 1.30x slower (one thread, CPU time, medians, 2.05-2.14 -> 2.71-2.86 ms,
# load 2.5-4), so kernels keep the full code generator (docs/compile_time.md).
KERNEL_CODEGEN_LEVEL = 3

# The speed level of a kernel whose run time is negligible however it is compiled
# (codegen/kernel_work.py decides which): LLVM's O1 pipeline without loop vectorization,
# interleaving, unrolling or SLP (SMALL_PIPELINE), then the code generator at
# SMALL_CODEGEN_LEVEL (0: LLVM's fast instruction selector and register allocator). At O3 such a
# kernel costs LLVM 5-20 ms (a vector body interleaved 4-8 times, a vector epilogue and a scalar
# remainder, then instruction selection over all of it) to save a few microseconds. Measured
# over the distinct kernels of eight models (LLVM CPU-s of the kernels under 2 us of work, each
# compiled alone, load 2.8-3.7): O3 0.99 s; this pipeline with code generator level 1: 0.47;
# with level 0: 0.28; O2 the same way: 0.50 / 0.31; O1 with the vectorizer on: 0.87. Level 0 cost
# no more run time than level 1 at this threshold (benchmarks/small_level_ab.py); above it, the
# scalar code's cost grows fast (docs/compile_time.md, "Small kernels at a small level").
SMALL_KERNEL = 1
# PipelineTuningOptions of SMALL_KERNEL's middle end (its speed level, then attributes set).
SMALL_PIPELINE = {"speed_level": 1, "loop_vectorization": False, "slp_vectorization": False,
                  "loop_unrolling": False, "loop_interleaving": False}
SMALL_CODEGEN_LEVEL = 0


def codegen_level(speed_level: int) -> int:
    """The code generator's level for a module optimized at `speed_level` (UNOPTIMIZED: 0;
    SMALL_KERNEL: SMALL_CODEGEN_LEVEL; an O-level: KERNEL_CODEGEN_LEVEL)."""
    if speed_level == UNOPTIMIZED:
        return 0
    return SMALL_CODEGEN_LEVEL if speed_level == SMALL_KERNEL else KERNEL_CODEGEN_LEVEL


def level_tag(speed_level: int) -> str:
    """How `speed_level` compiles, as text for a kernel's cache key: the O-level, or for
    SMALL_KERNEL its pipeline and code generator level (so a change of either is a new key)."""
    if speed_level != SMALL_KERNEL:
        return f"O{speed_level}"
    options = ",".join(f"{k}={v}" for k, v in SMALL_PIPELINE.items())
    return f"small[{options};codegen={SMALL_CODEGEN_LEVEL}]"


@functools.lru_cache(maxsize=None)
def target_machine(codegen_level: int):
    """The host's target machine (its CPU name and features) with LLVM's code generator at
    `codegen_level` (0: fast instruction selection and register allocation, for UNOPTIMIZED;
    KERNEL_CODEGEN_LEVEL for kernels, SMALL_CODEGEN_LEVEL for small ones). One per level and
    process, shared: never give it to an execution engine, which takes ownership."""
    import llvmlite.binding as llvm

    from ..emitters.cpu.target import host_cpu

    name, features = host_cpu()  # initializes the native target
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=name, features=features, opt=codegen_level, reloc="default", codemodel="jitdefault")


def target_machines() -> int:
    """How many target machines this process has made (`target_machine`'s levels): a worker
    has made its kernels' and the driver's before its first task (`_warm`)."""
    return target_machine.cache_info().currsize


def optimized_kernel(text: str, speed_level: int):
    """Kernel IR `text` parsed, verified and optimized at `speed_level` (an llvmlite ModuleRef):
    the O-level's pipeline (emitters/cpu/target.optimized_module) or, for SMALL_KERNEL,
    SMALL_PIPELINE."""
    from ..emitters.cpu.target import optimized_module

    if speed_level != SMALL_KERNEL:
        return optimized_module(text, speed_level)
    tuning = dict(SMALL_PIPELINE)
    return optimized_module(text, tuning.pop("speed_level"), tuning)


def compile_timed(text: str, speed_level: int) -> tuple[bytes, float, float]:
    """Object code of LLVM IR `text` at `speed_level` (UNOPTIMIZED: three passes and fast
    instruction selection; else `optimized_kernel` and the host's code generator at
    `codegen_level`), with the seconds spent parsing and optimizing, and generating code."""
    import time

    import llvmlite.binding as llvm

    from ..emitters.cpu.target import host_target_machine

    start = time.perf_counter()
    if speed_level != UNOPTIMIZED:
        llmod = optimized_kernel(text, speed_level)
        mid = time.perf_counter()
        obj = target_machine(codegen_level(speed_level)).emit_object(llmod)
        return obj, mid - start, time.perf_counter() - mid
    llmod = llvm.parse_assembly(text)
    llmod.verify()
    passes = llvm.create_new_module_pass_manager()
    passes.add_sroa_pass()
    passes.add_instruction_combine_pass()
    passes.add_simplify_cfg_pass()
    passes.run(llmod, llvm.create_pass_builder(host_target_machine(), llvm.create_pipeline_tuning_options(1)))
    mid = time.perf_counter()
    obj = target_machine(0).emit_object(llmod)
    return obj, mid - start, time.perf_counter() - mid


def pool() -> ProcessPoolExecutor:
    """The process pool, started on first use."""
    with _lock:
        return _started()


def _started() -> ProcessPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ProcessPoolExecutor(max_workers=max(1, processes()),
                                    mp_context=multiprocessing.get_context("forkserver"), initializer=_warm)
        atexit.register(shutdown)
        # In a process that multiprocessing started (a user's worker, the conformance runner's),
        # exit runs no atexit handler: multiprocessing's own exit function joins every
        # non-daemon child first, and the pool's idle workers wait for tasks forever, so the
        # process would never exit. A finalizer with a priority runs before that join; its
        # priority is above the pool's queues' own (10, which stop the threads that feed the
        # workers: after them, the workers' stop signal would never be sent).
        multiprocessing.util.Finalize(None, shutdown, exitpriority=100)
    return _pool


def submit(text: str, speed_level: int) -> "Future[tuple[bytes, float, float]]":
    """Compile kernel IR `text` at `speed_level` in a worker; the future's result is
    (object bytes, seconds optimizing, seconds generating code).

    The executor starts a worker, when it needs one, inside `submit` (CPython 3.9-3.13, for
    start methods other than fork), and the worker imports whatever `sys.modules["__main__"]`
    names at that moment: the blank stand-in is put there for the call, under the pool's lock
    so concurrent submits do not interleave their swaps.

    A pool broken by a worker that died (killed, or LLVM crashed in it: that compile's future
    raises BrokenProcessPool) is replaced by a new one here, so one crash does not fail every
    later compile of the process."""
    global _pool
    with _lock, _blank_main():
        try:
            return _started().submit(compile_timed, text, speed_level)
        except BrokenProcessPool:
            _pool.shutdown(wait=False, cancel_futures=True)
            _pool = None
            return _started().submit(compile_timed, text, speed_level)


def compile_in_lane(text: str, speed_level: int, use_processes: bool) -> tuple[bytes, float, float]:
    """Run in a lane thread: compile `text` at `speed_level` on the thread lane if it is idle (or
    the pool is not to be used), else in a worker process; (object bytes, seconds optimizing,
    seconds generating code)."""
    if not use_processes:
        return compile_timed(text, speed_level)
    if _thread_lane.acquire(blocking=False):
        try:
            return compile_timed(text, speed_level)
        finally:
            _thread_lane.release()
    return submit(text, speed_level).result()


class Lanes:
    """The lanes of one compile of `tasks` LLVM modules: `count` of them (1 + `processes()`
    when the pool is used, else the thread lane alone), run by a `ThreadPoolExecutor` with a
    thread per lane, and a thread of its own for a task that emits its own IR before compiling
    it (the driver, see `run`). At most `count` kernels are in flight (the driver's own module
    beside them, compiled on the thread lane when it is idle, else in a worker), and at most
    `count` LLVM compilations run at once: one in this process (llvmlite's lock) and one per
    worker. Used as a context manager: leaving it drops the
    tasks not yet started and waits for the running ones.

    The driver's thread was once the kernels' too (one executor of `count + 1` threads): once
    the driver was done, `count + 1` kernels were in flight. Without a pool two threads of this
    process then took turns at llvmlite's lock, and each kernel's LLVM seconds (wall spans)
    counted the other's turns too (keras MobileNetV2 at load 6, no worker: LLVM optimization and
    code generation summed to 13.4 s in a 10.4 s compile of 2.1 CPU-s); with a pool one kernel
    more than the workers waited in the pool's queue behind a busy worker, even when the thread
    lane was free first. Both ways alternated in one process (cold, 4 rounds; each list's last
    round a load spike): no worker (load 4.8-6) LLVM seconds MobileNetV2 2.63, 2.63, 3.17, 16.8
    -> 1.56, 1.59, 1.53, 7.1 and haiku's ResNet-18 step 5.7, 7.4, 10.4, 25.1 -> 3.1, 3.9, 4.1,
    9.1, wall within the noise (1.66-1.95 -> 1.75-1.80 s, 4.0-6.6 -> 4.0-5.9 s); one worker
    (load 3.7-5.4) wall within the noise too (0.96-1.55 -> 0.88-0.91 s, 2.43-2.60 -> 2.43-2.86
    s)."""

    def __init__(self, tasks: int) -> None:
        self.processes = use_pool(tasks)
        self.count = 1 + (processes() if self.processes else 0)
        self._threads = ThreadPoolExecutor(max_workers=self.count, thread_name_prefix="hlofuse-llvm")
        self._own = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hlofuse-llvm-task")

    def compile(self, text: str, speed_level: int) -> "Future[tuple[bytes, float, float]]":
        """Compile kernel IR `text` at `speed_level` on the next free lane; the future's result
        is (object bytes, seconds optimizing, seconds generating code)."""
        return self._threads.submit(compile_in_lane, text, speed_level, self.processes)

    def compile_here(self, text: str, speed_level: int) -> bytes:
        """The object code of IR `text`, compiled from the calling thread on the thread lane, or
        in a worker when that lane is busy (for a task started with `run`)."""
        return compile_in_lane(text, speed_level, self.processes)[0]

    def run(self, fn: Callable, *args) -> Future:
        """Run `fn(*args)` on a thread of its own (at most one such task at a time keeps the
        lanes' count: its LLVM work goes through `compile_here`)."""
        return self._own.submit(fn, *args)

    def __enter__(self) -> "Lanes":
        return self

    def __exit__(self, *exc) -> None:
        self._threads.shutdown(wait=True, cancel_futures=True)
        self._own.shutdown(wait=True, cancel_futures=True)


def shutdown() -> None:
    """Stop the workers (the next `pool()` starts new ones)."""
    global _pool
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=True, cancel_futures=True)
            _pool = None
