"""Reference rules of the conversions: convert (XLA's saturating float->int, NaN -> 0, ->pred
is x != 0), bitcast-convert (a narrower type adds a minor dimension) and reduce-precision; and
the convert that ends a mixed-type dot or convolution (`in_contraction_type`)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ...hlo.dtypes import contraction_type_of_other_kind
from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloInstruction
from ...hlo.opcodes import register_reference
from .elementwise import Array, contiguous, is_float, is_small_int, out_dtype, to_type
from .op_helpers import result_dtype


def float_to_int(x: Array, dtype: np.dtype) -> Array:
    """XLA's float -> integer conversion: truncate, NaN -> 0, saturate at the type's range."""
    dtype = np.dtype(dtype)
    x = np.asarray(x).astype(np.float64) if np.asarray(x).dtype != np.float64 else np.asarray(x)
    if is_small_int(dtype):
        info = ml_dtypes.iinfo(dtype)  # 1-, 2- and 4-bit integers saturate at their own range
        lo, hi = int(info.min), int(info.max)
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
    return convert_array(args[0], out_dtype(inst))


@register_reference("bitcast-convert")
def _bitcast_convert(inst: HloInstruction, args: list, interp) -> Array:
    """Reinterpret the bits; a narrower result type adds a minor dimension, a wider one drops it."""
    x = contiguous(args[0])
    dtype = out_dtype(inst)
    if x.dtype.itemsize == dtype.itemsize:
        # the operand's own shape: in a batched call (Interpreter.call_batched, a sort
        # comparator or a reducer run on whole arrays) that is not the declared scalar shape
        return x.view(dtype)
    if x.dtype.itemsize > dtype.itemsize:
        return x.reshape(x.shape + (1,)).view(dtype).reshape(inst.shape.dims)
    return x.view(dtype).reshape(inst.shape.dims)


_FLOAT_BITS = {np.dtype(np.float16): (5, 10, np.uint16), np.dtype(np.float32): (8, 23, np.uint32),
               np.dtype(np.float64): (11, 52, np.uint64)}


def reduce_precision(x: Array, exponent_bits: int, mantissa_bits: int) -> Array:
    """Round f16/f32/f64 values to a float format with the given bits (XLA's algorithm, on the
    bits of `x`'s own layout), as the same type. A NaN is returned unchanged."""
    src_exp, src_mant, utype = _FLOAT_BITS[x.dtype]
    total = 1 + src_exp + src_mant
    one = utype(1)
    bits = contiguous(x).view(utype).copy()
    if mantissa_bits < src_mant:
        # Round to nearest even at a fixed bit position (subnormals of the layout round as integers).
        shift = utype(src_mant - mantissa_bits)
        last_bit_mask = one << shift
        base_bias = (last_bit_mask >> one) - one
        last_bit = (bits & last_bit_mask) >> shift
        truncation_mask = ~(last_bit_mask - one)
        bits = (bits + last_bit + base_bias) & truncation_mask
    if exponent_bits < src_exp:
        # Only a narrower exponent flushes: out-of-range exponents become signed zero / infinity.
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
    # Rounding may carry a NaN's mantissa into infinity (or zero, with no mantissa bits left):
    # XLA returns the operand's NaN unchanged, also for mantissa_bits=0.
    return np.where(np.isnan(x), x, bits.view(x.dtype)).astype(x.dtype)


def reduce_precision_layout(dtype: np.dtype) -> np.dtype:
    """The float type whose bits XLA:CPU runs reduce-precision on for elements of `dtype`: f16
    and f32/f64 their own, the 8-, 6- and 4-bit floats f16 (they widen to it exactly; XLA:CPU
    upcasts them so), f8e8m0fnu (beyond f16's range) and bf16 f32 (bf16 is f32's upper half, so
    its own layout gives the same result)."""
    dtype = np.dtype(dtype)
    if dtype in _FLOAT_BITS:
        return dtype
    if dtype.itemsize == 1 and dtype.name != "float8_e8m0fnu":
        return np.dtype(np.float16)
    return np.dtype(np.float32)


@register_reference("reduce-precision")
def _reduce_precision(inst: HloInstruction, args: list, interp) -> Array:
    """Round to `exponent_bits`/`mantissa_bits` and back (overflow to inf, underflow to zero)."""
    x = np.asarray(args[0])
    wide = x.astype(reduce_precision_layout(x.dtype))
    out = reduce_precision(wide, int(inst.attrs["exponent_bits"]), int(inst.attrs["mantissa_bits"]))
    return to_type(out, out_dtype(inst))


@register_reference("stochastic-convert")
def _stochastic_convert(inst: HloInstruction, args: list, interp) -> Array:
    """Stochastic rounding of floats to a signed integer type by XLA's convention (its
    StochasticConvertDecomposer, the only definition XLA has; XLA:CPU runs it): |x|'s fraction,
    scaled by 2**bits of the random type (f16 widened to f32 first, where 2**16 fits) and
    converted to that unsigned type, rounds |x| up where it exceeds the random bits; the sign is
    put back by negation, and x at or beyond the target's range (compared in x's own type)
    gives its min or max. Every step is computed as the decomposition's op is, in x's type,
    with XLA's saturating converts and wrapping integer arithmetic. To other types XLA defines
    no stochastic rounding: refused."""
    x, random = np.asarray(args[0]), np.asarray(args[1])
    to = out_dtype(inst)
    if to.kind != "i" or is_small_int(to):
        raise UnsupportedError(f"stochastic-convert to {inst.shape.dtype.name} is not defined by XLA "
                               f"(its decomposition rounds floats to signed integers of 8 bits or more)")
    ft = x.dtype
    with np.errstate(all="ignore"):
        negative = np.sign(x) < 0
        magnitude = np.abs(x)
        whole = np.floor(magnitude)
        fraction = (magnitude - whole).astype(ft)
        if ft == np.float16:
            fraction = fraction.astype(np.float32)
        scaled = (fraction * fraction.dtype.type(2.0 ** (random.dtype.itemsize * 8))).astype(fraction.dtype)
        round_up = random < float_to_int(scaled, random.dtype)
        truncated = float_to_int(whole, to)
        rounded = np.where(round_up, truncated + to.type(1), truncated).astype(to)
        result = np.where(negative, -rounded, rounded).astype(to)
        info = np.iinfo(to)
        result = np.where(x <= ft.type(info.min), info.min, result)
        result = np.where(x >= ft.type(info.max), info.max, result)
    return result.astype(to)


def in_contraction_type(inst: HloInstruction, contract) -> np.ndarray:
    """`contract(dtype)` (a dot's or convolution's result computed in numpy `dtype`) in the type
    XLA computes `inst` in: its result's, or, where the operands' type is of another kind and
    does not upcast to it (f32 x s64 -> s32), the operands' higher-precision type, converted to
    the result with XLA's convert (saturating; hlo.dtypes.contraction_type_of_other_kind, which
    passes/contraction_types.py makes explicit in compiled modules)."""
    out = result_dtype(inst.shape)
    calc = contraction_type_of_other_kind(inst.operands[0].shape.dtype, inst.operands[1].shape.dtype, inst.shape.dtype)
    return contract(out) if calc is None else convert_array(contract(calc.numpy), out)
