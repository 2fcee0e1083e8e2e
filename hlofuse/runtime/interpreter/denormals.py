"""XLA:CPU's denormal mode in the interpreter: flush-to-zero (FTZ) and denormals-are-zero (DAZ).

XLA:CPU runs its kernels with MXCSR's FTZ and DAZ bits set, and so do hlofuse's compiled CPU
kernels (codegen/kernels/cpu_skeleton.py). The interpreter is their oracle, so it models the
mode, in one place: `Interpreter.evaluate_instruction` asks `operands` and `result` here, per
instruction, by the registry row's `denormals` field (hlo/opcodes.py). What XLA:CPU does was
measured op by op with jax (docs/denormals.md has the table):

  * Only f32, f64 and bf16 (and the parts of c64/c128) are affected, and f8e8m0fnu's 2**-127.
    bf16 and e8m0 are computed in f32, where a bf16 denormal (and e8m0's 2**-127) is an f32
    denormal; f16 and the other 8-bit floats are computed in f32 too, where their denormals
    are normal numbers, so nothing of theirs is flushed. e8m0 has no zero: an operand that
    flushes is handed to the rule as an f32 array, and a result that flushes is NaN.
  * "flush": float arithmetic (add ... divide, max/min, compare, clamp, sign, floor/ceil,
    sqrt, exp, log, dot ...): denormal operands read as zero of their sign, and a denormal
    result is written as zero of its sign.
  * "keep": ops that move or select bits (data movement, abs, negate, copy, select,
    bitcast-convert, reduce-precision ...), and ops whose called computation does the
    arithmetic (reduce, sort, map, scatter ...: that computation's instructions flush).
  * "keep-tiny": XLA's approximations of sin, tan and expm1 (and of tanh for f32/bf16)
    return x itself for tiny |x|, by a select on the operand's bits: a denormal operand comes
    back unchanged, any other flushes as "flush".
  * "convert": flushes only through a hardware f32 <-> f64 conversion (f64 to f32 or bf16,
    f32 or bf16 to f64), and float -> pred (x != 0) reads a denormal as zero; f32 <-> bf16
    is done on the bits and keeps denormals. A TOTALORDER compare orders bits: it keeps.
  * "flush-divisor": remainder calls libm's fmod, which tests the divisor for zero with a
    float compare (so a denormal divisor gives NaN) but computes on the bits.
"""
from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ...hlo.ir import HloInstruction

MODES = ("keep", "flush", "keep-tiny", "convert", "flush-divisor")

# Float types XLA:CPU computes with SSE arithmetic on their own bits (bf16 through f32).
_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
_FLUSHED = {np.dtype(np.float32): np.float32, np.dtype(np.float64): np.float64,
            np.dtype(ml_dtypes.bfloat16): np.float32, _E8M0: np.float32}
_COMPLEX = (np.dtype(np.complex64), np.dtype(np.complex128))
_TINY = {dt: float(ml_dtypes.finfo(dt if dt != _E8M0 else np.float32).tiny) for dt in _FLUSHED}
# tanh: XLA's f64 tanh has no small-argument select (measured: tanh(f64 denormal) is 0).
_KEEP_TINY_NOT_F64 = ("tanh",)


def subnormal_mask(a: np.ndarray) -> np.ndarray | None:
    """Where the f32/f64/bf16 array `a` holds a denormal; None for other types."""
    tiny = _TINY.get(a.dtype)
    if tiny is None:
        return None
    x = a.astype(_FLUSHED[a.dtype], copy=False) if a.dtype not in (np.float32, np.float64) else a
    return (np.abs(x) < tiny) & (x != 0)


def flush(value: Any) -> Any:
    """`value` with every f32/f64/bf16 denormal (and complex part) replaced by a zero of its sign.

    Arrays without denormals (the common case) come back as they are, uncopied; tuples recurse."""
    if isinstance(value, tuple):
        return tuple(flush(v) for v in value)
    if not isinstance(value, np.ndarray):
        return value
    if value.dtype in _COMPLEX:
        re, im = flush(np.ascontiguousarray(value.real)), flush(np.ascontiguousarray(value.imag))
        if re is value.real and im is value.imag:
            return value
        out = np.empty_like(value)
        out.real, out.imag = re, im
        return out
    mask = subnormal_mask(value)
    if mask is None or not mask.any():
        return value
    if value.dtype == _E8M0:  # no zero in e8m0: read as the f32 zero it computes with
        value = value.astype(np.float32)
    out = value.copy()
    # A zero of the denormal's own sign: 0 * x keeps the sign bit of x.
    out[mask] = (value[mask].astype(np.float32 if value.dtype != np.float64 else np.float64) * 0).astype(value.dtype)
    return out


def tiny_product_bound(lhs: np.ndarray, rhs: np.ndarray, acc: np.dtype) -> float | None:
    """The magnitude below which a product of an element of `lhs` and one of `rhs`, computed in
    `acc` (float32 or float64: the precision XLA:CPU multiplies them in), is a denormal that
    FTZ writes as zero; None when no product can be that small (the two smallest nonzero
    magnitudes multiply to a normal number: the usual case, checked in one pass over each
    operand) or for other types.

    Why: a dot's or a convolution's products are flushed one by one on XLA:CPU (measured:
    f32 3x3 convolutions of 64 features with every input and weight 1e-20 give 0 there, where
    summing the 1e-40 products in float64 gives 5.8e-38)."""
    acc = np.dtype(acc)
    if acc not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None
    tiny = _TINY[acc]
    smallest = []
    for a in (lhs, rhs):
        if a.dtype.kind != "f" and a.dtype not in _FLUSHED:
            return None
        mag = np.abs(a.astype(np.float64, copy=False))
        nonzero = mag[mag > 0]
        if nonzero.size == 0:
            return None
        smallest.append(float(nonzero.min()))
    return tiny if smallest[0] * smallest[1] < tiny else None


def flush_below(value: np.ndarray, bound: float) -> np.ndarray:
    """`value` (in place when writable) with every element of magnitude below `bound` replaced
    by a zero of its sign: FTZ applied to products or partial sums computed in a wider type."""
    mask = np.abs(value) < bound
    if mask.any():
        value[mask] *= 0
    return value


def _conversion_flushes(src: np.dtype, dst: np.dtype) -> bool:
    """Whether a convert from `src` to `dst` goes through the hardware f32 <-> f64 conversion."""
    wide, narrow = np.dtype(np.float64), (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16))
    return (src == wide and dst in narrow) or (dst == wide and src in narrow)


def operands(inst: HloInstruction, mode: str, args: list) -> list:
    """The operand values instruction `inst` computes on under mode `mode` (DAZ)."""
    if mode in ("flush", "keep-tiny"):
        if inst.opcode == "ceil" and getattr(args[0], "dtype", None) == _E8M0:
            return args  # measured: XLA:CPU's ceil of e8m0's 2**-127 is 1 (floor's is NaN)
        return [flush(a) for a in args]
    if mode == "convert":
        src = getattr(args[0], "dtype", None)
        dst = inst.shape.dtype.numpy
        # float -> pred is a compare with zero (x != 0), which reads a denormal as zero.
        reads = src is not None and (_conversion_flushes(src, dst) or dst == np.bool_)
        return [flush(args[0])] if reads else args
    if mode == "flush-divisor":
        return [args[0], flush(args[1])]
    return args


def _flush_result(value: Any) -> Any:
    """`flush` for a result: an f8e8m0fnu result that flushes (2**-127) is NaN, e8m0's value
    for the zero its f32 computation wrote."""
    if isinstance(value, np.ndarray) and value.dtype == _E8M0:
        mask = subnormal_mask(value)
        if mask is not None and mask.any():
            value = value.copy()
            value[mask] = np.nan
        return value
    return flush(value)


def result(inst: HloInstruction, mode: str, args: list, value: Any) -> Any:
    """The value instruction `inst` writes under mode `mode` (FTZ), given its raw operands."""
    if mode == "flush":
        return _flush_result(value)
    if mode == "convert":
        src = getattr(args[0], "dtype", None)
        return _flush_result(value) if src is not None and _conversion_flushes(src, inst.shape.dtype.numpy) else value
    if mode == "keep-tiny":
        flushed = _flush_result(value)
        x = args[0]
        if not isinstance(x, np.ndarray) or (inst.opcode in _KEEP_TINY_NOT_F64 and x.dtype == np.float64):
            return flushed
        mask = subnormal_mask(x)
        if mask is None or not mask.any():
            return flushed
        out = np.array(flushed, copy=True)
        out[mask] = x[mask]
        return out
    return value
