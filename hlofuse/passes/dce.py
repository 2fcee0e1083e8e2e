"""Dead code elimination: unused side-effect-free instructions and unreachable computations."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.ir import HloModule
from .pass_base import HloPass
from .rewrite import has_side_effect, is_removable, remove_dead_instructions

__all__ = ["DeadCodeElimination", "has_side_effect", "is_removable", "remove_dead_instructions"]


@dataclass(frozen=True)
class DeadCodeElimination(HloPass):
    """XLA's HloDCE: drop dead instructions in every computation (fused ones included; their
    parameters stay), then computations no longer called from the entry."""

    remove_computations: bool = True
    name: ClassVar[str] = "dce"

    def run(self, module: HloModule) -> bool:
        """Remove dead code; True if anything went."""
        changed = False
        for comp in module.computations_post_order():
            changed |= remove_dead_instructions(comp) > 0
        if self.remove_computations:
            changed |= module.remove_unreachable_computations()
        return changed

