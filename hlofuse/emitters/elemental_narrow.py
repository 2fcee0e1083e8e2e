"""Narrow floating-point types in the element generators: the 8-, 6- and 4-bit floats.

As XLA does, arithmetic on them is done in f32: a register holds the element's bit pattern
(an i8), `decode` widens it to f32 exactly and `encode` rounds an f32 or f64 back, to
nearest even, with each format's special values:

- "ieee" formats (f8e5m2, f8e4m3, f8e3m4) have infinities and NaNs (exponent all ones);
  overflow rounds to infinity;
- "fn" formats (f8e4m3fn) have no infinity; the all-ones pattern is NaN, and overflow and
  infinities become NaN;
- "fnuz" formats (f8e4m3fnuz, f8e5m2fnuz, f8e4m3b11fnuz) have no negative zero, and the
  pattern of negative zero (0x80) is their only NaN; overflow and infinities become NaN;
- "finite" formats (f6e2m3fn, f6e3m2fn, f4e2m1fn) have neither: overflow and infinities
  saturate to the largest finite value, and a NaN becomes a zero whose sign bit is the
  inverse of the NaN's (what ml_dtypes, the numpy side, does);
- f8e8m0fnu is an unsigned power of two 2**(e-127): no zero, no sign; zero, negative numbers,
  overflow and NaN become its NaN (0xff) and rounding is half-up on the exponent (as ml_dtypes).

The decoding and the rounding are computed from each format's parameters (exponent bits,
mantissa bits, bias), not from lookup tables.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

I8 = ir.IntType(8)
I32 = ir.IntType(32)
F32 = ir.FloatType()
F64 = ir.DoubleType()


@dataclass(frozen=True)
class NarrowFloat:
    """Bit layout of a narrow float: exponent and mantissa widths, bias, special-value kind."""

    ebits: int
    mbits: int
    bias: int
    kind: str  # ieee | fn | fnuz | finite | e8m0

    @property
    def signed(self) -> bool:
        """Whether the format has a sign bit."""
        return self.kind != "e8m0"

    @property
    def sign_bit(self) -> int:
        """The sign bit's mask."""
        return 1 << (self.ebits + self.mbits)

    @property
    def max_code(self) -> int:
        """The bit pattern of the largest finite value."""
        all_ones = (1 << (self.ebits + self.mbits)) - 1
        if self.kind == "ieee":
            return all_ones - (1 << self.mbits)  # exponent all ones is inf / NaN
        if self.kind in ("fn", "e8m0"):
            return all_ones - 1  # the all-ones pattern is NaN
        return all_ones

    @property
    def nan_code(self) -> int | None:
        """The bit pattern of a positive (quiet) NaN, or None for formats without NaN."""
        exp_ones = ((1 << self.ebits) - 1) << self.mbits
        return {"ieee": exp_ones | (1 << (self.mbits - 1)) if self.mbits else exp_ones,
                "fn": exp_ones | ((1 << self.mbits) - 1), "fnuz": 0x80, "e8m0": 0xFF}.get(self.kind)


NARROW_FLOATS: dict[str, NarrowFloat] = {
    "f8e5m2": NarrowFloat(5, 2, 15, "ieee"),
    "f8e4m3": NarrowFloat(4, 3, 7, "ieee"),
    "f8e3m4": NarrowFloat(3, 4, 3, "ieee"),
    "f8e4m3fn": NarrowFloat(4, 3, 7, "fn"),
    "f8e4m3fnuz": NarrowFloat(4, 3, 8, "fnuz"),
    "f8e5m2fnuz": NarrowFloat(5, 2, 16, "fnuz"),
    "f8e4m3b11fnuz": NarrowFloat(4, 3, 11, "fnuz"),
    "f6e2m3fn": NarrowFloat(2, 3, 1, "finite"),
    "f6e3m2fn": NarrowFloat(3, 2, 3, "finite"),
    "f4e2m1fn": NarrowFloat(2, 1, 1, "finite"),
    "f8e8m0fnu": NarrowFloat(8, 0, 127, "e8m0"),
}


def is_narrow_float(name: str) -> bool:
    """Whether element type `name` is one of the narrow floats handled here."""
    return name in NARROW_FLOATS


def _c8(v: int) -> ir.Constant:
    return ir.Constant(I8, v)


def _pow2_f32(b: ir.IRBuilder, k: ir.Value) -> ir.Value:
    """2**k as an f32 for an i32 k in the normal range [-126, 127]."""
    return b.bitcast(b.shl(b.add(k, ir.Constant(I32, 127)), ir.Constant(I32, 23)), F32)


def decode_f64(b: ir.IRBuilder, bits: ir.Value, name: str) -> ir.Value:
    """The f64 value of narrow-float bit pattern `bits` (an i8), exactly, and a normal number.

    Only f8e8m0fnu needs its own path: its 2**-127 is an f32 subnormal, which a kernel under
    denormals-are-zero reads as zero in any float instruction, the f32 -> f64 conversion
    included; built on the bits, the f64 is 2**-127 whatever the mode. The other formats'
    f32 values are normal (the smallest, f8e4m3b11fnuz's, is 2**-13) and convert exactly."""
    if NARROW_FLOATS[name].kind != "e8m0":
        return b.fpext(decode(b, bits, name), F64)
    i64 = ir.IntType(64)
    e = b.zext(bits, i64)
    value = b.bitcast(b.shl(b.add(e, ir.Constant(i64, 1023 - 127)), ir.Constant(i64, 52)), F64)
    return b.select(b.icmp_unsigned("==", e, ir.Constant(i64, 0xFF)), ir.Constant(F64, float("nan")), value)


def decode(b: ir.IRBuilder, bits: ir.Value, name: str) -> ir.Value:
    """The f32 value of narrow-float bit pattern `bits` (an i8), exactly."""
    fmt = NARROW_FLOATS[name]
    x = b.zext(bits, I32)
    c = lambda v: ir.Constant(I32, v)  # noqa: E731
    exp = b.and_(b.lshr(x, c(fmt.mbits)), c((1 << fmt.ebits) - 1))
    man = b.and_(x, c((1 << fmt.mbits) - 1))
    nan = ir.Constant(F32, float("nan"))
    if fmt.kind == "e8m0":
        # 2**(e-127): an f32 with exponent field e, except e = 0 (2**-127, an f32 subnormal).
        value = b.bitcast(b.select(b.icmp_unsigned("==", exp, c(0)), c(0x400000), b.shl(exp, c(23))), F32)
        return b.select(b.icmp_unsigned("==", exp, c(0xFF)), nan, value)
    subnormal = b.icmp_unsigned("==", exp, c(0))
    significand = b.select(subnormal, man, b.or_(man, c(1 << fmt.mbits)))
    scale = b.sub(b.select(subnormal, c(1), exp), c(fmt.bias + fmt.mbits))
    value = b.fmul(b.uitofp(significand, F32), _pow2_f32(b, scale))
    exp_ones = c((1 << fmt.ebits) - 1)
    if fmt.kind == "ieee":
        special = b.icmp_unsigned("==", exp, exp_ones)
        inf_or_nan = b.select(b.icmp_unsigned("==", man, c(0)), ir.Constant(F32, float("inf")), nan)
        value = b.select(special, inf_or_nan, value)
    elif fmt.kind == "fn":
        is_nan = b.icmp_unsigned("==", b.and_(x, c(fmt.sign_bit - 1)), c(fmt.sign_bit - 1))
        value = b.select(is_nan, nan, value)
    negative = b.icmp_unsigned("!=", b.and_(x, c(fmt.sign_bit)), c(0))
    value = b.select(negative, b.fneg(value), value)
    if fmt.kind == "fnuz":
        value = b.select(b.icmp_unsigned("==", x, c(0x80)), nan, value)
    return value


def encode(b: ir.IRBuilder, v: ir.Value, name: str) -> ir.Value:
    """Round f32 or f64 `v` to narrow float `name` (to nearest even): its bit pattern (i8)."""
    fmt = NARROW_FLOATS[name]
    wide = v.type == F64
    it = ir.IntType(64 if wide else 32)
    src_mbits, src_bias = (52, 1023) if wide else (23, 127)
    c = lambda k: ir.Constant(it, k)  # noqa: E731
    bits = b.bitcast(v, it)
    sign_shift = (64 if wide else 32) - 1
    negative = b.icmp_unsigned("!=", b.lshr(bits, c(sign_shift)), c(0))
    mag = b.and_(bits, c((1 << sign_shift) - 1))
    inf_bits = ((1 << (sign_shift - src_mbits)) - 1) << src_mbits
    is_nan = b.icmp_unsigned(">", mag, c(inf_bits))
    is_inf = b.icmp_unsigned("==", mag, c(inf_bits))
    absv = b.bitcast(mag, v.type)

    # Normal results: round the source mantissa to fmt.mbits bits, then rebias the exponent.
    shift = src_mbits - fmt.mbits
    half = 1 << (shift - 1)
    if fmt.kind == "e8m0":
        rounded = b.add(mag, c(half))  # ties away from zero (what ml_dtypes does)
    else:
        odd = b.and_(b.lshr(mag, c(shift)), c(1))
        rounded = b.add(mag, b.add(odd, c(half - 1)))
    normal = b.sub(b.lshr(rounded, c(shift)), c((src_bias - fmt.bias) << fmt.mbits))

    # Results below the smallest normal: a multiple of the smallest subnormal, rounded.
    min_normal_bits = (src_bias + 1 - fmt.bias) << src_mbits
    tiny = b.icmp_unsigned("<", mag, c(min_normal_bits))
    if fmt.kind == "e8m0":
        # Below 2**-126 the only value is 2**-127 (code 0); round half-up between them. On
        # the bits: kernels read an f32 denormal (2**-127 is one) as zero in float compares.
        three_halves = (((1023 - 127) << 52) | (1 << 51)) if wide else 0x600000  # 1.5 * 2**-127
        sub = b.zext(b.icmp_unsigned(">=", mag, c(three_halves)), it)
    else:
        scaled = b.fmul(absv, ir.Constant(v.type, 2.0 ** (fmt.bias - 1 + fmt.mbits)))
        rint = b.module.declare_intrinsic("llvm.rint", [v.type], ir.FunctionType(v.type, [v.type]))
        sub = b.fptoui(b.call(rint, [scaled]), it)
    code = b.select(tiny, sub, normal)

    over = b.or_(b.icmp_unsigned(">", code, c(fmt.max_code)), is_inf)
    if fmt.kind == "ieee":
        overflow_code = ((1 << fmt.ebits) - 1) << fmt.mbits  # infinity
    elif fmt.kind == "finite":
        overflow_code = fmt.max_code
    else:
        overflow_code = fmt.nan_code
    code = b.trunc(b.select(over, c(overflow_code), code), I8)

    if fmt.kind == "e8m0":
        bad = b.or_(b.or_(is_nan, negative), b.icmp_unsigned("==", mag, c(0)))
        return b.select(bad, _c8(0xFF), code)
    sign = b.select(negative, _c8(fmt.sign_bit), _c8(0))
    if fmt.kind == "fnuz":
        # No negative zero (0x80 is NaN); a NaN is 0x80 whatever its sign.
        sign = b.select(b.icmp_unsigned("==", code, _c8(0)), _c8(0), sign)
    code = b.or_(code, sign)
    if fmt.kind == "finite":
        nan_result = b.select(negative, _c8(0), _c8(fmt.sign_bit))
    elif fmt.kind == "fnuz":
        nan_result = _c8(0x80)
    else:
        nan_result = b.or_(_c8(fmt.nan_code), sign)
    return b.select(is_nan, nan_result, code)


def narrow_total_order_key(b: ir.IRBuilder, bits: ir.Value, name: str) -> ir.Value:
    """An i16 whose signed order is the total order of narrow-float bit patterns `bits`
    (-NaN < -inf < ... < -0 < +0 < ... < inf < NaN, by the format's own sign bit; the
    unsigned f8e8m0fnu orders by its pattern). The fnuz formats' only NaN is the sign bit
    alone (their "-0"): XLA orders it as a negative NaN, below every other pattern."""
    fmt = NARROW_FLOATS[name]
    i16 = ir.IntType(16)
    x = b.zext(bits, i16)
    if not fmt.signed:
        return x
    mag = b.and_(x, ir.Constant(i16, fmt.sign_bit - 1))
    negative = b.icmp_unsigned("!=", b.and_(x, ir.Constant(i16, fmt.sign_bit)), ir.Constant(i16, 0))
    key = b.select(negative, b.xor(mag, ir.Constant(i16, -1)), mag)
    if fmt.kind == "fnuz":
        is_nan = b.icmp_unsigned("==", x, ir.Constant(i16, fmt.sign_bit))
        key = b.select(is_nan, ir.Constant(i16, -2 * fmt.sign_bit), key)
    return key
