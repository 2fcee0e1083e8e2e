"""Fusions of the input whose kernel would emit an instruction too many times are taken apart,
for the compiled backends.

HLO text may arrive fused (XLA's dumps, its test modules, hand-written or generated modules).
A compiled backend emits a fused computation element by element, each instruction once per
distinct index it is read at (passes/fusion/indexing_evaluation.py), so a fused chain of slice
pairs -- an associative scan written out, a stencil repeated -- asks for 2^depth copies of its
first levels: 26 levels of `add(slice, slice)` over f32[64] ran the CPU emitter out of memory.
XLA's fusion passes never build such a fusion (they hold every producer to
MAX_DUPLICATED_INDEXING copies, as hlofuse's do), so one in the input was made elsewhere. Its
instructions are put back in its place, as a call is inlined, and hlofuse's own fusion passes
then fuse them under that limit. The values are the same: fusion never changes what an
instruction computes. The interpreter evaluates such a fusion as it is (array by array, no
copies), and stays the oracle.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.ir import HloModule
from .fusion.call_inliner import inline_call
from .fusion.indexing_evaluation import MAX_DUPLICATED_INDEXING, most_emitted
from .pass_base import HloPass


@dataclass(frozen=True)
class OversizedFusionSplitter(HloPass):
    """Inline every fusion instruction (outside fused computations) whose kernel would emit one
    of its instructions more than MAX_DUPLICATED_INDEXING times. Work: one indexing walk of
    each fused computation (`most_emitted`)."""

    name: ClassVar[str] = "oversized-fusion-splitter"

    def run(self, module: HloModule) -> bool:
        """Take the oversized fusions apart; True if there was one."""
        oversized = [inst for comp in module.computations if not comp.is_fusion_computation()
                     for inst in comp.instructions
                     if inst.opcode == "fusion" and most_emitted(inst)[0] > MAX_DUPLICATED_INDEXING]
        for inst in oversized:
            inline_call(inst, "calls")
        if oversized:
            for comp in module.computations:
                comp.sort_instructions()
            module.remove_unreachable_computations()
        return bool(oversized)
