"""The host CPU as a Target, its LLVM target machine and the O3 pipeline (runtime/jit.py loads
the object code made with them into the process)."""
from __future__ import annotations

import functools
import threading
import time
from collections.abc import Mapping

import llvmlite.binding as llvm

from ...runtime.gemm_provider import provider_fingerprint
from ..target import Target


@functools.lru_cache(maxsize=None)
def _init() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    set_process_options()


@functools.lru_cache(maxsize=None)
def set_process_options() -> None:
    """LLVM's process-wide switches for every pipeline hlofuse runs (host and NVPTX), once.

    Loop idiom recognition's CRC recognizer (HashRecognize, new in LLVM 21) walks the operand
    tree of each loop-carried value without memoizing shared operands: on a reduction loop over
    a deep elementwise body it took exponential time (the graph fuzzer, seed 30: a bf16
    max-reduction of atan2(sin(x), x) ran more than 20 minutes in O1's loop-idiom pass; our
    kernels never contain a CRC loop, so the recognizer has nothing to find)."""
    llvm.set_option("", "-disable-loop-idiom-hashrecognize")


@functools.lru_cache(maxsize=None)
def host_target_machine() -> llvm.TargetMachine:
    """The target machine for this host CPU (its name and features), at O3 (shared; never
    give it to an execution engine, which takes ownership: use new_host_target_machine)."""
    return new_host_target_machine()


@functools.lru_cache(maxsize=None)
def host_cpu() -> tuple[str, str]:
    """The host CPU's name and LLVM feature string (asking LLVM costs ~10 ms, and every loaded
    program makes a target machine: asked once per process)."""
    _init()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def new_host_target_machine() -> llvm.TargetMachine:
    """A fresh host target machine."""
    _init()
    target = llvm.Target.from_default_triple()
    name, features = host_cpu()
    return target.create_target_machine(
        cpu=name,
        features=features,
        opt=3,
        reloc="default",
        codemodel="jitdefault",
    )


def preferred_vector_width(features: str) -> int | None:
    """The vector width (bits) CPU kernels ask LLVM to prefer on a host with LLVM feature
    string `features`: 512 where AVX-512F is present, else None (LLVM's choice for the CPU).

    LLVM prefers 256-bit vectors on most AVX-512 CPUs (its prefer-256-bit tuning; znver4/5
    excepted). Measured per kernel kind on a znver5 host, one thread, CPU time (docs/emitters.md):
    512 bits run transcendental loops (tanh, exp) 1.8x faster, max reductions 1.3-1.7x, column
    reductions up to 1.3x and a softmax row kernel 1.6x; plain elementwise loops and row sums
    are equal within the measurement's noise (+-6%). So every kernel prefers 512."""
    return 512 if "+avx512f" in features.split(",") else None


def add_string_attribute(fn, key: str, value: str) -> None:
    """Give llvmlite.ir function `fn` the LLVM string attribute `"key"="value"`.

    llvmlite's FunctionAttributes accepts only LLVM's keyword attributes, yet prints each entry
    verbatim: the entry is added past that check (the printed IR is verified by LLVM)."""
    set.add(fn.attributes, f'"{key}"="{value}"')


class CpuTarget(Target):
    """Host CPU: libm names for f64 math, atomicrmw for atomics, host triple and layout."""

    name = "cpu"

    def __init__(self) -> None:
        tm = host_target_machine()
        self.triple = llvm.get_process_triple()
        self.data_layout = str(tm.target_data)
        self.cpu_name, self.cpu_features = host_cpu()
        # Kernels carry "prefer-vector-width" (codegen/kernels/cpu_skeleton.py); None: LLVM's default.
        self.vector_width = preferred_vector_width(self.cpu_features)

    def fingerprint(self) -> str:
        """What compiled code depends on (`host_fingerprint`)."""
        return host_fingerprint()


def host_fingerprint() -> str:
    """What compiled code for this host depends on: triple, CPU name and features, and the
    library f32 GEMM kernels call (runtime/gemm_provider.py). Without a CpuTarget, whose target
    machine (1.1 ms to make) a module cache hit's key does not need."""
    name, features = host_cpu()
    return f"{llvm.get_process_triple()}|{name}|{features}|{provider_fingerprint()}"


# Whether kernels' code generation runs LLVM's loop strength reduction (the code generator's
# pass that rewrites a loop's address arithmetic into extra induction variables), read by
# `apply_codegen_options`. On: off, LLVM's CPU time over the 437 distinct kernels of ten models
# and three generated modules fell 11% (paired, one process; small kernels 13-14%), but
# streaming kernels over many arrays and convolutions ran slower, one thread, same bits: a
# 50-parameter Adam step 1.06x (twice), the flax MNIST CNN 1.04-1.05x (docs/compile_time.md,
# "Where a small kernel's LLVM time goes"). The switch stays for A/B runs
# (benchmarks/loop_hints_ab.py).
LOOP_STRENGTH_REDUCTION = True
_applied: dict[str, str] = {}  # LLVM command-line option -> the value last given to LLVM here
_options_lock = threading.Lock()


def apply_codegen_options() -> None:
    """Give LLVM this module's code-generator switches (LOOP_STRENGTH_REDUCTION) before a
    kernel's code generation. LLVM's options are process-wide; each is set only when its
    value changes. codegen/llvm_pool.compile_timed calls it before each compilation, whose long
    calls run past llvmlite's lock: a value changed while another thread compiles would land
    inside that compilation, so the switches change only between compiles (benchmarks' A/Bs)."""
    value = "0" if LOOP_STRENGTH_REDUCTION else "1"
    if _applied.get("disable-lsr") == value:
        return
    with _options_lock:  # the first compilations of a process, on several lanes, set it once
        if _applied.get("disable-lsr") != value:
            _init()
            llvm.set_option("", f"-disable-lsr={value}")
            _applied["disable-lsr"] = value


def optimize(llmod: llvm.ModuleRef, speed_level: int = 3, tuning: Mapping[str, bool] | None = None) -> None:
    """Run the new pass manager's O`speed_level` pipeline for the host on `llmod` in place (and
    set the code generator's switches for the object code that follows, `apply_codegen_options`).
    `tuning`: PipelineTuningOptions attributes set after the defaults (both vectorizers on), such
    as codegen/llvm_pool.SMALL_PIPELINE's."""
    apply_codegen_options()
    pb = llvm.create_pass_builder(host_target_machine(), pipeline_options(speed_level, tuning))
    pb.getModulePassManager().run(llmod, pb)


def pipeline_options(speed_level: int, tuning: Mapping[str, bool] | None = None) -> llvm.PipelineTuningOptions:
    """PipelineTuningOptions of the O`speed_level` pipeline for kernels: both vectorizers on,
    then `tuning`'s attributes set (codegen/llvm_pool.py builds its lanes' pipelines with it)."""
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    for name, value in (tuning or {}).items():
        setattr(pto, name, value)
    return pto


def optimized_module(text: str, speed_level: int = 3, tuning: Mapping[str, bool] | None = None) -> llvm.ModuleRef:
    """LLVM IR text parsed, verified and optimized for the host (`optimize`: `speed_level`'s
    pipeline, `tuning` overriding its PipelineTuningOptions). llvmlite.ir builds IR in
    Python and has no way to hand it to LLVM but its text (measured on the 10,000-instruction
    chain of tests/test_deep_modules.py: printing 0.8 s and parsing 0.3 s beside ~20 s of LLVM
    CPU time)."""
    llmod = llvm.parse_assembly(text)
    llmod.verify()
    optimize(llmod, speed_level, tuning)
    return llmod


def compile_ir(text: str, speed_level: int = 3) -> bytes:
    """LLVM IR text optimized and compiled to a host object file."""
    return host_target_machine().emit_object(optimized_module(text, speed_level))


def compile_ir_timed(text: str, speed_level: int = 3) -> tuple[bytes, float, float]:
    """`compile_ir` with the seconds spent optimizing (parsing included) and generating code."""
    start = time.perf_counter()
    llmod = optimized_module(text, speed_level)
    mid = time.perf_counter()
    obj = host_target_machine().emit_object(llmod)
    return obj, mid - start, time.perf_counter() - mid
