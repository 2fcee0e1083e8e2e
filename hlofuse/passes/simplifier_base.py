"""What the simplifier's rule modules share: shape compatibility, reading constants through
broadcasts, the value range of an element type, and building replacement instructions.

A rule looks at one instruction and returns its replacement: an existing instruction, a new
one (not yet in the computation) or None when it does not apply (simplifier.py runs them).
"""
from __future__ import annotations

from typing import Callable

import ml_dtypes
import numpy as np

from ..hlo.dtypes import ElementType
from ..hlo.ir import HloInstruction
from ..hlo.shapes import ArrayShape, Layout, Shape
from .constant_folding import literal_array

Rule = Callable[[HloInstruction], "HloInstruction | None"]


def layout_of(s: ArrayShape) -> Layout:
    """`s`'s layout, XLA's default one when it has none."""
    return s.layout if s.layout is not None else Layout.default(s.rank)


def compatible(a: Shape, b: Shape) -> bool:
    """Same type, dimensions and layout (a missing layout counts as the default one)."""
    if a.is_array and b.is_array:
        return (a.dtype == b.dtype and a.dims == b.dims and a.dynamic == b.dynamic
                and layout_of(a) == layout_of(b))
    return a == b


def if_compatible(inst: HloInstruction, candidate: HloInstruction) -> HloInstruction | None:
    """`candidate` when it can stand for `inst` as it is (same shape and layout), else None."""
    return candidate if compatible(candidate.shape, inst.shape) else None


def scalar_constant(inst: HloInstruction) -> np.ndarray | None:
    """The value of a constant, looking through broadcasts, when all its elements are equal."""
    while inst.opcode == "broadcast":
        inst = inst.operands[0]
    value = literal_array(inst)
    if value is None or value.size == 0:
        return None
    first = value.reshape(-1)[0]
    # Compare bit patterns so that -0.0 and 0.0 (and NaN payloads) stay distinct.
    if value.dtype.kind in "fcV" or value.dtype.itemsize == 2:
        raw = np.ascontiguousarray(value).view(np.uint8).reshape(value.size, -1)
        if not (raw == raw[0]).all():
            return None
    elif not (value == first).all():
        return None
    return np.asarray(first)


def integer_range(t: ElementType) -> tuple[int, int] | None:
    """(lowest, highest) value of an integer or pred type; None for any other type."""
    if t.kind == "pred":
        return 0, 1
    if t.kind in ("sint", "uint"):
        info = ml_dtypes.iinfo(t.numpy)
        return int(info.min), int(info.max)
    return None


def is_all(inst: HloInstruction, value: int | float) -> bool:
    """Whether every element of `inst` (a constant, maybe behind broadcasts) equals `value`.
    An integer or pred `value` matches integers and preds only; a float `value` (+-inf) matches
    floats only; NaN never matches."""
    v = scalar_constant(inst)
    if v is None:
        return False
    kind = inst.shape.dtype.kind
    if isinstance(value, float):
        return kind == "float" and bool(np.asarray(v, dtype=np.float64) == value)
    if kind == "pred":
        return bool(v) == bool(value) and value in (0, 1)
    return kind in ("sint", "uint") and int(v) == value


def new_instruction(inst: HloInstruction, opcode: str, operands: list[HloInstruction], attrs: dict,
                    shape: Shape | None = None) -> HloInstruction:
    """A new instruction standing for `inst` (its shape unless `shape` is given). Named after its
    opcode, as XLA names new instructions; a rewrite to the same opcode takes over the old name
    (Rewriter.replace)."""
    return HloInstruction(opcode, shape if shape is not None else inst.shape, operands, attrs, name=opcode)


def new_scalar_constant(dtype: ElementType, value) -> HloInstruction:
    """A new rank-0 constant of `dtype` holding `value`."""
    c = HloInstruction("constant", ArrayShape(dtype, (), (), Layout(())), name="constant")
    c.literal = np.asarray(value).astype(dtype.numpy).reshape(())
    return c


def splat(shape: ArrayShape, value) -> HloInstruction:
    """broadcast(scalar constant `value`) of `shape`, as XLA's MakeScalarLike builds it."""
    return HloInstruction("broadcast", shape, [new_scalar_constant(shape.dtype, value)], {"dimensions": ()},
                          name="broadcast")
