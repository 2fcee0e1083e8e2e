"""Horizontal input fusion (XLA's GpuHorizontalInputFusion): independent reductions that feed
the same consumer (typically the root tuple) become one multi-output input fusion, one launch
instead of one per reduction.

For each consumer, defs before uses, the candidates are its operands (get-tuple-elements looked
through) that are input-fusible reductions (a reduce, or an input fusion with a reduce hero)
whose only non-root user is that consumer, so fusing them can never make a cycle. They are
sorted by the shape their hero reads (`input_shape`: rank, then dimensions) and, as in XLA, each
is merged into the current anchor when their loops fit (`shapes_compatible`) and the result fits
the budget; otherwise it becomes the next anchor.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.shapes import Shape, TupleShape
from .context import FusionContext
from .fusibility import is_input_fusible_reduction
from .fusion_utils import create_fusion, merge_siblings, sort_computations
from .horizontal_fusion import _non_gte_ancestor, _only_user_is
from .kernel_pass import KernelComputationPass
from .multi_output_fusion import fits_in_budget
from .sibling_rules import hero, shapes_compatible


def input_shape(inst: HloInstruction) -> Shape:
    """XLA's GetInputShapeForMultiOutputFusion: the shape of the first operand of `inst`'s
    hero (an empty tuple when the hero has no operands).

    Always an array for a reduce hero, also a variadic one, whose result is a tuple: its loop
    shape (`loop_shape`) is that tuple when the reduction is not contiguous (a reduce of an
    [n, 1] input over its size-1 dimension), so it cannot be the sort key."""
    h = hero(inst)
    return h.operands[0].shape if h.operands else TupleShape(())


def _sort_key(inst: HloInstruction) -> tuple:
    """XLA's CompareShapeDimsFromLeftToRight on `input_shape`: rank, then dimensions."""
    s = input_shape(inst)
    return (s.rank, tuple(s.dims)) if s.is_array else (0, ())


def candidates(consumer: HloInstruction) -> list[HloInstruction]:
    """XLA's FindAndSortFusionCandidates for `consumer`."""
    found: list[HloInstruction] = []
    for op in consumer.operands:
        pred = _non_gte_ancestor(op)
        if (is_input_fusible_reduction(pred) and _only_user_is(pred, consumer)
                and not any(pred is f for f in found)):
            found.append(pred)
    found.sort(key=_sort_key)
    return found


@dataclass(frozen=True)
class HorizontalInputFusion(KernelComputationPass):
    """Fuse independent reductions feeding one consumer into one multi-output input fusion (GPU).

    Work: one visit per consumer, its candidates judged against the current anchor: linear in
    the computation and its consumers' operands (tests/passes/test_fusion_complexity.py)."""

    name: ClassVar[str] = "horizontal-input-fusion"

    def _run_on(self, comp: HloComputation, ctx: FusionContext) -> bool:
        changed = False
        for consumer in comp.post_order():
            if consumer.parent is not comp:
                continue
            cands = candidates(consumer)
            if len(cands) < 2:
                continue
            cands = [c if c.opcode == "fusion" else create_fusion(c, "kInput") for c in cands]
            changed = True
            anchor = cands[0]
            for fused in cands[1:]:
                d = shapes_compatible(anchor, fused)
                if d:
                    d = fits_in_budget(anchor, fused, ctx.params)
                if not d:
                    ctx.log.refused(self.name, fused.name, anchor.name, d)
                    anchor = fused
                    continue
                name = fused.name
                merge_siblings(anchor, fused)
                ctx.log.fused(self.name, name, anchor.name, anchor.name,
                              rule=f"horizontal input fusion (independent reductions feeding {consumer.name})")
                ctx.graph_changed()
        if changed:
            sort_computations(comp)
        return changed
