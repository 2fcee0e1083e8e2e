"""Element generators for elementwise arithmetic and comparison, with XLA's semantics for the
corner cases (integer division by zero, shifts past the width, NaN-propagating max/min,
TOTALORDER compares); conversions are in elemental_convert.py."""
from __future__ import annotations

import math

from llvmlite import ir

from ..hlo.dtypes import ElementType
from ..hlo.errors import UnsupportedError
from ..hlo.opcodes import mark_unsupported, opcodes_where, register_elemental
from . import elemental_complex as cplx
from .elemental_narrow import decode_f64, is_narrow_float, narrow_total_order_key
from .elemental import ElementalEmitter, from_compute, to_compute
from .ir_helpers import I1, Index, flush_denormal_bits


def _et(inst) -> ElementType:
    return inst.shape.dtype


def _is_float(et: ElementType) -> bool:
    return et.is_float


def _intr(em: ElementalEmitter, name: str, args: list, ty=None):
    return em.target.intrinsic(em.b, name, args, ty)


def float_op(em: ElementalEmitter, et: ElementType, fn, *values):
    """Apply `fn(*compute values)` to register values of float type `et`, rounding back."""
    b = em.b
    return from_compute(b, fn(*[to_compute(b, v, et) for v in values]), et)


# ---- min / max -------------------------------------------------------------------------------
def _not_nan_constant(v) -> bool:
    """Whether IR value `v` is a float constant (a scalar or a splat vector) that is no NaN."""
    if not isinstance(v, ir.Constant):
        return False
    value = v.constant
    values = value if isinstance(value, (list, tuple)) else [value]
    try:
        return all(not math.isnan(float(getattr(x, "constant", x))) for x in values)
    except (TypeError, ValueError):
        return False


def emit_max(em: ElementalEmitter, et: ElementType, x, y, is_min: bool = False):
    """maximum/minimum; float NaN propagates (XLA's default, not fast-min-max)."""
    b = em.b
    if et.is_pred:
        return b.and_(x, y) if is_min else b.or_(x, y)
    if et.is_complex:
        return cplx.extremum(em, x, y, is_min)
    if et.is_float:
        # llvm.maximum/minimum propagate NaN and order -0 < +0; LLVM vectorizes them,
        # also as reductions.
        def extremum(a, c):
            r = em.target.float_max(b, a, c, is_min)
            if em.in_reducer or _not_nan_constant(a) or _not_nan_constant(c):
                return r
            # Of two NaNs, the first operand's, as XLA:CPU and the interpreter (numpy) return
            # it: llvm.maximum leaves the choice to the target, and x86 took the second's (a
            # clamp's sign, exposed by a TOTALORDER compare: the large-graph fuzzer, seed 50).
            # Against a constant that is no NaN there are never two (relu, relu6: the select
            # cost MobileNetV2 7%).
            return b.select(b.fcmp_unordered("uno", a, a), a, r)

        return float_op(em, et, extremum, x, y)
    op = "<=" if is_min else ">="
    cmp = b.icmp_signed(op, x, y) if et.is_signed else b.icmp_unsigned(op, x, y)
    return b.select(cmp, x, y)


def float_width(t: ir.Type) -> int:
    return {ir.HalfType: 16, ir.FloatType: 32, ir.DoubleType: 64}[type(t)]


# ---- unary -----------------------------------------------------------------------------------
def _unary_rule(fn):
    def rule(em: ElementalEmitter, inst):
        g = em.operand(inst, 0)
        src = inst.operands[0].shape.dtype
        if src.is_complex and fn not in (_abs, _negate, _math_unary, _copy, _sign):
            raise UnsupportedError(f"{inst.opcode} {inst.name}: complex operands are not supported")
        return lambda idx: fn(em, inst, src, g(idx))

    return rule


def _abs(em, inst, et, x):
    b = em.b
    if et.is_complex:
        return cplx.absolute(em, x)
    if et.is_float:
        return float_op(em, et, lambda v: _intr(em, "llvm.fabs", [v]), x)
    if not et.is_signed or et.is_pred:
        return x
    return b.select(b.icmp_signed("<", x, ir.Constant(x.type, 0)), b.neg(x), x)


def _negate(em, inst, et, x):
    if et.is_complex:
        return cplx.negate(em, x)
    if et.is_float:
        return float_op(em, et, em.b.fneg, x)
    return em.b.neg(x)


def _sign(em, inst, et, x):
    b = em.b
    if et.is_complex:
        return cplx.sign(em, x)
    if et.is_float:
        def f(v):
            one = _intr(em, "llvm.copysign", [ir.Constant(v.type, 1.0), v])
            # A zero (a denormal too, where DAZ compares it as zero) gives a zero of its sign.
            zero = _intr(em, "llvm.copysign", [ir.Constant(v.type, 0.0), v])
            signed = b.select(b.fcmp_ordered("==", v, ir.Constant(v.type, 0.0)), zero, one)
            return b.select(b.fcmp_unordered("uno", v, v), v, signed)

        return float_op(em, et, f, x)
    zero = ir.Constant(x.type, 0)
    if not et.is_signed:
        return b.zext(b.icmp_unsigned("!=", x, zero), x.type)
    pos = b.zext(b.icmp_signed(">", x, zero), x.type)
    neg = b.zext(b.icmp_signed("<", x, zero), x.type)
    return b.sub(pos, neg)


def _not(em, inst, et, x):
    return em.b.xor(x, ir.Constant(x.type, -1 if not et.is_pred else 1))


def _rounding(intrinsic):
    def f(em, inst, et, x):
        if not et.is_float:
            return x
        if et.name == "f8e8m0fnu":
            # Rounded in f64, where e8m0's 2**-127 is normal: in f32 it is a subnormal that
            # denormals-are-zero reads as 0 (ceil 0, then e8m0's NaN). XLA:CPU gives the
            # rounding of the exact value (ceil 1): its decode selects 2**-127 as a constant and
            # LLVM folds the rounding into the select, so the hardware never sees the subnormal.
            # Rounding is exact in any type, so f64 changes no other result.
            b = em.b
            return from_compute(b, _intr(em, intrinsic, [decode_f64(b, x, et.name)]), et)
        return float_op(em, et, lambda v: _intr(em, intrinsic, [v]), x)

    return f


def _is_finite(em, inst, et, x):
    b = em.b
    v = to_compute(b, x, et)
    return b.fcmp_ordered("<", _intr(em, "llvm.fabs", [v]), ir.Constant(v.type, float("inf")))


def _clz(em, inst, et, x):
    fnty = ir.FunctionType(x.type, [x.type, I1])
    fn = em.module.declare_intrinsic("llvm.ctlz", [x.type], fnty)
    return em.b.call(fn, [x, ir.Constant(I1, 0)])


def _popcnt(em, inst, et, x):
    return _intr(em, "llvm.ctpop", [x])


def _copy(em, inst, et, x):
    return x


def _math_unary(em, inst, et, x):
    name = inst.info.math
    if et.is_complex:
        return cplx.unary_math(em, name, x)
    return float_op(em, et, lambda v: em.target.math(em.b, name, [v]), x)


# Bit layouts (total, mantissa, exponent bits) of the types reduce-precision works on.
_FLOAT_LAYOUTS = {16: (16, 10, 5), 32: (32, 23, 8), 64: (64, 52, 11)}


def reduce_precision_bits(b: ir.IRBuilder, v, ebits: int, mbits: int):
    """XLA's reduce-precision algorithm on the bits of half/float/double `v`, in `v`'s own layout:
    round the mantissa to `mbits` bits (nearest even, at a fixed bit position, so the layout's
    subnormals round as integers), then, only if `ebits` is narrower than the layout's exponent,
    flush exponents out of the reduced range to signed zero / infinity. A NaN stays the same NaN."""
    nbits, nm, ne = _FLOAT_LAYOUTS[float_width(v.type)]
    it = ir.IntType(nbits)
    c = lambda k: ir.Constant(it, k)  # noqa: E731
    bits = b.bitcast(v, it)
    if mbits < nm:
        last = 1 << (nm - mbits)
        bias = b.add(b.lshr(b.and_(bits, c(last)), c(nm - mbits)), c((last >> 1) - 1))
        bits = b.and_(b.add(bits, bias), c(~(last - 1) & ((1 << nbits) - 1)))
    if ebits < ne:
        sign_mask = 1 << (nbits - 1)
        exp_mask = ((1 << ne) - 1) << nm
        exp_bias = (1 << (ne - 1)) - 1
        red_bias = (1 << (ebits - 1)) - 1
        xe = b.and_(bits, c(exp_mask))
        over = b.icmp_unsigned(">", xe, c((exp_bias + red_bias) << nm))
        under = b.icmp_unsigned("<=", xe, c((exp_bias - red_bias) << nm))
        signed_zero = b.and_(bits, c(sign_mask))
        signed_inf = b.or_(signed_zero, c(exp_mask))
        bits = b.select(over, signed_inf, b.select(under, signed_zero, bits))
    # Rounding can carry a NaN's mantissa into infinity (or, with no mantissa bits, to zero), and
    # the exponent check makes it infinity: XLA returns the operand's NaN unchanged, mbits=0 too.
    return b.select(b.fcmp_unordered("uno", v, v), v, b.bitcast(bits, v.type))


def _reduce_precision(em, inst, et, x):
    """reduce-precision computed in the layout XLA:CPU computes the operand type in: f32 and f64
    in their own bits, f16 in f16 bits (so ebits=5 keeps f16 subnormals, and mbits<10 rounds them
    at a fixed position), the 8-, 6- and 4-bit floats widened exactly to f16 (f8e8m0fnu, whose
    range f16 lacks, to f32), bf16 in f32 (its bits are f32's upper half: the same result)."""
    b = em.b
    ebits, mbits = int(inst.attrs["exponent_bits"]), int(inst.attrs["mantissa_bits"])
    if et.name == "f16":
        return reduce_precision_bits(b, x, ebits, mbits)
    v = to_compute(b, x, et)
    if is_narrow_float(et.name) and et.name != "f8e8m0fnu":
        half = reduce_precision_bits(b, b.fptrunc(v, ir.HalfType()), ebits, mbits)
        return from_compute(b, b.fpext(half, v.type), et)
    return from_compute(b, reduce_precision_bits(b, v, ebits, mbits), et)


for _op, _fn in {
    "abs": _abs, "negate": _negate, "sign": _sign, "not": _not,
    "ceil": _rounding("llvm.ceil"), "floor": _rounding("llvm.floor"),
    "round-nearest-afz": _rounding("llvm.round"), "round-nearest-even": _rounding("llvm.rint"),
    "is-finite": _is_finite, "count-leading-zeros": _clz, "popcnt": _popcnt, "copy": _copy,
    "reduce-precision": _reduce_precision,
}.items():
    register_elemental(_op)(_unary_rule(_fn))

register_elemental(*opcodes_where(lambda i: i.kind == "unary" and bool(i.math)))(_unary_rule(_math_unary))


# ---- binary ----------------------------------------------------------------------------------
def _binary_rule(fn):
    def rule(em: ElementalEmitter, inst):
        g0, g1 = em.operand(inst, 0), em.operand(inst, 1)
        et = inst.operands[0].shape.dtype
        return lambda idx: fn(em, inst, et, g0(idx), g1(idx))

    return rule


def _pred_arith(b: ir.IRBuilder, int_op: str, x, y):
    """add/subtract/multiply on pred as the interpreter (and XLA for add/multiply) defines them:
    saturating logic, not arithmetic mod 2 (an i1 `add` would be xor): or, and-not, and."""
    if int_op == "add":
        return b.or_(x, y)
    if int_op == "sub":
        return b.and_(x, b.not_(y))
    return b.and_(x, y)


def _arith(int_op, float_op_name):
    def f(em, inst, et, x, y):
        b = em.b
        if et.is_complex:
            return cplx.binary(em, int_op, x, y)
        if et.is_float:
            op = getattr(b, float_op_name)
            return float_op(em, et, lambda u, v: op(u, v, flags=em.fp_flags), x, y)
        if et.is_pred:
            return _pred_arith(b, int_op, x, y)
        return getattr(b, int_op)(x, y)

    return f


def _int_division(em, et, x, y, remainder: bool):
    """XLA: x/0 = -1 (all ones), x%0 = x; INT_MIN/-1 = INT_MIN, INT_MIN%-1 = 0."""
    b = em.b
    ty = x.type
    zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
    by_zero = b.icmp_unsigned("==", y, zero)
    if et.is_signed:
        int_min = ir.Constant(ty, -(1 << (et.bits - 1)))
        overflow = b.and_(b.icmp_signed("==", x, int_min), b.icmp_signed("==", y, ir.Constant(ty, -1)))
        safe = b.select(b.or_(by_zero, overflow), one, y)
        if remainder:
            r = b.select(overflow, zero, b.srem(x, safe))
            return b.select(by_zero, x, r)
        q = b.select(overflow, int_min, b.sdiv(x, safe))
        return b.select(by_zero, ir.Constant(ty, -1), q)
    safe = b.select(by_zero, one, y)
    if remainder:
        return b.select(by_zero, x, b.urem(x, safe))
    return b.select(by_zero, ir.Constant(ty, -1), b.udiv(x, safe))


def _divide(em, inst, et, x, y):
    if et.is_complex:
        return cplx.binary(em, "div", x, y)
    if et.is_float:
        return float_op(em, et, em.b.fdiv, x, y)
    return _int_division(em, et, x, y, False)


def _remainder(em, inst, et, x, y):
    if et.is_complex:
        raise UnsupportedError(f"remainder {inst.name}: complex operands are not supported (nor by XLA)")
    if et.is_float:
        return float_op(em, et, lambda a, c: em.target.float_remainder(em.b, a, c), x, y)
    return _int_division(em, et, x, y, True)


def _maximum(em, inst, et, x, y):
    return emit_max(em, et, x, y)


def _minimum(em, inst, et, x, y):
    return emit_max(em, et, x, y, is_min=True)


def _bitwise(op):
    return lambda em, inst, et, x, y: getattr(em.b, op)(x, y)


def _shift(kind):
    def f(em, inst, et, x, y):
        b = em.b
        ty = x.type
        width = ir.Constant(ty, et.bits)
        too_far = b.icmp_unsigned(">=", y, width)
        safe = b.select(too_far, ir.Constant(ty, 0), y)
        if kind == "shl":
            return b.select(too_far, ir.Constant(ty, 0), b.shl(x, safe))
        if kind == "lshr":
            return b.select(too_far, ir.Constant(ty, 0), b.lshr(x, safe))
        return b.ashr(x, b.select(too_far, ir.Constant(ty, et.bits - 1), y))

    return f


def _power(em, inst, et, x, y):
    b = em.b
    if et.is_complex:
        return cplx.power(em, x, y)
    if et.is_float:
        return float_op(em, et, lambda u, v: em.target.math(b, "pow", [u, v]), x, y)
    if et.is_pred:
        return b.or_(x, b.not_(y))  # x**0 = 1, x**1 = x (an i1 shift loop would shift past the width)
    if et.bits < 8:
        # XLA computes the 2- and 4-bit integers in 8 bits (so a u4 exponent of 15 is not negative).
        wide = ir.IntType(8)
        ext = b.sext if et.is_signed else b.zext
        return b.trunc(int_power(b, ext(x, wide), ext(y, wide)), x.type)
    return int_power(b, x, y)


def int_power(b: ir.IRBuilder, x, y):
    """XLA's integer power (the same for signed and unsigned types): square-and-multiply over the
    exponent's low 6 bits only, wrapping, so an exponent past 63 acts as its value mod 64
    (0**64 is 1, 2**65 is 2). An exponent negative as a signed value (also for unsigned types:
    XLA compares it signed) gives 1 for base 1, +-1 by parity for base -1 (all ones), else 0."""
    ty = x.type
    one = ir.Constant(ty, 1)
    acc, base, e = one, x, y
    for _ in range(min(ty.width, 6)):
        bit = b.trunc(e, I1)
        acc = b.select(bit, b.mul(acc, base), acc)
        base = b.mul(base, base)
        e = b.lshr(e, one)
    negative = b.icmp_signed("<", y, ir.Constant(ty, 0))
    minus_one = ir.Constant(ty, -1)
    odd = b.trunc(y, I1)
    of_minus_one = b.select(odd, minus_one, one)
    neg_val = b.select(b.icmp_unsigned("==", x, one), one,
                       b.select(b.icmp_unsigned("==", x, minus_one), of_minus_one, ir.Constant(ty, 0)))
    return b.select(negative, neg_val, acc)


def _atan2(em, inst, et, x, y):
    if et.is_complex:
        return _complex_atan2(em, x, y)
    return float_op(em, et, lambda u, v: em.target.math(em.b, "atan2", [u, v]), x, y)


def _complex_atan2(em, y, x):
    """XLA's complex atan2(y, x) = -i * log((x + i*y) / sqrt(x*x + y*y))."""
    b = em.b
    y_re, y_im = cplx.parts(b, y)
    i_y = cplx.make(b, y.type, b.fneg(y_im), y_re)
    norm = cplx.sqrt(em, cplx.binary(em, "add", cplx.binary(em, "mul", x, x), cplx.binary(em, "mul", y, y)))
    log = cplx.unary_math(em, "log", cplx.binary(em, "div", cplx.binary(em, "add", x, i_y), norm))
    l_re, l_im = cplx.parts(b, log)
    return cplx.make(b, y.type, l_im, b.fneg(l_re))


for _op, _fn in {
    "add": _arith("add", "fadd"), "subtract": _arith("sub", "fsub"), "multiply": _arith("mul", "fmul"),
    "divide": _divide, "remainder": _remainder, "maximum": _maximum, "minimum": _minimum,
    "and": _bitwise("and_"), "or": _bitwise("or_"), "xor": _bitwise("xor"),
    "shift-left": _shift("shl"), "shift-right-logical": _shift("lshr"), "shift-right-arithmetic": _shift("ashr"),
    "power": _power, "atan2": _atan2,
}.items():
    register_elemental(_op)(_binary_rule(_fn))


# ---- compare / select / clamp ----------------------------------------------------------------
_DIR = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def read_as_daz(em: ElementalEmitter, v, et: ElementType):
    """The register value `v` of float type `et` as a float compare under denormals-are-zero
    reads it. LLVM's InstCombine turns a float compare of a widened bf16 (a bitcast of its
    shifted bits) into an integer test of the bits, which sees a denormal as non-zero whatever
    the function's denormal-fp-math (found by the graph fuzzer, seed 41: bf16 -> pred gave
    true for 9e-41), and it looks through `freeze`. So on a flushing target a bf16 denormal is
    made a zero of its sign on the bits first (exponent field zero: keep only the sign), and
    so is an f32 that is such a widened bf16; other f32 and f64 values are read by the
    hardware's DAZ, and f16 and the 8-bit floats have no denormals in f32."""
    if not em.target.flushes_denormals:
        return v
    if et.name == "f32" and _widened_bf16(v):
        # an f32 that is a bf16 widened in this kernel (a convert from bf16 fused before the
        # compare: graph fuzzer, seed 94, bf16 -> f32 -> pred gave true for 1e-40): InstCombine
        # folds through the widening to the bf16 bits all the same
        return flush_denormal_bits(em.b, v, "f32")
    if et.name != "bf16":
        return v
    return flush_denormal_bits(em.b, v, "bf16")


def _widened_bf16(v) -> bool:
    """Whether LLVM value `v` is a bf16 widened to f32 as the element generators widen it
    (elemental.to_compute: the bits shifted into an f32's upper half)."""
    if not (isinstance(v, ir.CastInstr) and v.opname == "bitcast"):
        return False
    shifted = v.operands[0]
    if not (isinstance(shifted, ir.Instruction) and shifted.opname == "shl"):
        return False
    widened = shifted.operands[0]
    return (isinstance(widened, ir.CastInstr) and widened.opname == "zext"
            and widened.operands[0].type == ir.IntType(16))


def compare_values(em: ElementalEmitter, et: ElementType, direction: str, cmp_type: str | None, x, y):
    """compare with XLA's semantics: FLOAT is ordered except NE; TOTALORDER orders -NaN < -inf <
    ... < -0 < +0 < ... < inf < NaN by comparing sign-magnitude flipped integers."""
    b = em.b
    op = _DIR[direction]
    if et.is_complex:
        return cplx.compare(em, direction, x, y)
    if et.is_float and cmp_type == "TOTALORDER" and is_narrow_float(et.name):
        # On the stored bit patterns, so NaN payloads stay ordered (decoding would merge them).
        return b.icmp_signed(op, narrow_total_order_key(b, x, et.name), narrow_total_order_key(b, y, et.name))
    if et.is_float and cmp_type == "TOTALORDER":
        # On the value's own bits, not widened: an f16 NaN widened by the GPU's `cvt.f32.f16`
        # becomes the canonical NaN and loses its sign (graph fuzzer on an H200, seed 65);
        # bf16 values are held as their i16 bits already.
        it = ir.IntType(et.bits)
        shift, mag = ir.Constant(it, et.bits - 1), ir.Constant(it, (1 << (et.bits - 1)) - 1)

        def key(v):
            bits = v if v.type == it else b.bitcast(v, it)
            return b.xor(bits, b.and_(b.ashr(bits, shift), mag))

        return b.icmp_signed(op, key(x), key(y))
    if et.is_float:
        x, y = read_as_daz(em, x, et), read_as_daz(em, y, et)
        x, y = to_compute(b, x, et), to_compute(b, y, et)
        if direction == "NE":
            return b.fcmp_unordered("!=", x, y)
        return b.fcmp_ordered(op, x, y)
    signed = et.is_signed and not et.is_pred
    if cmp_type == "UNSIGNED":
        signed = False
    elif cmp_type == "SIGNED":
        signed = True
    return b.icmp_signed(op, x, y) if signed else b.icmp_unsigned(op, x, y)


@register_elemental("compare")
def _compare(em: ElementalEmitter, inst):
    g0, g1 = em.operand(inst, 0), em.operand(inst, 1)
    et = inst.operands[0].shape.dtype
    direction = str(inst.attrs["direction"])
    cmp_type = inst.attrs.get("type")
    cmp_type = str(cmp_type) if cmp_type is not None else None
    return lambda idx: compare_values(em, et, direction, cmp_type, g0(idx), g1(idx))


def _broadcast_scalar(em, inst, i):
    """Generator of operand i, read at the scalar index if the operand is rank 0 (old-style HLO)."""
    g = em.operand(inst, i)
    if inst.operands[i].shape.rank == 0 and inst.shape.rank > 0:
        return lambda idx: g(Index(em.b, (), multi=()))
    return g


@register_elemental("select")
def _select(em: ElementalEmitter, inst):
    p, t, f = (_broadcast_scalar(em, inst, i) for i in range(3))
    return lambda idx: em.b.select(p(idx), t(idx), f(idx))


@register_elemental("clamp")
def _clamp(em: ElementalEmitter, inst):
    lo, x, hi = (_broadcast_scalar(em, inst, i) for i in range(3))
    et = inst.shape.dtype
    # min(max(lo, x), hi) in this operand order: complex max/min are not symmetric (XLA:CPU).
    return lambda idx: emit_max(em, et, emit_max(em, et, lo(idx), x(idx)), hi(idx), is_min=True)



mark_unsupported("elemental", "XLA defines stochastic rounding of floats to signed integers only, which the "
                 "stochastic-convert-decomposer pass rewrites into elementwise ops (passes/"
                 "stochastic_convert_decomposer.py); to other types it is not defined", "stochastic-convert")
