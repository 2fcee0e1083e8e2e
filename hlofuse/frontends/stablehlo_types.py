"""MLIR types and dense constants of StableHLO, turned into hlofuse shapes and numpy arrays.

Constants are read through the attribute's buffer protocol (`np.array(attr)`) where the
bindings support it (integers, f16/f32/f64, i1), and from the attribute's printed form
otherwise (bf16, complex, f8): MLIR prints a dense attribute either as a hex string of the
raw little-endian bytes (`dense<"0x...">`) or as (nested) literals, floats possibly as hex
bit patterns (`0x7FC0`) and complex numbers as `(re,im)` pairs.
"""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np

from ..hlo.dtypes import ElementType, element_type
from ..hlo.errors import UnsupportedError
from ..hlo.shapes import TOKEN_SHAPE, ArrayShape, Shape, TupleShape, array

# MLIR element type spelling -> HLO element type name.
_MLIR_TO_HLO = {
    "i1": "pred", "i4": "s4", "i8": "s8", "i16": "s16", "i32": "s32", "i64": "s64",
    "si4": "s4", "si8": "s8", "si16": "s16", "si32": "s32", "si64": "s64",
    "ui4": "u4", "ui8": "u8", "ui16": "u16", "ui32": "u32", "ui64": "u64",
    "f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64",
    "complex<f32>": "c64", "complex<f64>": "c128",
    "f8E4M3FN": "f8e4m3fn", "f8E5M2": "f8e5m2",
}

# Element types the buffer protocol of the bindings reads correctly.
_BUFFER_OK = {"pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "f32", "f64"}


def hlo_element_type(mlir_type) -> ElementType:
    """The HLO element type of an MLIR element type (UnsupportedError if it has none)."""
    text = str(mlir_type)
    try:
        return element_type(_MLIR_TO_HLO[text])
    except KeyError:
        raise UnsupportedError(f"element type {text} has no HLO counterpart") from None


def hlo_shape(mlir_type, cache: dict | None = None) -> Shape:
    """The hlofuse shape (default layouts) of an MLIR tensor, tuple or token type.

    `cache` (MLIR type -> shape) may be given for many lookups: MLIR uniques types in their
    context, so equal types compare (and hash) equal by identity, and shapes are frozen values
    that instructions can share. The cache keeps the types' context alive, so it should live
    no longer than the context (the importer keeps one per context)."""
    if cache is not None:
        shape = cache.get(mlir_type)
        if shape is None:
            shape = cache[mlir_type] = _convert_type(mlir_type)
        return shape
    return _convert_type(mlir_type)


def _convert_type(mlir_type) -> Shape:
    from jaxlib.mlir import ir

    t = mlir_type.maybe_downcast() if hasattr(mlir_type, "maybe_downcast") else mlir_type
    if isinstance(t, ir.RankedTensorType):
        if not t.has_static_shape:
            raise UnsupportedError(
                f"dynamic shape {t} (refine the shapes first, e.g. with from_exported and concrete arguments)")
        return array(hlo_element_type(t.element_type), tuple(t.shape))
    if isinstance(t, ir.TupleType):
        return TupleShape(tuple(_convert_type(t.get_type(i)) for i in range(t.num_types)))
    text = str(mlir_type)
    if text in ("!stablehlo.token", "!hlo.token"):
        return TOKEN_SHAPE
    raise UnsupportedError(f"type {text} has no HLO counterpart")


def dense_to_numpy(attr, shape: ArrayShape) -> np.ndarray:
    """The value of a DenseElementsAttr as a numpy array of `shape`'s element type."""
    t = shape.dtype
    if t.name in _BUFFER_OK:
        arr = np.array(attr)
        if arr.dtype == t.numpy:
            if arr.shape != shape.dims:  # splats come back as a single element
                arr = np.broadcast_to(arr.reshape(-1)[:1].reshape(()), shape.dims)
            return np.ascontiguousarray(arr)
    return parse_dense_text(str(attr), shape)


_DENSE = re.compile(r"dense<(.*)>\s*:", re.S)
_TOKEN = re.compile(r"\(|\)|\[|\]|,|[^\s\[\](),]+")


def parse_dense_text(text: str, shape: ArrayShape) -> np.ndarray:
    """Parse the printed form `dense<...> : tensor<...>` of a dense attribute."""
    m = _DENSE.search(text)
    if m is None:
        raise UnsupportedError(f"cannot read constant {text[:80]}")
    body = m.group(1).strip()
    t = shape.dtype
    dt = t.numpy
    count = shape.element_count()
    if body.startswith('"0x'):
        raw = bytes.fromhex(body[3:-1])
        if t.is_pred:
            flat = np.frombuffer(raw, np.uint8).astype(np.bool_)
        else:
            flat = np.frombuffer(raw, dt)
        if flat.size == 1 and count != 1:
            flat = np.repeat(flat, count)
        return flat.reshape(shape.dims).copy()
    scalars = _scalar_tokens(body, t)
    values = np.array([_scalar_value(s, t) for s in scalars], dtype=object)
    if values.size == 1 and count != 1:
        values = np.repeat(values, count)
    if values.size != count:
        raise UnsupportedError(f"constant has {values.size} elements, its type {shape} wants {count}")
    return _to_array(values, t).reshape(shape.dims)


def _scalar_tokens(body: str, t: ElementType) -> list:
    """Flatten nested literal lists into scalars (complex scalars as (re, im) token pairs)."""
    out: list = []
    tokens = _TOKEN.findall(body)
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "(":
            out.append((tokens[i + 1], tokens[i + 3]))
            i += 5
            continue
        if tok not in "[],":
            out.append(tok)
        i += 1
    return out


def _float_bits(tok: str, t: ElementType):
    """A float given by its hex bit pattern (MLIR prints NaN and infinities this way)."""
    bits = int(tok, 16)
    width = t.bits if not t.is_complex else t.bits // 2
    uint = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[width]
    real_dt = t.numpy if not t.is_complex else np.dtype(np.float32 if width == 32 else np.float64)
    return np.array([bits], uint).view(real_dt)[0]


def _real(tok: str, t: ElementType):
    if tok.lower().startswith(("0x", "-0x")) and (t.is_float or t.is_complex):
        return _float_bits(tok, t)
    if tok in ("true", "false"):
        return tok == "true"
    if t.is_integer:
        return int(tok)
    return float(tok)


def _scalar_value(s, t: ElementType):
    if isinstance(s, tuple):
        return complex(float(_real(s[0], t)), float(_real(s[1], t)))
    return _real(s, t)


def _to_array(values: np.ndarray, t: ElementType) -> np.ndarray:
    if t.is_float and t.numpy in (np.dtype(ml_dtypes.bfloat16),) or t.name.startswith("f8"):
        # Values were printed in this type, so the float64 -> narrow conversion is exact;
        # hex bit patterns already carry the narrow dtype.
        return np.array([np.asarray(v).astype(t.numpy) for v in values], dtype=t.numpy)
    if t.is_integer:
        return np.array([int(v) for v in values], dtype=object).astype(t.numpy)
    return np.array(list(values), dtype=t.numpy)
