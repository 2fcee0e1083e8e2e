"""Common subexpression elimination: identical instructions computed once.

Two instructions are identical when they have the same opcode, shape (layout included), the
same operands (by identity, after their own merging), equal attributes (`metadata` ignored, as
XLA's `Identical` does; called computations compared by structure, as XLA's HloCSE compares
them with `*lhs == *rhs`: two reduces of one operand whose `to_apply` are equal copies, as JAX
emits one per reduction, are one reduce; fused computations, which have one owner each, by
identity) and, for constants, bit-equal literals. Parameters, side-effecting instructions,
token producers and instructions tied by control edges are never merged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Hashable

import numpy as np

from ..hlo.ir import HloComputation, HloInstruction, HloModule
from .rewrite import Rewriter, has_side_effect
from .pass_base import HloPass

_IGNORED_ATTRS = frozenset({"metadata"})


class ComputationIds:
    """Structural identity of computations: equal computations (same instructions in the same
    graph, names aside) get the same id. Within one pass run (`interned`) the id is a small int
    standing for the structure, so a key holds an int instead of the body; ids from different
    instances are not comparable, so a lone key (`interned=False`) holds the structure itself."""

    def __init__(self, interned: bool = True) -> None:
        self.interned = interned
        self._by_computation: dict[HloComputation, Hashable] = {}
        self._by_structure: dict[Hashable, int] = {}

    def id_of(self, comp: HloComputation) -> Hashable:
        """The id of `comp`'s structure (computed once per computation)."""
        got = self._by_computation.get(comp)
        if got is None:
            got = structure = self._structure(comp)
            if self.interned:
                got = self._by_structure.setdefault(structure, len(self._by_structure))
            self._by_computation[comp] = got
        return got

    def _structure(self, comp: HloComputation) -> Hashable:
        index: dict[HloInstruction, int] = {}
        body = []
        for inst in comp.post_order():
            index[inst] = len(body)
            body.append((instruction_key(inst, self, operands=tuple(index[o] for o in inst.operands)),
                         inst.parameter_number if inst.opcode == "parameter" else None,
                         tuple(index.get(p, -1) for p in inst.control_predecessors)))
        return tuple(body), index[comp.root]


def freeze(value: Any, computations: ComputationIds | None = None) -> Hashable:
    """A hashable stand-in for an attribute value (computations by structure)."""
    if isinstance(value, HloComputation):
        if value.is_fusion_computation():
            # a fused computation has one owner (its fusion): fusions stay apart, as before fusion
            return ("computation", value)
        return ("computation", (computations or ComputationIds(interned=False)).id_of(value))
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v, computations) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v, computations)) for k, v in value.items()))
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    try:
        hash(value)
    except TypeError:
        return ("repr", repr(value))
    return (type(value).__name__, value)


def literal_key(inst: HloInstruction) -> Hashable | None:
    """Bit-exact identity of a constant's value (-0.0 differs from 0.0; NaNs by payload)."""
    lit = inst.literal
    if lit is None:
        return None
    return _value_key(lit)


def _value_key(value) -> Hashable:
    """`literal_key` of one literal value: an array, or a tuple of values (a tuple constant)."""
    if isinstance(value, tuple):
        return ("tuple",) + tuple(_value_key(v) for v in value)
    arr = np.ascontiguousarray(np.asarray(value))
    return (arr.dtype.str, arr.shape, arr.tobytes())


def _mergeable(inst: HloInstruction) -> bool:
    if inst.opcode == "parameter" or inst.control_predecessors:
        return False
    if inst.shape.is_token or any(s.is_token for s in getattr(inst.shape, "elements", ())):
        return False
    if inst.opcode == "constant" and inst.literal is None:
        return False  # an elided literal has an unknown value
    return not has_side_effect(inst)


def instruction_key(inst: HloInstruction, computations: ComputationIds | None = None,
                    operands: tuple | None = None) -> Hashable:
    """Everything that makes two instructions compute the same value (`operands`: what stands
    for the operands, the instructions themselves by default)."""
    computations = computations or ComputationIds(interned=False)
    attrs = tuple(sorted((k, freeze(v, computations)) for k, v in inst.attrs.items() if k not in _IGNORED_ATTRS))
    literal = literal_key(inst) if inst.opcode == "constant" else None
    return (inst.opcode, inst.shape, tuple(inst.operands) if operands is None else operands, attrs, literal)


def cse_computation(comp: HloComputation, computations: ComputationIds | None = None) -> int:
    """Merge identical instructions of `comp` into their first occurrence; return how many went."""
    computations = computations or ComputationIds()
    has_control_successor = {p for i in comp.instructions for p in i.control_predecessors}
    seen: dict[Hashable, HloInstruction] = {}
    rewriter = Rewriter(comp)
    merged = 0
    for inst in comp.post_order():
        if not _mergeable(inst) or inst in has_control_successor:
            continue
        key = instruction_key(inst, computations)
        first = seen.get(key)
        if first is None:
            seen[key] = inst
            continue
        rewriter.replace(inst, first)
        merged += 1
    rewriter.finish()
    return merged


@dataclass(frozen=True)
class CommonSubexpressionElimination(HloPass):
    """XLA's HloCSE over every computation (callees first)."""

    name: ClassVar[str] = "cse"

    def run(self, module: HloModule) -> bool:
        """Merge duplicates everywhere; True if any instruction was merged."""
        changed = False
        # callees come first, so a computation's id is taken after its own merging
        computations = ComputationIds()
        for comp in module.computations_post_order():
            changed |= cse_computation(comp, computations) > 0
        return changed

