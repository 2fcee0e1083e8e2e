"""The schedule of a compiled program, shared by the CPU and the GPU backends.

Both backends execute a fused module the same way: every executed computation (the entry,
while bodies, branches, called computations) becomes a list of `Step`s with a buffer
assignment (codegen/buffers.py); a fusion, or a fusible op left unfused (wrapped into a
one-instruction computation), becomes kernels; other ops run as library rules
(runtime/library_ops.py). This module holds that common part: the step and computation
plans and the planner that classifies instructions. Each backend supplies how a fused
computation becomes kernels (`Planner.kernel_calls`, codegen/cpu.py and codegen/gpu.py);
runtime/program.py runs the steps.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..hlo.errors import UnsupportedError
from ..hlo.ir import HloComputation, HloInstruction
from ..hlo.rule_loader import load_rules
from .buffers import Assignment, assign_buffers
from .kernels.args import output_leaves


@dataclass
class Step:
    """One instruction of an executed computation and how it runs.

    `kernels` are the backend's kernels of a kernel step (KernelPlans on the CPU, GpuLaunches
    on the GPU), in launch order."""

    inst: HloInstruction
    kind: str  # param | const | tuple | gte | kernel | library | call | unsupported
    operand_steps: list[int] = field(default_factory=list)
    kernels: list = field(default_factory=list)
    leaf_shapes: list = field(default_factory=list)  # output leaves (kernel steps)
    temps: list = field(default_factory=list)  # shapes of temporaries between its kernels
    message: str = ""  # why an unsupported step cannot run (lenient planning)
    # Output leaf k -> operand leaf i whose values output k must already hold when the kernels
    # run: they write only part of it (dynamic-update-slice's window, scatter's updates). The
    # runtime passes operand i's buffer itself when the operand dies here (XLA's in-place rule),
    # otherwise copies it into the output buffer first.
    inplace: dict[int, int] = field(default_factory=dict)

    @property
    def aliases_operands(self) -> bool:
        """Whether the value may share buffers with its operands."""
        return self.kind in ("tuple", "gte", "library", "call")

    @property
    def kernel_leaf_bytes(self) -> list[int]:
        """Byte sizes of the output leaves a kernel step writes."""
        if self.kind != "kernel":
            return []
        return [s.element_count() * s.dtype.byte_size for s in self.leaf_shapes]


class ComputationPlan:
    """The steps executing one computation, and its buffer assignment."""

    def __init__(self, comp: HloComputation, planner: "Planner") -> None:
        self.comp = comp
        self.steps: list[Step] = []
        index: dict[HloInstruction, int] = {}
        for inst in comp.post_order():
            step = planner.step(inst)
            step.operand_steps = [index[op] for op in inst.operands]
            index[inst] = len(self.steps)
            self.steps.append(step)
        self.root_step = index[comp.root]
        self.assignment: Assignment = assign_buffers(self.steps, self.root_step)


class Planner:
    """Turns executed computations into steps and collects the kernels to emit.

    Subclasses name the `backend` (for messages) and implement `kernel_calls`; they may
    override `dedicated_kernel` to run some non-fusible ops as kernels."""

    backend = "?"

    def __init__(self, lenient: bool = False) -> None:
        # Planning asks the op registry which ops have an element generator or a library rule.
        load_rules("elemental")
        load_rules("library")
        self.plans: dict[HloComputation, ComputationPlan] = {}
        self.kernels: list = []
        self.lenient = lenient  # plan what can be emitted; fail only when an unsupported step runs

    def plan(self, comp: HloComputation) -> ComputationPlan:
        """The (memoized) plan of computation `comp`."""
        p = self.plans.get(comp)
        if p is None:
            p = ComputationPlan(comp, self)
            self.plans[comp] = p
        return p

    def kernel_calls(self, comp: HloComputation, inst: HloInstruction) -> tuple[list, list]:
        """The kernels (in order) and temporaries' shapes computing fused computation `comp`
        for instruction `inst`; the kernels are also appended to `self.kernels`."""
        raise NotImplementedError

    def kernel_name(self, inst: HloInstruction) -> str:
        """A fresh symbol prefix for the kernels of instruction `inst`."""
        return f"k{len(self.kernels)}_{symbol_name(inst.name)}"

    def dedicated_kernel(self, inst: HloInstruction) -> HloComputation | None:
        """A computation to run non-elemental instruction `inst` as kernels, or None."""
        return None

    def runs_fusion(self, comp: HloComputation) -> bool:
        """Whether the backend runs fused computation `comp`, which holds instructions without
        element generators (a dot and its epilogue), as kernels rather than as a call."""
        return False

    def in_place_kernels(self, comp: HloComputation, name: str) -> tuple[list, dict[int, int]] | None:
        """Kernels writing only part of their outputs (dynamic-update-slice windows, scatter
        updates) for fused computation `comp`, with the Step.inplace map, or None where the
        backend has none for it (then the ordinary path runs it)."""
        return None

    def _in_place_step(self, inst: HloInstruction) -> Step | None:
        """A kernel step updating an operand in place (a fusion rooted at dynamic-update-slice
        or scatter, or one left unfused), or None."""
        if inst.opcode == "fusion":
            comp = inst.fused_computation
        elif inst.opcode in ("dynamic-update-slice", "scatter"):
            comp = wrap_instruction(inst)
        else:
            return None
        planned = self.in_place_kernels(comp, self.kernel_name(inst))
        if planned is None:
            return None
        kernels, inplace = planned
        self.kernels.extend(kernels)
        return Step(inst, "kernel", kernels=kernels, leaf_shapes=[leaf.shape for leaf in output_leaves(comp)],
                    inplace=inplace)

    def step(self, inst: HloInstruction) -> Step:
        """How instruction `inst` of an executed computation runs."""
        op = inst.opcode
        if inst.info.step_kind:  # parameters, constants, tuples: no kernel, no library rule
            return Step(inst, inst.info.step_kind)
        in_place = self._in_place_step(inst)
        if in_place is not None:
            return in_place
        if op == "fusion":
            comp = inst.fused_computation
            if not is_emittable(comp) and not self.runs_fusion(comp):
                # e.g. XLA's kOutput/kCustom fusions around a dot: run the fused computation
                # like a call, its fusible parts as kernels.
                self.plan(comp)
                return Step(inst, "call")
        elif inst.info.elemental is not None and inst.info.kind != "control":
            # An op with an element generator left unfused runs as a one-instruction kernel.
            # Control flow has element generators too, but only for scalar computations inlined
            # into a kernel (a conditional in a map body); as a step of its own it is a library call.
            comp = wrap_instruction(inst)
        elif (dedicated := self.dedicated_kernel(inst)) is not None:
            comp = dedicated
        elif inst.info.library is not None:
            for callee in inst.called_computations():
                self.plan(callee)
            return Step(inst, "library")
        else:
            reason = inst.info.unsupported.get("library") or inst.info.unsupported.get("elemental") or "not implemented"
            message = f"the {self.backend} backend cannot run {op} instruction {inst.name}: {reason}"
            if not self.lenient:
                raise UnsupportedError(message)
            return Step(inst, "unsupported", message=message)
        step = Step(inst, "kernel", leaf_shapes=[leaf.shape for leaf in output_leaves(comp)])
        step.kernels, step.temps = self.kernel_calls(comp, inst)
        return step


def wrap_instruction(inst: HloInstruction) -> HloComputation:
    """A computation holding a copy of `inst` applied to fresh parameters (an unfused fusible op)."""
    comp = HloComputation(f"wrapped.{inst.name}")
    params = []
    for i, op in enumerate(inst.operands):
        p = HloInstruction("parameter", op.shape, name=f"param_{i}")
        p.parameter_number = i
        params.append(comp.add_instruction(p))
    root = comp.add_instruction(inst.clone(operands=params))
    comp.root = root
    return comp


def is_emittable(comp: HloComputation) -> bool:
    """Whether every instruction of a fused computation has an element generator."""
    return all(i.opcode == "parameter" or i.info.elemental is not None for i in comp.instructions)


def symbol_name(text: str) -> str:
    """`text` with every character that is not a letter, digit or underscore replaced by '_'."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)
