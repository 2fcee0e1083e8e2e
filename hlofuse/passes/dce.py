"""Dead code elimination: unused side-effect-free instructions and unreachable computations."""
from __future__ import annotations

from dataclasses import dataclass

from ..hlo.ir import HloComputation, HloInstruction, HloModule
from .pass_base import HloPass


def has_side_effect(inst: HloInstruction, _seen: set[int] | None = None) -> bool:
    """Side effecting per the registry row, or calling a computation that has such an op."""
    if inst.info.side_effecting:
        return True
    seen = set() if _seen is None else _seen
    for comp in inst.called_computations():
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        if any(has_side_effect(i, seen) for i in comp.instructions):
            return True
    return False


def is_removable(inst: HloInstruction) -> bool:
    """Dead: no users, not the root, not a parameter, no side effects."""
    if inst.users or inst.is_root() or inst.opcode == "parameter":
        return False
    return not has_side_effect(inst)


def remove_instruction_keeping_order(comp: HloComputation, inst: HloInstruction) -> None:
    """Remove `inst`; instructions that had to run after it now run after its own control
    predecessors, so dropping it does not lose an ordering constraint."""
    for other in comp.instructions:
        if inst in other.control_predecessors:
            for pred in inst.control_predecessors:
                if pred is not other and pred not in other.control_predecessors:
                    other.control_predecessors.append(pred)
    comp.remove_instruction(inst)


def remove_dead_instructions(comp: HloComputation) -> int:
    """Remove every dead instruction of `comp` (operands that die with it too); return how many."""
    removed = 0
    # Users come after their operands in post order, so walking it backwards frees whole
    # dead chains in one sweep.
    for inst in reversed(comp.post_order()):
        if inst.parent is comp and is_removable(inst):
            remove_instruction_keeping_order(comp, inst)
            removed += 1
    return removed


@dataclass(frozen=True)
class DeadCodeElimination(HloPass):
    """XLA's HloDCE: drop dead instructions in every computation (fused ones included; their
    parameters stay), then computations no longer called from the entry."""

    remove_computations: bool = True
    name: str = "dce"

    def run(self, module: HloModule) -> bool:
        """Remove dead code; True if anything went."""
        changed = False
        for comp in module.computations_post_order():
            changed |= remove_dead_instructions(comp) > 0
        if self.remove_computations:
            changed |= module.remove_unreachable_computations()
        return changed


def _register() -> None:
    from .pipeline import register_pass

    register_pass("dce", DeadCodeElimination)


_register()
