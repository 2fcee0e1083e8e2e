"""Vectorizable approximations of f32 transcendental functions, built as LLVM IR.

Like XLA's CPU backend (and Eigen), hlofuse never calls scalar libm in a hot f32 loop:
every function here is straight-line IR (selects, no branches, no calls except intrinsics
LLVM vectorizes), so a loop over them becomes `<8 x float>` / `<4 x double>` code.

Two families:
  * exp, log, expm1, log1p, tanh, logistic: f32 arithmetic, Cody-Waite range reduction
    and Cephes-style minimax polynomials (tanh: 1 - 2/(e**2|x| + 1) beside a polynomial).
  * pow, cbrt, erf: computed in f64 (erf: a rational), then rounded once to f32 (about 0.5 ULP);
    sin, cos, tan and atan2 likewise, in emitters/math_trig.py (with their reduction by pi/2).
  * f64 exp and log (1-2 ULP); other f64 functions call the target's library (libm).
Measured ULP errors are in tests/emitters/test_cpu_math.py.
"""
from __future__ import annotations

import math

from llvmlite import ir

from .ir_helpers import flush_denormal_bits

F32 = ir.FloatType()
F64 = ir.DoubleType()
I32 = ir.IntType(32)
I64 = ir.IntType(64)


class MathIR:
    """Terse IR arithmetic over one builder (float type `ty`)."""

    def __init__(self, b: ir.IRBuilder, target, ty: ir.Type) -> None:
        self.b, self.t, self.ty = b, target, ty

    def c(self, v: float) -> ir.Constant:
        return ir.Constant(self.ty, float(v))

    def add(self, x, y):
        return self.b.fadd(x, y)

    def sub(self, x, y):
        return self.b.fsub(x, y)

    def mul(self, x, y):
        return self.b.fmul(x, y)

    def div(self, x, y):
        return self.b.fdiv(x, y)

    def fma(self, x, y, z):
        return self.t.intrinsic(self.b, "llvm.fmuladd", [x, y, z])

    def intr(self, name, *args):
        return self.t.intrinsic(self.b, name, list(args))

    def sel(self, cond, x, y):
        return self.b.select(cond, x, y)

    def cmp(self, op, x, y):
        return self.b.fcmp_ordered(op, x, y)

    def isnan(self, x):
        return self.b.fcmp_unordered("uno", x, x)

    def horner(self, x, coeffs):
        """coeffs[0]*x^n + ... + coeffs[n], highest degree first."""
        acc = self.c(coeffs[0])
        for k in coeffs[1:]:
            acc = self.fma(acc, x, self.c(k))
        return acc


def _pow2_f32(m: MathIR, ni):
    """2**ni as f32 for an i32 `ni` in [-126, 127] (+0 for -127)."""
    b = m.b
    bits = b.shl(b.add(ni, ir.Constant(I32, 127)), ir.Constant(I32, 23))
    return b.bitcast(bits, F32)


# ---- f32 exp / log family ------------------------------------------------------------------
_EXP_P = [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1]


def _exp_parts(m: MathIR, t):
    """(y, n) with e**t = y * 2**n, y in about [0.7, 1.42] (1 ULP), n an i32: n = rint(t/ln2),
    r = t - n*ln2 (two-part ln2), y = 1 + r + r*r*P(r)."""
    n = m.intr("llvm.rint", m.mul(t, m.c(1.44269504088896341)))
    r = m.fma(n, m.c(-0.693359375), t)
    r = m.fma(n, m.c(2.12194440e-4), r)
    y = m.add(m.fma(m.horner(r, _EXP_P), m.mul(r, r), r), m.c(1.0))
    return y, m.b.fptosi(n, I32)


# Whether exp_f32 may scale in one step (`scales_with_ldexp`); a switch for A/B measurements
# (benchmarks/row_limits.py --baseline hlofuse.emitters.math_approx.LDEXP_SCALING=False).
LDEXP_SCALING = True


def scales_with_ldexp(target) -> bool:
    """Whether exp_f32 scales by 2**n with one `llvm.ldexp` (`_ldexp_f32`): on a target that
    flushes denormal results and has AVX-512, whose vscalefps LLVM lowers it to (one
    instruction, exact, overflow to inf; flushed to 0 below 2**-126, as the two-step product
    is). Other targets keep the two steps (a GPU keeps denormals; without vscalefps LLVM
    expands ldexp into a longer sequence)."""
    return bool(LDEXP_SCALING and getattr(target, "flushes_denormals", True)
                and "+avx512f" in str(getattr(target, "cpu_features", "")).split(","))


def _ldexp_f32(m: MathIR, y, n):
    """y * 2**n for f32 `y` and i32 `n`, exactly (llvm.ldexp; declared once per module)."""
    module = m.b.module
    fn = module.globals.get("llvm.ldexp.f32.i32")
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(F32, [F32, I32]), "llvm.ldexp.f32.i32")
    return m.b.call(fn, [y, n])


def exp_f32(b: ir.IRBuilder, target, x) -> ir.Value:
    """e**x: _exp_parts, then 2**n in two steps (results from 2**128 down to denormals), or
    in one, `scales_with_ldexp`: the same bits for every f32 on this host (all 2**32 compared,
    FTZ/DAZ as the kernels run); on one thread, f32[3072,2048], exp alone 1.77 -> 1.29 ms,
    softmax 1.90 -> 1.64 (docs/emitters.md, "Row kernels against the memory bar")."""
    m = MathIR(b, target, F32)
    xc = m.sel(m.cmp(">", x, m.c(-104.0)), x, m.c(-104.0))  # NaN -> -104 (fixed up below)
    xc = m.sel(m.cmp("<", xc, m.c(89.0)), xc, m.c(89.0))
    y, ni = _exp_parts(m, xc)
    if scales_with_ldexp(target):
        # n <= 128: y * 2**128 is finite below x = 88.7228 (y < 1) and inf above; n >= -150:
        # below 2**-126 the result flushes to +0, as e**x for x < -103.97 does.
        res = m.sel(m.cmp(">", x, m.c(88.72283935546875)), m.c(math.inf), _ldexp_f32(m, y, ni))
        return m.sel(m.isnan(x), x, res)
    n1 = b.ashr(ni, ir.Constant(I32, 1))
    n2 = b.sub(ni, n1)
    res = m.mul(m.mul(y, _pow2_f32(m, n1)), _pow2_f32(m, n2))
    res = m.sel(m.cmp(">", x, m.c(88.72283935546875)), m.c(math.inf), res)
    res = m.sel(m.cmp("<", x, m.c(-103.97208404541016)), m.c(0.0), res)
    return m.sel(m.isnan(x), x, res)


_LOG_P = [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
          -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1]


def log_f32(b: ir.IRBuilder, target, x) -> ir.Value:
    """ln x: exponent/mantissa split (subnormals prescaled), Cephes polynomial on [sqrt(.5), sqrt(2))."""
    m = MathIR(b, target, F32)
    sub = m.cmp("<", x, m.c(1.17549435e-38))
    xs = m.sel(sub, m.mul(x, m.c(8388608.0)), x)
    bits = b.bitcast(xs, I32)
    e = b.sub(b.lshr(bits, ir.Constant(I32, 23)), ir.Constant(I32, 126))
    e = b.sub(e, b.select(sub, ir.Constant(I32, 23), ir.Constant(I32, 0)))
    mant = b.bitcast(b.or_(b.and_(bits, ir.Constant(I32, 0x007FFFFF)), ir.Constant(I32, 0x3F000000)), F32)
    small = m.cmp("<", mant, m.c(0.707106781186547524))
    e = b.sub(e, b.zext(small, I32))
    f = m.sel(small, m.sub(m.add(mant, mant), m.c(1.0)), m.sub(mant, m.c(1.0)))
    z = m.mul(f, f)
    y = m.mul(m.mul(f, z), m.horner(f, _LOG_P))
    fe = b.sitofp(e, F32)
    y = m.fma(fe, m.c(-2.12194440e-4), y)
    y = m.fma(z, m.c(-0.5), y)
    r = m.add(f, y)
    r = m.fma(fe, m.c(0.693359375), r)
    r = m.sel(m.cmp("==", x, m.c(math.inf)), x, r)
    r = m.sel(m.cmp("==", x, m.c(0.0)), m.c(-math.inf), r)
    return _log_domain(m, x, r)


def _log_domain(m: "MathIR", x, r):
    """ln's NaNs as XLA:CPU and the interpreter give them: x < 0 gives the x86 default NaN
    (negative, 0xffc00000 in f32), a NaN x comes back as it is (its sign and payload are what
    a TOTALORDER compare or a bitcast sees; found by the graph fuzzer, seed 41)."""
    r = m.sel(m.cmp("<", x, m.c(0.0)), m.c(-math.nan), r)
    return m.sel(m.isnan(x), x, r)


def log1p_f32(b: ir.IRBuilder, target, x) -> ir.Value:
    """log(1+x) = log(u) * x / (u-1) with u = 1+x (exact compensation, Goldberg's trick)."""
    m = MathIR(b, target, F32)
    u = m.add(x, m.c(1.0))
    d = m.sub(u, m.c(1.0))
    r = m.mul(log_f32(b, target, u), m.div(x, d))
    r = m.sel(m.cmp("==", d, m.c(0.0)), _flushed(m, x), r)
    return m.sel(m.cmp("==", x, m.c(math.inf)), x, r)


def _flushed(m: MathIR, x):
    """x, or a zero of its sign where the kernel's denormals-are-zero mode compares it equal
    to zero (a denormal): what XLA:CPU's log1p and cbrt give for a denormal operand."""
    return m.sel(m.cmp("==", x, m.c(0.0)), m.intr("llvm.copysign", m.c(0.0), x), x)


def expm1_f32(b: ir.IRBuilder, target, x) -> ir.Value:
    """e**x - 1 = (u-1) * x / log(u) with u = e**x (Kahan's trick)."""
    m = MathIR(b, target, F32)
    u = exp_f32(b, target, x)
    um1 = m.sub(u, m.c(1.0))
    r = m.div(m.mul(um1, x), log_f32(b, target, u))
    r = m.sel(m.cmp("==", um1, m.c(-1.0)), m.c(-1.0), r)
    r = m.sel(m.cmp("==", u, m.c(math.inf)), u, r)
    r = m.sel(m.cmp(">", x, m.c(0.5)), um1, r)  # no cancellation there; avoids inf/inf
    return m.sel(m.cmp("==", u, m.c(1.0)), x, r)


# tanh(x) = x + x*z*P(z), z = x*x, for |x| < _TANH_SMALL: degree-4 relative-error minimax of
# (tanh(x)/x - 1)/z on [0, _TANH_SMALL**2] (scripts/fit_minimax.py; 1.9e-7 in f64, scaled by
# z/3 <= 0.14 in the result).
_TANH_P = [-0.005924723111093044, 0.02087438479065895, -0.0538240410387516, 0.13332587480545044,
           -0.333333283662796]
_TANH_SMALL = 0.65
# e**t for |t| <= ln2/2 as the Pade [3/3] quotient (A + B)/(A - B), A = 1 + t*t/10 and
# B = t*(1/2 + t*t/120) (relative error 6.0e-9 there).
_TANH_PADE = (0.1, 1.0 / 120.0, 0.5)
# tanh(x) rounds to 1 in f32 from atanh(1 - 2**-25) = 9.0109 on.
_TANH_CLAMP = 9.02
# 1.5 * 2**23: k = v + _ROUNDER holds rint(v) in its low mantissa bits (|v| < 2**22).
_ROUNDER = 12582912.0


def tanh_f32(b: ir.IRBuilder, target, x) -> ir.Value:
    """tanh, 1 ULP over the whole f32 range, one divide: the odd polynomial for |x| < 0.65,
    1 - 2/(e**2|x| + 1) from there, e**2|x| = 2**n * N/D from a Pade quotient (|x| clamped
    at _TANH_CLAMP, so no overflow or NaN handling; one-step reduction) folded into that
    divide, x itself below 0.00035.

    Why this form: 1 - h with h = 2/(e**2|x| + 1) <= 0.43 carries h's rounding errors into
    the result scaled by h/(1 - h), where a rational N(x*x)/D(x*x) (XLA's form, which hlofuse
    used before) gets the full rounding of its two Horner sums: 5 ULP just below 1. With
    e**2r = N/D, h = 2D/(2**n N + D): N and D share their even and odd parts (A + B, A - B),
    three multiply-adds and a multiply where a degree-6 polynomial for e**2r took seven
    multiply-adds; the small branch's polynomial reaches 0.65 so that the quotient's rounding
    (h up to 0.43 there) stays within 1 ULP. On the Zen 1 AVX2 host (one thread, CPU time, in
    cache, medians of 9 interleaved rounds, load 6.7) 38.2 -> 34.2 cycles a vector of 8 for
    tanh, 46.0 -> 40.7 for GELU-tanh (docs/emitters.md)."""
    m = MathIR(b, target, F32)
    ax = m.intr("llvm.fabs", x)
    z = m.mul(x, x)
    small = m.fma(m.mul(m.horner(z, _TANH_P), z), ax, ax)
    # |x| clamped (a NaN becomes the clamp too: the ordered compare is false; the select
    # below takes `small`, NaN, for it). tanh(_TANH_CLAMP) rounds to 1, so does `big` there.
    axc = m.sel(m.cmp("<", ax, m.c(_TANH_CLAMP)), ax, m.c(_TANH_CLAMP))
    # e**(2 axc) = 2**n * e**t: n = rint(2 axc / ln2) from k's bits, t = 2 axc - n*ln2 in one
    # step (ln2's f32 error times n <= 26 moves e**2|x| by ~5e-8 relative where h ~ 3e-8;
    # 2 axc is exact, and f32(ln2) is twice f32(ln2/2), so t is twice the reduction by ln2/2).
    k = m.fma(axc, m.c(2.0 / math.log(2.0)), m.c(_ROUNDER))
    n = m.sub(k, m.c(_ROUNDER))
    t = m.fma(n, m.c(-math.log(2.0)), m.add(axc, axc))
    # 2**n: k's bits are those of _ROUNDER plus n; shifted to the exponent field and rebiased.
    rebias = ((127 - 0x4B400000) << 23) & 0xFFFFFFFF
    pow2n = b.bitcast(b.add(b.shl(b.bitcast(k, I32), ir.Constant(I32, 23)), ir.Constant(I32, rebias)), F32)
    tt = m.mul(t, t)
    even = m.fma(tt, m.c(_TANH_PADE[0]), m.c(1.0))
    odd = m.mul(t, m.fma(tt, m.c(_TANH_PADE[1]), m.c(_TANH_PADE[2])))
    num, den = m.add(even, odd), m.sub(even, odd)
    big = m.sub(m.c(1.0), m.div(m.add(den, den), m.fma(pow2n, num, den)))
    # tanh is odd: the magnitude gets the sign of x (x + x*z*p would round -0 to +0).
    res = m.intr("llvm.copysign", m.sel(m.cmp(">=", ax, m.c(_TANH_SMALL)), big, small), x)
    # x itself below 0.00035, where tanh(x) rounds to x (the first f32 where it does not is
    # 3.5211e-4: XLA's cut at 0.0004 is 1 ULP high on [3.5211e-4, 4e-4), which floor(tanh(x)
    # - x) turns into 0 for -1); a denormal x comes back unchanged, as XLA's, even where
    # denormals-are-zero would read it as zero in the polynomial.
    return m.sel(m.cmp("<", ax, m.c(0.00035)), x, res)


# e**t is below the smallest normal f32 from t = ln(2**-126) = -87.34 on, and the kernels flush
# denormal results (docs/denormals.md): logistic's exponential clamps its argument here, where
# the one-step scaling's 2**n, n = -127, has exponent field 0 and is +0.
_EXP_FLUSH_FLOOR = -88.0


def logistic_f32(b: ir.IRBuilder, target, x) -> ir.Value:
    """1 / (1 + e**-x); e**x where that is the same to f32 precision (x < -20), so tiny
    results keep accuracy. e**t (t = -x, or x below -20: t <= 20) is exp_f32's reduction and
    polynomial with one-step scaling by 2**n: no overflow case (t <= 20), no denormal case
    (t clamped at _EXP_FLUSH_FLOOR, where e**t flushes to 0; a product below 2**-126
    flushes as it does after exp_f32's two-step scaling), no infinity or NaN case inside.
    Bit for bit the results of 1 / (1 + exp_f32(-x)) (the form before) over 92 million
    f32 (every 7th of +-[1e-8, 110], every 101st of +-[1e-30, 1e-8], the special values),
    in ~7% less CPU time (docs/emitters.md). A target that keeps denormals
    (`flushes_denormals` false) gets 1 / (1 + exp_f32(-x)), whose two-step scaling builds them."""
    m = MathIR(b, target, F32)
    neg = m.cmp("<", x, m.c(-20.0))
    if not getattr(target, "flushes_denormals", True):
        e = exp_f32(b, target, m.sel(neg, x, b.fneg(x)))
        return m.sel(neg, e, m.div(m.c(1.0), m.add(m.c(1.0), e)))
    arg = m.sel(neg, x, b.fneg(x))
    t = m.sel(m.cmp(">", arg, m.c(_EXP_FLUSH_FLOOR)), arg, m.c(_EXP_FLUSH_FLOOR))  # NaN -> floor (fixed below)
    y, n = _exp_parts(m, t)
    e = m.mul(y, _pow2_f32(m, n))  # n = -127 (t < -87.7): 2**n's bits are those of +0
    res = m.sel(neg, e, m.div(m.c(1.0), m.add(m.c(1.0), e)))
    # A NaN x gives -x (its payload, the sign flipped), as 1 / (1 + e**-x) does on the
    # hardware, XLA:CPU and the interpreter.
    return m.sel(m.isnan(x), arg, res)


# ---- f64 helpers for the f32 functions computed in double ---------------------------------
def _exp_f64(m: MathIR, t):
    """e**t for t in [-700, 700] (NaN-free input), relative error ~1e-15."""
    b = m.b
    n = m.intr("llvm.rint", m.mul(t, m.c(1.4426950408889634)))
    r = m.fma(n, m.c(-6.93147180369123816490e-01), t)
    r = m.fma(n, m.c(-1.90821492927058770002e-10), r)
    coeffs = [1.0 / math.factorial(k) for k in range(13, -1, -1)]
    p = m.horner(r, coeffs)
    ni = b.fptosi(n, I64)
    bits = b.shl(b.add(ni, ir.Constant(I64, 1023)), ir.Constant(I64, 52))
    return m.mul(p, b.bitcast(bits, F64))


def _atanh_argument(m: MathIR, bits, e):
    """For a positive double with bit pattern `bits` and unbiased exponent `e`: its mantissa
    taken into [sqrt(.5), sqrt(2)) (adjusting `e`), then s = (mant-1)/(mant+1) and s*s, so
    that ln(mant) = 2*atanh(s). Returns (s, s2, e)."""
    b = m.b
    mant = b.bitcast(b.or_(b.and_(bits, ir.Constant(I64, 0x000FFFFFFFFFFFFF)),
                           ir.Constant(I64, 0x3FF0000000000000)), F64)
    big = m.cmp(">", mant, m.c(1.4142135623730951))
    mant = m.sel(big, m.mul(mant, m.c(0.5)), mant)
    e = b.add(e, b.zext(big, I64))
    s = m.div(m.sub(mant, m.c(1.0)), m.add(mant, m.c(1.0)))
    s2 = m.mul(s, s)
    return s, s2, e


def _log_f64(m: MathIR, x):
    """ln x for positive normal doubles, relative error ~1e-16 (atanh series on [sqrt(.5), sqrt(2)))."""
    b = m.b
    bits = b.bitcast(x, I64)
    e = b.sub(b.lshr(bits, ir.Constant(I64, 52)), ir.Constant(I64, 1023))
    s, s2, e = _atanh_argument(m, bits, e)
    series = m.horner(s2, [1.0 / (2 * k + 1) for k in range(11, -1, -1)])
    lm = m.mul(m.add(s, s), series)
    return m.fma(b.sitofp(e, F64), m.c(math.log(2.0)), lm)


def to_f64(b: ir.IRBuilder, target, x) -> ir.Value:
    """f32 `x` widened to f64 as the kernel's float mode reads it, for the functions whose
    operand is read flushed (the registry's `denormals`="flush").

    On a target that runs with denormals-are-zero the hardware's widening (cvtss2sd) reads an
    f32 denormal as a zero of its sign, but LLVM folds an `fpext` of a constant (a pad's or a
    select's literal arm, found by the graph fuzzer, seed 30: bf16 power(inf, 1e-40) gave inf)
    into a normal f64 whatever the function's denormal-fp-math. So there the denormal is made
    a zero on the bits first (ir_helpers.flush_denormal_bits)."""
    if getattr(target, "flushes_denormals", True):
        x = flush_denormal_bits(b, x, "f32")
    return b.fpext(x, F64)


def pow_f32(b: ir.IRBuilder, target, x, y) -> ir.Value:
    """x**y with C99's special cases; exp(y*log|x|) evaluated in f64 then rounded once."""
    m = MathIR(b, target, F64)
    xd, yd = to_f64(b, target, x), to_f64(b, target, y)
    ax = m.intr("llvm.fabs", xd)
    safe = m.sel(m.cmp(">", ax, m.c(0.0)), ax, m.c(1.0))
    safe = m.sel(m.cmp("<", safe, m.c(math.inf)), safe, m.c(1.0))
    lg = _log_f64(m, safe)
    lg = m.sel(m.cmp("==", ax, m.c(0.0)), m.c(-1e300), lg)
    lg = m.sel(m.cmp("==", ax, m.c(math.inf)), m.c(1e300), lg)
    t = m.mul(yd, lg)
    t = m.sel(m.cmp(">", t, m.c(200.0)), m.c(200.0), t)
    t = m.sel(m.cmp(">", t, m.c(-200.0)), t, m.c(-200.0))  # also NaN -> -200, fixed below
    r = _exp_f64(m, t)
    is_int = m.cmp("==", m.intr("llvm.floor", yd), yd)
    half = m.mul(yd, m.c(0.5))
    odd = b.and_(is_int, m.cmp("!=", m.intr("llvm.floor", half), half))
    negx = b.icmp_signed("<", b.bitcast(xd, I64), ir.Constant(I64, 0))
    r = m.sel(b.and_(negx, odd), b.fneg(r), r)
    finite_neg = b.and_(m.cmp("<", xd, m.c(0.0)), m.cmp(">", xd, m.c(-math.inf)))
    finite_y = m.cmp("<", m.intr("llvm.fabs", yd), m.c(math.inf))
    # NaNs as glibc's powf (and so XLA:CPU and the interpreter) gives them on every host: an
    # invalid operation gives the x86 negative default NaN, a NaN operand comes back as it is,
    # x's before y's, except that a NaN x to an odd integer power loses its sign (glibc squares
    # x and negates the square when x's sign bit is set and y is odd: pow(-NaN, 1) = +NaN).
    r = m.sel(b.and_(finite_neg, b.and_(finite_y, b.not_(is_int))), m.c(-math.nan), r)
    r = m.sel(m.isnan(yd), yd, r)
    r = m.sel(m.isnan(xd), m.sel(odd, ax, xd), r)
    r = m.sel(b.and_(m.cmp("==", ax, m.c(1.0)), m.cmp("==", m.intr("llvm.fabs", yd), m.c(math.inf))), m.c(1.0), r)
    r = m.sel(m.cmp("==", xd, m.c(1.0)), m.c(1.0), r)
    r = m.sel(m.cmp("==", yd, m.c(0.0)), m.c(1.0), r)
    return b.fptrunc(r, F32)


def cbrt_f32(b: ir.IRBuilder, target, x) -> ir.Value:
    """Cube root: exp(log|x|/3) in f64 with the sign of x; 0, inf and NaN map to themselves."""
    m = MathIR(b, target, F64)
    xd = to_f64(b, target, x)  # a denormal is a zero of its sign where the target flushes
    ax = m.intr("llvm.fabs", xd)
    ok = b.and_(m.cmp(">", ax, m.c(0.0)), m.cmp("<", ax, m.c(math.inf)))
    safe = m.sel(ok, ax, m.c(1.0))
    r = _exp_f64(m, m.mul(_log_f64(m, safe), m.c(1.0 / 3.0)))
    r = m.intr("llvm.copysign", r, xd)
    return b.fptrunc(m.sel(ok, r, xd), F32)


# erf(x) = x * N(x*x) / D(x*x) on |x| <= _ERF_CLAMP, in f64: a (7, 6) rational minimax for the
# relative error of erf(x)/x on [0, 3.93] (linear programming over 8,000 points with Loeb's
# reweighting; relative error 4.4e-10, so the f32 result is the correctly rounded one but for
# near-ties). erf rounds to +-1 in f32 from 3.92 on.
_ERF_N = [-2.023545723442704e-09, 6.235562149134317e-07, 5.0339568506398824e-05, 0.0007866704683553275, 0.009908152981962286, 0.07419730389242042, 0.3113822502725344, 1.1283791670861365]
_ERF_D = [8.093671608365769e-06, 0.0002085315815492918, 0.0030044431895089488, 0.027945462676967785, 0.16885187555527595, 0.6092886672929524, 1.0]
_ERF_CLAMP = 3.93


def erf_f32(b: ir.IRBuilder, target, x) -> ir.Value:
    """erf: one rational function of x*x (_ERF_N / _ERF_D) with one divide, in f64, +-1 from
    3.93 on. Replaces a Taylor series and a Chebyshev fit of erfc*exp beside an f64 exp
    (~100 f64 operations an element, 6x slower; docs/emitters.md)."""
    m = MathIR(b, target, F64)
    xd = to_f64(b, target, x)
    ax = m.intr("llvm.fabs", xd)
    axc = m.sel(m.cmp(">", ax, m.c(_ERF_CLAMP)), m.c(_ERF_CLAMP), ax)  # NaN stays NaN
    z = m.mul(axc, axc)
    r = m.div(m.mul(axc, m.horner(z, _ERF_N)), m.horner(z, _ERF_D))
    r = m.sel(m.cmp(">=", ax, m.c(_ERF_CLAMP)), m.c(1.0), r)
    return b.fptrunc(m.intr("llvm.copysign", r, xd), F32)


# ---- f64 exp / log (vectorizable; libm would be a scalar call per element) ------------------
def exp_f64(b: ir.IRBuilder, target, x) -> ir.Value:
    """e**x in f64: two-part ln2 reduction, degree-13 Taylor polynomial, 2**n in two steps."""
    m = MathIR(b, target, F64)
    xc = m.sel(m.cmp(">", x, m.c(-746.0)), x, m.c(-746.0))  # NaN -> -746 (fixed up below)
    xc = m.sel(m.cmp("<", xc, m.c(710.0)), xc, m.c(710.0))
    n = m.intr("llvm.rint", m.mul(xc, m.c(1.4426950408889634)))
    r = m.fma(n, m.c(-6.93147180369123816490e-01), xc)
    r = m.fma(n, m.c(-1.90821492927058770002e-10), r)
    p = m.horner(r, [1.0 / math.factorial(k) for k in range(13, -1, -1)])
    ni = b.fptosi(n, I64)
    n1 = b.ashr(ni, ir.Constant(I64, 1))
    n2 = b.sub(ni, n1)

    def pow2(k):
        return b.bitcast(b.shl(b.add(k, ir.Constant(I64, 1023)), ir.Constant(I64, 52)), F64)

    res = m.mul(m.mul(p, pow2(n1)), pow2(n2))
    res = m.sel(m.cmp(">", x, m.c(709.782712893384)), m.c(math.inf), res)
    res = m.sel(m.cmp("<", x, m.c(-745.1332191019412)), m.c(0.0), res)
    return m.sel(m.isnan(x), x, res)


def log_f64(b: ir.IRBuilder, target, x) -> ir.Value:
    """ln x in f64: subnormals prescaled, mantissa in [sqrt(.5), sqrt(2)), atanh series, e*ln2 in two parts."""
    m = MathIR(b, target, F64)
    sub = m.cmp("<", x, m.c(2.2250738585072014e-308))
    xs = m.sel(sub, m.mul(x, m.c(2.0 ** 54)), x)
    xs = m.sel(m.cmp(">", xs, m.c(0.0)), xs, m.c(1.0))  # keep the bit tricks on positive values
    bits = b.bitcast(xs, I64)
    e = b.sub(b.lshr(bits, ir.Constant(I64, 52)), ir.Constant(I64, 1023))
    e = b.sub(e, b.select(sub, ir.Constant(I64, 54), ir.Constant(I64, 0)))
    s, s2, e = _atanh_argument(m, bits, e)
    series = m.horner(s2, [1.0 / (2 * k + 1) for k in range(12, 0, -1)])
    lm = m.fma(m.add(s, s), m.mul(s2, series), m.add(s, s))
    fe = b.sitofp(e, F64)
    r = m.fma(fe, m.c(1.90821492927058770002e-10), lm)
    r = m.fma(fe, m.c(6.93147180369123816490e-01), r)
    r = m.sel(m.cmp("==", x, m.c(math.inf)), x, r)
    r = m.sel(m.cmp("==", x, m.c(0.0)), m.c(-math.inf), r)
    return _log_domain(m, x, r)
