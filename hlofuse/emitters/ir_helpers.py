"""The bottom layer of IR building: LLVM types, i64 constants, array indices, counted loops,
and element loads and stores.

Everything that emits LLVM IR (the elemental emitter and its rule modules, the kernel
emitters of codegen/) builds on these helpers. The module imports only llvmlite and the
standard library, so any module may import it at its top without forming a cycle; element
types are taken duck-typed (anything with `is_pred`, `is_integer` and `bits`, such as
hlo.dtypes.ElementType).
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator, Protocol

from llvmlite import ir

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()


class ElementKind(Protocol):
    """What the load and store helpers need to know of an element type."""

    is_pred: bool
    is_integer: bool
    bits: int


def const_i64(v: int) -> ir.Constant:
    """An i64 LLVM constant."""
    return ir.Constant(I64, int(v))


def row_major_strides(dims) -> list[int]:
    """Element strides of a row-major array of `dims`."""
    strides, acc = [], 1
    for d in reversed(dims):
        strides.append(acc)
        acc *= d
    return strides[::-1]


class Index:
    """An index into an array of `dims`: its multi-dimensional i64 components and its linear
    (row-major) form. The missing form is computed eagerly where the Index is made, so values
    always dominate their uses; LLVM removes the unused one."""

    def __init__(self, b: ir.IRBuilder, dims, multi=None, linear=None) -> None:
        self.dims = tuple(int(d) for d in dims)
        if multi is None and linear is None:
            raise ValueError("an Index needs a multi-dimensional or a linear form")
        if multi is None:
            multi = delinearize(b, linear, self.dims)
        if linear is None:
            linear = linearize(b, multi, self.dims)
        self.multi = tuple(multi)
        self.linear = linear

    def key(self) -> tuple:
        """The index values as a hashable key (for the value cache). Instructions hash by
        identity and llvmlite constants by their text, so two keys are equal exactly when they
        name the same LLVM values. Every index of a rank-0 array names its one element, so they
        all share a key."""
        if not self.dims:
            return ()
        return tuple(self.multi) if self.multi else (self.linear,)


def linearize(b: ir.IRBuilder, multi, dims) -> ir.Value:
    """Row-major linear index of `multi` in `dims`."""
    if not dims:
        return const_i64(0)
    acc = None
    for v, stride in zip(multi, row_major_strides(dims)):
        term = v if stride == 1 else b.mul(v, const_i64(stride), flags=["nuw", "nsw"])
        acc = term if acc is None else b.add(acc, term, flags=["nuw", "nsw"])
    return acc


def delinearize(b: ir.IRBuilder, linear, dims) -> list:
    """Multi-dimensional index of row-major `linear` in `dims` (size-1 dims give 0).

    Below 2**31 elements the divisions are done in i32: division by a constant then becomes a
    32-bit multiply-high, which vectorizes (there is no vector 64-bit multiply-high on x86)."""
    total = math.prod(dims)
    narrow = total < (1 << 31) and linear.type == I64
    lin = b.trunc(linear, I32) if narrow else linear
    ty = lin.type
    out = []
    for d, stride in zip(dims, row_major_strides(dims)):
        if d == 1:
            out.append(const_i64(0))
            continue
        if d == total:
            # The only dimension above 1: the linear index itself, untouched. (Narrowed and
            # widened again, zext(trunc(i)), LLVM no longer sees an affine index: a loop over
            # [n,1] slices of [n,4] arrays read them with gathers.)
            out.append(linear)
            continue
        q = lin if stride == 1 else b.udiv(lin, ir.Constant(ty, stride))
        q = q if stride * d == total else b.urem(q, ir.Constant(ty, d))
        out.append(b.zext(q, I64) if narrow else q)
    return out


@contextmanager
def for_range(b: ir.IRBuilder, start: ir.Value, stop: ir.Value, name: str = "i",
              step: int = 1, unroll: bool = True) -> Iterator[ir.Value]:
    """Emit `for (i = start; i < stop; i += step)`; the with-body emits the loop body and gets i.

    `unroll=False` tells LLVM never to unroll this loop (`llvm.loop.unroll.disable`), for a
    loop that unrolling only makes larger: one around a long inner loop, which LLVM's unroller
    costs by the inner loop's body, not its trip count, and fully unrolls before the vectorizer
    multiplies every copy (docs/compile_time.md)."""
    pre = b.block
    header = b.append_basic_block(name + ".header")
    body = b.append_basic_block(name + ".body")
    done = b.append_basic_block(name + ".exit")
    b.branch(header)
    b.position_at_end(header)
    phi = b.phi(I64, name)
    phi.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", phi, stop), body, done)
    b.position_at_end(body)
    yield phi
    nxt = b.add(phi, ir.Constant(I64, step), flags=["nsw"])
    phi.add_incoming(nxt, b.block)
    latch = b.branch(header)
    if not unroll:
        latch.set_metadata("llvm.loop", loop_id(b.module, "llvm.loop.unroll.disable"))
    b.position_at_end(done)


def loop_id(mod: ir.Module, *hints: str | tuple[str, ir.Constant]) -> ir.values.MDValue:
    """A new loop ID (`!llvm.loop`: a node whose first operand is itself, one per loop, as LLVM
    requires) carrying `hints`: a name alone (`!{!"llvm.loop.unroll.disable"}`) or a name and
    its value (`!{!"llvm.loop.vectorize.enable", i1 0}`)."""
    props = [mod.add_metadata([ir.MetaDataString(mod, h)] if isinstance(h, str)
                              else [ir.MetaDataString(mod, h[0]), h[1]]) for h in hints]
    loop_node = ir.values.MDValue(mod, [], name=str(len(mod.metadata)))
    loop_node.operands = (loop_node, *props)  # llvmlite's add_metadata cannot make a self-reference
    return loop_node


def load_element(b: ir.IRBuilder, ptr: ir.Value, et: ElementKind) -> ir.Value:
    """Load an element of type `et` through `ptr` (a pointer to its memory type) into its
    register form: pred is i8 in memory and i1 in a register, 4-bit integers take a byte."""
    v = b.load(ptr)
    if et.is_pred:
        return b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
    if et.is_integer and et.bits < 8:
        return b.trunc(v, ir.IntType(et.bits))
    return v


def store_element(b: ir.IRBuilder, v: ir.Value, ptr: ir.Value, et: ElementKind) -> None:
    """Store a register value `v` of type `et` through `ptr`."""
    if et.is_pred or (et.is_integer and et.bits < 8):
        v = b.zext(v, I8)
    b.store(v, ptr)


def freeze(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """LLVM's `freeze` of `v` (llvmlite's builder has no method for it). It emits no machine
    code; kernels use it to hide a value's origin from InstCombine (cpu_reduction.py)."""
    inst = ir.instructions.Instruction(b.block, v.type, "freeze", [v], name="frozen")
    b._insert(inst)
    return inst


def flush_denormal_bits(b: ir.IRBuilder, v: ir.Value, type_name: str) -> ir.Value:
    """`v` (a register value of f32, f64 or bf16 `type_name`, scalar or vector; bf16 as its i16
    bits) with a denormal made a zero of its sign at run time, on its bits: integer operations,
    which LLVM's constant folding gets right whatever the float mode (it folds float intrinsics
    and `fpext` on a denormal constant as if denormals were kept) and InstCombine cannot turn
    back into a float test."""
    bits_ty, exponent, sign = {"f32": (I32, 0x7F800000, -0x80000000), "f64": (I64, 0x7FF0000000000000, -0x8000000000000000),
                               "bf16": (I16, 0x7F80, -0x8000)}[type_name]
    lanes = v.type.count if isinstance(v.type, ir.VectorType) else None

    def const(value):
        return ir.Constant(ir.VectorType(bits_ty, lanes), [value] * lanes) if lanes else ir.Constant(bits_ty, value)

    int_ty = ir.VectorType(bits_ty, lanes) if lanes else bits_ty
    bits = v if v.type == int_ty else b.bitcast(v, int_ty)
    denormal_or_zero = b.icmp_unsigned("==", b.and_(bits, const(exponent)), const(0))
    flushed = b.select(denormal_or_zero, b.and_(bits, const(sign)), bits)
    return flushed if v.type == int_ty else b.bitcast(flushed, v.type)
