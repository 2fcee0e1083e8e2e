"""Reference rules of the elementwise ops, with XLA's semantics.

Floats narrower than f32 (f16, bf16, f8) are computed in float32 and rounded to their own type
after every op, which is what XLA does. Transcendental functions of f32 are computed in float64
and rounded once, so the oracle is at least as accurate as any backend. Integers wrap around.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloInstruction
from ...hlo.opcodes import mark_unsupported, register_reference

Array = np.ndarray


# ---- dtype helpers ------------------------------------------------------------------------------
def is_float(dt: np.dtype) -> bool:
    """True for real floating types, including ml_dtypes' bfloat16 and float8 types."""
    dt = np.dtype(dt)
    return dt.kind == "f" or (dt.kind == "V" and "float" in dt.name)


def is_small_int(dt: np.dtype) -> bool:
    """True for the ml_dtypes 4-bit integer types (numpy kind 'V')."""
    dt = np.dtype(dt)
    return dt.kind == "V" and "int" in dt.name


def compute_dtype(dt: np.dtype, transcendental: bool = False) -> np.dtype:
    """The dtype an op on `dt` is computed in (wider for narrow floats / transcendentals)."""
    dt = np.dtype(dt)
    if is_float(dt) and dt.itemsize < 4:
        return np.dtype(np.float64 if transcendental else np.float32)
    if dt == np.float32 and transcendental:
        return np.dtype(np.float64)
    if dt == np.complex64 and transcendental:
        return np.dtype(np.complex128)
    if is_small_int(dt):
        return np.dtype(np.int8 if "uint" not in dt.name else np.uint8)
    return dt


def _contig(x) -> Array:
    """A C-contiguous array of `x` with the same shape (np.ascontiguousarray makes 0-d 1-d)."""
    x = np.asarray(x)
    return np.ascontiguousarray(x).reshape(x.shape)


def _out(inst: HloInstruction) -> np.dtype:
    return inst.shape.dtype.numpy


def to_type(value, dtype: np.dtype) -> Array:
    """`value` as an array of `dtype` (rounding wider floats, wrapping 4-bit integers)."""
    arr = np.asarray(value)
    dtype = np.dtype(dtype)
    if is_small_int(dtype) and arr.dtype != dtype:
        bits = 4
        raw = arr.astype(np.int64) & ((1 << bits) - 1)
        if "uint" not in dtype.name:
            raw = np.where(raw >= 8, raw - 16, raw)
        return raw.astype(dtype)
    return arr.astype(dtype, copy=False) if arr.dtype != dtype else arr


def unary(*opcodes: str, transcendental: bool = False):
    """Register `fn(x) -> array` for opcodes whose result has the operand's type."""

    def deco(fn: Callable[[Array], Array]):
        @register_reference(*opcodes)
        def rule(inst: HloInstruction, args: list, interp) -> Array:
            x = np.asarray(args[0])
            return to_type(fn(x.astype(compute_dtype(x.dtype, transcendental), copy=False)), _out(inst))

        rule.__doc__ = fn.__doc__
        return fn

    return deco


# ---- unary: arithmetic ----------------------------------------------------------------------
@unary("negate")
def negate(x: Array) -> Array:
    """-x (integers wrap: -INT_MIN == INT_MIN)."""
    return np.negative(x) if x.dtype != np.bool_ else x


@register_reference("abs")
def _abs(inst: HloInstruction, args: list, interp) -> Array:
    """|x|; complex gives its real-typed modulus; abs(INT_MIN) == INT_MIN."""
    x = np.asarray(args[0])
    if x.dtype.kind == "c":
        return to_type(np.abs(x.astype(np.complex128)), _out(inst))
    return to_type(np.abs(x.astype(compute_dtype(x.dtype))), _out(inst))


@unary("sign")
def sign(x: Array) -> Array:
    """-1, 0 or 1 (keeping -0.0 and NaN); x/|x| for complex; 0/1 for unsigned."""
    if x.dtype.kind == "c":
        mag = np.abs(x)
        return np.where(mag == 0, 0, x / np.where(mag == 0, 1, mag))
    if x.dtype.kind == "f":
        return np.where(np.isnan(x), x, np.where(x == 0, x, np.sign(x)))
    return np.sign(x)


@unary("not")
def logical_not(x: Array) -> Array:
    """Logical not for pred, bitwise not for integers."""
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


@unary("ceil")
def ceil(x: Array) -> Array:
    """Round toward +inf."""
    return np.ceil(x)


@unary("floor")
def floor(x: Array) -> Array:
    """Round toward -inf."""
    return np.floor(x)


@unary("round-nearest-even")
def round_even(x: Array) -> Array:
    """Round half to even."""
    return np.rint(x)


@unary("round-nearest-afz")
def round_afz(x: Array) -> Array:
    """Round half away from zero (C's round), keeping the sign of zero."""
    t = np.trunc(x)
    frac = x - t  # exact: x and trunc(x) share their exponent range
    return np.copysign(np.where(np.abs(frac) >= 0.5, t + np.sign(x), t), x)


@register_reference("copy")
def _copy(inst: HloInstruction, args: list, interp):
    """The operand, arrays or tuples (layouts are not modelled: values are logical)."""
    value = args[0]
    return value if isinstance(value, tuple) else np.array(value, copy=True)


@register_reference("is-finite")
def _is_finite(inst: HloInstruction, args: list, interp) -> Array:
    """True where x is neither infinite nor NaN."""
    x = np.asarray(args[0])
    return np.isfinite(x.astype(compute_dtype(x.dtype)))


@register_reference("real", "imag")
def _real_imag(inst: HloInstruction, args: list, interp) -> Array:
    """Real or imaginary part (of a real operand: itself or zero)."""
    x = np.asarray(args[0])
    part = np.real(x) if inst.opcode == "real" else np.imag(x)
    return to_type(part, _out(inst))


# ---- unary: bits --------------------------------------------------------------------------
def _unsigned_view(x: Array) -> tuple[Array, int]:
    bits = x.dtype.itemsize * 8
    return x.view(np.dtype(f"u{x.dtype.itemsize}")), bits


@unary("count-leading-zeros")
def count_leading_zeros(x: Array) -> Array:
    """Leading zero bits of the two's complement representation."""
    u, bits = _unsigned_view(_contig(x))
    out = np.full(u.shape, bits, dtype=np.int64)
    for b in range(bits):
        out = np.where((u >> np.asarray(b, u.dtype)) & np.asarray(1, u.dtype), bits - 1 - b, out)
    return out.astype(x.dtype)


@unary("popcnt")
def popcnt(x: Array) -> Array:
    """Number of set bits of the two's complement representation."""
    u, _ = _unsigned_view(_contig(x))
    return np.bitwise_count(u).astype(x.dtype)


# ---- unary: transcendental --------------------------------------------------------------
_erf = np.frompyfunc(math.erf, 1, 1)


def _complex_or(fn_real: Callable, fn_complex: Callable | None, name: str) -> Callable[[Array], Array]:
    def fn(x: Array) -> Array:
        if x.dtype.kind == "c":
            if fn_complex is None:
                raise UnsupportedError(f"{name} of a complex value is not supported by the interpreter")
            return fn_complex(x)
        return fn_real(x)

    return fn


def _logistic(x: Array) -> Array:
    # exp(-x) overflows to inf for very negative x, giving the right limit 0.
    return 1.0 / (1.0 + np.exp(-x))


def _cbrt_complex(x: Array) -> Array:
    raise UnsupportedError("cbrt of a complex value is not defined in XLA")


_TRANSCENDENTAL: dict[str, Callable[[Array], Array]] = {
    "exponential": np.exp,
    "exponential-minus-one": np.expm1,
    "log": np.log,
    "log-plus-one": np.log1p,
    "logistic": _logistic,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "cbrt": _complex_or(np.cbrt, None, "cbrt"),
    "tanh": np.tanh,
    "sine": np.sin,
    "cosine": np.cos,
    "tan": np.tan,
    "erf": _complex_or(lambda x: _erf(x).astype(x.dtype), None, "erf"),
}

for _opcode, _fn in _TRANSCENDENTAL.items():
    unary(_opcode, transcendental=True)(_fn)


# ---- conversions ----------------------------------------------------------------------------
def float_to_int(x: Array, dtype: np.dtype) -> Array:
    """XLA's float -> integer conversion: truncate, NaN -> 0, saturate at the type's range."""
    dtype = np.dtype(dtype)
    x = np.asarray(x).astype(np.float64) if np.asarray(x).dtype != np.float64 else np.asarray(x)
    if is_small_int(dtype):
        lo, hi = (0, 15) if "uint" in dtype.name else (-8, 7)
        return to_type(np.clip(np.nan_to_num(np.trunc(x), nan=0.0), lo, hi).astype(np.int64), dtype)
    info = np.iinfo(dtype)
    bits = info.bits
    # Powers of two are exact in every float type, so these bounds compare exactly.
    upper = float(2 ** (bits - 1) if info.min < 0 else 2 ** bits)
    lower = float(-(2 ** (bits - 1)) if info.min < 0 else 0)
    nan = np.isnan(x)
    over = x >= upper
    under = x < lower
    safe = np.where(nan | over | under, 0.0, np.trunc(x))
    out = safe.astype(dtype)
    out = np.where(over, info.max, out)
    out = np.where(under, info.min, out)
    return np.where(nan, 0, out).astype(dtype)


def convert_array(x: Array, dtype: np.dtype) -> Array:
    """Convert `x` to `dtype` as XLA's `convert` does."""
    x = np.asarray(x)
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x.copy()
    if dtype == np.bool_:
        return x != 0
    src = x.dtype
    if src.kind == "c" and dtype.kind != "c":
        x = np.real(x)
        src = x.dtype
    if (dtype.kind in "iu" or is_small_int(dtype)) and is_float(src):
        return float_to_int(x.astype(np.float64), dtype)
    if is_small_int(dtype):
        return to_type(x.astype(np.int64), dtype)
    if is_small_int(src):
        x = x.astype(np.int64)
    if is_float(dtype) and dtype.itemsize < 4 and (x.dtype.kind in "iu") and x.dtype.itemsize >= 4:
        # Going through float64 keeps a single rounding for any integer below 2**53.
        x = x.astype(np.float64)
    return x.astype(dtype)


@register_reference("convert")
def _convert(inst: HloInstruction, args: list, interp) -> Array:
    """Type conversion: float->int truncates and saturates (NaN -> 0), ->pred is x != 0."""
    return convert_array(args[0], _out(inst))


@register_reference("bitcast-convert")
def _bitcast_convert(inst: HloInstruction, args: list, interp) -> Array:
    """Reinterpret the bits; a narrower result type adds a minor dimension, a wider one drops it."""
    x = _contig(args[0])
    dtype = _out(inst)
    if x.dtype.itemsize == dtype.itemsize:
        return x.view(dtype).reshape(inst.shape.dims)
    if x.dtype.itemsize > dtype.itemsize:
        return x.reshape(x.shape + (1,)).view(dtype).reshape(inst.shape.dims)
    return x.view(dtype).reshape(inst.shape.dims)


_FLOAT_BITS = {np.dtype(np.float32): (8, 23, np.uint32), np.dtype(np.float64): (11, 52, np.uint64)}


def reduce_precision(x: Array, exponent_bits: int, mantissa_bits: int) -> Array:
    """Round f32/f64 values to a float format with the given bits (XLA's algorithm), as the same type."""
    src_exp, src_mant, utype = _FLOAT_BITS[x.dtype]
    total = 1 + src_exp + src_mant
    one = utype(1)
    bits = _contig(x).view(utype).copy()
    if mantissa_bits < src_mant:
        shift = utype(src_mant - mantissa_bits)
        last_bit_mask = one << shift
        base_bias = (last_bit_mask >> one) - one
        last_bit = (bits & last_bit_mask) >> shift
        truncation_mask = ~(last_bit_mask - one)
        bits = (bits + last_bit + base_bias) & truncation_mask
    if exponent_bits < src_exp:
        sign_mask = one << utype(total - 1)
        exp_mask = utype((1 << src_exp) - 1) << utype(src_mant)
        bias = (1 << (src_exp - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        max_exp = utype(bias + reduced_bias) << utype(src_mant)
        min_exp = utype(bias - reduced_bias) << utype(src_mant)
        exponent = bits & exp_mask
        signed_zero = bits & sign_mask
        bits = np.where(exponent > max_exp, signed_zero | exp_mask,
                        np.where(exponent <= min_exp, signed_zero, bits)).astype(utype)
    out = bits.view(x.dtype)
    if mantissa_bits > 0:
        out = np.where(np.isnan(x), x, out)
    else:
        # With no mantissa bits a NaN cannot be told from infinity; XLA keeps it a NaN.
        out = np.where(np.isnan(x), np.array(np.nan, x.dtype), out)
    return out.astype(x.dtype)


@register_reference("reduce-precision")
def _reduce_precision(inst: HloInstruction, args: list, interp) -> Array:
    """Round to `exponent_bits`/`mantissa_bits` and back (overflow to inf, underflow to zero)."""
    x = np.asarray(args[0])
    wide = x.astype(np.float64 if x.dtype == np.float64 else np.float32)
    out = reduce_precision(wide, int(inst.attrs["exponent_bits"]), int(inst.attrs["mantissa_bits"]))
    return to_type(out, _out(inst))


mark_unsupported("reference", "stochastic rounding needs XLA's random-bit convention, which is not modelled",
                 "stochastic-convert")


# ---- binary ---------------------------------------------------------------------------------
def binary(*opcodes: str, transcendental: bool = False):
    """Register `fn(x, y) -> array` for binary ops computed in the operands' compute type."""

    def deco(fn: Callable[[Array, Array], Array]):
        @register_reference(*opcodes)
        def rule(inst: HloInstruction, args: list, interp) -> Array:
            x, y = (np.asarray(a) for a in args)
            ct = compute_dtype(x.dtype, transcendental)
            return to_type(fn(x.astype(ct, copy=False), y.astype(ct, copy=False)), _out(inst))

        rule.__doc__ = fn.__doc__
        return fn

    return deco


@binary("add")
def add(x: Array, y: Array) -> Array:
    """x + y (pred: or)."""
    return np.logical_or(x, y) if x.dtype == np.bool_ else np.add(x, y)


@binary("subtract")
def subtract(x: Array, y: Array) -> Array:
    """x - y (pred: x and not y)."""
    return np.logical_and(x, np.logical_not(y)) if x.dtype == np.bool_ else np.subtract(x, y)


@binary("multiply")
def multiply(x: Array, y: Array) -> Array:
    """x * y (pred: and)."""
    return np.logical_and(x, y) if x.dtype == np.bool_ else np.multiply(x, y)


def int_divide(x: Array, y: Array) -> Array:
    """Integer division truncating toward zero; x/0 is -1 (all ones), INT_MIN/-1 is INT_MIN."""
    zero = y == 0
    signed = x.dtype.kind == "i"
    overflow = (x == np.iinfo(x.dtype).min) & (y == -1) if signed else np.zeros(x.shape, bool)
    safe_y = np.where(zero | overflow, np.ones_like(y), y)
    q = np.floor_divide(x, safe_y)
    if signed:
        # floor -> trunc: add one where the division was inexact and the signs differ.
        inexact = np.remainder(x, safe_y) != 0
        q = np.where(inexact & ((x < 0) != (safe_y < 0)), q + np.ones_like(q), q)
    q = np.where(overflow, x, q)
    return np.where(zero, np.full_like(x, -1) if signed else np.full_like(x, np.iinfo(x.dtype).max), q)


def int_remainder(x: Array, y: Array) -> Array:
    """Remainder with the dividend's sign; x%0 is x, INT_MIN % -1 is 0."""
    zero = y == 0
    safe_y = np.where(zero, np.ones_like(y), y)
    if x.dtype.kind == "i":
        safe_y = np.where(safe_y == -1, np.ones_like(y), safe_y)  # x % -1 == 0, avoids INT_MIN % -1
    return np.where(zero, x, np.fmod(x, safe_y))


@binary("divide")
def divide(x: Array, y: Array) -> Array:
    """x / y: IEEE for floats; integers truncate, with XLA's results for /0 and INT_MIN/-1."""
    if x.dtype.kind in "iu":
        return int_divide(x, y)
    return np.divide(x, y)


@binary("remainder")
def remainder(x: Array, y: Array) -> Array:
    """fmod for floats; integer remainder with the sign of the dividend."""
    if x.dtype.kind in "iu":
        return int_remainder(x, y)
    return np.fmod(x, y)


@binary("maximum")
def maximum(x: Array, y: Array) -> Array:
    """max(x, y), NaN if either is NaN."""
    return np.maximum(x, y)


@binary("minimum")
def minimum(x: Array, y: Array) -> Array:
    """min(x, y), NaN if either is NaN."""
    return np.minimum(x, y)


@binary("and")
def bit_and(x: Array, y: Array) -> Array:
    """Bitwise/logical and."""
    return np.bitwise_and(x, y)


@binary("or")
def bit_or(x: Array, y: Array) -> Array:
    """Bitwise/logical or."""
    return np.bitwise_or(x, y)


@binary("xor")
def bit_xor(x: Array, y: Array) -> Array:
    """Bitwise/logical xor."""
    return np.bitwise_xor(x, y)


def _shift(x: Array, y: Array, kind: str) -> Array:
    width = x.dtype.itemsize * 8
    utype = np.dtype(f"u{x.dtype.itemsize}")
    itype = np.dtype(f"i{x.dtype.itemsize}")
    amount = _contig(y).view(utype)  # shift amounts are read as unsigned
    big = amount >= width
    s = np.where(big, 0, amount).astype(utype)
    if kind == "left":
        out = (_contig(x).view(utype) << s).view(x.dtype)
        return np.where(big, np.zeros_like(x), out)
    if kind == "logical":
        out = (_contig(x).view(utype) >> s).view(x.dtype)
        return np.where(big, np.zeros_like(x), out)
    sx = _contig(x).view(itype)
    out = np.where(big, np.where(sx < 0, -1, 0).astype(itype), sx >> s.astype(itype))
    return out.view(x.dtype)


@binary("shift-left")
def shift_left(x: Array, y: Array) -> Array:
    """x << y; 0 when y >= bit width."""
    return _shift(x, y, "left")


@binary("shift-right-logical")
def shift_right_logical(x: Array, y: Array) -> Array:
    """Logical right shift; 0 when y >= bit width."""
    return _shift(x, y, "logical")


@binary("shift-right-arithmetic")
def shift_right_arithmetic(x: Array, y: Array) -> Array:
    """Arithmetic right shift; the sign fills when y >= bit width."""
    return _shift(x, y, "arithmetic")


def int_power(x: Array, y: Array) -> Array:
    """XLA's integer power: squaring over the low 6 bits of the exponent only (larger exponents
    overflow any base but +-1 anyway), wrapping. Exponents negative as signed values (also for
    unsigned types, as XLA compares them signed) give 0 unless the base is 1 or -1."""
    itype = np.dtype(f"i{x.dtype.itemsize}")
    sx, sy = _contig(x).view(itype), _contig(y).view(itype)
    result = np.ones_like(sx)
    base = sx.copy()
    e = sy.astype(np.int64).astype(np.uint64)
    for _ in range(6):
        result = np.where(e & np.uint64(1), result * base, result)
        base = base * base
        e = e >> np.uint64(1)
    odd = (sy & 1) == 1
    negative_exponent = np.where(sx == 1, 1, np.where(sx == -1, np.where(odd, -1, 1), 0)).astype(itype)
    return np.where(sy < 0, negative_exponent, result).astype(itype).view(x.dtype)


@binary("power", transcendental=True)
def power(x: Array, y: Array) -> Array:
    """x ** y (integers by squaring with wrap-around)."""
    if x.dtype.kind in "iu":
        return int_power(x, y)
    if x.dtype == np.bool_:
        return np.logical_or(x, np.logical_not(y))
    return np.power(x, y)


@binary("atan2", transcendental=True)
def atan2(x: Array, y: Array) -> Array:
    """atan2(x, y) (x is the numerator)."""
    return np.arctan2(x, y)


@register_reference("complex")
def _complex(inst: HloInstruction, args: list, interp) -> Array:
    """real + i*imag."""
    re, im = (np.asarray(a) for a in args)
    out = np.empty(np.broadcast_shapes(re.shape, im.shape), dtype=_out(inst))
    out.real = re
    out.imag = im
    return out


# ---- compare, select, clamp ----------------------------------------------------------------
def total_order_key(x: Array) -> Array:
    """Integers ordered as IEEE totalOrder: -NaN < -inf < ... < -0 < +0 < ... < inf < NaN."""
    x = _contig(x)
    itype = np.dtype(f"i{x.dtype.itemsize}")
    bits = x.view(itype)
    flip = np.array(np.iinfo(itype).max, itype)
    return np.where(bits < 0, bits ^ flip, bits)


_DIRECTIONS = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
               "GT": np.greater, "GE": np.greater_equal}


@register_reference("compare")
def _compare(inst: HloInstruction, args: list, interp) -> Array:
    """Compare with `direction`; `type=TOTALORDER` orders floats totally (NaNs included)."""
    x, y = (np.asarray(a) for a in args)
    direction = str(inst.attrs["direction"])
    if direction not in _DIRECTIONS:
        raise UnsupportedError(f"compare {inst.name}: unknown direction {direction}")
    ctype = str(inst.attrs.get("type", "")) or None
    if ctype == "TOTALORDER" and is_float(x.dtype):
        x, y = total_order_key(x), total_order_key(y)
    elif x.dtype.kind == "c" and direction not in ("EQ", "NE"):
        raise UnsupportedError(f"compare {inst.name}: complex values only compare for equality")
    else:
        ct = compute_dtype(x.dtype)
        x, y = x.astype(ct, copy=False), y.astype(ct, copy=False)
    return _DIRECTIONS[direction](x, y)


@register_reference("select")
def _select(inst: HloInstruction, args: list, interp) -> Array:
    """on_true where pred, on_false elsewhere (pred may be a scalar)."""
    pred, a, b = (np.asarray(v) for v in args)
    return to_type(np.where(pred, a, b), _out(inst))


@register_reference("clamp")
def _clamp(inst: HloInstruction, args: list, interp) -> Array:
    """min(max(x, lo), hi); lo and hi may be scalars; NaN propagates."""
    lo, x, hi = (np.asarray(v) for v in args)
    ct = compute_dtype(x.dtype)
    lo, x, hi = (v.astype(ct, copy=False) for v in (lo, x, hi))
    return to_type(np.minimum(np.maximum(x, lo), hi), _out(inst))
