"""rng-bit-generator as a compiled CPU kernel (custom "rng").

    kernels = plan_rng(comp, name)    # [KernelPlan] or None
    emit_rng_kernel(skel, plan)       # CUSTOM_EMITTERS["rng"]

Bit for bit what the reference interpreter computes (runtime/interpreter/rng.py, XLA's
RngBitGeneratorExpander): the state's first word is the key; ThreeFry-2x32 (20 rounds) counts
from state[1]; Philox-4x32 (10 rounds, also `rng_default`) from the 128-bit counter
(state[1], state[2]), or (state[1], key) for a 2-word state. A 32-bit ThreeFry result
interleaves its two words along XLA's split dimension (the first even dimension, else the
largest); 64-bit results join two words; narrower types keep the low bits of 32-bit words.

Work units are chunks of `CHUNK` counters (one ThreeFry counter gives 1 or 2 elements, one
Philox counter 2 or 4), so threads split them; the unit starting at counter 0 also writes the
new state (the old one with its counter words advanced by the counters used). Sub-byte
integers, pred and complex results keep the library rule (runtime/library_rng.py).
"""
from __future__ import annotations

import math

from llvmlite import ir

from ...emitters.ir_helpers import I32, I64, const_i64, for_range
from ...hlo.ir import HloComputation, HloInstruction

CHUNK = 1024  # counters per work unit
THREEFRY = ("rng_three_fry", "three_fry")
PHILOX = ("rng_philox", "philox", "rng_default", "default")
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)


def _algorithm(inst: HloInstruction) -> str:
    return str(inst.attrs.get("algorithm", "rng_default")).lower()


def rng_root(comp: HloComputation) -> HloInstruction | None:
    """The rng-bit-generator `comp` computes from its parameter, when this kernel handles it."""
    root = comp.root
    if root.opcode != "rng-bit-generator" or root.operands[0].opcode != "parameter":
        return None
    state, data = root.shape.elements
    et = data.dtype
    if et.bits not in (8, 16, 32, 64) or not (et.is_integer or et.is_float) or et.is_complex or et.is_pred:
        return None
    if state.dtype.bits != 64 or state.element_count() < 2 or _algorithm(root) not in THREEFRY + PHILOX:
        return None
    return root


def split_shape(dims: tuple[int, ...]) -> tuple[int, int, int, int]:
    """XLA's SplitShapeIntoHalves as (outer, D, inner, split): the split dimension (the first
    even one, else the largest) of size D between `outer` and `inner` elements."""
    if not dims:
        return 1, 1, 1, 0
    even = [i for i, d in enumerate(dims) if d % 2 == 0]
    split = even[0] if even else max(range(len(dims)), key=lambda i: (dims[i], -i))
    return math.prod(dims[:split]), dims[split], math.prod(dims[split + 1:]), split


def counters(inst: HloInstruction) -> int:
    """How many counters (ThreeFry blocks of 2 words, Philox blocks of 4) the result uses."""
    data = inst.shape.elements[1]
    n = data.element_count()
    wide = data.dtype.bits == 64
    if _algorithm(inst) in THREEFRY:
        if wide:
            return n
        outer, d, inner, _ = split_shape(tuple(data.dims))
        return outer * ((d + 1) // 2) * inner
    return -(-2 * n // 4) if wide else -(-n // 4)


def plan_rng(comp: HloComputation, name: str) -> list | None:
    """The rng kernel of `comp`, or None when it is not one this module compiles."""
    from ..planning import KernelPlan  # planning imports the kernel modules

    inst = rng_root(comp)
    if inst is None:
        return None
    units = max(1, -(-counters(inst) // CHUNK))
    return [KernelPlan(comp, [0, 1], units, CHUNK, None, name=f"{name}_rng", inputs=[("in", 0)],
                       results=[("out", 0), ("out", 1)], custom="rng")]


def _c32(v: int) -> ir.Constant:
    return ir.Constant(I32, v & 0xFFFFFFFF)


def _halves(b: ir.IRBuilder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    return b.trunc(x, I32), b.trunc(b.lshr(x, const_i64(32)), I32)


def _join(b: ir.IRBuilder, lo: ir.Value, hi: ir.Value) -> ir.Value:
    return b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), const_i64(32)))


def threefry2x32(b: ir.IRBuilder, x0: ir.Value, x1: ir.Value, k0: ir.Value, k1: ir.Value):
    """ThreeFry-2x32, 20 rounds, on i32 words (wrapping arithmetic)."""
    ks = (k0, k1, b.xor(b.xor(_c32(0x1BD11BDA), k0), k1))
    x0, x1 = b.add(x0, ks[0]), b.add(x1, ks[1])
    for block in range(5):
        for r in _ROTATIONS[4 * (block % 2): 4 * (block % 2) + 4]:
            x0 = b.add(x0, x1)
            x1 = b.xor(b.or_(b.shl(x1, _c32(r)), b.lshr(x1, _c32(32 - r))), x0)
        x0 = b.add(x0, ks[(block + 1) % 3])
        x1 = b.add(b.add(x1, ks[(block + 2) % 3]), _c32(block + 1))
    return x0, x1


def philox4x32(b: ir.IRBuilder, x: list, k0: ir.Value, k1: ir.Value) -> list:
    """Philox-4x32, 10 rounds, on i32 words."""
    for _ in range(10):
        p0 = b.mul(b.zext(x[0], I64), const_i64(0xD2511F53))
        p1 = b.mul(b.zext(x[2], I64), const_i64(0xCD9E8D57))
        lo0, hi0 = _halves(b, p0)
        lo1, hi1 = _halves(b, p1)
        x = [b.xor(b.xor(hi1, x[1]), k0), lo1, b.xor(b.xor(hi0, x[3]), k1), lo0]
        k0, k1 = b.add(k0, _c32(0x9E3779B9)), b.add(k1, _c32(0xBB67AE85))
    return x


def emit_rng_kernel(skel, plan) -> None:
    """Fill CPU kernel skeleton `skel` with rng kernel `plan` (custom="rng")."""
    inst = rng_root(plan.comp)
    state_shape, data = inst.shape.elements
    dims = tuple(data.dims)
    n = data.element_count()
    width = data.dtype.bits
    wide = width == 64
    words = state_shape.element_count()
    threefry = _algorithm(inst) in THREEFRY
    count = counters(inst)
    b = skel.builder
    state = b.bitcast(skel.function.args[0], I64.as_pointer())
    new_state = b.bitcast(skel.output_ptr(0), I64.as_pointer())
    out = b.bitcast(skel.output_ptr(1), ir.IntType(width).as_pointer())
    key = b.load(state)
    k0, k1 = _halves(b, key)
    low = b.load(b.gep(state, [const_i64(1)]))
    high = b.load(b.gep(state, [const_i64(2)])) if words >= 3 else key

    with b.if_then(b.icmp_signed("==", skel.begin, const_i64(0))):  # the new state, once
        for w in range(words):
            b.store(b.load(b.gep(state, [const_i64(w)])), b.gep(new_state, [const_i64(w)]))
        end_low = b.add(low, const_i64(count))
        b.store(end_low, b.gep(new_state, [const_i64(1)]))
        if not threefry and words >= 3:
            carry = b.zext(b.icmp_unsigned("<", end_low, low), I64)
            b.store(b.add(high, carry), b.gep(new_state, [const_i64(2)]))

    def store(e: ir.Value, word: ir.Value) -> None:
        if word.type.width != width:
            word = b.trunc(word, ir.IntType(width))
        b.store(word, b.gep(out, [e], inbounds=True))

    first = b.mul(skel.begin, const_i64(CHUNK))
    last = b.mul(skel.end, const_i64(CHUNK))
    last = b.select(b.icmp_signed("<", last, const_i64(count)), last, const_i64(count))
    with for_range(b, first, last, "ctr") as j:
        if threefry:
            y0, y1 = threefry2x32(b, *_halves(b, b.add(low, j)), k0, k1)
            if wide:
                store(j, _join(b, y0, y1))
            elif not dims:
                store(const_i64(0), y0)
            else:
                outer, d, inner, _ = split_shape(dims)
                half = (d + 1) // 2
                o = b.udiv(j, const_i64(half * inner))
                h = b.urem(b.udiv(j, const_i64(inner)), const_i64(half))
                i = b.urem(j, const_i64(inner))
                m0 = b.mul(h, const_i64(2))
                e0 = b.add(b.mul(b.add(b.mul(o, const_i64(d)), m0), const_i64(inner)), i)
                store(e0, y0)
                with b.if_then(b.icmp_signed("<", b.add(m0, const_i64(1)), const_i64(d))):
                    store(b.add(e0, const_i64(inner)), y1)
        else:
            lo = b.add(low, j)
            hi = b.add(high, b.zext(b.icmp_unsigned("<", lo, low), I64))
            x = philox4x32(b, [*_halves(b, lo), *_halves(b, hi)], k0, k1)
            values = [_join(b, x[0], x[1]), _join(b, x[2], x[3])] if wide else x
            for w, v in enumerate(values):
                e = b.add(b.mul(j, const_i64(len(values))), const_i64(w))
                if (count * len(values)) == n or w == 0:
                    # every block full, or the block's first element (always < n)
                    store(e, v)
                else:
                    with b.if_then(b.icmp_signed("<", e, const_i64(n))):
                        store(e, v)
    skel.finish()


# ---- get-dimension-size: a static size stored by a one-unit kernel ------------------------------

def dimension_size_root(comp: HloComputation) -> HloInstruction | None:
    """The get-dimension-size `comp` computes (of an operand with static dimensions)."""
    root = comp.root
    if root.opcode != "get-dimension-size" or not root.shape.is_array or not root.shape.dtype.is_integer:
        return None
    return root


def plan_dimension_size(comp: HloComputation, name: str) -> list | None:
    """The kernel storing `comp`'s dimension size, or None."""
    from ..planning import KernelPlan

    if dimension_size_root(comp) is None:
        return None
    return [KernelPlan(comp, [0], 1, 1, None, name=f"{name}_dimsize", inputs=[("in", 0)], results=[("out", 0)],
                       custom="dimension_size")]


def emit_dimension_size_kernel(skel, plan) -> None:
    """Store the (static) size of the dimension the instruction names."""
    inst = dimension_size_root(plan.comp)
    size = inst.operands[0].shape.dims[int(inst.attrs["dimensions"][0])]
    b = skel.builder
    ty = ir.IntType(inst.shape.dtype.bits)
    b.store(ir.Constant(ty, size), b.bitcast(skel.output_ptr(0), ty.as_pointer()))
    skel.finish()
