"""HLO element types (XLA's PrimitiveType) and their numpy counterparts."""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class ElementType:
    """One HLO primitive type: its name in HLO text, its numpy dtype and its class."""

    name: str
    numpy: np.dtype | None  # None for token / tuple-only types
    bits: int
    kind: str  # "pred", "sint", "uint", "float", "complex", "token"

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("sint", "uint")

    @property
    def is_signed(self) -> bool:
        return self.kind in ("sint", "float", "complex")

    @property
    def is_complex(self) -> bool:
        return self.kind == "complex"

    @property
    def is_pred(self) -> bool:
        return self.kind == "pred"

    @property
    def byte_size(self) -> int:
        """Bytes one element occupies in memory (sub-byte types take a whole byte)."""
        return max(1, self.bits // 8)

    def __str__(self) -> str:
        return self.name


def _t(name: str, dtype, bits: int, kind: str) -> ElementType:
    return ElementType(name, np.dtype(dtype) if dtype is not None else None, bits, kind)


_ALL = [
    _t("pred", np.bool_, 8, "pred"),
    _t("s4", ml_dtypes.int4, 4, "sint"),
    _t("s8", np.int8, 8, "sint"),
    _t("s16", np.int16, 16, "sint"),
    _t("s32", np.int32, 32, "sint"),
    _t("s64", np.int64, 64, "sint"),
    _t("u4", ml_dtypes.uint4, 4, "uint"),
    _t("u8", np.uint8, 8, "uint"),
    _t("u16", np.uint16, 16, "uint"),
    _t("u32", np.uint32, 32, "uint"),
    _t("u64", np.uint64, 64, "uint"),
    _t("f16", np.float16, 16, "float"),
    _t("bf16", ml_dtypes.bfloat16, 16, "float"),
    _t("f32", np.float32, 32, "float"),
    _t("f64", np.float64, 64, "float"),
    _t("c64", np.complex64, 64, "complex"),
    _t("c128", np.complex128, 128, "complex"),
    _t("f8e4m3fn", ml_dtypes.float8_e4m3fn, 8, "float"),
    _t("f8e5m2", ml_dtypes.float8_e5m2, 8, "float"),
    # Narrow types XLA's text can carry (ml_dtypes gives each a numpy dtype).
    _t("s1", ml_dtypes.int1, 1, "sint"),
    _t("s2", ml_dtypes.int2, 2, "sint"),
    _t("u1", ml_dtypes.uint1, 1, "uint"),
    _t("u2", ml_dtypes.uint2, 2, "uint"),
    _t("f8e4m3", ml_dtypes.float8_e4m3, 8, "float"),
    _t("f8e3m4", ml_dtypes.float8_e3m4, 8, "float"),
    _t("f8e4m3fnuz", ml_dtypes.float8_e4m3fnuz, 8, "float"),
    _t("f8e5m2fnuz", ml_dtypes.float8_e5m2fnuz, 8, "float"),
    _t("f8e4m3b11fnuz", ml_dtypes.float8_e4m3b11fnuz, 8, "float"),
    _t("f8e8m0fnu", ml_dtypes.float8_e8m0fnu, 8, "float"),
    _t("f6e2m3fn", ml_dtypes.float6_e2m3fn, 6, "float"),
    _t("f6e3m2fn", ml_dtypes.float6_e3m2fn, 6, "float"),
    _t("f4e2m1fn", ml_dtypes.float4_e2m1fn, 4, "float"),
    _t("token", None, 0, "token"),
    _t("opaque", None, 0, "opaque"),  # XLA's OPAQUE_TYPE: `opaque[]`, a handle custom-calls pass around
]

ELEMENT_TYPES: dict[str, ElementType] = {t.name: t for t in _ALL}
_BY_NUMPY: dict[np.dtype, ElementType] = {t.numpy: t for t in _ALL if t.numpy is not None}

PRED = ELEMENT_TYPES["pred"]
S32 = ELEMENT_TYPES["s32"]
S64 = ELEMENT_TYPES["s64"]
U32 = ELEMENT_TYPES["u32"]
F32 = ELEMENT_TYPES["f32"]
F64 = ELEMENT_TYPES["f64"]
TOKEN = ELEMENT_TYPES["token"]


def element_type(name: str) -> ElementType:
    """The element type called `name` in HLO text; KeyError if there is none."""
    return ELEMENT_TYPES[name]


def from_numpy(dtype) -> ElementType:
    """The element type of a numpy dtype (bfloat16 and float8 through ml_dtypes)."""
    dt = np.dtype(dtype)
    try:
        return _BY_NUMPY[dt]
    except KeyError:
        raise ValueError(f"numpy dtype {dt} has no HLO element type") from None


def real_type(t: ElementType) -> ElementType:
    """The component type of a complex type (c64 -> f32); other types map to themselves."""
    if t.name == "c64":
        return F32
    if t.name == "c128":
        return F64
    return t


def _precision_key(t: ElementType) -> tuple:
    """XLA's order of element types by precision (primitive_util::HigherPrecisionType): complex
    over real, then a float's exponent range, then its significand, then the bit width, then
    signed over unsigned."""
    c = real_type(t)
    fl = c.is_float and c.numpy is not None
    info = ml_dtypes.finfo(c.numpy) if fl else None
    return (t.is_complex, info.maxexp if fl else -1, info.nmant + 1 if fl else -1, c.bits, c.is_signed)


def higher_precision(a: ElementType, b: ElementType) -> ElementType:
    """The higher-precision of two element types, as XLA orders them (`a` on a tie)."""
    return a if _precision_key(a) >= _precision_key(b) else b


def can_upcast(source: ElementType, target: ElementType) -> bool:
    """Whether `target` is at least as precise as `source` (XLA's ShapeUtil::ElementCanUpcast):
    a dot whose operands' type upcasts to its result's is computed in the result's type."""
    return higher_precision(source, target) == target


def contraction_type(lhs: ElementType, rhs: ElementType, result: ElementType) -> ElementType:
    """The type a dot of `lhs` and `rhs` operands into `result` multiplies and accumulates in:
    XLA's OperandUpcaster converts operands whose type upcasts to the result's to it; for mixed
    operands that do not (f32 x s64 -> s32) XLA:CPU computes in their higher-precision type and
    converts the result (measured with jaxlib 0.10: an f32 x s64 dot into s32 is the f32 dot,
    converted with saturation)."""
    operands = higher_precision(lhs, rhs)
    return result if can_upcast(operands, result) else operands


def contraction_type_of_other_kind(lhs: ElementType, rhs: ElementType, result: ElementType) -> ElementType | None:
    """`contraction_type`, where it is of another kind (integer, float, complex) than `result`:
    the contraction is computed in it and converted (`convert`'s semantics: saturating
    float -> int, a complex's real part); None where computing in `result`'s type, or one of
    its kind rounded at the end, is the semantics already."""
    calc = contraction_type(lhs, rhs, result)

    def kind(t: ElementType) -> str:
        return "int" if t.is_integer or t.is_pred else t.kind

    return None if calc == result or kind(calc) == kind(result) else calc
