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
pool; ctypes releases the GIL during the call.
"""
from __future__ import annotations

import ctypes
import threading
import time
import numpy as np

from ..emitters import elemental  # noqa: F401  (registers the element generators)
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from . import library_ops, library_rng  # noqa: F401  (register the library rules)
from .buffers import OutputPool
from .compile_cache import CompileCache, cache_key
from .cpu_threads import available_cores, fit_blas_threads, thread_pool
from .executor_common import ComputationPlan, Planner, ProgramBase, Step, check_arguments, flatten, owned_outputs
from .executor_common import symbol_name, unflatten
from .kernel_planning import KernelPlan, plan_fusion, sequential_dot

_PARALLEL_MIN_ELEMENTS = 1 << 15
_memory_cache: dict[str, bytes] = {}


class _CpuPlanner(Planner):
    """Plans kernels with the shared kernel planner; a small dot becomes a sequential kernel."""

    backend = "CPU"

    def dedicated_kernel(self, inst: HloInstruction) -> HloComputation | None:
        """A sequential dot kernel for a dot small enough not to go to BLAS."""
        return sequential_dot(inst) if inst.opcode == "dot" else None

    def kernel_calls(self, comp: HloComputation, inst: HloInstruction) -> tuple[list[KernelPlan], list]:
        """Kernels and temporaries computing fused computation `comp` for instruction `inst`."""
        kernels, temps = plan_fusion(comp, self.kernel_name(inst))
        self.kernels.extend(kernels)
        return kernels, temps


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
        key = cache_key(fused_module.to_text(), target.fingerprint())
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
        fit_blas_threads()
        with self._run_lock:
            result = self._execute(self._entry, checked)
        return owned_outputs(result, checked)

    def _run_kernels(self, plan: ComputationPlan, i: int, step: Step, ops: list):
        """Run the kernels of step `i` (outputs in the arena or the output pool)."""
        inputs = [np.ascontiguousarray(x) for x in flatten(tuple(ops))]
        outs = []
        for k, shape in enumerate(step.leaf_shapes):
            slot = plan.assignment.slots[(i, k)]
            if slot.offset is None:
                outs.append(self._outputs.empty(shape.dims, shape.dtype.numpy))
            else:
                outs.append(plan.arena_view(slot, shape))
        temps = [np.empty(t.dims, t.dtype.numpy) for t in step.temps]
        where = {"in": [x.ctypes.data for x in inputs], "out": [o.ctypes.data for o in outs],
                 "tmp": [t.ctypes.data for t in temps]}
        for k in step.kernels:
            ptrs = [where[kind][n] for kind, n in k.inputs + k.results + k.scratch]
            _launch(k, ptrs)
        return unflatten(step.inst.shape, outs)


def _launch(k: KernelPlan, ptrs: list[int]) -> None:
    """Call kernel `k` over all its units, split over the cores when there is enough work
    (the calling thread runs the first share itself)."""
    units = k.units
    if units <= 0:
        return
    total = units * max(k.unit_elements, 1)
    workers = min(available_cores(), units, max(1, total // _PARALLEL_MIN_ELEMENTS))
    if workers <= 1:
        k.fn(*ptrs, 0, units)
        return
    bounds = [units * c // workers for c in range(workers + 1)]
    futures = [thread_pool().submit(k.fn, *ptrs, bounds[c], bounds[c + 1]) for c in range(1, workers)]
    k.fn(*ptrs, bounds[0], bounds[1])
    for f in futures:
        f.result()
