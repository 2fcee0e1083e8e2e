"""Constant folding: an instruction of constant operands evaluated by its row's reference rule.

The value of a folded instruction is what the numpy interpreter computes for it (the row's
`reference` rule, the oracle every backend is checked against), so folding never changes what
a module computes relative to the interpreter. Only instructions whose row says so are folded
(`OpInfo.fold`, hlo/op_conditions.py): data movement, and the arithmetic whose result every
backend reproduces bit-exactly. The rest stay unfolded: where the result is target specific
(the sign of max(-0, +0)), and what has not been pinned down on every backend (float -> int
conversion saturation, integer division by zero, complex products with infinities,
transcendental functions that differ by an ulp between libm and XLA's approximations).
Arithmetic on 4-bit integers and 8-bit floats is left alone too: XLA computes it through wider
types with rounding steps of its own.

Limits follow XLA's HloConstantFolding rules, with a smaller size budget: no folding of
broadcast or iota on their own (they stay cheap to describe), at least one operand must be a
plain constant, the others constants, broadcasts of constants or iotas; and neither the result
nor the operands together may exceed `max_elements` elements. XLA allows 45 million; hlofuse
defaults to 64 because a folded literal is printed in full in the module text and fusion has
nothing to gain from materializing big constants.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..hlo.dtypes import ElementType
from ..hlo.errors import HloError
from ..hlo.ir import HloInstruction, HloModule
from ..hlo.opcodes import op_info
from ..hlo.shapes import ArrayShape
from ..runtime.interpreter.core import Interpreter
from .pass_base import HloPass
from .rewrite import Rewriter, has_side_effect

DEFAULT_MAX_ELEMENTS = 64


def can_fold_opcode(opcode: str) -> bool:
    """Whether instructions of `opcode` may be folded at all (its row has a `fold` condition)."""
    return op_info(opcode).fold is not None


# ---- literals ---------------------------------------------------------------------------------

def literal_array(inst: HloInstruction) -> np.ndarray | None:
    """The value of a constant as an array of its shape, or None (elided or not an array)."""
    if inst.opcode != "constant" or inst.literal is None or not inst.shape.is_array:
        return None
    shape: ArrayShape = inst.shape
    return np.asarray(inst.literal, dtype=shape.dtype.numpy).reshape(shape.dims)


def _evaluate(inst: HloInstruction, args: list[np.ndarray]) -> np.ndarray | None:
    """`inst` on `args` by its reference rule, or None where the rule refuses (malformed
    attributes are the verifier's to report)."""
    with np.errstate(all="ignore"):
        try:
            value = Interpreter().evaluate_instruction(inst, list(args))
        except (HloError, ValueError, TypeError, KeyError, IndexError):
            return None
    return value if isinstance(value, np.ndarray) else None


def materialize(inst: HloInstruction) -> np.ndarray | None:
    """The value of a constant, a broadcast of a constant or an iota; None for anything else."""
    if inst.opcode == "constant":
        return literal_array(inst)
    if inst.opcode == "broadcast" and inst.operands[0].opcode == "constant" and inst.shape.is_array:
        value = literal_array(inst.operands[0])
        return None if value is None else _evaluate(inst, [value])
    if inst.opcode == "iota" and inst.shape.is_array:
        return _evaluate(inst, [])
    return None


def _types(inst: HloInstruction) -> list[ElementType]:
    return [o.shape.dtype for o in inst.operands if o.shape.is_array]


def _narrow(t: ElementType) -> bool:
    # 4-bit integers and 8-bit floats: XLA computes them through wider types with its own
    # rounding steps.
    return t.bits < 8 or (t.kind == "float" and t.bits == 8)


# ---- folding instructions ---------------------------------------------------------------------

def fold(inst: HloInstruction, args: list[np.ndarray]) -> np.ndarray | None:
    """`inst` applied to operand values `args` by its reference rule, or None where its row
    does not allow folding it on these values."""
    info = op_info(inst.opcode)
    if info.fold is None or not inst.shape.is_array:
        return None
    if info.kind != "data" and any(_narrow(t) for t in [inst.shape.dtype, *_types(inst)]):
        return None
    try:
        with np.errstate(all="ignore"):
            allowed = info.fold(inst, args)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None  # malformed attributes: leave it to the verifier
    return _evaluate(inst, args) if allowed else None


def _foldable(inst: HloInstruction, max_elements: int) -> list[np.ndarray] | None:
    if inst.opcode in ("constant", "parameter", "tuple", "broadcast", "iota"):
        return None
    if not can_fold_opcode(inst.opcode) or not inst.shape.is_array or not inst.operands:
        return None
    if inst.control_predecessors or has_side_effect(inst):
        return None
    if not any(o.opcode == "constant" for o in inst.operands):
        return None
    total = sum(o.shape.element_count() for o in inst.operands if o.shape.is_array)
    if max(total, inst.shape.element_count()) > max_elements:
        return None
    args = [materialize(o) for o in inst.operands]
    if any(a is None for a in args):
        return None
    return args


def fold_instruction(rewriter: Rewriter, inst: HloInstruction, max_elements: int = DEFAULT_MAX_ELEMENTS) -> bool:
    """Replace `inst` by a constant if all its operands are (broadcast) constants; True if done."""
    args = _foldable(inst, max_elements)
    if args is None:
        return False
    value = fold(inst, args)
    if value is None:
        return False
    const = HloInstruction("constant", inst.shape, name="constant")
    const.literal = literal_of(value, inst.shape)
    rewriter.replace(inst, const)
    return True


def literal_of(value, shape) -> np.ndarray:
    """A folded `value` as a constant's literal: a C-contiguous array of `shape`'s dimensions.
    (np.ascontiguousarray makes a 0-d value 1-d: a scalar constant's literal of shape (1,),
    which `float()` refuses under numpy 2; the HLO graph fuzzer, seed 74.)"""
    arr = np.array(value, order="C")
    return arr.reshape(shape.dims) if shape.is_array else arr


@dataclass(frozen=True)
class ConstantFolding(HloPass):
    """Fold instructions whose operands are all constants (see the module docstring)."""

    max_elements: int = DEFAULT_MAX_ELEMENTS
    name: ClassVar[str] = "constant-folding"

    def run(self, module: HloModule) -> bool:
        """Fold everywhere except inside fused computations; True if anything was folded."""
        changed = False
        for comp in module.computations_post_order():
            if comp.is_fusion_computation():
                continue
            rewriter = Rewriter(comp)
            folded = False
            for inst in comp.post_order():
                folded |= fold_instruction(rewriter, inst, self.max_elements)
            rewriter.finish()
            if folded:
                comp.sort_instructions()
            changed |= folded
        return changed

