"""Reference rules of the elementwise ops, with XLA's semantics.

Floats narrower than f32 (f16, bf16, f8) are computed in float32 and rounded to their own type
after every op, which is what XLA does. Transcendental functions of f32 are computed in float64
and rounded once, so the oracle is at least as accurate as any backend. Integers wrap around.
"""
from __future__ import annotations

import math
from typing import Callable

import ml_dtypes
import numpy as np

from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloInstruction
from ...hlo.opcodes import register_reference
from . import complex_xla
from .op_helpers import maximum, minimum, total_order_key

Array = np.ndarray


# ---- dtype helpers ------------------------------------------------------------------------------
def is_float(dt: np.dtype) -> bool:
    """True for real floating types, including ml_dtypes' bfloat16 and float8 types."""
    dt = np.dtype(dt)
    return dt.kind == "f" or (dt.kind == "V" and "float" in dt.name)


def is_small_int(dt: np.dtype) -> bool:
    """True for the ml_dtypes 1-, 2- and 4-bit integer types (numpy kind 'V')."""
    dt = np.dtype(dt)
    return dt.kind == "V" and "int" in dt.name


def small_int_bits(dt: np.dtype) -> int:
    """The bit width of an ml_dtypes narrow integer type (1, 2 or 4; one value per byte)."""
    return int(ml_dtypes.iinfo(np.dtype(dt)).bits)


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


def contiguous(x) -> Array:
    """A C-contiguous array of `x` with the same shape (np.ascontiguousarray makes 0-d 1-d)."""
    x = np.asarray(x)
    return np.ascontiguousarray(x).reshape(x.shape)


def out_dtype(inst: HloInstruction) -> np.dtype:
    """The numpy dtype of an instruction's (array) result."""
    return inst.shape.dtype.numpy


def narrow_through_f32(value, operand: np.dtype):
    """A transcendental function's f64 `value` for an operand of a float narrower than f32,
    rounded to f32 first: XLA computes such functions in f32 and rounds that to the narrow
    type, so where the f64 value lies next to a tie of the narrow type the two roundings are
    what XLA:CPU (and the kernels) give; rounded once, f16 sin(-0.2094) came out one ULP away
    (-0.20788574 against XLA's -0.20776367: the large-graph fuzzer, seed 66)."""
    operand = np.dtype(operand)
    if is_float(operand) and operand.itemsize < 4:
        return np.asarray(value).astype(np.float32)
    return value


def to_type(value, dtype: np.dtype) -> Array:
    """`value` as an array of `dtype` (rounding wider floats, wrapping 1-, 2- and 4-bit
    integers in their own width)."""
    arr = np.asarray(value)
    dtype = np.dtype(dtype)
    if is_small_int(dtype) and arr.dtype != dtype:
        bits = small_int_bits(dtype)
        raw = arr.astype(np.int64) & ((1 << bits) - 1)
        if "uint" not in dtype.name:
            raw = np.where(raw >= 1 << (bits - 1), raw - (1 << bits), raw)
        return raw.astype(dtype)
    return arr.astype(dtype, copy=False) if arr.dtype != dtype else arr


def unary(*opcodes: str, transcendental: bool = False) -> Callable[[Callable], Callable]:
    """Register `fn(x) -> array` for opcodes whose result has the operand's type."""

    def deco(fn: Callable[[Array], Array]):
        @register_reference(*opcodes)
        def rule(inst: HloInstruction, args: list, interp) -> Array:
            x = np.asarray(args[0])
            r = fn(x.astype(compute_dtype(x.dtype, transcendental), copy=False))
            return to_type(narrow_through_f32(r, x.dtype) if transcendental else r, out_dtype(inst))

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
        return to_type(np.abs(x.astype(np.complex128)), out_dtype(inst))
    return to_type(np.abs(x.astype(compute_dtype(x.dtype))), out_dtype(inst))


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


# Ops that are one numpy ufunc: ceil (toward +inf), floor (toward -inf), rint (half to even).
for _opcode, _fn in {"ceil": np.ceil, "floor": np.floor, "round-nearest-even": np.rint}.items():
    unary(_opcode)(_fn)


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
    if inst.opcode == "imag" and not np.iscomplexobj(x):
        # The value 0 converted to the type (np.imag gives zero bits, which for f8e8m0fnu,
        # having no zero, is 2**-127 where XLA converts 0 to NaN).
        return to_type(np.zeros(x.shape, np.float32), out_dtype(inst))
    part = np.real(x) if inst.opcode == "real" else np.imag(x)
    return to_type(part, out_dtype(inst))


# ---- integer bit ops --------------------------------------------------------------------------
def int_bits(dt: np.dtype) -> int:
    """The bit width of an integer type (4 for s4/u4, 2 for s2/u2, 1 for s1/u1, which ml_dtypes
    stores one per byte)."""
    dt = np.dtype(dt)
    return small_int_bits(dt) if is_small_int(dt) else dt.itemsize * 8


def bit_pattern(x: Array) -> Array:
    """The two's complement bit patterns of integers `x` as uint64, in the type's own width
    (an s4 -1 is 0b1111, not a sign-extended byte)."""
    x = np.asarray(x)
    if is_small_int(x.dtype):
        return (x.astype(np.int64) & ((1 << small_int_bits(x.dtype)) - 1)).astype(np.uint64)
    return contiguous(x).view(np.dtype(f"u{x.dtype.itemsize}")).astype(np.uint64)


def from_pattern(p: Array, dtype: np.dtype) -> Array:
    """Integers of `dtype` from uint64 bit patterns (bits above the type's width are dropped)."""
    dtype = np.dtype(dtype)
    if is_small_int(dtype):
        return to_type((p & np.uint64((1 << small_int_bits(dtype)) - 1)).astype(np.int64), dtype)
    return np.asarray(p).astype(np.dtype(f"u{dtype.itemsize}")).view(dtype)


def _unary_bits(opcode: str) -> Callable[[Callable], Callable]:
    """Register `fn(patterns, width) -> counts` for an integer op on the operand's bit patterns."""

    def deco(fn: Callable[[Array, int], Array]):
        @register_reference(opcode)
        def rule(inst: HloInstruction, args: list, interp) -> Array:
            x = np.asarray(args[0])
            return to_type(fn(bit_pattern(x), int_bits(x.dtype)).astype(np.int64), out_dtype(inst))

        rule.__doc__ = fn.__doc__
        return fn

    return deco


@_unary_bits("count-leading-zeros")
def count_leading_zeros(p: Array, width: int) -> Array:
    """Leading zero bits of the two's complement pattern in the type's width (clz(s4 1) == 3)."""
    out = np.full(p.shape, width, dtype=np.int64)
    for b in range(width):
        out = np.where((p >> np.uint64(b)) & np.uint64(1), width - 1 - b, out)
    return out


@_unary_bits("popcnt")
def popcnt(p: Array, width: int) -> Array:
    """Set bits of the two's complement pattern in the type's width (popcnt(s4 -1) == 4)."""
    return np.bitwise_count(p)


def shift(x: Array, y: Array, kind: str) -> Array:
    """x shifted by y in x's own bit width w: kind "left", "logical" (zeros come in) or
    "arithmetic" (copies of bit w-1 come in, also for unsigned types, as LLVM's ashr does).
    Amounts are read as unsigned; amounts >= w give 0, or all copies of bit w-1 (arithmetic)."""
    width = int_bits(x.dtype)
    p, amount = bit_pattern(x), bit_pattern(y)
    big = amount >= np.uint64(width)
    mask = np.uint64((1 << width) - 1)
    if kind == "arithmetic":
        up = np.uint64(64 - width)
        signed = (p << up).view(np.int64) >> up.astype(np.int64)  # sign-extended from bit w-1
        s = np.minimum(amount, np.uint64(width - 1)).astype(np.int64)
        out = (signed >> s).view(np.uint64) & mask
    else:
        s = np.where(big, np.uint64(0), amount)
        out = (p << s) & mask if kind == "left" else p >> s
        out = np.where(big, np.uint64(0), out)
    return from_pattern(out, x.dtype)


@register_reference("shift-left")
def _shift_left(inst: HloInstruction, args: list, interp) -> Array:
    """x << y in x's width; 0 when y >= the width."""
    return shift(np.asarray(args[0]), np.asarray(args[1]), "left")


@register_reference("shift-right-logical")
def _shift_right_logical(inst: HloInstruction, args: list, interp) -> Array:
    """Logical right shift in x's width; 0 when y >= the width."""
    return shift(np.asarray(args[0]), np.asarray(args[1]), "logical")


@register_reference("shift-right-arithmetic")
def _shift_right_arithmetic(inst: HloInstruction, args: list, interp) -> Array:
    """Arithmetic right shift in x's width; the top bit fills when y >= the width."""
    return shift(np.asarray(args[0]), np.asarray(args[1]), "arithmetic")


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


def _log(x: Array) -> Array:
    """Natural log; for a real x < 0, x86's default NaN (sign set: 0xffc00000 in f32), what the
    CPU kernels and glibc's logf/log give. numpy's own NaN there follows the routine it
    dispatches to on the host (+NaN through glibc on the Zen 1 AVX2 host, -NaN on the znver5
    AVX-512 host), and the oracle must not depend on the host. A NaN operand is returned as it is."""
    out = np.log(x)
    if np.iscomplexobj(out) or not out.dtype.kind == "f":
        return out
    invalid = np.asarray(x) < 0
    if np.any(invalid):
        out = np.array(out, copy=True)
        out[invalid] = -np.asarray(np.nan, out.dtype)  # the sign bit set: x86's default NaN
    return out


def _cbrt_complex(x: Array) -> Array:
    raise UnsupportedError("cbrt of a complex value is not defined in XLA")


_TRANSCENDENTAL: dict[str, Callable[[Array], Array]] = {
    "exponential": _complex_or(np.exp, complex_xla.exp, "exponential"),
    "exponential-minus-one": np.expm1,
    "log": _log,
    "log-plus-one": np.log1p,
    "logistic": _complex_or(_logistic, complex_xla.logistic, "logistic"),
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "cbrt": _complex_or(np.cbrt, None, "cbrt"),
    "tanh": np.tanh,
    "sine": np.sin,
    "cosine": np.cos,
    "tan": np.tan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    # np.frompyfunc gives a Python float, not an array, for a 0-d operand.
    "erf": _complex_or(lambda x: np.asarray(_erf(x), dtype=x.dtype), None, "erf"),
}


def _nan_operands_kept(fn: Callable[[Array], Array], negated: bool = False) -> Callable[[Array], Array]:
    """`fn` with every NaN operand returned as it is (sign and payload), as x86 arithmetic, the
    CPU kernels and XLA:CPU propagate it; `negated`: with its sign flipped (logistic, which XLA
    computes from exp(-x)). numpy's routines do not all do so, and which routine runs follows the
    host: its f32/f64 tanh of -NaN is +NaN with the payload dropped on the Zen 1 AVX2 host; the
    oracle must not depend on the host."""

    def kept(x: Array) -> Array:
        out = fn(x)
        if x.dtype.kind != "f" or np.ndim(out) != np.ndim(x):
            return out
        nan = np.isnan(x)
        if not np.any(nan):
            return out
        out = np.array(out, dtype=np.result_type(out), copy=True)
        out[nan] = -x[nan] if negated else x[nan]
        return out

    return kept


for _opcode, _fn in _TRANSCENDENTAL.items():
    unary(_opcode, transcendental=True)(_nan_operands_kept(_fn, negated=_opcode == "logistic"))


# ---- binary ---------------------------------------------------------------------------------
def binary(*opcodes: str, transcendental: bool = False) -> Callable[[Callable], Callable]:
    """Register `fn(x, y) -> array` for binary ops computed in the operands' compute type."""

    def deco(fn: Callable[[Array, Array], Array]):
        @register_reference(*opcodes)
        def rule(inst: HloInstruction, args: list, interp) -> Array:
            x, y = (np.asarray(a) for a in args)
            ct = compute_dtype(x.dtype, transcendental)
            r = fn(x.astype(ct, copy=False), y.astype(ct, copy=False))
            return to_type(narrow_through_f32(r, x.dtype) if transcendental else r, out_dtype(inst))

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
    """x * y (pred: and; complex as XLA fuses its parts, complex_xla.multiply)."""
    if x.dtype.kind == "c":
        return complex_xla.multiply(x, y)
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
    """x / y: IEEE for floats; integers truncate, with XLA's results for /0 and INT_MIN/-1;
    pred as a 1-bit unsigned integer (x/1 = x, x/0 = all ones): x or not y; complex as XLA
    divides (complex_xla.divide)."""
    if x.dtype.kind in "iu":
        return int_divide(x, y)
    if x.dtype == np.bool_:
        return np.logical_or(x, np.logical_not(y))
    if x.dtype.kind == "c":
        return complex_xla.divide(x, y)  # XLA's limits at infinities and zeros, not numpy's
    return np.divide(x, y)


@binary("remainder")
def remainder(x: Array, y: Array) -> Array:
    """fmod for floats; integer remainder with the sign of the dividend; pred as a 1-bit unsigned
    integer (x%1 = 0, x%0 = x): x and not y (numpy's fmod on bools would give 0 for x%0)."""
    if x.dtype.kind in "iu":
        return int_remainder(x, y)
    if x.dtype == np.bool_:
        return np.logical_and(x, np.logical_not(y))
    if x.dtype.kind == "c":
        raise UnsupportedError("remainder of complex values is not supported (nor by XLA)")
    return np.fmod(x, y)


# Ops that are one numpy ufunc: max/min propagate NaN and order -0 < +0 as XLA's do
# (op_helpers.SignedZeroExtremum); the bitwise ufuncs are the logical ops on pred.
for _opcode, _fn in {"maximum": maximum, "minimum": minimum, "and": np.bitwise_and,
                     "or": np.bitwise_or, "xor": np.bitwise_xor}.items():
    binary(_opcode)(_fn)


def int_power(x: Array, y: Array) -> Array:
    """XLA's integer power: squaring over the low 6 bits of the exponent only (larger exponents
    overflow any base but +-1 anyway), wrapping. Exponents negative as signed values (also for
    unsigned types, as XLA compares them signed) give 0 unless the base is 1 or -1."""
    itype = np.dtype(f"i{x.dtype.itemsize}")
    sx, sy = contiguous(x).view(itype), contiguous(y).view(itype)
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
    """atan2(x, y) (x is the numerator); for complex values XLA's -i*log((y + i*x) / sqrt(x*x + y*y))."""
    if x.dtype.kind == "c":
        return -1j * np.log((y + 1j * x) / np.sqrt(x * x + y * y))
    return np.arctan2(x, y)


def float_math_function(opcode: str) -> Callable | None:
    """The numpy function the interpreter computes float math op `opcode` with, before its
    compute-type conversion and NaN-operand rule: it computes in whatever float type it is given
    (the edge fuzzer evaluates it in a wider one to judge a disagreement with XLA); None for an
    op without one."""
    return _TRANSCENDENTAL.get(opcode) or {"power": power, "atan2": atan2}.get(opcode)


@register_reference("complex")
def _complex(inst: HloInstruction, args: list, interp) -> Array:
    """real + i*imag."""
    re, im = (np.asarray(a) for a in args)
    out = np.empty(np.broadcast_shapes(re.shape, im.shape), dtype=out_dtype(inst))
    out.real = re
    out.imag = im
    return out


# ---- compare, select, clamp ----------------------------------------------------------------
_DIRECTIONS = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
               "GT": np.greater, "GE": np.greater_equal}


@register_reference("compare")
def _compare(inst: HloInstruction, args: list, interp) -> Array:
    """Compare with `direction`; `type=TOTALORDER` orders floats totally (NaNs included);
    complex values order as XLA orders them (complex_xla.compare)."""
    x, y = (np.asarray(a) for a in args)
    direction = str(inst.attrs["direction"])
    if direction not in _DIRECTIONS:
        raise UnsupportedError(f"compare {inst.name}: unknown direction {direction}")
    ctype = str(inst.attrs.get("type", "")) or None
    if ctype == "TOTALORDER" and is_float(x.dtype):
        x, y = total_order_key(x), total_order_key(y)
    elif x.dtype.kind == "c" and direction not in ("EQ", "NE"):
        return complex_xla.compare(x, y, direction)
    else:
        ct = compute_dtype(x.dtype)
        x, y = x.astype(ct, copy=False), y.astype(ct, copy=False)
    return _DIRECTIONS[direction](x, y)


@register_reference("select")
def _select(inst: HloInstruction, args: list, interp) -> Array:
    """on_true where pred, on_false elsewhere (pred may be a scalar)."""
    pred, a, b = (np.asarray(v) for v in args)
    return to_type(np.where(pred, a, b), out_dtype(inst))


@register_reference("clamp")
def _clamp(inst: HloInstruction, args: list, interp) -> Array:
    """min(max(lo, x), hi); lo and hi may be scalars; NaN propagates. The operand order
    matters for complex values, whose max/min are not symmetric (XLA:CPU)."""
    lo, x, hi = (np.asarray(v) for v in args)
    ct = compute_dtype(x.dtype)
    lo, x, hi = (v.astype(ct, copy=False) for v in (lo, x, hi))
    return to_type(minimum(maximum(lo, x), hi), out_dtype(inst))
