"""The CPU executable: plan the fused module, emit ONE LLVM module of kernels, JIT it, run.

    program = CpuProgram.compile(fused_module, cache_dir=None)
    outputs = program.run([x, y])          # entry result flattened depth-first
    program.llvm_ir(), program.asm(), program.compile_seconds

Planning is pure Python and cheap (runtime/executor_common.py, shared with the GPU backend):
every executed computation (the entry, while bodies, branches, called computations) becomes
a list of steps; a fusion, or a fusible op left unfused (wrapped into a one-instruction
computation), becomes kernel calls; other ops run as library rules (runtime/library_ops.py).
Kernels are then emitted with the shared emitters
into one module, optimized at O3 for the host, compiled to an object file (cached on disk
by fingerprint) and loaded. A kernel's outer range of work units is split over a thread
pool; ctypes releases the GIL during the call. Per-call work is kept small (box_decode runs
five kernels in ~0.15 ms): what a kernel step needs is prepared on its first run
(`_StepRuntime`), and array addresses are remembered.
"""
from __future__ import annotations

import ctypes
import threading
import time
import weakref
import numpy as np

from ..emitters import elemental  # noqa: F401  (registers the element generators)
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from . import library_ops, library_rng  # noqa: F401  (register the library rules)
from .buffers import OutputPool
from .compile_cache import CompileCache, cache_key
from .cpu_threads import SplitTuner, blas_thread_choices, set_blas_threads, split_choices, thread_pool
from .executor_common import (ComputationPlan, Planner, ProgramBase, Step, flatten, owned_outputs, symbol_name,
                              unflatten)
from .io import check_arguments
from .kernel_planning import KernelPlan, find_shared_expression, plan_fusion, sequential_dot, share_candidate
from .kernel_planning import share_expression

_PARALLEL_MIN_ELEMENTS = 1 << 14  # a thread gets at least this many elements
_memory_cache: dict[str, bytes] = {}


class _CpuPlanner(Planner):
    """Plans kernels with the shared kernel planner; a small dot becomes a sequential kernel."""

    backend = "CPU"

    def __init__(self, lenient: bool = False) -> None:
        super().__init__(lenient)
        self._candidates: dict[int, object] = {}  # id(inst) -> ShareCandidate
        self.shared: list = []  # shapes of buffers one kernel step writes and a later one reads
        self.shared_outputs: dict[int, list[int]] = {}  # id(inst) -> shared buffers appended to its outputs
        self.shared_inputs: dict[int, list[int]] = {}  # id(inst) -> shared buffers appended to its inputs

    def dedicated_kernel(self, inst: HloInstruction) -> HloComputation | None:
        """A sequential dot kernel for a dot small enough not to go to BLAS."""
        return sequential_dot(inst) if inst.opcode == "dot" else None

    def kernel_calls(self, comp: HloComputation, inst: HloInstruction) -> tuple[list[KernelPlan], list]:
        """Kernels and temporaries computing fused computation `comp` for instruction `inst`."""
        name = self.kernel_name(inst)
        shared = self._reuse_expression(comp, inst, name)
        if shared is not None:
            return shared
        kernels, temps = plan_fusion(comp, name)
        self.kernels.extend(kernels)
        cand = share_candidate(comp, inst, name, kernels, temps)
        if cand is not None:
            self._candidates[id(inst)] = cand
        return kernels, temps

    def _reuse_expression(self, comp: HloComputation, inst: HloInstruction, name: str):
        """Kernels reading an expression an operand's reduction kernel also writes (see
        kernel_planning.share_candidate), or None."""
        for op in inst.operands:
            cand = self._candidates.get(id(op))
            if cand is None:
                continue
            expr = find_shared_expression(comp, inst, cand)
            if expr is None:
                continue
            old = list(cand.kernels)
            planned = share_expression(cand, comp, expr, name)
            if planned is None:
                continue
            del self._candidates[id(op)]
            self.kernels[:] = [k for k in self.kernels if all(k is not o for o in old)] + cand.kernels
            sid = len(self.shared)
            self.shared.append(expr.shape)
            self.shared_outputs.setdefault(id(op), []).append(sid)
            self.shared_inputs[id(inst)] = [sid]
            kernels, temps = planned
            self.kernels.extend(kernels)
            return kernels, temps
        return None


class CpuProgram(ProgramBase):
    """A fused module compiled for the host CPU."""

    def __init__(self, module: HloModule) -> None:
        self.module = module
        self.compile_seconds = 0.0
        self._planner = _CpuPlanner()
        self._entry = self._planner.plan(module.entry)
        self._llvm_ir: str | None = None
        self._jit = None
        self.cache_hit = False
        self._outputs = OutputPool()
        self._shared: list[np.ndarray] | None = None
        self._runtimes: dict[tuple[int, int], _StepRuntime] = {}
        self._library_tuners: dict[int, SplitTuner] = {}  # id(inst) -> BLAS thread-count tuner
        # The arenas and the output pool are per program: runs of one program are serialized.
        self._run_lock = threading.Lock()

    # ---- compilation -----------------------------------------------------------------------
    @classmethod
    def compile(cls, fused_module: HloModule, cache_dir=None) -> "CpuProgram":
        """Plan, emit, optimize and load `fused_module` (object code from the cache when possible)."""
        from ..emitters.cpu.target import CpuTarget

        start = time.perf_counter()
        prog = cls(fused_module)
        target = CpuTarget()
        key = cache_key(fused_module.to_text() + prog._kernel_signature(), target.fingerprint())
        disk = CompileCache(cache_dir) if cache_dir is not None else None
        obj = _memory_cache.get(key)
        on_disk = disk.load(key) if disk is not None else None
        obj = obj or on_disk
        prog.cache_hit = obj is not None
        if obj is None:
            obj = prog._build_object(target)
        if disk is not None and on_disk is None:
            disk.store(key, obj)
        _memory_cache[key] = obj
        prog._load(obj)
        prog.compile_seconds = time.perf_counter() - start
        return prog

    def _kernel_signature(self) -> str:
        """The kernels' names, stages and argument counts: part of the cache key, so object code
        planned differently for the same module text (e.g. a shared expression) is not reused."""
        from ..emitters.kernel_args import param_leaf_count
        from ..emitters.loop_emitter import output_leaves

        return "".join(f"\n; {k.name} {k.stage} {param_leaf_count(k.comp)} {len(output_leaves(k.comp))} {len(k.scratch)}"
                       for k in self._planner.kernels)

    def _emit_module(self, target):
        """The LLVM module (llvmlite.ir) with every kernel of the program."""
        from llvmlite import ir

        from ..emitters.cpu.kernels import CpuKernelSkeleton
        from ..emitters.loop_emitter import emit_loop_kernel, output_leaves
        from ..emitters.reduction_emitter import emit_reduction_kernel

        mod = ir.Module(name=symbol_name(self.module.name))
        mod.triple = target.triple
        mod.data_layout = target.data_layout
        for k in self._planner.kernels:
            skel = CpuKernelSkeleton(mod, target, k.name, k.comp, len(output_leaves(k.comp)), len(k.scratch))
            if k.group is not None:
                emit_reduction_kernel(skel, k.comp, k.group, k.stage, k.parts)
            else:
                emit_loop_kernel(skel, k.comp, k.outputs)
        return mod

    def _optimized(self, target):
        import llvmlite.binding as llvm

        from ..emitters.cpu.target import optimize

        llmod = llvm.parse_assembly(str(self._emit_module(target)))
        llmod.verify()
        optimize(llmod)
        self._llvm_ir = str(llmod)
        return llmod

    def _build_object(self, target) -> bytes:
        from ..emitters.cpu.target import host_target_machine

        return host_target_machine().emit_object(self._optimized(target))

    def _load(self, obj: bytes) -> None:
        from ..emitters.cpu.target import JitModule
        from ..emitters.kernel_args import param_leaf_count
        from ..emitters.loop_emitter import output_leaves

        self._jit = JitModule(object_code=obj)
        for k in self._planner.kernels:
            n = param_leaf_count(k.comp) + len(output_leaves(k.comp)) + len(k.scratch)
            proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * n), ctypes.c_int64, ctypes.c_int64)
            k.fn = proto(self._jit.address(k.name))

    def llvm_ir(self) -> str:
        """The optimized LLVM IR of the program (re-emitted if the object came from the cache)."""
        if self._llvm_ir is None:
            from ..emitters.cpu.target import CpuTarget

            self._optimized(CpuTarget())
        return self._llvm_ir

    def asm(self) -> str:
        """Host assembly of the program."""
        import llvmlite.binding as llvm

        from ..emitters.cpu.target import host_target_machine

        llmod = llvm.parse_assembly(self.llvm_ir())
        return host_target_machine().emit_assembly(llmod)

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
        tuner = self._library_tuners.get(id(inst))
        if tuner is None:
            tuner = self._library_tuners[id(inst)] = SplitTuner(blas_thread_choices())
        threads = tuner.choose()
        set_blas_threads(threads)
        start = time.perf_counter()
        result = super()._run_library(inst, operands)
        tuner.record(threads, time.perf_counter() - start)
        return result

    def _run_kernels(self, plan: ComputationPlan, i: int, step: Step, ops: list):
        """Run the kernels of step `i` (outputs in the arena or the output pool)."""
        rt = self._runtimes.get((id(plan), i))
        if rt is None:
            rt = self._runtimes[(id(plan), i)] = _StepRuntime(self, plan, i, step)
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
        for k, index in zip(step.kernels, rt.arg_index):
            _launch(k, [addrs[j] if j >= 0 else rt.fixed[~j] for j in index])
        return unflatten(step.inst.shape, outs)

    def _shared_buffers(self) -> list[np.ndarray]:
        """The buffers of expressions shared between kernel steps (allocated once)."""
        if self._shared is None:
            self._shared = [np.empty(s.dims, s.dtype.numpy) for s in self._planner.shared]
        return self._shared


class _StepRuntime:
    """What a kernel step needs on every run, computed on its first: arena views and the
    temporaries (both persistent: runs of a program are serialized), the shared buffers, and
    for every kernel where each argument comes from.

    Argument addresses per run are [inputs..., shared inputs..., outputs..., shared outputs...];
    `arg_index` holds an index into that list, or ~j for `fixed[j]` (a temporary)."""

    def __init__(self, prog: CpuProgram, plan: ComputationPlan, i: int, step: Step) -> None:
        planner = prog._planner
        shared = prog._shared_buffers() if planner.shared else []
        self.tuple_operands = any(op.shape.is_tuple for op in step.inst.operands)
        self.shared_in = [shared[s].ctypes.data for s in planner.shared_inputs.get(id(step.inst), ())]
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
                view = plan.arena_view(slot, shape)
                self.fixed_outs.append(view)
                self.out_addrs.append(view.ctypes.data)
        self.out_addrs += [shared[s].ctypes.data for s in planner.shared_outputs.get(id(step.inst), ())]
        self.temps = [np.empty(t.dims, t.dtype.numpy) for t in step.temps]
        self.fixed = [t.ctypes.data for t in self.temps]
        n_in = sum(1 for _ in _leaf_shapes(step.inst.operands)) + len(self.shared_in)
        base = {"in": 0, "out": n_in}
        self.arg_index = [[base[kind] + n if kind != "tmp" else ~n for kind, n in k.inputs + k.results + k.scratch]
                          for k in step.kernels]


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


def _launch(k: KernelPlan, ptrs: list[int]) -> None:
    """Call kernel `k` over all its units, split over as many threads as its tuner finds
    fastest (the calling thread runs the first share itself)."""
    units = k.units
    if units <= 0:
        return
    tuner = k.tuner
    if tuner is None:
        tuner = k.tuner = SplitTuner(split_choices(units, units * max(k.unit_elements, 1),
                                                          _PARALLEL_MIN_ELEMENTS))
    workers = tuner.choose()
    start = time.perf_counter()
    if workers <= 1:
        k.fn(*ptrs, 0, units)
    else:
        bounds = [units * c // workers for c in range(workers + 1)]
        futures = [thread_pool().submit(k.fn, *ptrs, bounds[c], bounds[c + 1]) for c in range(1, workers)]
        k.fn(*ptrs, bounds[0], bounds[1])
        for f in futures:
            f.result()
    tuner.record(workers, time.perf_counter() - start)
