"""Common subexpression elimination: identical instructions computed once.

Two instructions are identical when they have the same opcode, shape (layout included), the
same operands (by identity, after their own merging), equal attributes (called computations
compared by identity, `metadata` ignored, as XLA's `Identical` does) and, for constants,
bit-equal literals. Parameters, side-effecting instructions, token producers and instructions
tied by control edges are never merged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Hashable

import numpy as np

from ..hlo.ir import HloComputation, HloInstruction, HloModule
from .rewrite import Rewriter, has_side_effect
from .pass_base import HloPass

_IGNORED_ATTRS = frozenset({"metadata"})


def freeze(value: Any) -> Hashable:
    """A hashable stand-in for an attribute value (computations by identity: they hash so)."""
    if isinstance(value, HloComputation):
        return ("computation", value)
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
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
    arr = np.ascontiguousarray(np.asarray(lit))
    return (arr.dtype.str, arr.shape, arr.tobytes())


def _mergeable(inst: HloInstruction) -> bool:
    if inst.opcode == "parameter" or inst.control_predecessors:
        return False
    if inst.shape.is_token or any(s.is_token for s in getattr(inst.shape, "elements", ())):
        return False
    if inst.opcode == "constant" and inst.literal is None:
        return False  # an elided literal has an unknown value
    return not has_side_effect(inst)


def instruction_key(inst: HloInstruction) -> Hashable:
    """Everything that makes two instructions compute the same value."""
    attrs = tuple(sorted((k, freeze(v)) for k, v in inst.attrs.items() if k not in _IGNORED_ATTRS))
    literal = literal_key(inst) if inst.opcode == "constant" else None
    return (inst.opcode, inst.shape, tuple(inst.operands), attrs, literal)


def cse_computation(comp: HloComputation) -> int:
    """Merge identical instructions of `comp` into their first occurrence; return how many went."""
    has_control_successor = {p for i in comp.instructions for p in i.control_predecessors}
    seen: dict[Hashable, HloInstruction] = {}
    rewriter = Rewriter(comp)
    merged = 0
    for inst in comp.post_order():
        if not _mergeable(inst) or inst in has_control_successor:
            continue
        key = instruction_key(inst)
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
        for comp in module.computations_post_order():
            changed |= cse_computation(comp) > 0
        return changed

