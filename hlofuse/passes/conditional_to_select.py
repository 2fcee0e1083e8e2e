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
from .op_expander import OpExpander, add
from .rewrite import has_side_effect


def _branches(cond: HloInstruction) -> tuple[HloComputation, HloComputation] | None:
    """(true, false) computations of a predicated conditional; None for an indexed one."""
    pred = cond.operands[0].shape
    if not (pred.is_array and pred.rank == 0 and pred.dtype.kind == "pred"):
        return None
    if "true_computation" in cond.attrs:
        return cond.attrs["true_computation"], cond.attrs["false_computation"]
    branches = cond.attrs.get("branch_computations") or ()
    return (branches[0], branches[1]) if len(branches) == 2 else None


def applies(cond: HloInstruction) -> bool:
    """Whether `cond` is a predicated conditional of an array result whose branches have no
    side effect (see the module docstring)."""
    branches = _branches(cond)
    return (branches is not None and cond.shape.is_array and len(cond.operands) == 3
            and not any(has_side_effect(i) for b in branches for i in b.instructions))


def select_of_branches(cond: HloInstruction) -> HloInstruction:
    """select(p, T(a), F(b)) for conditional `cond` (one that `applies`), T and F inlined,
    added before it."""
    comp = cond.parent
    calls = [add(comp, "call", cond.shape, op, to_apply=branch)
             for op, branch in zip(cond.operands[1:], _branches(cond))]
    pred = cond.operands[0]
    if cond.shape.rank > 0:
        pred = add(comp, "broadcast", cond.shape.with_dtype(PRED), pred, dimensions=())
    select = add(comp, "select", cond.shape, pred, *calls)
    for call in calls:
        inline_call(call)
    return select


@dataclass(frozen=True)
class ConditionalToSelect(OpExpander):
    """Every predicated, side-effect-free conditional of an array result in an embedded
    computation becomes a select of its inlined branches (module docstring). Work: one walk
    of the module's computations, and each rewrite copies its two branches."""

    name: ClassVar[str] = "conditional-to-select"

    def computations(self, module: HloModule) -> list[HloComputation]:
        """The embedded computations (a map's function, a reducer, what they call)."""
        kernels = set(kernel_computations(module))
        return [c for c in module.computations if c not in kernels and not c.is_fusion_computation()]

    def matches(self, inst: HloInstruction) -> bool:
        """A conditional the rewrite `applies` to."""
        return inst.opcode == "conditional" and applies(inst)

    def expand(self, inst: HloInstruction, run: dict) -> HloInstruction:
        """The select of its inlined branches."""
        return select_of_branches(inst)

    def run(self, module: HloModule) -> bool:
        """Rewrite the conditionals; the branch computations no longer called go."""
        changed = super().run(module)
        if changed:
            module.remove_unreachable_computations()
        return changed
