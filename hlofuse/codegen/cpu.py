"""Codegen for the host CPU: plan the fused module, emit ONE LLVM module of kernels, optimize
it at O3 for the host and compile it to object code.

    code = compile_cpu(fused_module, cache_dir=None)   # a CpuCode (codegen/program.py)
    code.object_code, code.llvm_ir(), code.asm()

Planning is pure Python and cheap (codegen/schedule.py, shared with the GPU): every executed
computation becomes steps; a fusion, or a fusible op left unfused, becomes kernels of the
shared kernel planner (codegen/planning.py), a small dot a sequential kernel. Object code is
cached in memory and on disk by fingerprint (codegen/cache.py). runtime/cpu_executor.py loads
the object and runs the schedule.
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir

from ..emitters.cpu.target import CpuTarget, host_target_machine, optimize
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..passes.fusion.decisions import module_log
from .cache import CompileCache, cache_key, memory_cache
from .kernels.args import output_leaves, param_leaf_count
from .kernels.cpu_loop import emit_loop_kernel
from .kernels.cpu_reduction import emit_reduction_kernel
from .kernels.cpu_skeleton import CpuKernelSkeleton
from .planning import KernelPlan, plan_fusion, sequential_dot
from .program import Program
from .schedule import Planner, symbol_name
from .shared_expressions import find_shared_expression, record_shared, share_candidate, share_expression


class CpuPlanner(Planner):
    """Plans kernels with the shared kernel planner; a small dot becomes a sequential kernel.

    A reduction kernel may also write an expression that a later fusion then reads
    (codegen/shared_expressions.py); each such decision is recorded in `log` (the fused
    module's fusion log) when one is given."""

    backend = "CPU"

    def __init__(self, lenient: bool = False, log=None) -> None:
        super().__init__(lenient)
        self.log = log  # passes/fusion/decisions.FusionLog, or None
        self._candidates: dict[HloInstruction, object] = {}  # inst -> ShareCandidate
        self.shared: list = []  # shapes of buffers one kernel step writes and a later one reads
        self.shared_outputs: dict[HloInstruction, list[int]] = {}  # inst -> shared buffers appended to its outputs
        self.shared_inputs: dict[HloInstruction, list[int]] = {}  # inst -> shared buffers appended to its inputs

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
            self._candidates[inst] = cand
        return kernels, temps

    def _reuse_expression(self, comp: HloComputation, inst: HloInstruction, name: str):
        """Kernels reading an expression an operand's reduction kernel also writes (see
        shared_expressions.share_candidate), or None."""
        for op in inst.operands:
            cand = self._candidates.get(op)
            if cand is None:
                continue
            expr = find_shared_expression(comp, inst, cand)
            if expr is None:
                continue
            old = list(cand.kernels)
            planned = share_expression(cand, comp, expr, name)
            if planned is None:
                continue
            del self._candidates[op]
            self.kernels[:] = [k for k in self.kernels if all(k is not o for o in old)] + cand.kernels
            sid = len(self.shared)
            self.shared.append(expr.shape)
            self.shared_outputs.setdefault(op, []).append(sid)
            self.shared_inputs[inst] = [sid]
            if self.log is not None:
                record_shared(self.log, cand, inst, expr)
            kernels, temps = planned
            self.kernels.extend(kernels)
            return kernels, temps
        return None


def kernel_signature(kernels: list[KernelPlan]) -> str:
    """The kernels' names, stages and argument counts: part of the cache key, so object code
    planned differently for the same module text (e.g. a shared expression) is not reused."""
    return "".join(f"\n; {k.name} {k.stage} {param_leaf_count(k.comp)} {len(output_leaves(k.comp))} {len(k.scratch)}"
                   for k in kernels)


def emit_module(name: str, kernels: list[KernelPlan], target) -> ir.Module:
    """The LLVM module (llvmlite.ir) named after module `name` with every kernel of `kernels`."""
    mod = ir.Module(name=symbol_name(name))
    mod.triple = target.triple
    mod.data_layout = target.data_layout
    for k in kernels:
        skel = CpuKernelSkeleton(mod, target, k.name, k.comp, len(output_leaves(k.comp)), len(k.scratch))
        if k.group is not None:
            emit_reduction_kernel(skel, k.comp, k.group, k.stage, k.parts)
        else:
            emit_loop_kernel(skel, k.comp, k.outputs)
    return mod


def optimize_module(mod: ir.Module) -> llvm.ModuleRef:
    """`mod` parsed, verified and optimized at O3 for the host."""
    llmod = llvm.parse_assembly(str(mod))
    llmod.verify()
    optimize(llmod)
    return llmod


@dataclass(eq=False)
class CpuCode(Program):
    """A fused module compiled for the host CPU: its schedule, kernels and object code."""

    object_code: bytes = b""
    cache_hit: bool = False  # the object code came from the memory or disk cache
    _llvm_ir: str | None = None

    def build_object(self, target) -> bytes:
        """Emit, optimize and compile every kernel to a host object file."""
        llmod = optimize_module(emit_module(self.module.name, self.kernels, target))
        self._llvm_ir = str(llmod)
        return host_target_machine().emit_object(llmod)

    def llvm_ir(self) -> str:
        """The optimized LLVM IR of the program (re-emitted if the object came from the cache)."""
        if self._llvm_ir is None:
            self._llvm_ir = str(optimize_module(emit_module(self.module.name, self.kernels, CpuTarget())))
        return self._llvm_ir

    def asm(self) -> str:
        """Host assembly of the program."""
        return host_target_machine().emit_assembly(llvm.parse_assembly(self.llvm_ir()))


def compile_cpu(fused_module: HloModule, cache_dir=None, log=None) -> CpuCode:
    """Plan `fused_module` and compile its kernels to host object code (from the memory or
    disk cache when possible). The kernel planner's decisions go to `log`, by default the
    fused module's fusion log (passes/fusion/decisions.module_log)."""
    planner = CpuPlanner(log=log if log is not None else module_log(fused_module))
    code = CpuCode(fused_module, planner)
    planner.plan(fused_module.entry)  # and every computation the entry runs
    target = CpuTarget()
    key = cache_key(fused_module.to_text() + kernel_signature(code.kernels), target.fingerprint())
    disk = CompileCache(cache_dir) if cache_dir is not None else None
    on_disk = disk.load(key) if disk is not None else None
    obj = memory_cache.get(key) or on_disk
    code.cache_hit = obj is not None
    if obj is None:
        obj = code.build_object(target)
    if disk is not None and on_disk is None:
        disk.store(key, obj)
    memory_cache[key] = obj
    code.object_code = obj
    return code
