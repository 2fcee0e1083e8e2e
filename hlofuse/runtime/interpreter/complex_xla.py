"""Complex arithmetic as XLA computes it, where numpy's answer differs: ordering compares,
division and exp at infinities and NaNs, logistic (which XLA expands to 1 / (1 + exp(-x))), and
multiply, whose parts XLA:CPU computes as fused multiply-adds (`multiply`, with an exact `fma`).

XLA lowers these through MLIR's complex dialect (ComplexToStandard); the formulas below follow
that lowering operation for operation, so that the interpreter reproduces XLA's NaNs,
infinities and signed zeros, not C99 Annex G's (numpy's). The element generators
(emitters/elemental_complex.py) emit the same formulas.
"""
from __future__ import annotations

import numpy as np

Array = np.ndarray

ORDERING = {"LT": np.less, "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal}


def compare(x: Array, y: Array, direction: str) -> Array:
    """XLA's LT/LE/GT/GE of complex values: `(re(x) == re(y) and im(x) op im(y)) or re(x) op re(y)`
    with ordered float compares (any NaN in a compared part gives false; -0 == +0).

    For LT and GT this is the lexicographic order (real part first, then imaginary part). For
    LE and GE it reduces to `re(x) op re(y)`: equal real parts already satisfy `op`, so the
    imaginary parts never matter (XLA:CPU gives `1+3j <= 1+2j` true; checked against it)."""
    op = ORDERING[direction]
    with np.errstate(invalid="ignore"):
        return (np.equal(x.real, y.real) & op(x.imag, y.imag)) | op(x.real, y.real)


def make(re: Array, im: Array, dtype: np.dtype) -> Array:
    """A complex array of `dtype` from its parts (exact: no arithmetic, signed zeros kept)."""
    out = np.empty(np.broadcast_shapes(np.shape(re), np.shape(im)), dtype=dtype)
    out.real = re
    out.imag = im
    return out


def exp(x: Array) -> Array:
    """e^re (cos im + i sin im), with the imaginary part kept when it is zero (so
    exp(inf + 0i) = inf + 0i, not inf + NaN i); no C99 special cases (exp(-inf + inf i) is NaN)."""
    re, im = x.real, x.imag
    with np.errstate(all="ignore"):
        e = np.exp(re)
        return make(e * np.cos(im), np.where(im == 0, im, e * np.sin(im)), x.dtype)


def divide(x: Array, y: Array) -> Array:
    """x / y by Smith's algorithm (the ratio of the smaller to the larger part of y), and, only
    where both parts of that come out NaN, the limits XLA substitutes: a zero divisor gives
    copysign(inf, re y) * x (unless x is NaN + NaN i), an infinite dividend over a finite
    divisor gives inf * (sign-of-infinity parts of x) * conj(y), a finite dividend over an
    infinite divisor gives 0 * x * (sign-of-infinity parts of conj y)."""
    ft = x.real.dtype.type
    a, b, c, d = x.real, x.imag, y.real, y.imag
    zero, one, inf = ft(0), ft(1), ft(np.inf)
    with np.errstate(all="ignore"):
        # Smith: |c| < |d| divides through by d, else by c.
        r1 = c / d
        den1 = d + c * r1
        re1, im1 = (a * r1 + b) / den1, (b * r1 - a) / den1
        r2 = d / c
        den2 = c + d * r2
        re2, im2 = (a + b * r2) / den2, (b - a * r2) / den2
        aa, ab, ac, ad = np.abs(a), np.abs(b), np.abs(c), np.abs(d)
        by_d = ac < ad
        re, im = np.where(by_d, re1, re2), np.where(by_d, im1, im2)

        # 1. Zero divisor, a dividend that is not NaN + NaN i.
        zero_div = (~np.isnan(a) | ~np.isnan(b)) & (ac == 0) & (ad == 0)
        inf_c = np.copysign(inf, c)
        # 2. Infinite dividend, finite divisor ("!= inf" is ordered: NaN is not finite).
        finite_y = (ac < inf) & (ad < inf)
        a_inf, b_inf = aa == inf, ab == inf
        inf_num = (a_inf | b_inf) & finite_y
        sa, sb = np.copysign(np.where(a_inf, one, zero), a), np.copysign(np.where(b_inf, one, zero), b)
        # 3. Finite dividend, infinite divisor.
        c_inf, d_inf = ac == inf, ad == inf
        inf_den = (aa < inf) & (ab < inf) & (c_inf | d_inf)
        sc, sd = np.copysign(np.where(c_inf, one, zero), c), np.copysign(np.where(d_inf, one, zero), d)

        special_re = np.where(zero_div, inf_c * a, np.where(
            inf_num, inf * (sa * c + sb * d), np.where(inf_den, zero * (a * sc + b * sd), re)))
        special_im = np.where(zero_div, inf_c * b, np.where(
            inf_num, inf * (sb * c - sa * d), np.where(inf_den, zero * (b * sc - a * sd), im)))
        both_nan = np.isnan(re) & np.isnan(im)
        return make(np.where(both_nan, special_re, re), np.where(both_nan, special_im, im), x.dtype)


def logistic(x: Array) -> Array:
    """XLA's logistic of complex values: its LogisticExpander rewrites it to
    divide(1, add(1, exp(negate(x)))) before the complex ops are lowered."""
    one = np.ones_like(x)
    return divide(one, one + exp(-x))


def multiply(x: Array, y: Array) -> Array:
    """x * y as XLA:CPU computes it: LLVM contracts each part's product and sum into one fused
    multiply-add, re = fma(re x, re y, -(im x * im y)) and im = fma(im x, re y, re x * im y)
    (measured with jaxlib 0.10 on values that cancel: every element equal; numpy's own SIMD
    loop fuses the imaginary part the other way round, and its scalar loop not at all, so the
    interpreter does not leave it to numpy). Each fma is exact (`fma`)."""
    a, b, c, d = x.real, x.imag, y.real, y.imag
    with np.errstate(all="ignore"):
        return make(fma(a, c, -(b * d)), fma(b, c, a * d), x.dtype)


def fma(a: Array, b: Array, c: Array) -> Array:
    """a * b + c rounded once, for f32 or f64 arrays of one shape (or broadcastable).

    f32: the product is exact in f64 and the sum is rounded to odd there (53 bits, at least
    two more than f32's 24: rounding that to f32 is then rounded once). f64: Dekker's exact
    product and Boldo and Melquiond's fma by rounding to odd (`_fma_f64`). A non-finite input
    or product follows IEEE's a * b + c (the same as fma's but where an exact product outside
    the finite range meets a c that brings the sum back; those and f64 products too large for
    Dekker's split or too small for its error term are computed exactly with fractions)."""
    a, b, c = np.broadcast_arrays(*(np.asarray(v) for v in (a, b, c)))
    if a.dtype == np.float32:
        with np.errstate(all="ignore"):
            p = a.astype(np.float64) * b.astype(np.float64)
            return _round_to_odd_sum(p, c.astype(np.float64)).astype(np.float32)
    return _fma_f64(a.astype(np.float64), b.astype(np.float64), c.astype(np.float64))


def _two_sum(x: Array, y: Array) -> tuple[Array, Array]:
    """(s, e): s = x + y rounded, e its exact error (x + y = s + e; Knuth's TwoSum)."""
    s = x + y
    bb = s - x
    return s, (x - (s - bb)) + (y - bb)


def _round_to_odd_sum(x: Array, y: Array) -> Array:
    """x + y in f64 rounded to odd: where the rounded sum is inexact and its last bit even, the
    neighbour toward the exact sum (odd), so that a later rounding to fewer bits rounds once."""
    s, e = _two_sum(x, y)
    even = (s.view(np.int64) & 1) == 0
    nudge = (e != 0) & even & np.isfinite(s)
    return np.where(nudge, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)


_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's split of an f64 into two 26-bit halves


def _fma_f64(a: Array, b: Array, c: Array) -> Array:
    """a * b + c for f64 arrays, rounded once (see `fma`)."""
    with np.errstate(all="ignore"):
        plain = a * b + c
        p = a * b
        # Dekker's product a * b = p + q exactly, where neither the split overflows nor the
        # error term underflows; elsewhere fractions decide (rare: |a|, |b| over 2**995 or a
        # product under 2**-960)
        fine = (np.isfinite(a) & np.isfinite(b) & np.isfinite(c) & np.isfinite(p)
                & (np.abs(a) < 2.0 ** 995) & (np.abs(b) < 2.0 ** 995)
                & ((np.abs(p) > 2.0 ** -960) | (p == 0)))
        aa, bb = np.where(fine, a, 1.0), np.where(fine, b, 1.0)
        p = aa * bb
        ah, bh = _SPLIT * aa, _SPLIT * bb
        ah, bh = ah - (ah - aa), bh - (bh - bb)
        al, bl = aa - ah, bb - bh
        q = ((ah * bh - p) + ah * bl + al * bh) + al * bl
        # Boldo-Melquiond: c + p = th + tl exactly; v = tl + q rounded to odd; th + v rounded
        th, tl = _two_sum(np.where(fine, c, 0.0), p)
        result = th + _round_to_odd_sum(tl, q)
        result = np.where(fine, result, plain)
    exact = ~fine & np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    if exact.any():  # products out of Dekker's range: exactly, one element at a time
        from fractions import Fraction

        flat = result.reshape(-1).copy()
        for k in np.flatnonzero(exact.reshape(-1)):
            ak, bk, ck = (float(v.reshape(-1)[k]) for v in (a, b, c))
            flat[k] = _fraction_to_f64(Fraction(ak) * Fraction(bk) + Fraction(ck))
        result = flat.reshape(result.shape)
    return result


def _fraction_to_f64(q) -> float:
    """The f64 nearest a Fraction (ties to even; inf beyond the largest finite f64)."""
    try:
        return q.numerator / q.denominator  # Python rounds an int / int quotient correctly
    except OverflowError:
        return float("inf") if q > 0 else float("-inf")
