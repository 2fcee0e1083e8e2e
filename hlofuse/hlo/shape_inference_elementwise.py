"""Shape rules of the elementwise ops: unary, binary, compare, select, clamp, conversions.

HLO has no implicit broadcasting: every array operand has the dimensions of the result
(clamp's bounds may also be scalars). Element-type rules follow XLA's ShapeInference.
"""
from __future__ import annotations

from typing import Callable

from .dtypes import PRED, ElementType, real_type
from .ir import HloInstruction
from .opcodes import register_shape_rule
from .shape_inference_common import (
    array_operand, array_operands, declared_array, fail, int_attr, is_scalar_of, make_array, text,
)
from .shapes import ArrayShape, Shape

# Element-type classes, as predicates over ElementType.
TypeClass = Callable[[ElementType], bool]


def _floating(t: ElementType) -> bool:
    return t.is_float


def _floating_or_complex(t: ElementType) -> bool:
    return t.is_float or t.is_complex


def _integral(t: ElementType) -> bool:
    return t.is_integer


def _integral_or_pred(t: ElementType) -> bool:
    return t.is_integer or t.is_pred


def _signed_or_complex(t: ElementType) -> bool:
    return t.kind in ("sint", "float", "complex")


def _numeric(t: ElementType) -> bool:
    return t.kind in ("sint", "uint", "float", "complex")


def _any(t: ElementType) -> bool:
    return True


_CLASS_NAMES = {
    _floating: "floating-point",
    _floating_or_complex: "floating-point or complex",
    _integral: "integral",
    _integral_or_pred: "integral or pred",
    _signed_or_complex: "signed integral, floating-point or complex",
    _numeric: "numeric",
    _any: "any",
}


def _check_type(inst: HloInstruction, shape: ArrayShape, allowed: TypeClass, i: int = 0) -> None:
    if not allowed(shape.dtype):
        name = _CLASS_NAMES[allowed]
        fail(inst, f"operand {i} has element type {shape.dtype.name}; "
                   f"{inst.opcode} expects {'an' if name[0] in 'aeiou' else 'a'} {name} type")


def _unary(allowed: TypeClass, result: Callable[[ElementType], ElementType] = lambda t: t):
    def rule(inst: HloInstruction) -> Shape:
        x = array_operand(inst, 0)
        _check_type(inst, x, allowed)
        return make_array(result(x.dtype), x.dims, x.dynamic)

    rule.__doc__ = f"Unary elementwise rule: operand type {_CLASS_NAMES[allowed]}, same dimensions."
    return rule


# Each verdict here (operand type class per opcode) is checked against XLA's compiler over every
# element type class in tests/hlo/test_verifier_vs_xla_types.py.
register_shape_rule("floor", "ceil", "round-nearest-afz", "round-nearest-even", "erf")(_unary(_floating))
register_shape_rule("exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "sqrt",
                    "rsqrt", "tanh", "sine", "cosine", "tan", "sinh", "cosh", "asin", "acos", "atan", "asinh",
                    "acosh", "atanh")(_unary(_floating_or_complex))
# XLA's ShapeInference takes cbrt on real floats only ("Expected element type in shape to be
# floating for cbrt operation"); logistic, by contrast, compiles and runs on complex in XLA:CPU.
register_shape_rule("cbrt")(_unary(_floating))
register_shape_rule("real", "imag")(_unary(_floating_or_complex, real_type))
register_shape_rule("abs")(_unary(_signed_or_complex, real_type))
register_shape_rule("sign")(_unary(_signed_or_complex))
register_shape_rule("negate")(_unary(_numeric))
register_shape_rule("count-leading-zeros", "popcnt")(_unary(_integral))
register_shape_rule("not")(_unary(_integral_or_pred))
register_shape_rule("is-finite")(_unary(_floating, lambda t: PRED))


@register_shape_rule("copy")
def _copy(inst: HloInstruction) -> Shape:
    """copy: the operand's shape (arrays and tuples alike)."""
    if len(inst.operands) != 1:
        fail(inst, f"expects 1 operand, has {len(inst.operands)}")
    return inst.operands[0].shape


def _same_dims_operands(inst: HloInstruction) -> list[ArrayShape]:
    shapes = array_operands(inst)
    if not shapes:
        fail(inst, "expects at least one operand")
    for i, s in enumerate(shapes[1:], 1):
        if s.dims != shapes[0].dims:
            fail(inst, f"operands must have equal dimensions (no implicit broadcast in HLO): "
                       f"operand 0 is {text(shapes[0])}, operand {i} is {text(s)}")
    return shapes


def _same_type_operands(inst: HloInstruction, shapes: list[ArrayShape]) -> None:
    for i, s in enumerate(shapes[1:], 1):
        if s.dtype != shapes[0].dtype:
            fail(inst, f"operands must have the same element type: operand 0 is {shapes[0].dtype.name}, "
                       f"operand {i} is {s.dtype.name}")


def _binary(allowed: TypeClass, refused: dict[str, str] | None = None):
    """`refused` maps an element-type kind the class admits to why it is refused all the same."""

    def rule(inst: HloInstruction) -> Shape:
        shapes = _same_dims_operands(inst)
        _same_type_operands(inst, shapes)
        _check_type(inst, shapes[0], allowed)
        x = shapes[0]
        if refused and x.dtype.kind in refused:
            fail(inst, f"{inst.opcode} of {x.dtype.name} is refused: {refused[x.dtype.kind]}")
        return make_array(x.dtype, x.dims, x.dynamic)

    rule.__doc__ = f"Binary elementwise rule: equal shapes of a {_CLASS_NAMES[allowed]} type."
    return rule


# XLA takes pred for add (or), multiply (and), maximum and minimum, but refuses it for subtract,
# divide, remainder and power (StableHLO has no i1 arithmetic; checked with XLA's compiler).
register_shape_rule("add", "multiply", "maximum", "minimum")(_binary(_any))
register_shape_rule("subtract", "divide", "power")(_binary(_numeric))
# XLA's shape inference, its HLO verifier and StableHLO let remainder of complex through, but XLA:CPU
# crashes (SIGSEGV) compiling it: there is no result to match, so it is refused here.
register_shape_rule("remainder")(_binary(_numeric, refused={
    "complex": "XLA's verifier accepts complex remainder, but XLA:CPU cannot compile it (it crashes)"}))
register_shape_rule("atan2")(_binary(_floating_or_complex))
register_shape_rule("and", "or", "xor")(_binary(_integral_or_pred))
register_shape_rule("shift-left", "shift-right-arithmetic", "shift-right-logical")(_binary(_integral))


@register_shape_rule("complex")
def _complex(inst: HloInstruction) -> Shape:
    """complex(re, im): f32 -> c64, f64 -> c128."""
    shapes = _same_dims_operands(inst)
    _same_type_operands(inst, shapes)
    t = shapes[0].dtype.name
    if t not in ("f32", "f64"):
        fail(inst, f"complex expects f32 or f64 operands, got {t}")
    from .dtypes import element_type

    return make_array(element_type("c64" if t == "f32" else "c128"), shapes[0].dims, shapes[0].dynamic)


_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")
_COMPARE_TYPES = ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")
# The comparison types XLA's HLO verifier allows per element-type kind ("Expected comparison type
# UNSIGNED. actual: FLOAT"). Complex takes every direction, but only under FLOAT, not
# TOTALORDER: XLA orders LT/GT lexicographically (real part, then imaginary part) and LE/GE by
# the real parts alone (emitters/elemental_complex.compare).
_COMPARE_TYPES_OF_KIND = {"pred": ("UNSIGNED",), "uint": ("UNSIGNED",), "sint": ("SIGNED",),
                          "float": ("FLOAT", "TOTALORDER"), "complex": ("FLOAT",)}


@register_shape_rule("compare")
def _compare(inst: HloInstruction) -> Shape:
    """compare: equal operand shapes and types, a known direction, a comparison type that fits
    the element type; the result is pred."""
    shapes = _same_dims_operands(inst)
    _same_type_operands(inst, shapes)
    direction = inst.attrs.get("direction")
    if direction not in _DIRECTIONS:
        fail(inst, f"direction must be one of {', '.join(_DIRECTIONS)}, got {direction!r}")
    ctype = inst.attrs.get("type")
    if ctype is not None:
        if str(ctype) not in _COMPARE_TYPES:
            fail(inst, f"comparison type must be one of {', '.join(_COMPARE_TYPES)}, got {ctype!r}")
        fits = _COMPARE_TYPES_OF_KIND.get(shapes[0].dtype.kind, ())
        if str(ctype) not in fits:
            fail(inst, f"comparison type {ctype} does not fit element type {shapes[0].dtype.name}: "
                       f"expected {' or '.join(fits) or 'none (not comparable)'}")
    return make_array(PRED, shapes[0].dims, shapes[0].dynamic)


@register_shape_rule("select")
def _select(inst: HloInstruction) -> Shape:
    """select(pred, on_true, on_false): pred of the same dimensions as the branches, or a
    scalar pred choosing a whole branch (XLA's verifier and XLA:CPU of jaxlib 0.10 take it;
    XLA's tiled CPU emitter tests use it; a pred of another rank is refused by both)."""
    p, t, f = array_operands(inst, range(3))
    if p.dtype != PRED:
        fail(inst, f"predicate (operand 0) must have element type pred, has {p.dtype.name}")
    if t.dtype != f.dtype or t.dims != f.dims:
        fail(inst, f"on_true {text(t)} and on_false {text(f)} must have the same shape")
    if p.rank != 0 and p.dims != t.dims:
        fail(inst, f"predicate {text(p)} must be a scalar or have the dimensions of the selected operands "
                   f"{text(t)}")
    return make_array(t.dtype, t.dims, t.dynamic)


@register_shape_rule("clamp")
def _clamp(inst: HloInstruction) -> Shape:
    """clamp(min, x, max): bounds are scalars or have x's shape; one element type."""
    lo, x, hi = array_operands(inst, range(3))
    for name, b in (("min", lo), ("max", hi)):
        if b.dtype != x.dtype:
            fail(inst, f"{name} bound has element type {b.dtype.name}, operand has {x.dtype.name}")
        if b.rank != 0 and b.dims != x.dims:
            fail(inst, f"{name} bound {text(b)} must be a scalar or have the operand's shape {text(x)}")
    return make_array(x.dtype, x.dims, x.dynamic)


@register_shape_rule("convert")
def _convert(inst: HloInstruction) -> Shape:
    """convert: same dimensions, the declared element type (complex to real is refused)."""
    x = array_operand(inst, 0)
    out = declared_array(inst)
    if x.dtype.is_complex and not out.dtype.is_complex:
        fail(inst, f"conversion from complex {x.dtype.name} to {out.dtype.name} is not defined (use real/imag)")
    return make_array(out.dtype, x.dims, x.dynamic)


@register_shape_rule("bitcast-convert")
def _bitcast_convert(inst: HloInstruction) -> Shape:
    """bitcast-convert: equal bit widths keep the dimensions; a narrower result adds a
    trailing dimension of the width ratio, a wider one consumes it."""
    x = array_operand(inst, 0)
    out = declared_array(inst)
    if x.dtype.is_complex != out.dtype.is_complex:
        # XLA's ShapeInference refuses this ("Conversion between complex and real type").
        fail(inst, f"cannot bitcast between complex and real types ({x.dtype.name} -> {out.dtype.name})")
    a, b = x.dtype.bits, out.dtype.bits
    if x.dtype.is_complex and a != b:
        # XLA's shape inference lets c64 <-> c128 through, but XLA:CPU cannot compile it
        # (c128 -> c64 is an error, c64 -> c128 a crash): there is no defined result.
        fail(inst, f"cannot bitcast {x.dtype.name} to {out.dtype.name}: complex types of different "
                   f"widths (XLA compiles only a complex type to itself)")
    if a == b:
        return make_array(out.dtype, x.dims, x.dynamic)
    if a > b:
        if a % b:
            fail(inst, f"cannot bitcast {x.dtype.name} to {out.dtype.name}: widths do not divide")
        return make_array(out.dtype, x.dims + (a // b,))
    if b % a or not x.dims or x.dims[-1] != b // a:
        fail(inst, f"bitcast from {text(x)} to {out.dtype.name} needs a last dimension of {b // a if a else '?'}")
    return make_array(out.dtype, x.dims[:-1])


@register_shape_rule("reduce-precision")
def _reduce_precision(inst: HloInstruction) -> Shape:
    """reduce-precision: a floating operand, exponent_bits >= 1, mantissa_bits >= 0."""
    x = array_operand(inst, 0)
    _check_type(inst, x, _floating)
    e = int_attr(inst, "exponent_bits")
    m = int_attr(inst, "mantissa_bits")
    if e < 1:
        fail(inst, f"exponent_bits must be an integer >= 1, got {e!r}")
    if m < 0:
        fail(inst, f"mantissa_bits must be an integer >= 0, got {m!r}")
    return make_array(x.dtype, x.dims, x.dynamic)


@register_shape_rule("stochastic-convert")
def _stochastic_convert(inst: HloInstruction) -> Shape:
    """stochastic-convert(x, random): random bits are unsigned of x's width and shape."""
    x, r = array_operands(inst, range(2))
    out = declared_array(inst)
    _check_type(inst, x, _floating)
    if r.dtype.kind != "uint" or r.dtype.bits != x.dtype.bits:
        fail(inst, f"random operand must be unsigned with {x.dtype.bits} bits, is {r.dtype.name}")
    if r.dims != x.dims:
        fail(inst, f"random operand {text(r)} must have the dimensions of the operand {text(x)}")
    return make_array(out.dtype, x.dims, x.dynamic)


@register_shape_rule("map")
def _map(inst: HloInstruction) -> Shape:
    """map(x0..xn-1), to_apply: equal operand dimensions; the computation maps n scalars to one."""
    from .shape_inference_common import check_signature, computation, root_shape

    shapes = _same_dims_operands(inst)
    comp = computation(inst, "to_apply")
    r = root_shape(inst, comp)
    if not is_scalar_of(r):
        fail(inst, f"mapped computation {comp.name} must return a scalar, returns {text(r)}")
    check_signature(inst, comp, [make_array(s.dtype, ()) for s in shapes], None, "mapped")
    dims = inst.attrs.get("dimensions")
    if dims is not None and tuple(dims) != tuple(range(shapes[0].rank)):
        fail(inst, f"map dimensions must be {list(range(shapes[0].rank))}, got {list(dims)}")
    return make_array(r.dtype, shapes[0].dims, shapes[0].dynamic)
