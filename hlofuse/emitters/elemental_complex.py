"""Complex arithmetic for the elemental emitter: c64/c128 are {re, im} structs in registers
and in memory (numpy's layout). The generic rules in elemental_math.py call these when the
element type is complex."""
from __future__ import annotations

import math

from llvmlite import ir

from ..hlo.dtypes import ElementType, real_type
from ..hlo.errors import UnsupportedError
from ..hlo.opcodes import register_elemental


def parts(b: ir.IRBuilder, v):
    return b.extract_value(v, 0), b.extract_value(v, 1)


def make(b: ir.IRBuilder, ty: ir.Type, re, im):
    return b.insert_value(b.insert_value(ir.Constant(ty, ir.Undefined), re, 0), im, 1)


def binary(em, op: str, x, y):
    """add / sub / mul / div of complex values (Smith's algorithm for division)."""
    b = em.b
    a, bb = parts(b, x)
    c, d = parts(b, y)
    if op == "add":
        return make(b, x.type, b.fadd(a, c), b.fadd(bb, d))
    if op == "sub":
        return make(b, x.type, b.fsub(a, c), b.fsub(bb, d))
    if op == "mul":
        return make(b, x.type, b.fsub(b.fmul(a, c), b.fmul(bb, d)), b.fadd(b.fmul(a, d), b.fmul(bb, c)))
    if op == "div":
        fabs = lambda v: em.target.intrinsic(b, "llvm.fabs", [v])  # noqa: E731
        wide = b.fcmp_ordered(">=", fabs(c), fabs(d))
        r1 = b.fdiv(d, c)
        den1 = b.fadd(c, b.fmul(d, r1))
        re1 = b.fdiv(b.fadd(a, b.fmul(bb, r1)), den1)
        im1 = b.fdiv(b.fsub(bb, b.fmul(a, r1)), den1)
        r2 = b.fdiv(c, d)
        den2 = b.fadd(b.fmul(c, r2), d)
        re2 = b.fdiv(b.fadd(b.fmul(a, r2), bb), den2)
        im2 = b.fdiv(b.fsub(b.fmul(bb, r2), a), den2)
        return make(b, x.type, b.select(wide, re1, re2), b.select(wide, im1, im2))
    raise UnsupportedError(f"complex {op} is not supported")


def negate(em, x):
    b = em.b
    re, im = parts(b, x)
    return make(b, x.type, b.fneg(re), b.fneg(im))


def absolute(em, x):
    """|z| = m * sqrt((re/m)^2 + (im/m)^2) with m = max(|re|, |im|) (no overflow); inf wins over NaN."""
    b = em.b
    re, im = parts(b, x)
    fabs = lambda v: em.target.intrinsic(b, "llvm.fabs", [v])  # noqa: E731
    ar, ai = fabs(re), fabs(im)
    m = b.select(b.fcmp_ordered(">=", ar, ai), ar, ai)
    m = b.select(b.fcmp_unordered("uno", ar, ai), b.fadd(ar, ai), m)
    safe = b.select(b.fcmp_ordered("==", m, ir.Constant(m.type, 0.0)), ir.Constant(m.type, 1.0), m)
    qr, qi = b.fdiv(ar, safe), b.fdiv(ai, safe)
    r = b.fmul(m, em.target.intrinsic(b, "llvm.sqrt", [b.fadd(b.fmul(qr, qr), b.fmul(qi, qi))]))
    inf = ir.Constant(m.type, math.inf)
    is_inf = b.or_(b.fcmp_ordered("==", ar, inf), b.fcmp_ordered("==", ai, inf))
    return b.select(is_inf, inf, r)


def unary_math(em, name: str, x):
    """exp and log of a complex value; other functions are unsupported."""
    b = em.b
    re, im = parts(b, x)
    t = em.target
    if name == "exp":
        e = t.math(b, "exp", [re])
        return make(b, x.type, b.fmul(e, t.math(b, "cos", [im])), b.fmul(e, t.math(b, "sin", [im])))
    if name == "log":
        return make(b, x.type, t.math(b, "log", [absolute(em, x)]), t.math(b, "atan2", [im, re]))
    raise UnsupportedError(f"complex {name} is not supported by the LLVM emitters")


def compare(em, direction: str, x, y):
    b = em.b
    a, bb = parts(b, x)
    c, d = parts(b, y)
    if direction == "EQ":
        return b.and_(b.fcmp_ordered("==", a, c), b.fcmp_ordered("==", bb, d))
    if direction == "NE":
        return b.or_(b.fcmp_unordered("!=", a, c), b.fcmp_unordered("!=", bb, d))
    raise UnsupportedError(f"compare direction {direction} is not defined for complex values")


def convert(em, v, src: ElementType, dst: ElementType, convert_real):
    """Conversions to, from and between complex types (complex -> real keeps the real part)."""
    from .elemental import reg_type

    b = em.b
    if src.is_complex and dst.is_complex:
        re, im = parts(b, v)
        rs, rd = real_type(src), real_type(dst)
        return make(b, reg_type(dst), convert_real(em, re, rs, rd), convert_real(em, im, rs, rd))
    if src.is_complex:
        return convert_real(em, parts(b, v)[0], real_type(src), dst)
    rd = real_type(dst)
    re = convert_real(em, v, src, rd)
    return make(b, reg_type(dst), re, ir.Constant(re.type, 0.0))


@register_elemental("real", "imag")
def _real_imag(em, inst):
    g = em.operand(inst, 0)
    src = inst.operands[0].shape.dtype
    k = 0 if inst.opcode == "real" else 1
    b = em.b
    if not src.is_complex:
        if k == 0:
            return g
        zero = ir.Constant(_reg(inst.shape.dtype), 0.0)
        return lambda idx: zero
    return lambda idx: b.extract_value(g(idx), k)


@register_elemental("complex")
def _complex(em, inst):
    g0, g1 = em.operand(inst, 0), em.operand(inst, 1)
    ty = _reg(inst.shape.dtype)
    return lambda idx: make(em.b, ty, g0(idx), g1(idx))


def _reg(et):
    from .elemental import reg_type

    return reg_type(et)
