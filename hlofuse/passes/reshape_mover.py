"""Reshape mover (XLA's ReshapeMover, run in XLA:CPU's simplification pipeline): sinks reshapes
and transposes below elementwise instructions.

    %ra = f32[1,1,7] reshape(f32[7] %a)                %e = f32[7] divide(%a, broadcast(c))
    %e  = f32[1,1,7] divide(%ra, broadcast(c))   =>    %r = f32[1,1,7] reshape(%e)

An elementwise instruction is a candidate when every operand has its dimensions and is either
trivially reshaped (a constant, a broadcast of a scalar) or a non-trivial reshape/transpose
(of something that is not itself trivially reshaped, and not of one element), all of those
equivalent (the same opcode, the same source dimensions and, for transposes, the same
permutation; here also the same source layout, so the moved operation reads its operands in
one layout). A reshape/transpose operand moves only when every one of its users moves with
it, so nothing is computed twice. What it buys: the moved reshapes meet and cancel
(reshape(reshape(x)) = x in the simplifier) and equal values computed in two shapes become
one for CSE (JAX's keepdims means divided in [1,1,1,7] and in [7]).

Each element is computed by the same operation from the same operands: bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..hlo.shapes import ArrayShape
from .pass_base import HloPass
from .rewrite import Rewriter
from .simplifier_base import layout_of


def _trivially_reshaped(inst: HloInstruction) -> bool:
    """A constant (its literal reshapes) or a broadcast of a scalar (it takes any shape)."""
    if inst.opcode == "constant":
        return inst.literal is not None
    return inst.opcode == "broadcast" and inst.operands[0].shape.is_array and inst.operands[0].shape.rank == 0


def _nontrivial_reshape(inst: HloInstruction) -> bool:
    if inst.opcode not in ("reshape", "transpose") or not inst.shape.is_array:
        return False
    if all(d == 1 for d in inst.shape.dims):
        return False  # one element: nothing to gain
    return inst.operands[0].shape.is_array and not _trivially_reshaped(inst.operands[0])


def _equivalent(a: HloInstruction, b: HloInstruction) -> bool:
    if a.opcode != b.opcode or a.shape.dims != b.shape.dims:
        return False
    sa, sb = a.operands[0].shape, b.operands[0].shape
    if sa.dims != sb.dims or layout_of(sa) != layout_of(sb):
        return False
    return a.opcode == "reshape" or tuple(a.attrs["dimensions"]) == tuple(b.attrs["dimensions"])


def _first_reshape(inst: HloInstruction) -> HloInstruction | None:
    """The operand whose reshape/transpose would move, when `inst` is a candidate."""
    if not inst.info.elementwise or not inst.operands or not inst.shape.is_array:
        return None
    if not inst.users and not inst.is_root():
        return None
    if inst.control_predecessors:
        return None
    first = None
    for op in inst.operands:
        if not op.shape.is_array or op.shape.dims != inst.shape.dims:
            return None
        if _trivially_reshaped(op):
            continue
        if not _nontrivial_reshape(op):
            return None
        if first is None:
            first = op
        elif not _equivalent(first, op):
            return None
    return first


def _moved_operand(first: HloInstruction, op: HloInstruction, source: ArrayShape) -> HloInstruction:
    """`op` in the shape of the moved instruction's operands (`source`'s dimensions and layout)."""
    shape = ArrayShape(op.shape.dtype, source.dims, source.dynamic, source.layout)
    if op.opcode in ("reshape", "transpose"):
        return op.operands[0]  # `first` or one equivalent to it
    if op.opcode == "broadcast":
        return HloInstruction("broadcast", shape, [op.operands[0]], dict(op.attrs), name="broadcast")
    # a constant: reshaped back, or transposed by the inverse permutation (then folded)
    if first.opcode == "reshape":
        return HloInstruction("reshape", shape, [op], {}, name="reshape")
    perm = tuple(int(p) for p in first.attrs["dimensions"])
    inverse = tuple(perm.index(i) for i in range(len(perm)))
    return HloInstruction("transpose", shape, [op], {"dimensions": inverse}, name="transpose")


def _sink(rewriter: Rewriter, inst: HloInstruction, first: HloInstruction) -> None:
    source = first.operands[0].shape
    operands = [_moved_operand(first, op, source) for op in inst.operands]
    shape = ArrayShape(inst.shape.dtype, source.dims, source.dynamic, source.layout)
    moved = HloInstruction(inst.opcode, shape, operands, dict(inst.attrs), name=inst.opcode)
    attrs = {} if first.opcode == "reshape" else {"dimensions": tuple(first.attrs["dimensions"])}
    rewriter.replace(inst, HloInstruction(first.opcode, inst.shape, [moved], attrs, name=first.opcode))


def move_reshapes(comp: HloComputation) -> bool:
    """One sweep of XLA's ReshapeMover over `comp`; True if any reshape moved."""
    candidates = {}
    for inst in comp.instructions:
        first = _first_reshape(inst)
        if first is not None:
            candidates[inst] = first
    # a reshape with a user that does not move stays, and so every user of it stays
    removed = True
    while candidates and removed:
        removed = False
        nontrivial = {op for inst in candidates for op in inst.operands if _nontrivial_reshape(op)}
        for op in nontrivial:
            if op.is_root() or any(u not in candidates for u in op.users):
                for u in op.users:
                    removed |= candidates.pop(u, None) is not None
    if not candidates:
        return False
    rewriter = Rewriter(comp)
    for inst in comp.post_order():
        if inst in candidates:
            _sink(rewriter, inst, candidates[inst])
    rewriter.finish()
    comp.sort_instructions()
    return True


@dataclass(frozen=True)
class ReshapeMover(HloPass):
    """XLA's ReshapeMover over every non-fused computation, repeated until nothing moves (a
    moved reshape can make its user a candidate)."""

    max_rounds: int = 64
    name: ClassVar[str] = "reshape-mover"

    def run(self, module: HloModule) -> bool:
        """Sink reshapes and transposes; True if any moved."""
        changed = False
        for comp in module.computations_post_order():
            if comp.is_fusion_computation():
                continue
            for _ in range(self.max_rounds):
                if not move_reshapes(comp):
                    break
                changed = True
        return changed
