"""The CPU executable: load the object code codegen made for a fused module, and run it.

    program = CpuProgram.compile(fused_module, cache_dir=None)
    outputs = program.run([x, y])          # entry result flattened depth-first
    program.llvm_ir(), program.asm(), program.compile_seconds

codegen/cpu.py plans the module (every executed computation becomes steps; fusions become
kernels; other ops run as library rules, runtime/library_ops.py), emits each distinct kernel
into its own LLVM module, optimizes it for the host and compiles it to an object file (cached
per kernel in memory and on disk). Here the objects are loaded and the steps run (runtime/program.py). A
kernel's outer range of work units is split over a thread pool; ctypes releases the GIL
during the call. Per-call work is kept small (box_decode runs five kernels in ~0.15 ms):
what a kernel step needs is prepared on its first run (`_StepRuntime`), and array addresses
are remembered. What loading makes stays here, not on codegen's values: per kernel, its
function and its thread-count tuner (`LoadedKernel`).
"""
from __future__ import annotations

import ctypes
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..codegen.cpu import CpuCode, compile_cpu
from ..codegen.planning import KernelPlan
from ..codegen.schedule import ComputationPlan, Step
from ..hlo.ir import HloInstruction, HloModule
from .cpu_threads import SplitTuner, blas_thread_choices, set_blas_threads, split_choices, thread_pool
from .io import check_arguments
from .jit import JitModule
from .output_pool import OutputPool
from .program import ProgramBase, flatten, owned_outputs, unflatten

_PARALLEL_MIN_ELEMENTS = 1 << 14  # a thread gets at least this many elements


@dataclass(eq=False)
class LoadedKernel:
    """A kernel of a loaded program: its plan (codegen's), the function loaded from the object
    code, and the thread-count tuner of its launches (made on its first launch)."""

    plan: KernelPlan
    fn: Callable
    tuner: SplitTuner | None = None


class CpuProgram(ProgramBase):
    """A fused module compiled for the host CPU (`code`), loaded and ready to run."""

    def __init__(self, code: CpuCode) -> None:
        super().__init__(code)
        self.compile_seconds = 0.0
        self._jit = None
        self.loaded: dict[str, LoadedKernel] = {}  # kernel name -> its function and tuner
        self._outputs = OutputPool()
        self._shared: list[np.ndarray] | None = None
        self._runtimes: dict[tuple[ComputationPlan, int], _StepRuntime] = {}
        self._library_tuners: dict[HloInstruction, SplitTuner] = {}  # inst -> BLAS thread-count tuner
        # The arenas and the output pool are per program: runs of one program are serialized.
        self._run_lock = threading.Lock()

    # ---- compilation -----------------------------------------------------------------------
    @classmethod
    def compile(cls, fused_module: HloModule, cache_dir=None, cache: bool = True) -> "CpuProgram":
        """Compile `fused_module` (codegen/cpu.py; each kernel's object code from the memory
        cache, or the disk cache in `cache_dir`, when possible; `cache=False` bypasses both) and
        load it. `code.timings` gets the stages' seconds, loading included."""
        start = time.perf_counter()
        prog = cls(compile_cpu(fused_module, cache_dir, cache=cache))
        loading = time.perf_counter()
        prog._load()
        prog.code.timings["loading"] = time.perf_counter() - loading
        prog.compile_seconds = time.perf_counter() - start
        return prog

    @property
    def cache_hit(self) -> bool:
        """Whether every kernel's object code came from the memory or disk cache."""
        return self.code.cache_hit

    def _load(self) -> None:
        """Load every distinct kernel's object into one engine; each kernel calls its
        object's function (structurally identical kernels share one)."""
        self._jit = JitModule(objects=[o.object_code for o in self.code.objects])
        addresses = {o.symbol: self._jit.address(o.symbol) for o in self.code.objects}
        for k in self._planner.kernels:
            proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * k.pointer_count), ctypes.c_int64, ctypes.c_int64)
            self.loaded[k.name] = LoadedKernel(k, proto(addresses[self.code.symbols[k.name]]))

    def llvm_ir(self) -> str:
        """The optimized LLVM IR of the program (re-emitted if the object came from the cache)."""
        return self.code.llvm_ir()

    def asm(self) -> str:
        """Host assembly of the program."""
        return self.code.asm()

    # ---- execution -------------------------------------------------------------------------
    def run(self, args: list) -> list[np.ndarray]:
        """Run on numpy arrays (one per entry parameter); the entry result flattened."""
        checked = check_arguments(self.module, args)
        with self._run_lock:
            result = self._execute(self._entry, checked)
        return owned_outputs(result, checked)

    def _run_library(self, inst: HloInstruction, operands: list):
        """Run a library rule with BLAS's thread count chosen by timing, per instruction:
        OpenBLAS's threads spin while they wait, so on a busy machine one thread can be many
        times faster than all cores, and on an idle one all cores win."""
        tuner = self._library_tuners.get(inst)
        if tuner is None:
            tuner = self._library_tuners[inst] = SplitTuner(blas_thread_choices())
        threads = tuner.choose()
        set_blas_threads(threads)
        start = time.perf_counter()
        result = super()._run_library(inst, operands)
        tuner.record(threads, time.perf_counter() - start)
        return result

    def _run_kernels(self, plan: ComputationPlan, i: int, step: Step, ops: list):
        """Run the kernels of step `i` (outputs in the arena or the output pool)."""
        rt = self._runtimes.get((plan, i))
        if rt is None:
            rt = self._runtimes[(plan, i)] = _StepRuntime(self, plan, i, step)
        leaves = flatten(tuple(ops)) if rt.tuple_operands else ops
        if not all(type(x) is np.ndarray and x.flags.c_contiguous for x in leaves):
            leaves = [np.ascontiguousarray(x) for x in leaves]  # kept alive until the kernels ran
        addrs = [_address(x) for x in leaves]
        addrs += rt.shared_in
        outs = list(rt.fixed_outs)
        for k, (dims, dtype) in rt.pooled:
            outs[k] = o = self._outputs.empty(dims, dtype)
            rt.out_addrs[k] = _address(o)
        addrs += rt.out_addrs
        for k, i in step.inplace.items():  # kernels that write only part of an output
            np.copyto(outs[k], leaves[i].reshape(outs[k].shape))
        for k, index in zip(rt.kernels, rt.arg_index):
            _launch(k, [addrs[j] if j >= 0 else rt.fixed[~j] for j in index])
        return unflatten(step.inst.shape, outs)

    def _shared_buffers(self) -> list[np.ndarray]:
        """The buffers of expressions shared between kernel steps (allocated once)."""
        if self._shared is None:
            self._shared = [np.empty(s.dims, s.dtype.numpy) for s in self._planner.shared]
        return self._shared


class _StepRuntime:
    """What a kernel step needs on every run, computed on its first: its loaded kernels, arena
    views and the temporaries (both persistent: runs of a program are serialized), the shared
    buffers, and for every kernel where each argument comes from.

    Argument addresses per run are [inputs..., shared inputs..., outputs..., shared outputs...];
    `arg_index` holds an index into that list, or ~j for `fixed[j]` (a temporary)."""

    def __init__(self, prog: CpuProgram, plan: ComputationPlan, i: int, step: Step) -> None:
        planner = prog._planner
        self.kernels = [prog.loaded[k.name] for k in step.kernels]
        shared = prog._shared_buffers() if planner.shared else []
        self.tuple_operands = any(op.shape.is_tuple for op in step.inst.operands)
        self.shared_in = [shared[s].ctypes.data for s in planner.shared_inputs.get(step.inst, ())]
        self.fixed_outs: list = []
        self.pooled: list = []
        self.out_addrs: list[int] = []
        for k, shape in enumerate(step.leaf_shapes):
            slot = plan.assignment.slots[(i, k)]
            if slot.offset is None:
                self.fixed_outs.append(None)
                self.pooled.append((k, (tuple(shape.dims), shape.dtype.numpy)))
                self.out_addrs.append(0)
            else:
                view = prog.arena_view(plan, slot, shape)
                self.fixed_outs.append(view)
                self.out_addrs.append(view.ctypes.data)
        self.out_addrs += [shared[s].ctypes.data for s in planner.shared_outputs.get(step.inst, ())]
        self.temps = [np.empty(t.dims, t.dtype.numpy) for t in step.temps]
        self.fixed = [t.ctypes.data for t in self.temps]
        n_in = sum(1 for _ in _leaf_shapes(step.inst.operands)) + len(self.shared_in)
        base = {"in": 0, "out": n_in}
        self.arg_index = [[base[kind] + n if kind != "tmp" else ~n for kind, n in k.inputs + k.results + k.scratch]
                          for k in step.kernels]


# Keyed by id(): numpy arrays are not hashable. The weak reference in the entry tells
# whether the id still names the same array.
_addresses: dict[int, tuple] = {}


def _address(x: np.ndarray) -> int:
    """The data address of array `x`: `x.ctypes.data` costs a microsecond, so addresses of
    arrays seen before (inputs passed again, recycled outputs) are remembered, under a weak
    reference that tells whether the id still names the same array, with the shape (an
    array's data moves only when `ndarray.resize` changes its size)."""
    hit = _addresses.get(id(x))
    if hit is not None and hit[0]() is x and hit[2] == x.shape:
        return hit[1]
    addr = x.ctypes.data
    if len(_addresses) > 1024:
        _addresses.clear()
    _addresses[id(x)] = (weakref.ref(x), addr, x.shape)
    return addr


def _leaf_shapes(operands):
    for op in operands:
        yield from (op.shape.leaves() if op.shape.is_tuple else [op.shape])


def _launch(k: LoadedKernel, ptrs: list[int]) -> None:
    """Call kernel `k` over all its units, split over as many threads as its tuner finds
    fastest (the calling thread runs the first share itself)."""
    units = k.plan.units
    if units <= 0:
        return
    tuner = k.tuner
    if tuner is None:
        tuner = k.tuner = SplitTuner(split_choices(units, units * max(k.plan.unit_elements, 1),
                                                   _PARALLEL_MIN_ELEMENTS))
    workers = tuner.choose()
    fn = k.fn
    start = time.perf_counter()
    if workers <= 1:
        fn(*ptrs, 0, units)
    else:
        bounds = [units * c // workers for c in range(workers + 1)]
        futures = [thread_pool().submit(fn, *ptrs, bounds[c], bounds[c + 1]) for c in range(1, workers)]
        fn(*ptrs, bounds[0], bounds[1])
        for f in futures:
            f.result()
    tuner.record(workers, time.perf_counter() - start)
