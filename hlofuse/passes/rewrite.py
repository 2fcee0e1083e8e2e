"""Graph surgery shared by the passes: replacing instructions and removing dead ones in bulk.

Removing instructions one at a time costs a scan of the computation each (the instruction
list and the control edges), which makes a pass over a big module quadratic; these helpers
collect what dies and remove it in one sweep.
"""
from __future__ import annotations

from typing import Iterable

from ..hlo.ir import HloComputation, HloInstruction


def has_side_effect(inst: HloInstruction, _seen: set[HloComputation] | None = None) -> bool:
    """Side effecting per the registry row, or calling a computation that has such an op."""
    if inst.info.side_effecting:
        return True
    seen = set() if _seen is None else _seen
    for comp in inst.called_computations():
        if comp in seen:
            continue
        seen.add(comp)
        if any(has_side_effect(i, seen) for i in comp.instructions):
            return True
    return False


def is_removable(inst: HloInstruction) -> bool:
    """Dead: no users, not the root, not a parameter, no side effects."""
    if inst.users or inst.is_root() or inst.opcode == "parameter":
        return False
    return not has_side_effect(inst)


def collect_dead(comp: HloComputation, seeds: Iterable[HloInstruction]) -> list[HloInstruction]:
    """Detach and return the seeds that are dead and, transitively, the operands they leave
    dead. The returned instructions are still in `comp` until `remove_instructions`."""
    dead: list[HloInstruction] = []
    taken: set[HloInstruction] = set()
    stack = list(seeds)
    while stack:
        inst = stack.pop()
        if inst in taken or inst.parent is not comp or not is_removable(inst):
            continue
        taken.add(inst)
        operands = list(inst.operands)
        inst.detach_operands()
        dead.append(inst)
        stack.extend(operands)
    return dead


def remove_instructions(comp: HloComputation, dead: list[HloInstruction]) -> None:
    """Remove `dead` (no users left outside it) from `comp` in one pass. An instruction that
    had to run after a removed one now runs after that one's control predecessors, so no
    ordering constraint is lost."""
    if not dead:
        return
    dead_set = set(dead)
    for inst in dead:
        inst.detach_operands()
    expanded: dict[HloInstruction, list[HloInstruction]] = {}

    def live_predecessors(p: HloInstruction) -> list[HloInstruction]:
        if p not in dead_set:
            return [p]
        if p not in expanded:
            expanded[p] = []  # guards against cycles of control edges
            out: list[HloInstruction] = []
            for q in p.control_predecessors:
                out.extend(live_predecessors(q))
            expanded[p] = out
        return expanded[p]

    # Only instructions with control predecessors can name a dead one (`control_holders`),
    # so the survivors are not walked: a fusion's kernel computation grows to thousands of
    # instructions and loses a few at each of its hundreds of deduplications.
    for inst in comp.control_holders():
        if inst.parent is not comp or inst in dead_set:
            continue
        if any(p in dead_set for p in inst.control_predecessors):
            preds: list[HloInstruction] = []
            for p in inst.control_predecessors:
                for q in live_predecessors(p):
                    if q is not inst and q not in preds:
                        preds.append(q)
            inst.control_predecessors = preds
    comp.remove_detached(dead)


def remove_dead_instructions(comp: HloComputation) -> int:
    """Remove every dead instruction of `comp` (whole dead chains); return how many."""
    # The instructions nothing reads are the seeds: `collect_dead` follows each one's operands,
    # so whole dead chains go in one sweep, in any order of the seeds (which dies does not
    # depend on it, nor does the removal), without a walk of the computation in post order.
    dead = collect_dead(comp, [inst for inst in comp.instructions if not inst.users])
    remove_instructions(comp, dead)
    return len(dead)


def _add_with_new_operands(comp: HloComputation, inst: HloInstruction) -> None:
    for op in inst.operands:
        if op.parent is None and op.opcode != "parameter":
            _add_with_new_operands(comp, op)
    comp.add_instruction(inst)


class Rewriter:
    """Replaces instructions in one computation and sweeps what they leave dead at `finish()`.

    A new instruction of the same opcode as the one it replaces takes over its name once the
    old one is gone, and any other new one gets the plainest free `<opcode>[.N]` name then,
    so that the printed module stays readable and stable."""

    def __init__(self, comp: HloComputation) -> None:
        self.comp = comp
        self.replaced: list[HloInstruction] = []
        self.renames: list[tuple[HloInstruction, str]] = []
        self._origin: dict[HloInstruction, str] = {}

    def replace(self, old: HloInstruction, new: HloInstruction) -> None:
        """Point every use of `old` (and the root, if it is) at `new`, adding `new` and any new
        operands of it to the computation first."""
        if new.parent is None:
            if new.opcode == old.opcode:
                # a chain of rewrites in one sweep hands the first instruction's name down;
                # until then the new one is called `<name>.N`, keeping opcode names free
                name = self._origin.get(old, old.name)
                self._origin[new] = name
                new.name = name
            else:
                name = new.name or new.opcode
            self.renames.append((new, name))
            _add_with_new_operands(self.comp, new)
        old.replace_all_uses_with(new)
        self.replaced.append(old)

    def finish(self) -> int:
        """Remove the replaced instructions and the operands they left dead; return how many."""
        dead = collect_dead(self.comp, self.replaced)
        remove_instructions(self.comp, dead)
        module = self.comp.parent
        if module is not None:
            for new, name in self.renames:
                if new.parent is not self.comp or new.name == name:
                    continue
                got = module.unique_name(name)
                if got == name:  # free again: the instruction that had it is gone
                    module.release_name(new.name)
                    new.name = name
                else:
                    module.release_name(got)
        self.replaced, self.renames, self._origin = [], [], {}
        return len(dead)
