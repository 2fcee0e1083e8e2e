"""XLA's ConditionalToSelect: a conditional inside a computation that is inlined element by
element (a map's function, a reducer, a sort comparator, and what those call) becomes a select
of both branches, for the compiled backends.

    conditional(p, a, b), true_computation=T, false_computation=F      (in an embedded computation)
      -> select(p', T(a), F(b))      (p' = p broadcast to the result's shape; T and F inlined)

The element generators emit such computations inline, where a conditional can only be a branch
between scalar values (emitters/elemental_control.py); XLA's CPU and GPU pipelines run this pass
for the same reason. Both branches are computed, so it is done only where that cannot be seen:
branches without side effects, as XLA requires, and a predicate (not an index) selecting an
array result (XLA leaves tuple results alone: a select picks one array). The interpreter runs
the conditional itself (compiler.py leaves this pass out for it), so that it stays the oracle
of the rewrite.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.dtypes import PRED
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from .fusion.call_inliner import inline_call
from .fusion.cost_model import kernel_computations
from .pass_base import HloPass
from .rewrite import Rewriter, has_side_effect


def _branches(cond: HloInstruction) -> tuple[HloComputation, HloComputation] | None:
    """(true, false) computations of a predicated conditional; None for an indexed one."""
    pred = cond.operands[0].shape
    if not (pred.is_array and pred.rank == 0 and pred.dtype.kind == "pred"):
        return None
    if "true_computation" in cond.attrs:
        return cond.attrs["true_computation"], cond.attrs["false_computation"]
    branches = cond.attrs.get("branch_computations") or ()
    return (branches[0], branches[1]) if len(branches) == 2 else None


def conditional_to_select(cond: HloInstruction) -> HloInstruction | None:
    """Replace `cond` (in an embedded computation) by a select of its inlined branches; the
    select, or None where the rewrite does not apply (see the module docstring)."""
    branches = _branches(cond)
    if branches is None or not cond.shape.is_array or len(cond.operands) != 3:
        return None
    if any(has_side_effect(i) for b in branches for i in b.instructions):
        return None
    comp = cond.parent
    calls = [comp.add_instruction(HloInstruction("call", cond.shape, [op], {"to_apply": branch}, name="call"))
             for op, branch in zip(cond.operands[1:], branches)]
    pred = cond.operands[0]
    if cond.shape.rank > 0:
        pred = comp.add_instruction(HloInstruction("broadcast", cond.shape.with_dtype(PRED), [pred], {"dimensions": ()},
                                                   name="broadcast"))
    select = comp.add_instruction(HloInstruction("select", cond.shape, [pred, *calls], {}, name="select"))
    rewriter = Rewriter(comp)
    rewriter.replace(cond, select)
    rewriter.finish()
    for call in calls:
        inline_call(call)
    return select


@dataclass(frozen=True)
class ConditionalToSelect(HloPass):
    """Every predicated, side-effect-free conditional of an array result in an embedded
    computation becomes a select of its inlined branches (module docstring). Work: one walk
    of the module's computations, and each rewrite copies its two branches."""

    name: ClassVar[str] = "conditional-to-select"

    def run(self, module: HloModule) -> bool:
        """Rewrite the conditionals of the embedded computations; True if any was."""
        kernels = set(kernel_computations(module))
        changed = False
        for comp in list(module.computations):
            if comp in kernels or comp.is_fusion_computation():
                continue
            for inst in [i for i in comp.instructions if i.opcode == "conditional"]:
                changed |= conditional_to_select(inst) is not None
        if changed:
            for comp in module.computations:
                comp.sort_instructions()
            module.remove_unreachable_computations()
        return changed
