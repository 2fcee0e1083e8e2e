"""Call inlining before fusion (XLA's CallInliner): fusion cannot look through `call`
boundaries, and JAX emits a `call` for every nested jit (`jnp.clip`, `jnp.where`, ...), so the
called computation is inlined into its caller first, as XLA's CPU and GPU pipelines do early on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...hlo.ir import HloComputation, HloInstruction, HloModule
from ..pass_base import HloPass
from .cost_model import kernel_computations


def clone_computation(comp: HloComputation, module: HloModule) -> HloComputation:
    """A copy of `comp` added to `module` (names made unique: `x` becomes `x.1`); fusions in it
    get copies of their fused computations, other called computations are shared."""
    new = HloComputation(comp.name)
    new.execution_thread = comp.execution_thread
    mapping: dict[HloInstruction, HloInstruction] = {}
    for inst in comp.post_order():
        clone = inst.clone(operands=[mapping[o] for o in inst.operands])
        clone.control_predecessors = [mapping[p] for p in inst.control_predecessors]
        clone.parent = new
        new.instructions.append(clone)
        mapping[inst] = clone
    new.root = mapping[comp.root]
    module.add_computation(new)
    for clone in new.instructions:
        if clone.opcode == "fusion":
            own_fused_computation(clone)
    return new


def own_fused_computation(fusion: HloInstruction) -> None:
    """Give a cloned `fusion` (which still calls its original's fused computation) a copy of
    that computation pointing back at it, as XLA's fusion CloneWithNewOperands does: a fused
    computation belongs to exactly one fusion instruction."""
    module = fusion.parent.parent if fusion.parent is not None else None
    if module is None:
        raise ValueError(f"fusion {fusion.name} is not in a module")
    fc = clone_computation(fusion.fused_computation, module)
    fc.fusion_instruction = fusion
    fusion.attrs["calls"] = fc


def inline_call(call: HloInstruction, callee_attr: str = "to_apply") -> HloInstruction:
    """Replace `call` by a copy of the computation it calls (named by `callee_attr`: a fusion
    nested in a fused computation is inlined by its `calls`); returns the copy of its root.

    A fusion among the copies gets its own copy of its fused computation: the callee (and its
    fusions) may stay in the module for other callers, and a fused computation has one owner.
    """
    comp = call.parent
    callee: HloComputation = call.attrs[callee_attr]
    mapping: dict[HloInstruction, HloInstruction] = {}
    for inst in callee.post_order():
        if inst.opcode == "parameter":
            mapping[inst] = call.operands[inst.parameter_number]
            continue
        clone = inst.clone(operands=[mapping[o] for o in inst.operands])
        clone.control_predecessors = [mapping[p] for p in inst.control_predecessors if p in mapping]
        mapping[inst] = comp.add_instruction(clone)
        if clone.opcode == "fusion":
            own_fused_computation(clone)
    root = mapping[callee.root]
    call.replace_all_uses_with(root)
    comp.remove_instruction(call)
    return root


@dataclass(frozen=True)
class CallInliner(HloPass):
    """Inline every `call` of the kernel computations (repeatedly, for nested calls). Each
    inlined instruction is a clone of the callee's, so its `origin` names where it came from.
    `target` is taken (and not used) so that every fusion pass takes the same option."""

    target: str = "gpu"
    name: ClassVar[str] = "call-inliner"

    def run(self, module: HloModule) -> bool:
        """Inline calls until none is left; True if any was inlined."""
        changed = False
        while True:
            calls = [i for c in kernel_computations(module) if not c.is_fusion_computation()
                     for i in c.instructions if i.opcode == "call" and _no_control_edges(i)]
            if not calls:
                break
            for call in calls:
                inline_call(call)
            changed = True
        if changed:
            for c in module.computations:
                c.sort_instructions()
            module.remove_unreachable_computations()
        return changed


def _no_control_edges(inst: HloInstruction) -> bool:
    # (the computation's control holders name every instruction that has control
    # predecessors: not a scan of the whole computation per call)
    return not inst.control_predecessors and not inst.parent.control_successors(inst)
