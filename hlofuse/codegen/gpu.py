"""Codegen for the GPU: plan a fused module into grid launches and emit them once for NVPTX
(PTX) and once for the host emulation.

    code = compile_gpu(fused_module, arch="sm_90")   # a GpuCode (codegen/program.py)
    code.launches, code.ptx(), code.llvm_ir(), code.emulated_module()

Planning is shared with the CPU (codegen/schedule.py): every executed computation becomes
steps with a buffer assignment (codegen/buffers.py); a fusion (or a fusible op left unfused,
wrapped in a computation) is split into kernels by the shared kernel planner
(codegen/planning.py: reduction groups, loop kernels per output dimensions, reduces
materialized into temporaries), and each kernel becomes GPU launches (GpuLaunch):
  * a reduction group: [init] main [finish] [epilogue] (kernels/gpu_reduction.py),
  * a loop kernel: one grid (kernels/gpu_loop.py).
Other ops (dot, convolution, sort, while, ...) are not kernels: they run on the host through
the library rules (runtime/library_ops.py). runtime/gpu_executor.py loads the code on a CUDA
GPU or in the emulation (runtime/gpu_emulator.py) and runs the steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import llvmlite.binding as llvm
from llvmlite import ir

from ..emitters.gpu.ptxas import assemble
from ..emitters.gpu.target import DEFAULT_ARCH, EmulatedGpuTarget, GpuTarget, compile_ptx
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from .cpu import optimize_module
from .kernels.args import output_leaves, param_leaf_count
from .kernels.gpu_loop import LoopPlan, emit_loop_kernel, plan_loop
from .kernels.gpu_reduction import (
    ReductionPlan,
    emit_reduction_epilogue,
    emit_reduction_finish,
    emit_reduction_init,
    emit_reduction_main,
    plan_reduction,
)
from .kernels.gpu_skeleton import GpuKernelSkeleton, LaunchDims
from .planning import plan_fusion
from .program import Program
from .schedule import Planner, symbol_name


@dataclass
class GpuLaunch:
    """One kernel launch of a fusion step. `inputs`/`results` say where the kernel's
    parameter and output leaves live: ("in", i) a leaf of the fusion's operands, ("out", k) a
    leaf of its result, ("tmp", t) a temporary between the step's kernels (a reduce that the
    shared kernel planner materializes, e.g. softmax's row max)."""

    name: str
    comp: HloComputation
    role: str  # loop | init | main | finish | epilogue
    dims: LaunchDims
    plan: LoopPlan | ReductionPlan
    outputs: list[int] = field(default_factory=list)  # output leaves of loop kernels
    inputs: list[tuple[str, int]] = field(default_factory=list)
    results: list[tuple[str, int]] = field(default_factory=list)

    @property
    def scratch_types(self) -> tuple:
        """Element types of the scratch buffers the kernel takes after its outputs."""
        return () if self.role == "loop" else self.plan.scratch_types()

    @property
    def pointer_count(self) -> int:
        """Buffer arguments of the kernel: its parameter leaves, output leaves and scratch."""
        return param_leaf_count(self.comp) + len(output_leaves(self.comp)) + len(self.scratch_types)


def _launches_of(kp, leaves, add) -> None:
    """GPU launches for one kernel of the shared kernel planner (a reduction group or loop)."""
    if kp.group is not None:
        # The shared planner may split a reduction for the CPU's cores into a "partial" and
        # a "combine" kernel; the grid kernels split reductions themselves, so the group is
        # emitted whole, once (at its first kernel).
        if getattr(kp, "stage", "single") == "combine":
            return
        plan = plan_reduction(kp.group, leaves)
        if plan.kind != "per_output" and plan.atomic:
            add(kp, "init", plan.output_launch, plan)
        add(kp, "main", plan.launch, plan)
        if plan.two_pass:
            add(kp, "finish", plan.output_launch, plan)
        if plan.needs_epilogue:
            add(kp, "epilogue", plan.output_launch, plan)
        return
    widest = max(leaves[k].shape.dtype.byte_size for k in kp.outputs)
    plan = plan_loop(leaves[kp.outputs[0]].shape.dims, widest)
    add(kp, "loop", plan.launch, plan, kp.outputs)


class GpuPlanner(Planner):
    """Plans the launches of every kernel of the shared kernel planner."""

    backend = "GPU"

    def kernel_calls(self, comp: HloComputation, inst: HloInstruction) -> tuple[list[GpuLaunch], list]:
        """The launches of fused computation `comp` (in order) and its temporaries' shapes."""
        kernels, temps = plan_fusion(comp, self.kernel_name(inst), inst.operands)
        launches: list[GpuLaunch] = []

        def add(kp, role, dims, plan, outputs=()):
            launches.append(GpuLaunch(f"{kp.name}_{role}{len(launches)}", kp.comp, role, dims, plan,
                                      list(outputs), list(kp.inputs), list(kp.results)))

        for kp in kernels:
            _launches_of(kp, output_leaves(kp.comp), add)
        self.kernels.extend(launches)
        return launches, temps


def emit_module(launches: list[GpuLaunch], target, name: str) -> ir.Module:
    """An llvmlite module with every launch's kernel for `target` (GPU or emulated)."""
    mod = ir.Module(name=symbol_name(name))
    mod.triple = target.triple
    mod.data_layout = target.data_layout
    emitters = {"init": emit_reduction_init, "main": emit_reduction_main, "finish": emit_reduction_finish,
                "epilogue": emit_reduction_epilogue}
    for launch in launches:
        skel = GpuKernelSkeleton(mod, target, launch.name, launch.comp, launch.dims, launch.scratch_types)
        if launch.role == "loop":
            emit_loop_kernel(skel, launch.comp, launch.outputs, launch.plan)
        else:
            emitters[launch.role](skel, launch.comp, launch.plan)
    return mod


@dataclass(eq=False)
class GpuCode(Program):
    """A fused module planned into grid launches for `arch`; PTX and the emulated kernels'
    host module are emitted on demand."""

    arch: str = DEFAULT_ARCH
    _ptx: str | None = None
    _nvptx_ir: str | None = None

    @property
    def launches(self) -> list[GpuLaunch]:
        """Every kernel launch of the program (in planning order)."""
        return self.planner.kernels

    def ptx(self) -> str:
        """PTX of every kernel of the program (one module, for `arch`)."""
        if self._ptx is None:
            mod = emit_module(self.launches, GpuTarget(self.arch), self.module.name)
            self._nvptx_ir, self._ptx = compile_ptx(mod, self.arch)
        return self._ptx

    def llvm_ir(self) -> str:
        """Optimized NVPTX LLVM IR of the program (libdevice linked)."""
        self.ptx()
        return self._nvptx_ir

    def emulated_module(self) -> llvm.ModuleRef:
        """The emulated kernels (host triple and math) as one module optimized at O3 for the host."""
        return optimize_module(emit_module(self.launches, EmulatedGpuTarget(), self.module.name))

    def validate(self, arch: str | None = None) -> bytes:
        """Assemble the PTX for `arch` (ptxas or nvJitLink); returns the cubin."""
        return assemble(self.ptx(), arch or self.arch)


def compile_gpu(fused_module: HloModule, arch: str = DEFAULT_ARCH, lenient: bool = False) -> GpuCode:
    """Plan `fused_module` into grid launches for `arch`. With `lenient`, instructions no GPU
    kernel or library rule runs are planned as unsupported steps (failing only when run)."""
    planner = GpuPlanner(lenient)
    planner.plan(fused_module.entry)  # and every computation the entry runs
    return GpuCode(fused_module, planner, arch)


def launch_summary(program) -> list[dict]:
    """One dict per launch of `program` (a GpuCode or a runtime GpuProgram): name, role, kind,
    grid, block, threads, for reports and tests."""
    rows = []
    for launch in program.launches:
        kind = getattr(launch.plan, "kind", "loop")
        rows.append({"name": launch.name, "role": launch.role, "kind": kind, "grid": launch.dims.grid,
                     "block": launch.dims.block, "threads": launch.dims.threads,
                     "atomic": bool(getattr(launch.plan, "atomic", False)) and kind != "per_output"})
    return rows
