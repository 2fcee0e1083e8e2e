"""Combining a thread's partial result into an output element with an atomic.

Which atomic a reducer gets (decided from the reducer computation, never from a list of
opcodes kept here: the root's opcode is matched against LLVM's `atomicrmw` operations):

  * `atomicrmw` when the reducer is `op(p0, p1)` of its two parameters and LLVM has that
    read-modify-write for the element type: add (f32, f64, 32/64-bit integers), integer
    maximum/minimum (signed or unsigned by the HLO type), and/or/xor on 32/64-bit integers.
    On NVPTX these become `red.global.add.f32`, `atom.global.max.s32`, ...
  * a compare-and-swap loop for every other single-output reducer on a 32- or 64-bit type
    (multiply, float maximum/minimum with XLA's NaN propagation, any small computation): read
    the element, inline the reducer on (old, partial), `cmpxchg` the bits, retry on failure.
  * none (`None`): variadic reducers (argmax-style pairs live in two arrays, which one CAS
    cannot update together) and 8/16-bit types (pred, s8, f16, bf16, ...; NVPTX has no
    sub-word atomics) are reduced in two passes instead (see codegen/kernels/gpu_reduction.py).
"""
from __future__ import annotations

from llvmlite import ir

from ...hlo.dtypes import ElementType
from ...hlo.ir import HloComputation
from ..elemental import ElementalEmitter, mem_type

# HLO reducer root opcode -> (atomicrmw op for floats, signed ints, unsigned ints).
_RMW = {
    "add": ("fadd", "add", "add"),
    "maximum": (None, "max", "umax"),
    "minimum": (None, "min", "umin"),
    "and": (None, "and", "and"),
    "or": (None, "or", "or"),
    "xor": (None, "xor", "xor"),
}


def _is_binary_of_params(comp: HloComputation) -> bool:
    root = comp.root
    params = comp.parameters
    return (len(params) == 2 and len(root.operands) == 2
            and set(root.operands) == set(params))


def atomic_kind(comp: HloComputation, et: ElementType) -> str | None:
    """"rmw:<op>" for an atomicrmw, "cas" for a compare-and-swap loop, None for two passes."""
    if len(comp.parameters) != 2 or et.is_pred or et.is_complex or et.bits not in (32, 64):
        return None
    if _is_binary_of_params(comp) and comp.root.opcode in _RMW:
        fl, si, ui = _RMW[comp.root.opcode]
        op = fl if et.is_float else (si if et.is_signed else ui)
        if op is not None:
            return "rmw:" + op
    return "cas"


def emit_atomic_combine(em: ElementalEmitter, comp: HloComputation, et: ElementType, ptr: ir.Value,
                        partial: ir.Value) -> None:
    """Atomically set *ptr = comp(*ptr, partial) (`ptr` points at a `mem_type(et)` element)."""
    b = em.b
    kind = atomic_kind(comp, et)
    if kind is None:
        raise ValueError(f"reducer {comp.name} on {et.name} has no atomic; use two passes")
    if kind.startswith("rmw:"):
        b.atomic_rmw(kind[4:], ptr, partial, "monotonic")
        return
    ty = mem_type(et)
    ity = ir.IntType(et.bits)
    iptr = b.bitcast(ptr, ity.as_pointer(ptr.type.addrspace))
    start = b.load(iptr)
    pre = b.block
    loop = b.append_basic_block("cas.loop")
    done = b.append_basic_block("cas.done")
    b.branch(loop)
    b.position_at_end(loop)
    old_bits = b.phi(ity, "cas.old")
    old_bits.add_incoming(start, pre)
    old = b.bitcast(old_bits, ty) if ty != ity else old_bits
    new = em.call_scalar(comp, [old, partial], reduction=True)
    new_bits = b.bitcast(new, ity) if ty != ity else new
    pair = b.cmpxchg(iptr, old_bits, new_bits, "monotonic", "monotonic")
    seen = b.extract_value(pair, 0)
    ok = b.extract_value(pair, 1)
    old_bits.add_incoming(seen, b.block)
    b.cbranch(ok, done, loop)
    b.position_at_end(done)
