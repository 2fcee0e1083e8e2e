"""Complex arithmetic as XLA computes it, where numpy's answer differs: ordering compares,
division and exp at infinities and NaNs, and logistic (which XLA expands to 1 / (1 + exp(-x))).

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
