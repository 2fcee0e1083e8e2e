"""XLA's StochasticConvertDecomposer: `stochastic-convert` of floats to a signed integer type
becomes the elementwise ops that define it, for the compiled backends (the interpreter computes
the same convention itself, runtime/interpreter/conversion.py, and is the oracle of this
rewrite).

    stochastic-convert(x, r) -> s (a signed integer type of b bits; r unsigned, x's width w)
      negative = compare(sign(x), 0), LT
      whole    = floor(abs(x));  fraction = abs(x) - whole   (f16: widened to f32)
      up       = compare(r, convert(fraction * 2^w)), LT     (unsigned compare)
      t        = convert(whole) + (up ? 1 : 0)
      s        = negative ? -t : t
      s        = x <= min(s) ? min(s) : (x >= max(s) ? max(s) : s)   (bounds in x's type)

The fraction, read as a fixed-point number of w bits, rounds |x| up with probability equal to
it when r is uniform. XLA defines no stochastic rounding to other types: such an instruction
is left, and the element generators refuse it by name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.dtypes import ElementType, element_type
from ..hlo.ir import HloInstruction
from .op_expander import OpExpander, add, add_splat


def decomposable(inst: HloInstruction) -> bool:
    """Whether XLA's decomposition defines `inst`: a float operand and a signed integer result
    of 8 bits or more."""
    to: ElementType = inst.shape.dtype
    return inst.shape.is_array and to.kind == "sint" and to.bits >= 8


def decompose(inst: HloInstruction) -> HloInstruction:
    """The decomposition of stochastic-convert `inst` (module docstring), added before it."""
    comp = inst.parent
    x, random = inst.operands
    shape, to = inst.shape, inst.shape.dtype
    fshape, pred = x.shape, x.shape.with_dtype(element_type("pred"))
    sign = add(comp, "sign", fshape, x)
    negative = add(comp, "compare", pred, sign, add_splat(comp, sign.shape, 0), direction="LT")
    magnitude = add(comp, "abs", fshape, x)
    whole = add(comp, "floor", fshape, magnitude)
    fraction = add(comp, "subtract", fshape, magnitude, whole)
    if x.shape.dtype.name == "f16":  # 2^16 is beyond f16's range
        fraction = add(comp, "convert", fshape.with_dtype(element_type("f32")), fraction)
    scaled = add(comp, "multiply", fraction.shape, fraction,
                 add_splat(comp, fraction.shape, float(2 ** random.shape.dtype.bits)))
    fixed = add(comp, "convert", random.shape, scaled)
    round_up = add(comp, "compare", pred, random, fixed, direction="LT")
    truncated = add(comp, "convert", shape, whole)
    plus_one = add(comp, "add", shape, truncated, add_splat(comp, truncated.shape, 1))
    rounded = add(comp, "select", shape, round_up, plus_one, truncated)
    negated = add(comp, "negate", shape, rounded)
    result = add(comp, "select", shape, negative, negated, rounded)
    low, high = -(1 << (to.bits - 1)), (1 << (to.bits - 1)) - 1
    is_min = add(comp, "compare", pred, x, add_splat(comp, x.shape, float(low)), direction="LE")
    result = add(comp, "select", shape, is_min, add_splat(comp, result.shape, low), result)
    is_max = add(comp, "compare", pred, x, add_splat(comp, x.shape, float(high)), direction="GE")
    return add(comp, "select", shape, is_max, add_splat(comp, result.shape, high), result)


@dataclass(frozen=True)
class StochasticConvertDecomposer(OpExpander):
    """Every stochastic-convert XLA's decomposition defines becomes its elementwise ops
    (module docstring). Work: one walk of the module."""

    name: ClassVar[str] = "stochastic-convert-decomposer"

    def matches(self, inst: HloInstruction) -> bool:
        """A stochastic-convert XLA's decomposition defines."""
        return inst.opcode == "stochastic-convert" and decomposable(inst)

    def expand(self, inst: HloInstruction, run: dict) -> HloInstruction:
        """Its decomposition."""
        return decompose(inst)
