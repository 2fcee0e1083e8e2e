"""Element generators for conversions with XLA's semantics: `convert` (float->int saturates and
NaN -> 0, ->pred tests != 0, floats round to nearest even) and `bitcast-convert` (the same width
reinterpreted; narrowing and widening through a minor dimension of pieces)."""
from __future__ import annotations

from llvmlite import ir

from ..hlo.dtypes import ElementType
from ..hlo.opcodes import register_elemental
from . import elemental_complex as cplx
from .elemental import ElementalEmitter, compute_type, from_compute, reg_type, to_compute
from .elemental_math import float_width, read_as_daz
from .elemental_narrow import decode_f64, is_narrow_float
from .ir_helpers import Index, const_i64


def convert_value(em: ElementalEmitter, v, src: ElementType, dst: ElementType):
    """XLA's convert: float->int saturates (NaN -> 0), ->pred tests != 0, floats round to nearest even."""
    b = em.b
    if src == dst:
        return v
    if src.is_complex or dst.is_complex:
        return cplx.convert(em, v, src, dst, convert_value)
    dty = reg_type(dst)
    if dst.is_pred:
        if src.is_float:
            c = to_compute(b, read_as_daz(em, v, src), src)
            return b.fcmp_unordered("!=", c, ir.Constant(c.type, 0.0))
        return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
    if src.is_float:
        if dst.name == "f64" and is_narrow_float(src.name):
            # from the bits: f8e8m0fnu's 2**-127 is an f32 subnormal, which fpext reads as zero
            # under denormals-are-zero (LLVM folded the fpext away only where the f32 value had
            # no other use; a multi-output kernel also storing it kept the flushing fpext)
            return decode_f64(b, v, src.name)
        c = to_compute(b, v, src)
        if dst.is_float and is_narrow_float(dst.name):
            return from_compute(b, c, dst)
        if dst.is_float:
            cty = compute_type(dst)
            if dst.name == "f16":
                cty = dty
            if c.type != cty:
                c = b.fpext(c, cty) if float_width(c.type) < float_width(cty) else b.fptrunc(c, cty)
            return from_compute(b, c, dst)
        return em.target.float_to_int(b, c, dty, dst.is_signed)
    signed = src.is_signed and not src.is_pred
    if src.is_pred and not dst.is_float:
        return b.zext(v, dty)
    if dst.is_float:
        cty = dty if dst.name == "f16" else compute_type(dst)
        if is_narrow_float(dst.name) and src.bits >= 32:
            cty = ir.DoubleType()  # exact below 2**53, then rounded as an f64 is (the interpreter's path)
        c = b.sitofp(v, cty) if signed else b.uitofp(v, cty)
        return from_compute(b, c, dst)
    if src.bits == dst.bits:
        return v
    if src.bits > dst.bits:
        return b.trunc(v, dty)
    return b.sext(v, dty) if signed else b.zext(v, dty)


@register_elemental("convert")
def _convert(em: ElementalEmitter, inst):
    g = em.operand(inst, 0)
    src, dst = inst.operands[0].shape.dtype, inst.shape.dtype
    return lambda idx: convert_value(em, g(idx), src, dst)


def _to_bits(em: ElementalEmitter, v, et: ElementType):
    if et.is_pred:
        return em.b.zext(v, ir.IntType(8))
    if et.is_complex:
        return cplx.to_bits(em.b, v)
    return v if isinstance(v.type, ir.IntType) else em.b.bitcast(v, ir.IntType(et.bits))


def _from_bits(em: ElementalEmitter, v, et: ElementType):
    if et.is_pred:
        return em.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
    ty = reg_type(et)
    if et.is_complex:
        return cplx.from_bits(em.b, v, ty)
    return v if v.type == ty else em.b.bitcast(v, ty)


def bitcast_value(em: ElementalEmitter, v, src: ElementType, dst: ElementType):
    """Reinterpret the bits of a register value of type `src` as type `dst` (same width)."""
    return _from_bits(em, _to_bits(em, v, src), dst)


@register_elemental("bitcast-convert")
def _bitcast_convert(em: ElementalEmitter, inst):
    """Same width: reinterpret. Narrowing (f32 -> u16[..., 2]) adds a minor dimension holding the
    pieces, little end first; widening removes it (XLA's semantics)."""
    g = em.operand(inst, 0)
    src, dst = inst.operands[0].shape.dtype, inst.shape.dtype
    b = em.b
    if src.bits == dst.bits:
        return lambda idx: bitcast_value(em, g(idx), src, dst)
    op_dims = tuple(inst.operands[0].shape.dims)
    if src.bits > dst.bits:
        def narrow(idx):
            whole = _to_bits(em, g(Index(b, op_dims, multi=idx.multi[:-1])), src)
            shift = b.mul(b.trunc(idx.multi[-1], whole.type) if whole.type.width < 64 else idx.multi[-1],
                          ir.Constant(whole.type, dst.bits))
            return _from_bits(em, b.trunc(b.lshr(whole, shift), ir.IntType(dst.bits)), dst)

        return narrow
    k = src.bits and dst.bits // src.bits

    def widen(idx):
        acc = ir.Constant(ir.IntType(dst.bits), 0)
        for j in range(k):
            piece = _to_bits(em, g(Index(b, op_dims, multi=list(idx.multi) + [const_i64(j)])), src)
            piece = b.shl(b.zext(piece, ir.IntType(dst.bits)), ir.Constant(ir.IntType(dst.bits), j * src.bits))
            acc = b.or_(acc, piece)
        return _from_bits(em, acc, dst)

    return widen
