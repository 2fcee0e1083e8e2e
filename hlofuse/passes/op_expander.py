"""The shared shape of an expander (XLA's OpExpanderPass): every instruction a pass matches is
replaced by the instructions that compute it, added before it in its computation.

    class MyExpander(OpExpander):
        name = "my-expander"
        def matches(self, inst): ...           # which instructions to expand
        def expand(self, inst, run): ...       # their replacement (instructions added with `add`)

`run` is a dict the pass may keep things in for the one run over a module (a reducer
computation made once and shared by every expansion). The base replaces each match through the
passes' Rewriter (its uses, the root, and what dies with it) and sorts the computations once.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..hlo.ir import HloComputation, HloInstruction, HloModule
from .pass_base import HloPass
from .rewrite import Rewriter
from .simplifier_base import splat


def add(comp: HloComputation, opcode: str, shape, *operands: HloInstruction, **attrs) -> HloInstruction:
    """A new instruction of `comp` (named after its opcode, made unique by the module)."""
    return comp.add_instruction(HloInstruction(opcode, shape, list(operands), attrs, name=opcode))


def add_splat(comp: HloComputation, shape, value) -> HloInstruction:
    """`value` broadcast to `shape` (a scalar constant behind a broadcast), added to `comp`."""
    out = splat(shape, value)
    comp.add_instruction(out.operands[0])
    return comp.add_instruction(out)


@dataclass(frozen=True)
class OpExpander(HloPass):
    """Base of the expanders: `matches` picks the instructions, `expand` builds each one's
    replacement. Work: one walk of the module, plus what each expansion adds."""

    def matches(self, inst: HloInstruction) -> bool:
        """Whether `inst` is to be expanded."""
        raise NotImplementedError

    def expand(self, inst: HloInstruction, run: dict) -> HloInstruction:
        """The instruction computing what `inst` does, its parts added to `inst.parent`."""
        raise NotImplementedError

    def computations(self, module: HloModule) -> list[HloComputation]:
        """The computations whose instructions are looked at (every one unless overridden)."""
        return list(module.computations)

    def run(self, module: HloModule) -> bool:
        """Expand every match; True if there was one."""
        changed, run = False, {}
        for comp in self.computations(module):
            for inst in [i for i in comp.instructions if self.matches(i)]:
                rewriter = Rewriter(comp)
                rewriter.replace(inst, self.expand(inst, run))
                rewriter.finish()
                changed = True
        if changed:
            for comp in module.computations:
                comp.sort_instructions()
        return changed
