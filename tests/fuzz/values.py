"""Input arrays for fuzz cases: seeded random values with edge values mixed in (NaN, ±inf, ±0,
denormals, the extremes of each type), and flushing denormals to zero (XLA:CPU's FTZ/DAZ)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from hlofuse.hlo.shapes import ArrayShape, Shape, TupleShape

# Arrays larger than this (elements) are not made: a mutated shape like f32[99999999] is a valid
# module, but running it only measures memory.
MAX_ELEMENTS = 1 << 20


def float_edges(dtype) -> np.ndarray:
    """Edge values of a float type: zeros, ones, halves, NaN, infinities, denormals, the smallest
    normal, the largest finite value, values out of every integer range."""
    fi = ml_dtypes.finfo(dtype)
    tiny = float(fi.tiny)
    sub = float(fi.smallest_subnormal)
    big = float(fi.max)
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, np.nan, -np.nan, np.inf, -np.inf,
            sub, -sub, tiny / 2, -tiny / 2, tiny, -tiny, big, -big, 100.0, -100.0, 1e-3, 3.14159,
            127.5, 255.5, 3e9, -3e9, 2.0 ** 31, -(2.0 ** 31), 2.0 ** 63, 1e20, -1e20, 65504.0, 7e4]
    with np.errstate(over="ignore", invalid="ignore"):
        return np.array(vals, dtype=np.float64).astype(dtype)


def int_edges(dtype) -> np.ndarray:
    """Edge values of an integer type: 0, ±1, the extremes and their neighbours, shift widths."""
    info = np.iinfo(dtype)
    vals = [0, 1, 2, 3, 7, int(info.max), int(info.max) - 1, int(info.min), int(info.min) + 1,
            info.bits - 1, info.bits, info.bits + 1]
    if info.min < 0:
        vals += [-1, -2, -7, -info.bits]
    return np.array(vals, dtype=object).astype(dtype)


def edges_for(dtype, overflow_safe: bool = False) -> np.ndarray:
    """Edge values of `dtype` (numpy dtype of a bool, integer or float type). `overflow_safe`
    leaves out finite floats within a factor 64 of the type's largest: summed in a reduce or a
    dot they overflow or not depending on the order of the sum, which backends may choose."""
    dtype = np.dtype(dtype)
    if overflow_safe and dtype.kind not in "biuc":
        e = float_edges(dtype)
        with np.errstate(invalid="ignore"):
            big = np.isfinite(e) & (np.abs(e.astype(np.float64)) > float(ml_dtypes.finfo(dtype).max) / 64)
        return e[~big]
    if dtype == np.bool_:
        return np.array([False, True])
    if dtype.kind in "iu":
        return int_edges(dtype)
    if dtype.kind == "c":
        f = float_edges(np.float32 if dtype.itemsize == 8 else np.float64)
        return (f + 1j * f[::-1]).astype(dtype)
    return float_edges(dtype)


def random_array(dtype, dims: tuple[int, ...], rng: np.random.Generator, edge_fraction: float,
                 overflow_safe: bool = False) -> np.ndarray:
    """A seeded random array of `dtype`; each element is an edge value with `edge_fraction`."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        out = rng.integers(0, 2, dims).astype(np.bool_)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(int(info.min), -100), min(int(info.max), 100)
        out = rng.integers(lo, hi + 1, dims).astype(dtype)
    elif dtype.kind == "c":
        out = (rng.standard_normal(dims) + 1j * rng.standard_normal(dims)).astype(dtype)
    elif dtype.kind == "V" or dtype.itemsize < 1:
        out = np.zeros(dims, dtype)
    else:
        out = (rng.standard_normal(dims) * 3).astype(dtype)
    if edge_fraction > 0 and out.size:
        try:
            edges = edges_for(dtype, overflow_safe)
        except (ValueError, TypeError):  # a type without finfo/iinfo (e.g. int4): random only
            return out
        mask = rng.random(dims) < edge_fraction
        picks = edges[rng.integers(0, len(edges), dims)]
        out = np.where(mask, picks, out).astype(dtype)
    return np.array(out, dtype=dtype, order="C")  # ascontiguousarray would make a scalar 1-d


def make_inputs(shapes: list[Shape], seed: int, edge_fraction: float, overflow_safe: bool = True) -> list:
    """Arrays (tuples for tuple parameters) for parameters of these shapes; ValueError when a
    shape is too large or has no numpy type (a token)."""
    rng = np.random.default_rng(seed)

    def make(shape: Shape):
        if isinstance(shape, TupleShape):
            return tuple(make(e) for e in shape.elements)
        if not isinstance(shape, ArrayShape) or shape.dtype.numpy is None:
            raise ValueError(f"no input for a parameter of shape {shape}")
        dims = tuple(max(int(d), 0) for d in shape.dims)
        if int(np.prod(dims, dtype=np.int64)) > MAX_ELEMENTS:
            raise ValueError(f"parameter of shape {shape} is too large to run")
        return random_array(shape.dtype.numpy, dims, rng, edge_fraction, overflow_safe)

    return [make(s) for s in shapes]


def is_subnormal(a: np.ndarray) -> np.ndarray:
    """Elementwise: a nonzero float below the smallest normal of its type (False for non-floats)."""
    a = np.asarray(a)
    if a.dtype.kind != "f" and a.dtype not in (np.dtype(ml_dtypes.bfloat16),):
        if not is_float_dtype(a.dtype):
            return np.zeros(a.shape, bool)
    tiny = float(ml_dtypes.finfo(a.dtype).tiny)
    f = a.astype(np.float64)
    return (f != 0) & (np.abs(f) < tiny)


def is_float_dtype(dtype) -> bool:
    """Whether `dtype` holds floats (or complex): numpy's and ml_dtypes' (bf16, fp8), whose
    numpy kind is "V"."""
    try:
        ml_dtypes.finfo(dtype)
        return np.dtype(dtype).kind not in "iub"
    except (ValueError, TypeError):
        return False


def flush_denormals(a):
    """`a` with subnormal floats replaced by zeros of the same sign (tuples recursively)."""
    if isinstance(a, (tuple, list)):
        return type(a)(flush_denormals(x) for x in a)
    a = np.asarray(a)
    if not is_float_dtype(a.dtype):
        return a
    sub = is_subnormal(a)
    if not sub.any():
        return a
    out = a.copy()
    out[sub] = np.where(np.signbit(a[sub].astype(np.float64)), -0.0, 0.0).astype(a.dtype)
    return out


def contains_subnormal(arrays) -> bool:
    """True when any float array (in nested tuples) holds a subnormal value."""
    if isinstance(arrays, (tuple, list)):
        return any(contains_subnormal(x) for x in arrays)
    a = np.asarray(arrays)
    return is_float_dtype(a.dtype) and bool(is_subnormal(a).any())
