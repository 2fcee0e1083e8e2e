"""Depthwise (channels-innermost) convolution loops emitted already vectorised, so that LLVM
does not have to (cpu_conv.py's `_ConvEmitter`).

A depthwise kernel's innermost loop runs over a block of channels at unit stride in the input,
the weights and the accumulators. Left scalar, LLVM's loop vectorizer widened each copy of it
(one per window tap, once the taps were unrolled), adding a vector epilogue and a scalar
remainder loop to each and handing InstCombine, IndVarSimplify, LICM and GVN their bodies:
MobileNetV2's ten distinct depthwise kernels took 46-63 ms of LLVM each, a tenth of it in
LoopVectorize (benchmarks/llvm_rank.py --passes). Emitted as vector loads, multiplies, adds
and stores of the host's lane count (`channel_lanes`), with a scalar loop for the channels
left over, and both marked not to be vectorised again (`llvm.loop.vectorize.enable` false),
the vectorizer has nothing to build. Each lane computes acc + x * w as the scalar loop does
(no contraction into a fused multiply-add: the kernels set no fast-math flags), so every
output element gets the same bits.

    lanes = channel_lanes(geo, skel.target)      # None: the scalar loops, vectorised by LLVM
    vector_loop(b, count, lanes, vector_body, scalar_body)

The emitter's pieces that use them (`channels_vector_body`, `fill_vector`) take the
`_ConvEmitter` itself (cpu_conv.py), whose builder, pointers and helpers they use.
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from ...emitters.ir_helpers import const_i64, for_range
from .cpu_conv_geometry import ConvGeometry
from .loop_hints import forbid_vectorization

# Vector width (bits) where the target names none (LLVM's choice for the CPU): AVX2's.
DEFAULT_VECTOR_BITS = 256
# Most vectors `vector_loop` emits one after another instead of as a loop (when unrolled).
STRAIGHT_VECTORS = 8


def channel_lanes(geo: ConvGeometry, target) -> int | None:
    """Lanes of the vectors a channels-innermost kernel's channel loop is emitted in, or None
    when it keeps the scalar loop: it needs one input and one output feature per group
    (depthwise: ci = og = 1) read at unit stride in the weights (w_out = 1) and the input
    (x_group = 1), both operands of the float accumulation type (f32 or f64: no per-element
    conversion), and at least one whole vector of groups."""
    acc = geo.acc_type
    if not (geo.channels_innermost and geo.group_features == 1 and geo.group_inputs == 1
            and geo.w_out == 1 and geo.x_group == 1):
        return None
    if not acc.is_float or acc.bits not in (32, 64) or geo.lhs_type != acc or geo.rhs_type != acc:
        return None
    lanes = (getattr(target, "vector_width", None) or DEFAULT_VECTOR_BITS) // acc.bits
    return lanes if lanes > 1 and geo.groups >= lanes else None


def splat(value: ir.Constant, lanes: int) -> ir.Constant:
    """A vector constant of `lanes` copies of scalar constant `value`."""
    return ir.Constant(ir.VectorType(value.type, lanes), [value.constant] * lanes)


def vector_pointer(b: ir.IRBuilder, base: ir.Value, offset: ir.Value, lanes: int) -> ir.Value:
    """A pointer to the `lanes` elements of `base` (an element pointer) from `offset` on."""
    ptr = b.gep(base, [offset], inbounds=True)
    return b.bitcast(ptr, ir.VectorType(base.type.pointee, lanes).as_pointer())


def load_vector(b: ir.IRBuilder, base: ir.Value, offset: ir.Value, lanes: int) -> ir.Value:
    """`lanes` consecutive elements of `base` from `offset` on (element alignment only)."""
    return b.load(vector_pointer(b, base, offset, lanes), align=_align(base.type.pointee))


def store_vector(b: ir.IRBuilder, value: ir.Value, base: ir.Value, offset: ir.Value) -> None:
    """Store vector `value` to consecutive elements of `base` from `offset` on."""
    lanes = value.type.count
    b.store(value, vector_pointer(b, base, offset, lanes), align=_align(base.type.pointee))


def vector_loop(b: ir.IRBuilder, count: int, lanes: int, name: str,
                vector_body: Callable[[ir.Value], None], scalar_body: Callable[[ir.Value], None],
                unroll: bool = True) -> None:
    """for i in [0, count): `vector_body(i)` for each whole vector of `lanes` (i a multiple of
    lanes), then `scalar_body(i)` for the count % lanes elements left; neither loop is to be
    vectorised by LLVM, nor unrolled with `unroll` false (`for_range`). Unrolled, up to
    STRAIGHT_VECTORS vectors (a channel block's: cpu_conv.CHANNEL_BLOCK_VECTORS) are emitted as straight-line
    code; a loop of one iteration is emitted as its body."""
    whole = count - count % lanes
    if unroll and whole <= STRAIGHT_VECTORS * lanes:
        # Straight-line code: LLVM would unroll these loops fully anyway, after first
        # building, simplifying and analysing them as loops.
        for i in range(0, whole, lanes):
            vector_body(const_i64(i))
        for i in range(whole, count):
            scalar_body(const_i64(i))
        return
    if whole == lanes:
        vector_body(const_i64(0))
    elif whole:
        with for_range(b, const_i64(0), const_i64(whole), name, step=lanes, unroll=unroll) as i:
            vector_body(i)
        forbid_vectorization(i)
    if whole + 1 == count:
        scalar_body(const_i64(whole))
    elif whole < count:
        with for_range(b, const_i64(whole), const_i64(count), name + "r", unroll=unroll) as i:
            scalar_body(i)
        forbid_vectorization(i)


def _align(element: ir.Type) -> int:
    """Bytes of a float element (its natural alignment): the vectors are only that aligned."""
    return 8 if isinstance(element, ir.DoubleType) else 4


def channels_vector_body(em, xoff, woff, g0, count: int) -> None:
    """`_ConvEmitter._channels_body` where the channel loop is vectors (`em.lanes`): acc[gl] +=
    x[xoff + g0 + gl] * w[woff + g0 + gl] over the block's `count` groups (all groups into the
    position's accumulators when `g0` is None), a vector of lanes at a time."""
    geo, b, lanes = em.geo, em.b, em.lanes
    acc = em.acc if g0 is None else em.block_acc

    def at(base, gl):
        return em.add(base, gl) if g0 is None else em.add(base, g0, gl)

    def vector(gl) -> None:
        xv, wv = load_vector(b, em.x, at(xoff, gl), lanes), load_vector(b, em.w, at(woff, gl), lanes)
        store_vector(b, b.fadd(load_vector(b, acc, gl, lanes), b.fmul(xv, wv)), acc, gl)

    def scalar(gl) -> None:
        em.madd(gl, em.load(em.x, at(xoff, gl), geo.lhs_type), em.load(em.w, at(woff, gl), geo.rhs_type), acc)

    vector_loop(b, count, lanes, "gi", vector, scalar)


def fill_vector(em, woff, acc) -> None:
    """`_ConvEmitter._fill_level`'s innermost loop where the channel loop is vectors
    (`em.lanes`): acc[o] += 0 * w[woff + o] for every output feature."""
    geo, b, lanes = em.geo, em.b, em.lanes
    zeros = splat(em.zero, lanes)

    def vector(o) -> None:
        term = b.fmul(zeros, load_vector(b, em.w, em.add(woff, o), lanes))
        store_vector(b, b.fadd(load_vector(b, acc, o, lanes), term), acc, o)

    vector_loop(b, geo.features, lanes, "fo", vector,
                lambda o: em.madd(o, em.zero, em.load(em.w, em.add(woff, o), geo.rhs_type), acc),
                unroll=em.unroll_cold)

