"""Complex arithmetic for the elemental emitter: c64/c128 are {re, im} structs in registers
and in memory (numpy's layout). The generic rules in elemental_math.py call these when the
element type is complex."""
from __future__ import annotations

import math

from llvmlite import ir

from ..hlo.dtypes import ElementType, real_type
from ..hlo.errors import UnsupportedError
from ..hlo.opcodes import register_elemental
from .elemental import reg_type, scalar_constant


def parts(b: ir.IRBuilder, v):
    """(real, imaginary) parts of a complex register value."""
    return b.extract_value(v, 0), b.extract_value(v, 1)


def make(b: ir.IRBuilder, ty: ir.Type, re, im):
    """A complex value of struct type `ty` from its parts."""
    return b.insert_value(b.insert_value(ir.Constant(ty, ir.Undefined), re, 0), im, 1)


def binary(em, op: str, x, y):
    """add / sub / mul / div of complex values (division: `divide`, as XLA divides)."""
    b = em.b
    a, bb = parts(b, x)
    c, d = parts(b, y)
    if op == "add":
        return make(b, x.type, b.fadd(a, c), b.fadd(bb, d))
    if op == "sub":
        return make(b, x.type, b.fsub(a, c), b.fsub(bb, d))
    if op == "mul":  # each part one fused multiply-add, as XLA:CPU's (interpreter/complex_xla.multiply)
        fma = lambda p, q, r: em.target.intrinsic(b, "llvm.fma", [p, q, r])  # noqa: E731
        return make(b, x.type, fma(a, c, b.fneg(b.fmul(bb, d))), fma(bb, c, b.fmul(a, d)))
    if op == "div":
        return divide(em, x, y)
    raise UnsupportedError(f"complex {op} is not supported")


def divide(em, x, y):
    """x / y as XLA divides (MLIR's ComplexToStandard, the interpreter's complex_xla.divide):
    Smith's algorithm, and where both parts of that are NaN, the limits for a zero divisor
    (copysign(inf, re y) * x), an infinite dividend over a finite divisor (inf * signs of x's
    infinite parts * conj y) and a finite dividend over an infinite divisor (0 * x * signs of
    conj y's infinite parts)."""
    b = em.b
    a, bb = parts(b, x)
    c, d = parts(b, y)
    ty = a.type
    zero, one, inf = ir.Constant(ty, 0.0), ir.Constant(ty, 1.0), ir.Constant(ty, math.inf)
    fabs = lambda v: em.target.intrinsic(b, "llvm.fabs", [v])  # noqa: E731
    copysign = lambda m, s: em.target.intrinsic(b, "llvm.copysign", [m, s])  # noqa: E731
    # Smith: |c| < |d| divides through by d, else (NaN included) by c.
    r1 = b.fdiv(c, d)
    den1 = b.fadd(d, b.fmul(c, r1))
    re1 = b.fdiv(b.fadd(b.fmul(a, r1), bb), den1)
    im1 = b.fdiv(b.fsub(b.fmul(bb, r1), a), den1)
    r2 = b.fdiv(d, c)
    den2 = b.fadd(c, b.fmul(d, r2))
    re2 = b.fdiv(b.fadd(a, b.fmul(bb, r2)), den2)
    im2 = b.fdiv(b.fsub(bb, b.fmul(a, r2)), den2)
    aa, ab, ac, ad = fabs(a), fabs(bb), fabs(c), fabs(d)
    by_d = b.fcmp_ordered("<", ac, ad)
    re, im = b.select(by_d, re1, re2), b.select(by_d, im1, im2)

    # 1. Zero divisor, a dividend that is not NaN + NaN i.
    not_nan = b.or_(b.fcmp_ordered("ord", a, zero), b.fcmp_ordered("ord", bb, zero))
    zero_div = b.and_(not_nan, b.and_(b.fcmp_ordered("==", ac, zero), b.fcmp_ordered("==", ad, zero)))
    inf_c = copysign(inf, c)
    # 2. Infinite dividend, finite divisor (ordered compares: NaN is neither finite nor infinite).
    finite_y = b.and_(b.fcmp_ordered("!=", ac, inf), b.fcmp_ordered("!=", ad, inf))
    a_inf, b_inf = b.fcmp_ordered("==", aa, inf), b.fcmp_ordered("==", ab, inf)
    inf_num = b.and_(b.or_(a_inf, b_inf), finite_y)
    sa, sb = copysign(b.select(a_inf, one, zero), a), copysign(b.select(b_inf, one, zero), bb)
    # 3. Finite dividend, infinite divisor.
    finite_x = b.and_(b.fcmp_ordered("!=", aa, inf), b.fcmp_ordered("!=", ab, inf))
    c_inf, d_inf = b.fcmp_ordered("==", ac, inf), b.fcmp_ordered("==", ad, inf)
    inf_den = b.and_(finite_x, b.or_(c_inf, d_inf))
    sc, sd = copysign(b.select(c_inf, one, zero), c), copysign(b.select(d_inf, one, zero), d)

    special_re = b.select(zero_div, b.fmul(inf_c, a), b.select(
        inf_num, b.fmul(inf, b.fadd(b.fmul(sa, c), b.fmul(sb, d))),
        b.select(inf_den, b.fmul(zero, b.fadd(b.fmul(a, sc), b.fmul(bb, sd))), re)))
    special_im = b.select(zero_div, b.fmul(inf_c, bb), b.select(
        inf_num, b.fmul(inf, b.fsub(b.fmul(sb, c), b.fmul(sa, d))),
        b.select(inf_den, b.fmul(zero, b.fsub(b.fmul(bb, sc), b.fmul(a, sd))), im)))
    both_nan = b.and_(b.fcmp_unordered("uno", re, zero), b.fcmp_unordered("uno", im, zero))
    return make(b, x.type, b.select(both_nan, special_re, re), b.select(both_nan, special_im, im))


def negate(em, x):
    """-z."""
    b = em.b
    re, im = parts(b, x)
    return make(b, x.type, b.fneg(re), b.fneg(im))


def absolute(em, x):
    """|z| = m * sqrt((re/m)^2 + (im/m)^2) with m = max(|re|, |im|) (no overflow); inf wins over NaN."""
    b = em.b
    re, im = parts(b, x)
    fabs = lambda v: em.target.intrinsic(b, "llvm.fabs", [v])  # noqa: E731
    ar, ai = fabs(re), fabs(im)
    m = b.select(b.fcmp_ordered(">=", ar, ai), ar, ai)
    m = b.select(b.fcmp_unordered("uno", ar, ai), b.fadd(ar, ai), m)
    safe = b.select(b.fcmp_ordered("==", m, ir.Constant(m.type, 0.0)), ir.Constant(m.type, 1.0), m)
    qr, qi = b.fdiv(ar, safe), b.fdiv(ai, safe)
    r = b.fmul(m, em.target.intrinsic(b, "llvm.sqrt", [b.fadd(b.fmul(qr, qr), b.fmul(qi, qi))]))
    inf = ir.Constant(m.type, math.inf)
    is_inf = b.or_(b.fcmp_ordered("==", ar, inf), b.fcmp_ordered("==", ai, inf))
    return b.select(is_inf, inf, r)


def sqrt(em, x):
    """Principal square root: t = sqrt((|re| + |z|) / 2), then the half that keeps the branch cut."""
    b = em.b
    t_ = em.target
    re, im = parts(b, x)
    ty = re.type
    zero, half = ir.Constant(ty, 0.0), ir.Constant(ty, 0.5)
    fabs = lambda v: t_.intrinsic(b, "llvm.fabs", [v])  # noqa: E731
    t = t_.math(b, "sqrt", [b.fmul(b.fadd(fabs(re), absolute(em, x)), half)])
    safe = b.select(b.fcmp_ordered("==", t, zero), ir.Constant(ty, 1.0), t)
    other = b.fdiv(im, b.fadd(safe, safe))
    pos = b.fcmp_ordered(">=", re, zero)
    out_re = b.select(pos, t, fabs(other))
    out_im = b.select(pos, other, t_.intrinsic(b, "llvm.copysign", [t, im]))
    is_zero = b.fcmp_ordered("==", t, zero)
    return make(b, x.type, b.select(is_zero, zero, out_re), b.select(is_zero, im, out_im))


def _one(x):
    ty = x.type.elements[0]
    return make_const(x.type, ir.Constant(ty, 1.0), ir.Constant(ty, 0.0))


def make_const(ty, re, im):
    """A complex LLVM constant from constant parts."""
    return ir.Constant(ty, [re.constant, im.constant])


def unary_math(em, name: str, x):
    """Complex exp, log, expm1, log1p, sqrt, rsqrt, sin, cos, tan, tanh, sinh, cosh, logistic
    (UnsupportedError for the rest: the inverse trigonometric and hyperbolic functions)."""
    b = em.b
    re, im = parts(b, x)
    t = em.target
    ty = re.type
    if name == "exp":
        # XLA keeps a zero imaginary part (exp(inf + 0i) = inf + 0i, not inf * sin(0) = NaN).
        e = t.math(b, "exp", [re])
        im_out = b.select(b.fcmp_ordered("==", im, ir.Constant(ty, 0.0)), im, b.fmul(e, t.math(b, "sin", [im])))
        return make(b, x.type, b.fmul(e, t.math(b, "cos", [im])), im_out)
    if name == "logistic":
        # XLA's LogisticExpander: divide(1, add(1, exp(negate(x)))), so its infinities and NaNs
        # (exp overflowing for re(x) << 0) are those of complex exp and divide.
        one = _one(x)
        return binary(em, "div", one, binary(em, "add", one, unary_math(em, "exp", negate(em, x))))
    if name == "log":
        return make(b, x.type, t.math(b, "log", [absolute(em, x)]), t.math(b, "atan2", [im, re]))
    if name == "expm1":
        # e^z - 1 = (expm1(re) cos(im) - 2 sin^2(im/2)) + i e^re sin(im): no cancellation near 0
        s_half = t.math(b, "sin", [b.fmul(im, ir.Constant(ty, 0.5))])
        real = b.fsub(b.fmul(t.math(b, "expm1", [re]), t.math(b, "cos", [im])),
                      b.fmul(ir.Constant(ty, 2.0), b.fmul(s_half, s_half)))
        return make(b, x.type, real, b.fmul(t.math(b, "exp", [re]), t.math(b, "sin", [im])))
    if name == "log1p":
        # |1+z|^2 = 1 + (2 re + re^2 + im^2): log1p of the small part keeps accuracy near 0
        small = b.fadd(b.fmul(re, b.fadd(re, ir.Constant(ty, 2.0))), b.fmul(im, im))
        real = b.fmul(ir.Constant(ty, 0.5), t.math(b, "log1p", [small]))
        return make(b, x.type, real, t.math(b, "atan2", [im, b.fadd(re, ir.Constant(ty, 1.0))]))
    if name == "sqrt":
        return sqrt(em, x)
    if name == "rsqrt":
        return binary(em, "div", _one(x), sqrt(em, x))
    if name in ("sinh", "cosh"):
        # sinh(a+ib) = sinh a cos b + i cosh a sin b, cosh(a+ib) = cosh a cos b + i sinh a sin b
        # (the real functions of the parts: no cancellation, each part overflowing only where
        # its own product does)
        sh, ch = t.math(b, "sinh", [re]), t.math(b, "cosh", [re])
        sn, cs = t.math(b, "sin", [im]), t.math(b, "cos", [im])
        if name == "sinh":
            return make(b, x.type, b.fmul(sh, cs), b.fmul(ch, sn))
        return make(b, x.type, b.fmul(ch, cs), b.fmul(sh, sn))
    if name in ("sin", "cos", "tan", "tanh"):
        # sinh/cosh of the other component from expm1 (accurate near 0)
        def sinh_cosh(v):
            ep, em_ = t.math(b, "expm1", [v]), t.math(b, "expm1", [b.fneg(v)])
            sh = b.fmul(b.fsub(ep, em_), ir.Constant(ty, 0.5))
            ch = b.fadd(b.fmul(b.fadd(ep, em_), ir.Constant(ty, 0.5)), ir.Constant(ty, 1.0))
            return sh, ch

        if name in ("tanh", "tan"):
            # tanh(a+ib) = (sinh 2a + i sin 2b) / (cosh 2a + cos 2b); for large |a| the quotient
            # overflows, and it is sign(a) + i sin(2b) 2 e^-2|a| to working precision.
            # tan(z) = -i tanh(iz).
            a, c = (re, im) if name == "tanh" else (b.fneg(im), re)
            sh, ch = sinh_cosh(b.fadd(a, a))
            den = b.fadd(ch, t.math(b, "cos", [b.fadd(c, c)]))
            s2 = t.math(b, "sin", [b.fadd(c, c)])
            u, v = b.fdiv(sh, den), b.fdiv(s2, den)
            fabs_a = t.intrinsic(b, "llvm.fabs", [a])
            big = b.fcmp_ordered(">", fabs_a, ir.Constant(ty, 20.0 if ty == ir.DoubleType() else 10.0))
            decay = t.math(b, "exp", [b.fmul(ir.Constant(ty, -2.0), fabs_a)])
            u = b.select(big, t.intrinsic(b, "llvm.copysign", [ir.Constant(ty, 1.0), a]), u)
            v = b.select(big, b.fmul(b.fmul(s2, ir.Constant(ty, 2.0)), decay), v)
            return make(b, x.type, u, v) if name == "tanh" else make(b, x.type, v, b.fneg(u))
        sh, ch = sinh_cosh(im)
        sn, cs = t.math(b, "sin", [re]), t.math(b, "cos", [re])
        sin_z = make(b, x.type, b.fmul(sn, ch), b.fmul(cs, sh))
        cos_z = make(b, x.type, b.fmul(cs, ch), b.fneg(b.fmul(sn, sh)))
        return sin_z if name == "sin" else cos_z
    raise UnsupportedError(f"complex {name} is not supported by the LLVM emitters")


def sign(em, x):
    """z / |z| (0 stays 0, NaN stays NaN)."""
    b = em.b
    re, im = parts(b, x)
    r = absolute(em, x)
    zero = ir.Constant(r.type, 0.0)
    safe = b.select(b.fcmp_ordered("==", r, zero), ir.Constant(r.type, 1.0), r)
    return make(b, x.type, b.fdiv(re, safe), b.fdiv(im, safe))


def power(em, x, y):
    """x**y = exp(y log x), with 0**y = 0 for re(y) > 0 and x**0 = 1."""
    b = em.b
    res = unary_math(em, "exp", binary(em, "mul", y, unary_math(em, "log", x)))
    xr, xi = parts(b, x)
    yr, yi = parts(b, y)
    ty = xr.type
    zero = ir.Constant(ty, 0.0)
    x_zero = b.and_(b.fcmp_ordered("==", xr, zero), b.fcmp_ordered("==", xi, zero))
    y_zero = b.and_(b.fcmp_ordered("==", yr, zero), b.fcmp_ordered("==", yi, zero))
    zero_c = make_const(x.type, zero, zero)
    res = b.select(b.and_(x_zero, b.fcmp_ordered(">", yr, zero)), zero_c, res)
    return b.select(y_zero, _one(x), res)


_ORDERING = {"LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def compare(em, direction: str, x, y):
    """compare of complex values as XLA does it. EQ: both parts equal; NE: either part unequal
    or unordered. LT/LE/GT/GE: `(re x == re y and im x op im y) or re x op re y`, ordered (a
    NaN in a compared part gives false, -0 == +0): the lexicographic order for LT and GT; for
    LE and GE it reduces to `re x op re y` (XLA:CPU gives `1+3j <= 1+2j` true)."""
    b = em.b
    a, bb = parts(b, x)
    c, d = parts(b, y)
    if direction == "EQ":
        return b.and_(b.fcmp_ordered("==", a, c), b.fcmp_ordered("==", bb, d))
    if direction == "NE":
        return b.or_(b.fcmp_unordered("!=", a, c), b.fcmp_unordered("!=", bb, d))
    if direction not in _ORDERING:
        raise UnsupportedError(f"compare direction {direction} is not defined for complex values")
    op = _ORDERING[direction]
    tie = b.and_(b.fcmp_ordered("==", a, c), b.fcmp_ordered(op, bb, d))
    return b.or_(tie, b.fcmp_ordered(op, a, c))


def extremum(em, x, y, is_min: bool = False):
    """maximum/minimum of complex values as XLA:CPU computes them: only the real parts are
    compared, and the first operand wins unless the comparison is false (ties keep `x`; a NaN
    real part in either operand gives `y`): max is `re(x) >= re(y) ? x : y`, min uses `<=`.
    (HLO clamp is min(max(lo, x), hi) in that operand order.)"""
    b = em.b
    xr, yr = b.extract_value(x, 0), b.extract_value(y, 0)
    return b.select(b.fcmp_ordered("<=" if is_min else ">=", xr, yr), x, y)


def convert(em, v, src: ElementType, dst: ElementType, convert_real):
    """Conversions to, from and between complex types (complex -> real keeps the real part)."""
    b = em.b
    if src.is_complex and dst.is_complex:
        re, im = parts(b, v)
        rs, rd = real_type(src), real_type(dst)
        return make(b, reg_type(dst), convert_real(em, re, rs, rd), convert_real(em, im, rs, rd))
    if src.is_complex:
        return convert_real(em, parts(b, v)[0], real_type(src), dst)
    rd = real_type(dst)
    re = convert_real(em, v, src, rd)
    return make(b, reg_type(dst), re, ir.Constant(re.type, 0.0))


def to_bits(b: ir.IRBuilder, v) -> ir.Value:
    """The bits of a complex register value as one integer of its width, laid out as in
    memory (numpy's and XLA's layout): the real part in the low half, the imaginary part in
    the high half."""
    re, im = parts(b, v)
    half = ir.IntType(_part_bits(re.type))
    whole = ir.IntType(2 * half.width)
    lo = b.zext(b.bitcast(re, half), whole)
    hi = b.shl(b.zext(b.bitcast(im, half), whole), ir.Constant(whole, half.width))
    return b.or_(lo, hi)


def from_bits(b: ir.IRBuilder, bits, ty: ir.Type) -> ir.Value:
    """The complex value of struct type `ty` whose memory bits are the integer `bits`
    (the inverse of `to_bits`)."""
    part = ty.elements[0]
    half = ir.IntType(_part_bits(part))
    re = b.bitcast(b.trunc(bits, half), part)
    im = b.bitcast(b.trunc(b.lshr(bits, ir.Constant(bits.type, half.width)), half), part)
    return make(b, ty, re, im)


def _part_bits(ty: ir.Type) -> int:
    return 64 if isinstance(ty, ir.DoubleType) else 32


@register_elemental("real", "imag")
def _real_imag(em, inst):
    g = em.operand(inst, 0)
    src = inst.operands[0].shape.dtype
    k = 0 if inst.opcode == "real" else 1
    b = em.b
    if not src.is_complex:
        if k == 0:
            return g
        # imag of a real number is +0 of its type, built in the register type: a bit
        # pattern for bf16 and the 8-bit floats, not an LLVM float constant.

        zero = scalar_constant(inst.shape.dtype, 0)
        return lambda idx: zero
    return lambda idx: b.extract_value(g(idx), k)


@register_elemental("complex")
def _complex(em, inst):
    g0, g1 = em.operand(inst, 0), em.operand(inst, 1)
    ty = _reg(inst.shape.dtype)
    return lambda idx: make(em.b, ty, g0(idx), g1(idx))


def _reg(et):
    return reg_type(et)
