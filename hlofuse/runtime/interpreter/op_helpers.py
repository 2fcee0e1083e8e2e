"""Helpers shared by the reference rules of the heavy op families (dot, convolution, gather,
scatter, windows, sort, fft, linear algebra, rng): result and accumulation dtypes, attribute
readers, and recognition of simple combiner computations so that scatter, reduce-window and
select-and-scatter can run vectorized instead of calling the combiner once per element."""
from __future__ import annotations

from typing import Any, Callable

import ml_dtypes
import numpy as np

from ...hlo.attributes import Raw
from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.op_conditions import denormal_mode
from ...hlo.shapes import ArrayShape, Shape, TupleShape
from .denormals import flush


def result_dtype(shape: Shape) -> np.dtype:
    """The numpy dtype of an array shape."""
    assert isinstance(shape, ArrayShape), f"expected an array shape, got {shape}"
    return shape.dtype.numpy


def accumulation_dtype(*dtypes: np.dtype) -> np.dtype:
    """The dtype large contractions accumulate products in.

    Floats accumulate in float64 (complex128 for complex): at least the operand precision, so
    bf16/f16/f8/f32 products are summed more accurately than any backend does, then rounded
    once to the result type. Integers accumulate in int64 (uint64 if every type is unsigned):
    modular arithmetic makes the final wrapping cast equal to accumulating in the result type.
    """
    kinds = {np.dtype(d).kind for d in dtypes}
    if "c" in kinds:
        return np.dtype(np.complex128)
    if any(_is_float(d) for d in dtypes):
        return np.dtype(np.float64)
    if kinds <= {"u", "b"} and "u" in kinds:
        return np.dtype(np.uint64)
    return np.dtype(np.int64)


# Small contractions are summed one term at a time in the result's precision (at least f32),
# in XLA's order: that is what XLA's naive loop emitters and its evaluator do, so the
# reference reproduces their results bit for bit (the StableHLO conformance expectations were
# made that way). Beyond these sizes no backend sums sequentially, and the reference uses the
# exact float64 accumulation of `accumulation_dtype` instead.
SEQUENTIAL_MAX_TERMS = 256
SEQUENTIAL_MAX_WORK = 1 << 25


def sequential_dtype(out_dtype: np.dtype, *operand_dtypes: np.dtype, terms: int, outputs: int) -> np.dtype | None:
    """The dtype to sum a small float contraction in term by term: the precision of the
    result and the operands, at least float32 (complex if the result is); None for integer
    results and for contractions too large for that."""
    out = np.dtype(out_dtype)
    if not (_is_float(out) or out.kind == "c"):
        return None
    if terms > SEQUENTIAL_MAX_TERMS or terms * outputs > SEQUENTIAL_MAX_WORK:
        return None
    wide = any(np.dtype(d) in (np.float64, np.complex128) for d in (out, *operand_dtypes))
    if out.kind == "c":
        return np.dtype(np.complex128 if wide else np.complex64)
    return np.dtype(np.float64 if wide else np.float32)


def product_dtype(lhs: np.ndarray, rhs: np.ndarray) -> np.dtype:
    """The precision XLA:CPU multiplies a contraction's float operands in: float64 if either
    is, else float32 (bf16 and f16 products are f32 products)."""
    return np.dtype(np.float64 if np.float64 in (lhs.dtype, rhs.dtype) else np.float32)


def _is_float(dtype: np.dtype) -> bool:
    dt = np.dtype(dtype)
    # ml_dtypes floats (bfloat16, float8_*) have kind 'V'; treat every non-integer,
    # non-bool, non-complex dtype as a float.
    return dt.kind == "f" or (dt.kind == "V" and "int" not in dt.name)


def to_compute(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`x` converted to the accumulation dtype (through float32 for ml_dtypes floats)."""
    x = np.asarray(x)
    if x.dtype.kind == "V":
        x = x.astype(np.float32) if _is_float(x.dtype) else x.astype(np.int64)
    return x.astype(dtype, copy=False)


def from_compute(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round an accumulated array to the result dtype (integers wrap, as XLA's do)."""
    dtype = np.dtype(dtype)
    x = np.asarray(x)
    if dtype == np.bool_:
        return x != 0
    if dtype.kind in "iu" and x.dtype.kind in "iu":
        return x.astype(dtype)  # wrapping cast
    if dtype.kind == "V" and x.dtype.kind == "c":
        x = x.real
    if dtype.kind == "f" and x.dtype.kind == "c":
        x = x.real
    return x.astype(dtype)


def attr_bool(inst: HloInstruction, key: str, default: bool = False) -> bool:
    """A boolean attribute, whether the parser kept it as bool, str or Raw."""
    value = inst.attrs.get(key, default)
    if isinstance(value, (Raw, str)):
        text = str(value).strip().lower()
        if text not in ("true", "false", "1", "0"):
            raise UnsupportedError(f"{inst.opcode} {inst.name}: attribute {key}={value} is not a boolean")
        return text in ("true", "1")
    return bool(value)


def attr_float(inst: HloInstruction, key: str, default: float | None = None) -> float:
    """A floating-point attribute (epsilon ...), whatever form the parser gave it."""
    value = inst.attrs.get(key, default)
    if value is None:
        raise UnsupportedError(f"{inst.opcode} {inst.name}: missing attribute {key}")
    return float(str(value)) if isinstance(value, Raw) else float(value)


def attr_int(inst: HloInstruction, key: str, default: int | None = None) -> int:
    """An integer attribute, whatever form the parser gave it."""
    value = inst.attrs.get(key, default)
    if value is None:
        raise UnsupportedError(f"{inst.opcode} {inst.name}: missing attribute {key}")
    return int(str(value)) if isinstance(value, Raw) else int(value)


def attr_str(inst: HloInstruction, key: str, default: str | None = None) -> str:
    """A keyword attribute (fft_type, transpose_a ...) as a plain string."""
    value = inst.attrs.get(key, default)
    if value is None:
        raise UnsupportedError(f"{inst.opcode} {inst.name}: missing attribute {key}")
    return str(value)


def attr_dims(inst: HloInstruction, key: str) -> tuple[int, ...]:
    """A dimension-list attribute; absent means empty."""
    value = inst.attrs.get(key, ())
    if isinstance(value, Raw):
        text = str(value).strip().strip("{}")
        return tuple(int(v) for v in text.split(",") if v.strip())
    if isinstance(value, int):
        return (value,)
    return tuple(int(v) for v in value)


# ---- combiner recognition --------------------------------------------------------------------

# A reducer recognised from a computation: for each output i, either a numpy ufunc applied to
# (accumulator i, update i), or ASSIGN (the update replaces the value), or KEEP (the value stays).
ASSIGN = "assign"
KEEP = "keep"

class SignedZeroExtremum:
    """np.maximum or np.minimum with XLA's (IEEE 754-2019) signed zeros: max(+0, -0) is +0 and
    min(+0, -0) is -0 in either operand order, also in reductions and scatters. numpy returns
    one operand of an equal pair, which one depending on the dtype and the SIMD loop taken.
    NaN propagates, as with the plain ufuncs (XLA's default, not fmax/fmin).

    Called like the ufunc, with its `reduce(a, axis)` and `at(a, indices, b)`. It compares
    equal to (and hashes like) the ufunc it wraps, so tables keyed by np.maximum/np.minimum
    (reduce-window's identities) still apply to it."""

    def __init__(self, ufunc: np.ufunc) -> None:
        assert ufunc in (np.maximum, np.minimum)
        self.ufunc = ufunc
        self.is_min = ufunc is np.minimum
        self.__name__ = ufunc.__name__

    def __eq__(self, other: object) -> bool:
        return other is self.ufunc or (isinstance(other, SignedZeroExtremum) and other.ufunc is self.ufunc)

    def __hash__(self) -> int:
        return hash(self.ufunc)

    def __repr__(self) -> str:
        return f"SignedZeroExtremum({self.ufunc.__name__})"

    def _negative_zero(self, v: np.ndarray) -> np.ndarray:
        """Per element of `v`, whether it votes for a -0 result should the result be a zero:
        for max every operand must be -0 or nonzero (so <= -0); for min one -0 suffices."""
        if self.is_min:
            return np.signbit(v) & (v == 0)
        return np.signbit(v) | (v != 0)

    @staticmethod
    def _with_zero_sign(r: np.ndarray, negative: np.ndarray) -> np.ndarray:
        r = np.asarray(r)
        magnitude = np.abs(r)  # +0 in r's own dtype where r is a zero
        return np.where(r == 0, np.where(negative, -magnitude, magnitude), r)

    def __call__(self, x, y) -> np.ndarray:
        """Elementwise max/min of `x` and `y` (broadcasting)."""
        x, y = np.asarray(x), np.asarray(y)
        if np.result_type(x, y).kind == "c":
            # XLA:CPU compares complex values by their real parts only; the first operand
            # wins unless the comparison is false (a tie keeps x, a NaN real part gives y).
            with np.errstate(invalid="ignore"):
                keep = (x.real <= y.real) if self.is_min else (x.real >= y.real)
            return np.where(keep, x, y)
        r = self.ufunc(x, y)
        if not _is_float(r.dtype):
            return r
        vx, vy = self._negative_zero(x), self._negative_zero(y)
        return self._with_zero_sign(r, (vx | vy) if self.is_min else (vx & vy))

    def reduce(self, a, axis=0) -> np.ndarray:
        """The max/min of `a` over `axis` (an int or a tuple of ints)."""
        a = np.asarray(a)
        r = self.ufunc.reduce(a, axis=axis)
        if not _is_float(a.dtype):
            return r
        votes = self._negative_zero(a)
        negative = np.any(votes, axis=axis) if self.is_min else np.all(votes, axis=axis)
        return self._first_nan(a, axis, self._with_zero_sign(r, negative))

    @staticmethod
    def _first_nan(a: np.ndarray, axis, r: np.ndarray) -> np.ndarray:
        """`r` with each NaN replaced by the first NaN of its elements in index order: folding
        `maximum(acc, x)`, which keeps its first operand's NaN, carries that one (its sign and
        payload) to the end, as the compiled kernels do (XLA:CPU too for min; for max it clears
        the sign past the row's first vector); numpy's vectorised reduce returns the canonical
        NaN from some positions (a -NaN came out +NaN, which a TOTALORDER compare shows)."""
        nan = np.isnan(r)
        if not nan.any():
            return r
        axes = tuple(range(a.ndim)) if axis is None else (axis,) if np.isscalar(axis) else tuple(axis)
        axes = tuple(d % a.ndim for d in axes)
        kept = [d for d in range(a.ndim) if d not in axes]
        rows = np.transpose(a, kept + list(axes)).reshape(np.shape(r) + (-1,))
        first = np.argmax(np.isnan(rows), axis=-1)[..., None]
        return np.where(nan, np.take_along_axis(rows, first, axis=-1)[..., 0], r)

    def at(self, a: np.ndarray, indices, b) -> None:
        """a[indices] = max/min(a[indices], b) in place, repeated indices accumulating."""
        if not _is_float(a.dtype):
            self.ufunc.at(a, indices, b)
            return
        b = np.asarray(b)
        votes = self._negative_zero(a)
        (np.logical_or if self.is_min else np.logical_and).at(votes, indices, self._negative_zero(b))
        with np.errstate(invalid="ignore"):  # NaN operands are expected and propagate
            self.ufunc.at(a, indices, b)
        a[...] = self._with_zero_sign(a, votes)


# XLA's maximum/minimum: NaN-propagating, -0 < +0 (see SignedZeroExtremum).
maximum = SignedZeroExtremum(np.maximum)
minimum = SignedZeroExtremum(np.minimum)

# The combiners that are one numpy ufunc (or a ufunc-like SignedZeroExtremum): opcode ->
# (ufunc on pred, ufunc on other types).
_COMBINER_UFUNCS = {
    "add": (np.logical_or, np.add),
    "multiply": (np.logical_and, np.multiply),
    "maximum": (np.logical_or, maximum),
    "minimum": (np.logical_and, minimum),
    "and": (np.logical_and, np.bitwise_and),
    "or": (np.logical_or, np.bitwise_or),
    "xor": (np.logical_xor, np.bitwise_xor),
}


def _binary_ufunc(opcode: str, dtype: np.dtype):
    ufuncs = _COMBINER_UFUNCS.get(opcode)
    if ufuncs is None:
        return None
    if np.dtype(dtype).kind == "c" and opcode in ("maximum", "minimum"):
        return None  # XLA's complex max/min keep the first operand on ties: not commutative
    if np.dtype(dtype).kind == "c" and opcode == "multiply":
        # XLA computes a complex product with fused multiply-adds (complex_xla.multiply),
        # numpy's ufunc does not: the combiner is evaluated as the computation says.
        return None
    return ufuncs[0] if np.dtype(dtype).kind == "b" else ufuncs[1]


class FlushingCombiner:
    """A recognised float combiner under XLA:CPU's FTZ/DAZ (denormals.py): its operands read
    denormals as zeros of their sign and its results are written flushed, as the combiner
    computation's own instructions do when the interpreter evaluates them one by one.

    A whole reduction (`reduce`) or scatter (`at`) flushes its inputs and its final values,
    not each partial result: a partial sum that passes through the denormal range flushes on
    the hardware at that step, but which partial sums exist is the reduction order, which XLA
    leaves unspecified. Compares equal to (and hashes like) the combiner it wraps, so tables
    keyed by ufunc (reduce-window's identities) still apply."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.__name__ = fn.__name__

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FlushingCombiner):
            return other.fn == self.fn
        return self.fn == other

    def __hash__(self) -> int:
        return hash(self.fn)

    def __repr__(self) -> str:
        return f"FlushingCombiner({self.fn!r})"

    def __call__(self, x, y) -> np.ndarray:
        """The combiner of `x` and `y` elementwise (broadcasting), operands and result flushed."""
        return flush(np.asarray(self.fn(flush(np.asarray(x)), flush(np.asarray(y)))))

    def reduce(self, a, axis=0) -> np.ndarray:
        """The combination of `a`'s elements over `axis`, inputs and result flushed."""
        return flush(np.asarray(self.fn.reduce(flush(np.asarray(a)), axis=axis)))

    def at(self, a: np.ndarray, indices, b) -> None:
        """a[indices] = combiner(a[indices], b) in place (repeated indices accumulating): the
        targeted elements and `b` read flushed, the targeted results written flushed; elements
        no index names keep their bits (a scatter only moves them)."""
        a[indices] = flush(a[indices])
        self.fn.at(a, indices, flush(np.asarray(b)))
        a[indices] = flush(a[indices])


# Types whose denormals XLA:CPU's FTZ/DAZ flushes in a combiner's arithmetic (denormals.py;
# f8e8m0fnu, which has no zero, is left to the element-by-element path's rules).
_FLUSHING_COMBINER_TYPES = {np.dtype(np.float32), np.dtype(np.float64), np.dtype(ml_dtypes.bfloat16),
                            np.dtype(np.complex64), np.dtype(np.complex128)}


def recognize_combiner(comp: HloComputation, denormals: str = "keep") -> list[Any] | None:
    """The per-output reducers of a combiner computation `(acc_0..acc_{n-1}, x_0..x_{n-1})`,
    or None when it is anything else (then callers evaluate it element by element).

    Recognised outputs: `op(acc_i, x_i)` or `op(x_i, acc_i)` for a commutative op among
    add/multiply/maximum/minimum/and/or/xor, `x_i` (assign) and `acc_i` (keep). With
    `denormals="flush"` (the interpreter's XLA:CPU mode) a float op that flushes comes back as
    a FlushingCombiner, so the fast paths flush as the combiner's instructions would.
    """
    params = comp.parameters
    if len(params) % 2:
        return None
    n = len(params) // 2
    root = comp.root
    outputs = list(root.operands) if root.opcode == "tuple" else [root]
    if len(outputs) != n or (n > 1 and root.opcode != "tuple"):
        return None
    reducers: list[Any] = []
    for i, out in enumerate(outputs):
        acc, upd = params[i], params[n + i]
        if out is upd:
            reducers.append(ASSIGN)
        elif out is acc:
            reducers.append(KEEP)
        elif len(out.operands) == 2 and set(out.operands) == {acc, upd}:
            fn = _binary_ufunc(out.opcode, result_dtype(out.shape)) if out.shape.is_array else None
            if fn is None:
                return None
            if denormals == "flush" and denormal_mode(out) == "flush" \
                    and np.dtype(result_dtype(out.shape)) in _FLUSHING_COMBINER_TYPES:
                fn = FlushingCombiner(fn)
            reducers.append(fn)
        else:
            return None
    return reducers


def scalar_args(values: list[np.ndarray | np.generic], dtypes: list[np.dtype]) -> list[np.ndarray]:
    """0-d arrays of the given dtypes, the argument form for calling a scalar computation."""
    return [np.asarray(v, dtype=d).reshape(()) for v, d in zip(values, dtypes)]


def flatten_value(value: Any) -> list[np.ndarray]:
    """The arrays of a (possibly tuple) value, depth-first."""
    if isinstance(value, (tuple, list)):
        out: list[np.ndarray] = []
        for v in value:
            out.extend(flatten_value(v))
        return out
    return [np.asarray(value)]


def leaf_dtypes(shape: Shape) -> list[np.dtype]:
    """numpy dtypes of the array leaves of `shape`, depth-first."""
    return [leaf.dtype.numpy for leaf in shape.leaves()]


def tuple_or_single(values: list[np.ndarray], shape: Shape) -> Any:
    """`values` as the Value of `shape`: a tuple for tuple shapes, the array otherwise."""
    return tuple(values) if isinstance(shape, TupleShape) else values[0]


def float_layout(dtype: np.dtype) -> tuple[int, bool, bool]:
    """(bit width, has a sign bit, the sign bit alone is NaN) of a float type: ml_dtypes stores
    the 4- and 6-bit floats in the low bits of a byte, f8e8m0fnu has no sign bit, and the fnuz
    formats have their NaN where -0 would be."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return dt.itemsize * 8, True, False
    info = ml_dtypes.finfo(dt)
    width, signed = int(info.bits), float(info.min) < 0
    utype = {1: np.uint8, 2: np.uint16}[dt.itemsize]
    sign_nan = signed and bool(np.isnan(np.array(1 << (width - 1), utype).view(dt).astype(np.float32)))
    return width, signed, sign_nan


def total_order_key(x: np.ndarray) -> np.ndarray:
    """Signed integers ordered as XLA's TOTALORDER compare orders floats:
    -NaN < -inf < ... < -0.0 < +0.0 < ... < +inf < +NaN, reading the sign from each format's
    own sign bit (f8e8m0fnu, unsigned, orders by its pattern; the fnuz NaN, sign bit set, is a
    negative NaN, below everything, as XLA orders it). Integers and bools map to themselves."""
    x = np.asarray(x)
    if not _is_float(x.dtype):
        return x
    storage = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[x.dtype.itemsize]
    bits = np.ascontiguousarray(x).reshape(x.shape).view(storage)
    if x.dtype.kind == "f":
        # Negative floats order backwards in their sign-magnitude bits: flip all but the sign bit.
        return np.where(bits < 0, bits ^ np.iinfo(storage).max, bits)
    width, signed, sign_nan = float_layout(x.dtype)
    pattern = bits.astype(np.int64) & ((1 << width) - 1)
    if not signed:
        return pattern
    magnitude = pattern & ((1 << (width - 1)) - 1)
    key = np.where(pattern >> (width - 1), -magnitude - 1, magnitude)
    if sign_nan:
        key = np.where(pattern == 1 << (width - 1), -(1 << width), key)
    return key


def batched_call(comp: HloComputation, interp) -> Callable[[list], list] | None:
    """A function evaluating scalar computation `comp` on whole arrays at once (returning the
    flattened outputs), when the interpreter offers batched calls and `comp` is elementwise;
    None otherwise (callers then call `comp` once per element)."""
    call_batched = getattr(interp, "call_batched", None)
    if call_batched is None:
        return None
    from .core import is_elementwise_computation

    if not is_elementwise_computation(comp):
        return None
    return lambda args: flatten_value(call_batched(comp, args))
