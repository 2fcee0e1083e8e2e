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
from ..hlo.ir import HloInstruction, HloModule
from .pass_base import HloPass
from .rewrite import Rewriter
from .simplifier_base import splat


def _op(comp, opcode: str, shape, *operands: HloInstruction, **attrs) -> HloInstruction:
    return comp.add_instruction(HloInstruction(opcode, shape, list(operands), attrs, name=opcode))


def _constant(comp, like: HloInstruction, value) -> HloInstruction:
    """`value` broadcast to `like`'s shape (a scalar constant behind a broadcast)."""
    out = splat(like.shape, value)
    for inst in [*out.operands, out]:
        comp.add_instruction(inst)
    return out


def decomposable(inst: HloInstruction) -> bool:
    """Whether XLA's decomposition defines `inst`: a float operand and a signed integer result
    of 8 bits or more."""
    to: ElementType = inst.shape.dtype
    return inst.shape.is_array and to.kind == "sint" and to.bits >= 8


def decompose(inst: HloInstruction) -> HloInstruction:
    """Replace stochastic-convert `inst` by its decomposition (module docstring); the result."""
    comp = inst.parent
    x, random = inst.operands
    shape, to = inst.shape, inst.shape.dtype
    fshape, pred = x.shape, x.shape.with_dtype(element_type("pred"))
    sign = _op(comp, "sign", fshape, x)
    negative = _op(comp, "compare", pred, sign, _constant(comp, sign, 0), direction="LT")
    magnitude = _op(comp, "abs", fshape, x)
    whole = _op(comp, "floor", fshape, magnitude)
    fraction = _op(comp, "subtract", fshape, magnitude, whole)
    if x.shape.dtype.name == "f16":  # 2^16 is beyond f16's range
        fraction = _op(comp, "convert", fshape.with_dtype(element_type("f32")), fraction)
    scaled = _op(comp, "multiply", fraction.shape, fraction,
                 _constant(comp, fraction, float(2 ** random.shape.dtype.bits)))
    fixed = _op(comp, "convert", random.shape, scaled)
    round_up = _op(comp, "compare", pred, random, fixed, direction="LT")
    truncated = _op(comp, "convert", shape, whole)
    plus_one = _op(comp, "add", shape, truncated, _constant(comp, truncated, 1))
    rounded = _op(comp, "select", shape, round_up, plus_one, truncated)
    negated = _op(comp, "negate", shape, rounded)
    result = _op(comp, "select", shape, negative, negated, rounded)
    low, high = -(1 << (to.bits - 1)), (1 << (to.bits - 1)) - 1
    is_min = _op(comp, "compare", pred, x, _constant(comp, x, float(low)), direction="LE")
    result = _op(comp, "select", shape, is_min, _constant(comp, result, low), result)
    is_max = _op(comp, "compare", pred, x, _constant(comp, x, float(high)), direction="GE")
    result = _op(comp, "select", shape, is_max, _constant(comp, result, high), result)
    rewriter = Rewriter(comp)
    rewriter.replace(inst, result)
    rewriter.finish()
    return result


@dataclass(frozen=True)
class StochasticConvertDecomposer(HloPass):
    """Every stochastic-convert XLA's decomposition defines becomes its elementwise ops
    (module docstring). Work: one walk of the module."""

    name: ClassVar[str] = "stochastic-convert-decomposer"

    def run(self, module: HloModule) -> bool:
        """Decompose the stochastic converts; True if any was."""
        changed = False
        for comp in module.computations:
            for inst in [i for i in comp.instructions if i.opcode == "stochastic-convert" and decomposable(i)]:
                decompose(inst)
                changed = True
        if changed:
            for comp in module.computations:
                comp.sort_instructions()
        return changed
