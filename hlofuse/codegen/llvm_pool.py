"""Where LLVM's work on kernels runs: lanes, threads of this process that each compile one
kernel group's IR text at a time, fed from one queue in the order the groups are emitted.

llvmlite serialises every call into LLVM behind one process-wide lock (llvmlite/binding/ffi.py,
numba/llvmlite#318), so two threads calling its API keep one core busy. LLVM itself needs no
such lock between compilations that share nothing: XLA:CPU compiles the parts of a module on
threads, each with its own LLVMContext and target machine. A lane's compilation shares nothing
with any other: its module is parsed into an LLVMContext of its own (`_Compilation`), and its
pass builder and code generator use target machines taken from a free list for that one
compilation (`_machines`; a shared target machine's subtarget table is filled lazily, so two
compilations must not use one at once). Its three long calls (parsing, the pass pipeline, code
generation: all of LLVM's time but a few ms) go to LLVM past llvmlite's lock (`_unlocked`), and
ctypes releases the GIL meanwhile, so on two cores two kernels compile at once while the
calling thread emits the next groups' IR. Everything else (making and disposing of contexts,
target machines, pass builders; verifying; reading the object's buffer) keeps the lock. LLVM's
process-wide command-line options (emitters/cpu/target.apply_codegen_options) are set before a
compilation, under the lock, and change only when a benchmark flips one between compiles.

Measured on this 2-core machine (quiet): the 23 kernel groups of the flax MNIST CNN, GPT-2 and
MobileNetV2 compiled one after the other in 1.12 s, on two threads through llvmlite's lock in
1.13 s, on two threads past it in 0.59 s, every object the same bytes as the serial one
(tests/codegen/test_llvm_pool.py compares them on four threads). This replaced a pool of worker
processes (the lock's way round until then): their start (0.15-0.4 CPU-s, prestarted before the
passes), the pickling of IR text and objects, and a first compile of a small module (GPT-2,
BERT, the MNIST CNN: fewer than three groups) on one core, the pool not being worth its start.

Which lane compiled a kernel changes nothing visible: each runs `compile_timed` on the same
text at the same level for the same host CPU, and the results are collected in the groups'
order. An exception raised by a kernel's compilation reaches the caller from its future.
"""
from __future__ import annotations

import contextlib
import functools
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from ctypes import byref, c_char_p, string_at
from typing import Callable, Iterator

from ..runtime.cpu_threads import cpu_threads


def lanes() -> int:
    """How many kernels LLVM may compile at once: one per core this process may use, at most
    `HLOFUSE_CPU_THREADS` (runtime/cpu_threads.py: the bound on this process's threads)."""
    return max(1, cpu_threads())


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


def pipeline(speed_level: int) -> tuple[int, dict[str, bool]]:
    """The middle end's (O-level, PipelineTuningOptions overrides) for a kernel at `speed_level`:
    the O-level itself with none, or for SMALL_KERNEL SMALL_PIPELINE's."""
    if speed_level != SMALL_KERNEL:
        return speed_level, {}
    tuning = dict(SMALL_PIPELINE)
    return tuning.pop("speed_level"), tuning


def optimized_kernel(text: str, speed_level: int):
    """Kernel IR `text` parsed, verified and optimized at `speed_level` (an llvmlite ModuleRef):
    `pipeline`'s (emitters/cpu/target.optimized_module)."""
    from ..emitters.cpu.target import optimized_module

    return optimized_module(text, *pipeline(speed_level))


def _unlocked(name: str):
    """libllvmlite's C function `name` without llvmlite's lock (its ctypes function, with the
    argument and result types llvmlite gave it): for a call whose every argument belongs to the
    calling compilation alone (see the module's doc). An llvmlite whose wrapper no longer keeps
    its ctypes function as `_cfn` gets its locked wrapper back: correct, one compilation at a
    time (tests/codegen/test_llvm_pool.py fails then, so it does not go unnoticed)."""
    from llvmlite.binding import ffi

    wrapper = getattr(ffi.lib, name)
    return getattr(wrapper, "_cfn", wrapper)


# Target machines not in use, per code generator level: a compilation takes one for its pass
# builder (KERNEL_CODEGEN_LEVEL, as emitters/cpu/target.optimize's host target machine) and one
# for its code generation, and gives both back after (1.1 ms to make one; a lane keeps reusing).
_free_machines: dict[int, queue.SimpleQueue] = {}
_free_lock = threading.Lock()


@contextlib.contextmanager
def _machines(*levels: int) -> Iterator[list]:
    """Target machines of the host at code generator `levels`, this compilation's alone until
    the block ends."""
    taken = []
    with _free_lock:
        for level in levels:
            free = _free_machines.setdefault(level, queue.SimpleQueue())
            taken.append((level, free.get_nowait() if not free.empty() else None))
    machines = [tm if tm is not None else _new_target_machine(level) for level, tm in taken]
    try:
        yield machines
    finally:
        for (level, _), tm in zip(taken, machines):
            _free_machines[level].put(tm)


def _new_target_machine(level: int):
    """A new host target machine with the code generator at `level` (not shared)."""
    return target_machine.__wrapped__(level)


class _Message:
    """An error-message out-parameter of libllvmlite's C functions, as llvmlite's OutputString,
    but taking llvmlite's lock only to free a message LLVM wrote (OutputString frees on every
    exit, through the lock, so each successful call would still wait for it)."""

    def __init__(self) -> None:
        self._ptr = c_char_p(None)
        self._as_parameter_ = byref(self._ptr)

    def __bool__(self) -> bool:
        return self._ptr.value is not None

    def __str__(self) -> str:
        return (self._ptr.value or b"").decode("utf8", "replace")

    def close(self) -> None:
        """Free the message, if LLVM wrote one."""
        if self._ptr.value is not None:
            from llvmlite.binding import ffi

            ffi.lib.LLVMPY_DisposeString(self._ptr)
            self._ptr = c_char_p(None)
            self._as_parameter_ = byref(self._ptr)

    def __enter__(self) -> "_Message":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Compilation:
    """One kernel group's compilation: its LLVMContext and module, which no other thread sees."""

    def __init__(self, text: str) -> None:
        import llvmlite.binding as llvm

        self.context = llvm.create_context()
        self._text = c_char_p(text.encode("utf8"))
        with _Message() as err:
            self.module = llvm.ModuleRef(_unlocked("LLVMPY_ParseAssembly")(self.context, self._text, err),
                                         self.context)
            if err:
                self.close()
                raise RuntimeError(f"LLVM IR parsing error\n{err}")
        with _Message() as err:
            if _unlocked("LLVMPY_VerifyModule")(self.module, err):
                message = str(err)
                self.close()
                raise RuntimeError(message)

    def run_passes(self, passes, builder) -> None:
        """Run module pass manager `passes` (made by `builder`) on the module."""
        _unlocked("LLVMPY_RunNewModulePassManager")(passes, self.module, builder)

    def emit_object(self, tm) -> bytes:
        """The module's object code from target machine `tm`."""
        from llvmlite.binding import ffi

        with _Message() as err:
            buffer = _unlocked("LLVMPY_TargetMachineEmitToMemory")(tm, self.module, 1, err)
            if not buffer:
                raise RuntimeError(str(err))
        try:
            return string_at(ffi.lib.LLVMPY_GetBufferStart(buffer), ffi.lib.LLVMPY_GetBufferSize(buffer))
        finally:
            ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)

    def close(self) -> None:
        if getattr(self, "module", None) is not None:
            self.module.close()
            self.module = None
        self.context.close()


def compile_timed(text: str, speed_level: int) -> tuple[bytes, float, float]:
    """Object code of LLVM IR `text` at `speed_level` (UNOPTIMIZED: three passes and fast
    instruction selection; else `pipeline`'s, through emitters/cpu/target.pipeline_options, and
    the code generator at `codegen_level`), with the
    seconds spent parsing and optimizing, and generating code. Safe to call from several threads
    at once: they compile in parallel (the module's doc)."""
    import llvmlite.binding as llvm

    from ..emitters.cpu.target import apply_codegen_options, pipeline_options

    apply_codegen_options()
    start = time.perf_counter()
    with _machines(KERNEL_CODEGEN_LEVEL, codegen_level(speed_level)) as (pipeline_tm, codegen_tm):
        compilation = _Compilation(text)
        try:
            if speed_level == UNOPTIMIZED:
                passes = llvm.create_new_module_pass_manager()
                passes.add_sroa_pass()
                passes.add_instruction_combine_pass()
                passes.add_simplify_cfg_pass()
                builder = llvm.create_pass_builder(pipeline_tm, llvm.create_pipeline_tuning_options(1))
            else:
                builder = llvm.create_pass_builder(pipeline_tm, pipeline_options(*pipeline(speed_level)))
                passes = builder.getModulePassManager()
            compilation.run_passes(passes, builder)
            mid = time.perf_counter()
            obj = compilation.emit_object(codegen_tm)
        finally:
            compilation.close()
    return obj, mid - start, time.perf_counter() - mid


class Lanes:
    """The lanes of one compile: `count` threads (`lanes()`, at most `tasks`, at least one) that
    compile kernel groups through `compile_timed`, and a thread of its own for a task that emits
    its own IR before compiling it (the driver, see `run`). At most `count` compilations run at
    once, the driver's included (`_slots`): a core each. Used as a context manager: leaving it
    drops the groups not yet started and waits for the running ones."""

    def __init__(self, tasks: int) -> None:
        self.count = max(1, min(lanes(), tasks))
        self._slots = threading.BoundedSemaphore(self.count)
        self._threads = ThreadPoolExecutor(max_workers=self.count, thread_name_prefix="hlofuse-llvm")
        self._own = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hlofuse-llvm-task")

    def _compile(self, text: str, speed_level: int) -> tuple[bytes, float, float]:
        with self._slots:
            return compile_timed(text, speed_level)

    def compile(self, text: str, speed_level: int) -> "Future[tuple[bytes, float, float]]":
        """Compile kernel IR `text` at `speed_level` on the next free lane; the future's result
        is (object bytes, seconds optimizing, seconds generating code)."""
        return self._threads.submit(self._compile, text, speed_level)

    def compile_here(self, text: str, speed_level: int) -> bytes:
        """The object code of IR `text`, compiled on the calling thread once a lane's slot is
        free (for a task started with `run`)."""
        return self._compile(text, speed_level)[0]

    def run(self, fn: Callable, *args) -> Future:
        """Run `fn(*args)` on a thread of its own (at most one such task at a time; its LLVM work
        goes through `compile_here`)."""
        return self._own.submit(fn, *args)

    def __enter__(self) -> "Lanes":
        return self

    def __exit__(self, *exc) -> None:
        self._threads.shutdown(wait=True, cancel_futures=True)
        self._own.shutdown(wait=True, cancel_futures=True)
