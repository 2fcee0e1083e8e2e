"""Vectorizable f32 sine, cosine, tangent and atan2, built as LLVM IR (emitters/math_approx.py
has the other functions and the IR helpers these use).

Each is computed in f64 and rounded once to f32 (about 0.5 ULP). sin/cos/tan reduce by pi/2
with Cody-Waite for |x| < 2**26 and Payne-Hanek (a table of 2/pi's bits, integer products)
beyond, over the whole f32 range. Measured ULP errors are in tests/emitters/test_cpu_math.py.
"""
from __future__ import annotations

import functools
import math

from llvmlite import ir

from .math_approx import F32, F64, I32, I64, MathIR, to_f64

_PIO2_1 = 1.5707963267948966
_PIO2_2 = 6.123233995736766e-17
_PIO2_3 = -1.4973849048591698e-33  # pi/2 - _PIO2_1 - _PIO2_2 (rounded)

# |x| below this takes the Cody-Waite reduction (exact there), above it Payne-Hanek's.
_HUGE = 2.0 ** 26
_HUGE_BIASED_EXPONENT = 127 + 26


def _reduce_pio2(m: MathIR, x, xd):
    """(r, q): x = q*pi/2 + r with |r| <= pi/4 (about; q mod 4 as i64), for f32 `x` and its
    f64 value `xd`. Cody-Waite in f64 for |x| < 2**26; beyond, Payne-Hanek's reduction (a
    select, so the loop stays straight-line and vectorizes). Infinities and NaN give NaN."""
    b = m.b
    j = m.intr("llvm.rint", m.mul(xd, m.c(2.0 / math.pi)))
    j = m.sel(m.cmp("<", m.intr("llvm.fabs", j), m.c(1e15)), j, m.c(0.0))  # inf/NaN: r stays NaN
    r = m.fma(b.fneg(j), m.c(_PIO2_1), xd)
    r = m.fma(b.fneg(j), m.c(_PIO2_2), r)
    r = m.fma(b.fneg(j), m.c(_PIO2_3), r)
    q = b.and_(b.fptosi(j, I64), ir.Constant(I64, 3))
    ax = m.intr("llvm.fabs", xd)
    huge = b.and_(m.cmp(">=", ax, m.c(_HUGE)), m.cmp("<", ax, m.c(math.inf)))
    r_huge, q_huge = _reduce_pio2_huge(m, x)
    return m.sel(huge, r_huge, r), b.select(huge, q_huge, q)


@functools.lru_cache(maxsize=None)
def _two_over_pi_pairs() -> tuple[int, ...]:
    """pairs[i] = bits 32i+1 .. 32i+64 of the binary expansion of 2/pi (bit k weighs 2**-k)
    as an unsigned 64-bit integer, i = 0..5: what _reduce_pio2_huge reads bits 2 .. 199 from.
    2/pi is computed exactly here (Machin's formula for pi in integers, 64 guard bits)."""
    count = 6
    nbits = 32 * (count - 1) + 64
    one = 1 << (nbits + 64)

    def arctan_inv(k: int) -> int:  # arctan(1/k) * 2**(nbits+64), terms truncated
        total, power, i = 0, one // k, 0
        while power:
            total += (-1) ** i * (power // (2 * i + 1))
            power //= k * k
            i += 1
        return total

    pi = 16 * arctan_inv(5) - 4 * arctan_inv(239)
    two_over_pi = (2 * one << nbits) // pi  # floor(2/pi * 2**nbits): bits 1 .. nbits
    return tuple((two_over_pi >> (nbits - 32 * i - 64)) & (2 ** 64 - 1) for i in range(count))


def _reduce_pio2_huge(m: MathIR, x):
    """Payne-Hanek: (r, q) with x = q*pi/2 + r, for f32 `x` with 2**26 <= |x| < inf (other
    lanes get a harmless value: the caller selects them away).

    |x| = mant * 2**(e-150) with a 24-bit integer mant. Bits of 2/pi before k0 = e-151 only
    add multiples of 4 to x*2/pi; the 96 bits W from k0 on give x*2/pi mod 4 as
    (mant*W mod 2**96) / 2**94. Its top 64 bits, from three 32x32->64 products (the lowest
    product's low half dropped), hold the quadrant (2 bits) and the fraction to 2**-62;
    the bits of 2/pi after W change it by under 2**-70. No f32 comes closer to a multiple of
    pi/2 than |r| = 1.6e-9 = 2**-29.2 (x = 16367173 * 2**72, by exhaustive search), so r keeps
    about 32 correct bits, 8 more than f32's. The three words of W are picked from constants
    by selects and shifts (no table in memory, hence no gathers: the loop still vectorizes)."""
    b = m.b

    def i32(v):
        return ir.Constant(I32, v)

    def i64(v):
        return ir.Constant(I64, v)

    bits = b.bitcast(x, I32)
    e = b.and_(b.lshr(bits, i32(23)), i32(255))
    e = b.select(b.icmp_unsigned("<", e, i32(_HUGE_BIASED_EXPONENT)), i32(_HUGE_BIASED_EXPONENT), e)
    # W starts at bit k0 = e - 151 (2 .. 104): bit k0 + 32j is bit `shift` of pairs[word + j],
    # counted from its top, with k0 - 1 = 32*word + shift.
    k1 = b.zext(b.sub(e, i32(152)), I64)
    word, shift = b.lshr(k1, i64(5)), b.and_(k1, i64(31))
    pairs = _two_over_pi_pairs()
    mant = b.zext(b.or_(b.and_(bits, i32(0x7FFFFF)), i32(0x800000)), I64)

    def product(j: int):
        """mant times bits k0+32j .. k0+32j+31 of 2/pi."""
        pair = i64(pairs[j + 3])
        for w in (2, 1, 0):  # pairs[word + j] for word in 0..3
            pair = b.select(b.icmp_unsigned("==", word, i64(w)), i64(pairs[j + w]), pair)
        return b.mul(mant, b.lshr(b.shl(pair, shift), i64(32)))

    h = b.add(b.add(b.shl(product(0), i64(32)), product(1)), b.lshr(product(2), i64(32)))
    n = b.lshr(b.add(h, i64(1 << 61)), i64(62))  # nearest quadrant, mod 4
    frac = b.ashr(b.shl(h, i64(2)), i64(2))  # h - n*2**62, in [-2**61, 2**61)
    r = m.mul(b.sitofp(frac, F64), m.c(math.pi / 2 * 2.0 ** -62))
    negative = b.icmp_signed("<", bits, i32(0))
    r = m.sel(negative, b.fneg(r), r)
    q = b.and_(b.select(negative, b.neg(n), n), i64(3))
    return r, q


def _sin_cos_poly(m: MathIR, r):
    z = m.mul(r, r)
    sin_c = [(-1) ** k / math.factorial(2 * k + 1) for k in range(8, -1, -1)]
    cos_c = [(-1) ** k / math.factorial(2 * k) for k in range(9, -1, -1)]
    s = m.mul(r, m.horner(z, sin_c))
    c = m.horner(z, cos_c)
    return s, c


def _quadrant(m: MathIR, q, values, xd):
    b = m.b
    out = values[3]
    for k in (2, 1, 0):
        out = m.sel(b.icmp_signed("==", q, ir.Constant(I64, k)), values[k], out)
    # sin/cos/tan of an infinity is invalid: the negative default NaN, as the hardware gives it
    return m.sel(m.cmp("==", m.intr("llvm.fabs", xd), m.c(math.inf)), m.c(-math.nan), out)


def sin_f32(b: ir.IRBuilder, target, x) -> ir.Value:
    """sin via f64 reduction by pi/2 (_reduce_pio2) and Taylor series on [-pi/4, pi/4]."""
    m = MathIR(b, target, F64)
    xd = b.fpext(x, F64)  # not to_f64: a denormal comes back as it is (the registry's keep-tiny)
    r, q = _reduce_pio2(m, x, xd)
    s, c = _sin_cos_poly(m, r)
    res = _quadrant(m, q, [s, c, b.fneg(s), b.fneg(c)], xd)
    res = m.sel(m.cmp("==", xd, m.c(0.0)), xd, res)  # keep the sign of zero
    return b.fptrunc(res, F32)


def cos_f32(b: ir.IRBuilder, target, x) -> ir.Value:
    """cos via f64 reduction by pi/2 (_reduce_pio2) and Taylor series on [-pi/4, pi/4]."""
    m = MathIR(b, target, F64)
    xd = to_f64(b, target, x)
    r, q = _reduce_pio2(m, x, xd)
    s, c = _sin_cos_poly(m, r)
    return b.fptrunc(_quadrant(m, q, [c, b.fneg(s), b.fneg(c), s], xd), F32)


def tan_f32(b: ir.IRBuilder, target, x) -> ir.Value:
    """tan = sin/cos of the reduced argument, in f64."""
    m = MathIR(b, target, F64)
    xd = b.fpext(x, F64)  # not to_f64: a denormal comes back as it is (the registry's keep-tiny)
    r, q = _reduce_pio2(m, x, xd)
    s, c = _sin_cos_poly(m, r)
    odd = b.trunc(q, ir.IntType(1))
    res = m.sel(odd, b.fneg(m.div(c, s)), m.div(s, c))
    res = m.sel(m.cmp("==", xd, m.c(0.0)), xd, res)
    return b.fptrunc(res, F32)


def atan2_f32(b: ir.IRBuilder, target, y, x) -> ir.Value:
    """atan2 with C99's zero/infinity cases: atan of min/max ratio (<= 1) in f64, then octant fix-up."""
    m = MathIR(b, target, F64)
    yd, xd = to_f64(b, target, y), to_f64(b, target, x)
    ay, ax = m.intr("llvm.fabs", yd), m.intr("llvm.fabs", xd)
    swap = m.cmp(">", ay, ax)
    lo, hi = m.sel(swap, ax, ay), m.sel(swap, ay, ax)
    a = m.div(lo, hi)
    a = m.sel(m.cmp("==", hi, m.c(0.0)), m.c(0.0), a)
    both_inf = b.and_(m.cmp("==", ax, m.c(math.inf)), m.cmp("==", ay, m.c(math.inf)))
    a = m.sel(both_inf, m.c(1.0), a)
    red = m.cmp(">", a, m.c(0.41421356237309503))
    a2 = m.sel(red, m.div(m.sub(a, m.c(1.0)), m.add(a, m.c(1.0))), a)
    z = m.mul(a2, a2)
    t = m.mul(a2, m.horner(z, [(-1) ** k / (2 * k + 1) for k in range(16, -1, -1)]))
    t = m.sel(red, m.add(t, m.c(math.pi / 4)), t)
    t = m.sel(swap, m.sub(m.c(math.pi / 2), t), t)
    xneg = b.icmp_signed("<", b.bitcast(xd, I64), ir.Constant(I64, 0))
    t = m.sel(xneg, m.sub(m.c(math.pi), t), t)
    t = m.intr("llvm.copysign", t, yd)
    # A NaN operand comes back as it is; with two, the denominator's (x's), as glibc's atan2f
    # (`x + y`) and so XLA:CPU and the interpreter give it on every host, checked against libm.
    t = m.sel(m.isnan(yd), yd, t)
    t = m.sel(m.isnan(xd), xd, t)
    return b.fptrunc(t, F32)
