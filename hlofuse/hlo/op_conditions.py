"""Row facts that depend on the instruction: when an opcode is expensive, when it may be folded,
what XLA:CPU's denormal mode does to it.

These are the registry's conditional fields (`OpInfo.expensive_rule`, `OpInfo.fold`): small pure
functions of one instruction (and, for expensiveness, the fusion target's parameters), written
against the instruction's duck type so that the registry does not import the IR or the passes.
The passes read them from the rows (passes/fusion/fusibility.py, passes/constant_folding.py).
"""
from __future__ import annotations

from typing import Any

import numpy as np

# An HloInstruction (hlo/ir.py) and a TargetParams (passes/fusion/cost_model.py); not imported:
# ir.py reads the registry, and the passes sit above it.
Inst = Any
Params = Any

_COMPARE_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")


def _element(inst: Inst):
    return inst.shape.dtype if inst.shape.is_array else None


def _operand_types(inst: Inst) -> list:
    return [o.shape.dtype for o in inst.operands if o.shape.is_array]


# ---- expensiveness (XLA's shape- and target-dependent IsExpensive cases) -----------------------

def _is_effective_scalar_constant(inst: Inst) -> bool:
    if inst.opcode == "broadcast":
        inst = inst.operands[0]
    return inst.opcode == "constant" and inst.shape.is_array and inst.shape.element_count() == 1


def _is_f32_or_f16(inst: Inst) -> bool:
    t = _element(inst)
    return t is not None and t.name in ("f32", "f16")


def expensive_if_complex(inst: Inst, params: Params) -> bool:
    """XLA: cheap for reals, expensive for complex (abs, sign, sin, cos; tan on CPU)."""
    t = _element(inst)
    return t is not None and t.is_complex


def expensive_trigonometry(inst: Inst, params: Params) -> bool:
    """sine and cosine: XLA's rule (cheap for reals, expensive for complex), except on the CPU,
    where hlofuse's f32 sine and cosine are evaluated in f64 with an exact Payne-Hanek
    reduction for any argument (emitters/math_trig.py: about 0.5 ULP) and cost what an
    exponential costs, about 2 ns an element on one Zen 4 core against 0.05 for a multiply.
    Recomputed in every element of a broadcast, as XLA:CPU fuses them, keras_hub Llama's rotary
    embedding computed the cosine and sine of its [256, 64] angle table 32 times over, in four
    kernels of 8.6 ms (2.0 vectorized, kernels/row_splits.py); computed once, the angles take
    0.04 ms and those kernels only move memory."""
    t = _element(inst)
    return t is not None and (t.is_complex or params.name == "cpu")


def expensive_unless_cheap_division(inst: Inst, params: Params) -> bool:
    """Integer div/rem by a (broadcast) scalar constant compiles to multiplies and shifts (XLA);
    f32/f16 division is cheap on the GPU (GpuInstructionFusion::IsExpensive)."""
    t = _element(inst)
    if t is not None and t.is_integer and _is_effective_scalar_constant(inst.operands[1]):
        return False
    return not (params.cheap_f32_math and inst.opcode == "divide" and _is_f32_or_f16(inst))


def expensive_unless_gpu_f32(inst: Inst, params: Params) -> bool:
    """GpuInstructionFusion::IsExpensive: sqrt, rsqrt, exp are cheap in f32/f16 on the GPU."""
    if params.cheap_f32_math and _is_f32_or_f16(inst):
        return False
    return inst.info.expensive


def expensive_cpu_f32_to_bf16(inst: Inst, params: Params) -> bool:
    """CpuInstructionFusion::IsExpensive: f32 -> bf16 needs NaN checks; every other convert is cheap."""
    if params.name != "cpu":
        return False
    t = _element(inst)
    src = _element(inst.operands[0]) if inst.operands else None
    return t is not None and src is not None and t.name == "bf16" and src.name == "f32"


# ---- constant folding --------------------------------------------------------------------------
# `fold(inst, operand values)`: True when folding `inst` on these values gives what every backend
# computes bit-exactly. The value itself comes from the row's reference rule (the interpreter);
# these conditions keep out the results that are target specific (which zero max(-0, +0) is) or
# that the folding pass has not been shown to reproduce on every backend (float -> int saturation,
# integer division by zero, complex products with infinities, transcendental functions).

def always(inst: Inst, args: list) -> bool:
    """Data movement: folding only moves bits."""
    return True


def _out_kind_in(*kinds: str):
    def fold(inst: Inst, args: list) -> bool:
        return inst.shape.dtype.kind in kinds

    fold.__doc__ = f"Folded for result types of kind {', '.join(kinds)}."
    return fold


fold_add_sub = _out_kind_in("sint", "uint", "float", "complex")
fold_multiply = _out_kind_in("sint", "uint", "float")
fold_divide = _out_kind_in("float")  # integer x/0 and INT_MIN/-1 are left to the backends
fold_negate = _out_kind_in("sint", "uint", "float", "complex")
fold_bitwise = _out_kind_in("pred", "sint", "uint")


def fold_abs(inst: Inst, args: list) -> bool:
    """abs of signed integers and floats (complex abs rounds differently per backend)."""
    return _operand_types(inst)[0].kind in ("sint", "float")


def fold_max_min(inst: Inst, args: list) -> bool:
    """Not complex; for floats, not where both operands are zeros (which zero wins is target specific)."""
    kind = inst.shape.dtype.kind
    if kind == "complex":
        return False
    return not (kind == "float" and bool(np.any((args[0] == 0) & (args[1] == 0))))


def fold_compare(inst: Inst, args: list) -> bool:
    """Plain directions, complex included (compares round nothing: every backend and the
    reference give the same bits, complex LT/LE/GT/GE in XLA's order); not TOTALORDER."""
    direction = inst.attrs.get("direction")
    return direction in _COMPARE_DIRECTIONS and inst.attrs.get("type") != "TOTALORDER"


def fold_convert(inst: Inst, args: list) -> bool:
    """The conversions that round once (or not at all) the same way everywhere."""
    src, dst = _operand_types(inst)[0], inst.shape.dtype
    if src == dst or dst.kind == "pred":
        return True  # x != 0, as XLA
    if src.kind == "pred":
        return dst.kind != "complex"
    if src.kind in ("sint", "uint") and dst.kind in ("sint", "uint"):
        return True  # wraps modulo 2^bits
    if src.kind in ("sint", "uint") and dst.name in ("f32", "f64"):
        return True  # one correctly rounded conversion
    if src.kind == "float" and dst.kind == "float":
        # Widening is exact; from f32/f64 every backend rounds once, to nearest even.
        return dst.bits >= src.bits or src.name in ("f32", "f64")
    return False  # float -> int saturates in XLA; complex conversions are left alone


def denormal_mode(inst: Inst) -> str:
    """The registry row's `denormals` mode refined by the instruction: a TOTALORDER compare
    orders the bits, so it keeps them. The interpreter applies this mode
    (runtime/interpreter/denormals.py); the element generators read literal operands by it."""
    mode = inst.info.denormals
    if mode != "keep" and inst.opcode == "compare" and str(inst.attrs.get("type", "")) == "TOTALORDER":
        return "keep"
    return mode
