"""Fusions nested in fused computations are flattened into them, for the compiled backends.

XLA's HLO may hold a fusion instruction inside a fused computation (its fusion constant
sinking tests write them; TPU pipelines make them). hlofuse's kernels emit a fused computation
element by element, where a nested fusion is emitted inline only between rank-0 values (a
fused reducer), so an array-valued nested fusion was refused. Inlining it -- its fused
computation's instructions copied in its place, as a call is inlined -- computes the same
values in the same kernel. The interpreter evaluates nested fusions as they are.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.ir import HloModule
from .fusion.call_inliner import inline_call
from .pass_base import HloPass


@dataclass(frozen=True)
class NestedFusionFlattener(HloPass):
    """Inline every array-valued fusion instruction of a fused computation (repeatedly, for
    fusions nested deeper). Work: one walk of the fused computations per level of nesting."""

    name: ClassVar[str] = "nested-fusion-flattener"

    def run(self, module: HloModule) -> bool:
        """Flatten the nested fusions; True if there was one."""
        changed = False
        while True:
            nested = [i for c in module.computations if c.is_fusion_computation() for i in c.instructions
                      if i.opcode == "fusion" and not all(s.rank == 0 for s in i.shape.leaves())]
            if not nested:
                break
            for inst in nested:
                inline_call(inst, "calls")
            changed = True
        if changed:
            for comp in module.computations:
                comp.sort_instructions()
            module.remove_unreachable_computations()
        return changed
