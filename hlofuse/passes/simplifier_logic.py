"""Simplifier rules whose result is fixed by the operand type's value range (XLA's
AlgebraicSimplifier HandleCompare, HandleAnd, HandleOr, HandleMaximum, HandleMinimum).

Compares:
  x < lowest and x > highest are false, x >= lowest and x <= highest are true, for integers
  and pred (XLA: `X u< 0 -> false`, `X u>= 0 -> true` and their mirrors for unsigned types;
  here any integer type's range, the same argument); mirrored with the constant on the left;
  x op x for integers and pred (XLA: `lhs == rhs && IsIntegralType`): GT/LT/NE false,
  EQ/GE/LE true; iota < 0 false and iota >= 0 true (and mirrors), when the iota's values all
  fit its type.
  Floats: only x < -inf and x > +inf (and mirrors) are folded, to false: a NaN operand gives
  false there too. x >= -inf, x <= +inf and x == x are NOT folded: NaN makes them false.
  TOTALORDER compares are never folded (there -NaN < -inf).
and/or (pred and integers, bit for bit):
  x & 0 => 0, x & ~0 => x (XLA: `A && True => A`, `A & 0 => 0`); x | 0 => x, x | ~0 => ~0.
maximum/minimum:
  max(x, lowest) => x, min(x, highest) => x for integers and pred; for floats with infinities
  max(x, -inf) => x and min(x, +inf) => x (HLO's max/min propagate NaN, so x = NaN stays NaN).
"""
from __future__ import annotations

from ..hlo.ir import HloInstruction
from .simplifier_base import Rule, if_compatible, integer_range, is_all, splat

_MIRROR = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "EQ": "EQ", "NE": "NE"}


def _compare_with_constant_rhs(direction: str, x: HloInstruction, c: HloInstruction) -> bool | None:
    """The value of `x <direction> c` when the type's range fixes it, else None."""
    t = x.shape.dtype
    bounds = integer_range(t)
    if bounds is not None:
        lowest, highest = bounds
        if is_all(c, lowest):
            return {"LT": False, "GE": True}.get(direction)
        if is_all(c, highest):
            return {"GT": False, "LE": True}.get(direction)
        return None
    if t.kind == "float":
        if direction == "LT" and is_all(c, float("-inf")):
            return False
        if direction == "GT" and is_all(c, float("inf")):
            return False
    return None


def _iota_fits(iota: HloInstruction) -> bool:
    """Whether every value of the iota is representable (a narrow integer iota wraps)."""
    n = iota.shape.dims[int(iota.attrs["iota_dimension"])]
    bounds = integer_range(iota.shape.dtype)
    return iota.shape.dtype.kind == "float" or (bounds is not None and n - 1 <= bounds[1])


def _compare_value(inst: HloInstruction) -> bool | None:
    if str(inst.attrs.get("type", "")) == "TOTALORDER":
        return None
    direction = str(inst.attrs["direction"])
    lhs, rhs = inst.operands
    if direction not in _MIRROR or not lhs.shape.is_array:
        return None
    kind = lhs.shape.dtype.kind
    if lhs is rhs and kind in ("sint", "uint", "pred"):
        return direction in ("EQ", "GE", "LE")
    value = _compare_with_constant_rhs(direction, lhs, rhs)
    if value is None:
        value = _compare_with_constant_rhs(_MIRROR[direction], rhs, lhs)
    if value is not None:
        return value
    # iota >= 0 everywhere (XLA folds iota < 0 and 0 > iota to false, their negations to true)
    for x, c, d in ((lhs, rhs, direction), (rhs, lhs, _MIRROR[direction])):
        if x.opcode == "iota" and kind in ("sint", "uint", "float") and is_all(c, 0 if kind != "float" else 0.0) \
                and _iota_fits(x):
            return {"LT": False, "GE": True}.get(d)
    return None


def compare_by_range(inst: HloInstruction) -> HloInstruction | None:
    """A compare whose result every element shares, as a broadcast pred constant."""
    value = _compare_value(inst)
    if value is None or not inst.shape.is_array:
        return None
    return splat(inst.shape, value)


def _all_ones(inst: HloInstruction) -> bool:
    t = inst.shape.dtype
    if t.kind == "pred":
        return is_all(inst, 1)
    bounds = integer_range(t)
    if bounds is None:
        return False
    # every bit set: -1 for signed types, the highest value for unsigned ones
    return is_all(inst, -1 if t.kind == "sint" else bounds[1])


def and_with_constant(inst: HloInstruction) -> HloInstruction | None:
    """x & 0 => 0 and x & ~0 => x, either operand order (pred and integers)."""
    lhs, rhs = inst.operands
    for x, c in ((lhs, rhs), (rhs, lhs)):
        if is_all(c, 0):
            return if_compatible(inst, c)
        if _all_ones(c):
            return if_compatible(inst, x)
    return None


def or_with_constant(inst: HloInstruction) -> HloInstruction | None:
    """x | 0 => x and x | ~0 => ~0, either operand order (pred and integers)."""
    lhs, rhs = inst.operands
    for x, c in ((lhs, rhs), (rhs, lhs)):
        if is_all(c, 0):
            return if_compatible(inst, x)
        if _all_ones(c):
            return if_compatible(inst, c)
    return None


def _is_lowest(c: HloInstruction) -> bool:
    bounds = integer_range(c.shape.dtype)
    if bounds is not None:
        return is_all(c, bounds[0])
    return is_all(c, float("-inf"))


def _is_highest(c: HloInstruction) -> bool:
    bounds = integer_range(c.shape.dtype)
    if bounds is not None:
        return is_all(c, bounds[1])
    return is_all(c, float("inf"))


def max_with_lowest(inst: HloInstruction) -> HloInstruction | None:
    """max(x, lowest) => x (integers, pred; floats: lowest = -inf)."""
    lhs, rhs = inst.operands
    if _is_lowest(rhs):
        return if_compatible(inst, lhs)
    if _is_lowest(lhs):
        return if_compatible(inst, rhs)
    return None


def min_with_highest(inst: HloInstruction) -> HloInstruction | None:
    """min(x, highest) => x (integers, pred; floats: highest = +inf)."""
    lhs, rhs = inst.operands
    if _is_highest(rhs):
        return if_compatible(inst, lhs)
    if _is_highest(lhs):
        return if_compatible(inst, rhs)
    return None


# (opcode, rule) pairs simplifier.py registers
RULES: tuple[tuple[str, Rule], ...] = (
    ("compare", compare_by_range),
    ("and", and_with_constant),
    ("or", or_with_constant),
    ("maximum", max_with_lowest),
    ("minimum", min_with_highest),
)
