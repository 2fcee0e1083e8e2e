"""Dense (output-features-innermost) convolution loops emitted already vectorised and with
their accumulators in registers, so that LLVM has no loop to vectorise or unroll
(cpu_conv.py's `_ConvEmitter`; issue 15).

The dense direct kernel multiplies, per window tap and input feature, one input element of
each of POSITION_BLOCK output positions into a row of output features' weights. Emitted as
scalar loops, the feature loop (32 or 64 features) was what LLVM vectorised, and its
accumulators (a stack array per position) reached registers only after LLVM's full unroller
had unrolled every loop indexing them: the window and input-feature loops around the feature
loop, with a copy of the body for the block's interior and one per position at the border, 5
copies a tap. The flax MNIST CNN's 3x3 1 -> 32 kernel was 586 emitted instructions and 0.18 s
of LLVM (its whole model's LLVM time 0.25 s), ResNet-50's 7x7 stem 0.16 s.

Here the output features of a group are cut into vectors of the host's lanes (`feature_pieces`:
whole vectors, then narrower power-of-two vectors and a scalar for the rest), each multiplied
and added as one vector, the pieces of a position read and written at constant offsets of its
accumulator array only (`FeatureAccumulators`): once LLVM has unrolled the epilogue's feature
loop, SROA keeps them in registers through the window and input loops, which stay rolled
(`for_range`'s unroll=False; a short last window row unrolled by count, `window_unroll`), and
the vectorizer has nothing to build (`llvm.loop.vectorize.enable` false on the input loop).
A tap near the padding no longer branches per position: where not every blocked position's
tap is on the input, one body for all reads a position's input as +0 by a select
(`masked_taps`), which leaves the accumulator's bits unchanged (it starts at +0 and so never
holds -0; a +-0 term is then exact) unless the weight is inf or NaN, where the sum is NaN
either way (the cold non-finite path adds 0 * w on every padding tap anyway). Each output
element thus gets the same nonzero terms in the same order (window offsets row-major, input
features inside, IEEE multiply then add, no contraction): the same bits as the scalar kernel
(tests/codegen/test_conv_features.py).

How many positions a block holds depends on the register file (`position_block`): 4 with
AVX-512's 32 registers; with AVX2's 16, one (4 where the weights stream from memory). With 4
positions on AVX2 a 32-feature kernel's accumulators did not fit and it took the scalar loop:
the MNIST CNN's stem 0.5 CPU-s of LLVM on a Zen 1, 0.055 s with one position, which also ran
0.67x the time (docs/convolutions.md, "Kernels on an AVX2 host").

    block = position_block(geo, target)       # positions sharing each weight load
    lanes = feature_lanes(geo, target, block) # None: the scalar feature loop LLVM vectorises
    acc = FeatureAccumulators(em, lanes)      # per group: zero(), body(...), store(g)
"""
from __future__ import annotations

import math

from llvmlite import ir

from ...emitters.ir_helpers import const_i64, for_range
from ...hlo.attributes import WindowDimension
from .cpu_conv_geometry import ConvGeometry, window_tap
from .cpu_conv_vector import DEFAULT_VECTOR_BITS, load_vector, splat, store_vector, vector_loop
from .loop_hints import forbid_vectorization, unroll_count

# Consecutive output positions a dense kernel computes together (cpu_conv's register block):
# POSITION_BLOCK on a target of 32 vector registers (AVX-512) or where the weights exceed
# STREAMED_WEIGHT_BYTES, else NARROW_POSITION_BLOCK (AVX2, SSE: `position_block`).
POSITION_BLOCK = 4
NARROW_POSITION_BLOCK = 1
STREAMED_WEIGHT_BYTES = 256 << 10
# Vector registers left per blocked position besides its accumulators: its input's splat and a
# weight vector in flight (8 of AVX-512's 32 at 4 positions, as measured there).
SPARE_PER_POSITION = 2
# Whether dense kernels take feature vectors at all (a switch for A/B measurements:
# benchmarks/loop_hints_ab.py hlofuse.codegen.kernels.cpu_conv_features:FEATURE_VECTORS).
FEATURE_VECTORS = True
# Input features per group emitted one after another; more run as a rolled loop unrolled
# INPUT_UNROLL times (a 1x1 convolution's 16-576 inputs). One thread, CPU time, 21 interleaved
# rounds, load 5.7, against the scalar kernel: 1x1 80x80 16 -> 96 1.04 unrolled 4 times, 1.01
# twice or not at all, 1.06 8 times; 40x40 144 -> 24 0.84, 0.83, 0.87, 0.85; ResNet-50's
# 256 -> 64 1.00, 1.00, 0.99, 1.12.
INPUTS_STRAIGHT = 4
INPUT_UNROLL = 2
# Most vector multiply-adds in a row of taps (positions x pieces x inputs x taps) for which the
# last window dimension's loop is unrolled by count. The same run: MNIST's 3x3 1 -> 32 (24)
# 0.89x the scalar kernel's time unrolled, 1.06-1.08x rolled; MobileNetV2's stem 3x3 s2 3 -> 32
# (72) 1.00 either way; ResNet-50's stem 7x7 s2 3 -> 64 (336) 1.12-1.16x unrolled, 1.01 rolled.
UNROLLED_ROW_TERMS = 96


def vector_registers(target) -> int:
    """Vector registers of the target's ISA: 32 with AVX-512, else 16 (AVX2, SSE)."""
    features = getattr(target, "cpu_features", "") or ""
    return 32 if "+avx512f" in features.split(",") else 16


def position_block(geo: ConvGeometry, target) -> int:
    """The most consecutive output positions a dense kernel blocks on `target`: POSITION_BLOCK
    with 32 vector registers; with 16, NARROW_POSITION_BLOCK unless the weights (every tap,
    input and output feature) exceed STREAMED_WEIGHT_BYTES.

    On the Zen 1 AVX2 host (one thread, CPU time, medians of 7-9 interleaved rounds, load
    2.9-4.2, the same bits) every dense direct convolution with weights in its L2 ran fastest
    with one position: against the 4 positions of AVX-512, whose 32-feature and wider kernels
    then took LLVM's scalar loop (their accumulators did not fit), the MNIST CNN's 3x3 1 -> 32
    0.66x the time, MobileNetV2's stem 0.87x and its 1x1 kernels 0.59-0.89x (up to 98 KiB of
    weights), ResNet-50's stem 0.88x and its 1x1 64 -> 64 0.65x; two positions (where 32
    features fit) were between them (0.80x, 0.90x, 0.72-0.99x). A Zen 1 core splits each 256-bit
    multiply and add into two 128-bit halves, so its FP pipes, not the weight loads a block
    shares, bound the loop. Weights that stream from memory for every position are another
    matter: the MNIST CNN step's weight gradient (a 28 x 28 window of 128 inputs, 12.8 MB of
    "weights", 3 positions a row) ran 2.27x slower with one position. No AVX2 CPU of 256-bit FP
    pipes (Intel Haswell on) was measured (docs/convolutions.md)."""
    if vector_registers(target) >= 32:
        return POSITION_BLOCK
    taps = math.prod(d.size for d in geo.window)
    weights = taps * geo.group_inputs * geo.features * geo.rhs_type.byte_size
    return POSITION_BLOCK if weights > STREAMED_WEIGHT_BYTES else NARROW_POSITION_BLOCK


def feature_pieces(count: int, lanes: int) -> list[tuple[int, int]]:
    """(offset, width) pieces covering `count` features: whole vectors of `lanes`, then
    power-of-two vectors of fewer lanes and finally width 1 (a scalar) for what is left."""
    pieces, off = [], 0
    width = lanes
    while off < count:
        while width > count - off:
            width //= 2
        pieces.append((off, width))
        off += width
    return pieces


def feature_lanes(geo: ConvGeometry, target, block: int = POSITION_BLOCK) -> int | None:
    """Lanes of the vectors a dense kernel's feature loop is emitted in, or None where it keeps
    the scalar loop: output features innermost (not depthwise), the weights' output features
    contiguous (w_out = 1: vector loads), float accumulation in f32 or f64 with weights of that
    type (no per-lane conversion), and the `block` positions' accumulator pieces fitting the
    vector registers with SPARE_PER_POSITION to spare per position (f32: up to 96 features per
    group at 4 positions with AVX-512, 112 at one position with AVX2; more fall to the GEMM
    kernel or keep LLVM's loop, rolled around them)."""
    acc = geo.acc_type
    if not FEATURE_VECTORS or geo.channels_innermost or geo.w_out != 1 or geo.group_features < 1:
        return None
    if not acc.is_float or acc.bits not in (32, 64) or geo.rhs_type != acc:
        return None
    lanes = (getattr(target, "vector_width", None) or DEFAULT_VECTOR_BITS) // acc.bits
    if lanes < 2:
        return None
    pieces = len(feature_pieces(geo.group_features, lanes))
    return lanes if block * (pieces + SPARE_PER_POSITION) <= vector_registers(target) else None


class FeatureAccumulators:
    """A dense kernel's accumulators as vectors (module docstring): per blocked position and
    feature piece one pointer, each at a constant offset, for one group at a time."""

    def __init__(self, em, lanes: int) -> None:
        self.em, self.lanes = em, lanes
        geo, b = em.geo, em.b
        self.pieces = feature_pieces(geo.group_features, lanes)
        # One group: the pieces are views of the position's accumulator array at constant
        # offsets, which SROA promotes once LLVM has unrolled the epilogue's feature loop (so
        # the epilogue reads registers). Several: slots of their own, stored to the array at
        # the group's (variable) offset after its window. Slots of their own for one group
        # too, copied to the array for the epilogue, made LLVM half-forward the copies through
        # shuffles (a 1x1 32 -> 16 with batch norm 1.08x the scalar kernel's time).
        self.in_place = geo.groups == 1
        # Element alignment only: the pieces lie in a float array (a vector's own, 64 bytes for
        # 16 f32, made LLVM store them with aligned moves to unaligned stack slots: a fault).
        self.align = geo.acc_type.byte_size
        with b.goto_entry_block():
            if self.in_place:
                self.slots = [[b.bitcast(b.gep(em.accs[c], [const_i64(off)], inbounds=True), self._type(w).as_pointer())
                               for off, w in self.pieces] for c in range(em.block)]
            else:
                self.slots = [[b.alloca(self._type(w), name=f"facc{c}_{i}") for i, (_, w) in enumerate(self.pieces)]
                              for c in range(em.block)]

    def _type(self, width: int) -> ir.Type:
        return self.em.acc_ty if width == 1 else ir.VectorType(self.em.acc_ty, width)

    def _splat(self, v: ir.Value, width: int) -> ir.Value:
        """`width` copies of scalar `v` (v itself for width 1)."""
        if width == 1:
            return v
        b = self.em.b
        ty = ir.VectorType(v.type, width)
        one = b.insert_element(ir.Constant(ty, ir.Undefined), v, const_i64(0))
        return b.shuffle_vector(one, ir.Constant(ty, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), width),
                                                                                [0] * width))

    def tap(self, off, ok) -> tuple:
        """A position's entry for `body`: its input at element offset `off`, read as +0 where
        `ok` (an i1, or None for always on the input) is false (`off` must then still address
        an input element). A select per input element, not a pointer to a row of zeros: that
        made the ResNet-50 stem's hot loop 1.14x slower (LLVM turned it into branches)."""
        return self.em.x, off, ok

    def window_unroll(self, level: int) -> int | None:
        """The unroll count asked of window dimension `level`'s loop, or None (rolled): the last
        dimension's taps are unrolled where a row of them is at most UNROLLED_ROW_TERMS vector
        multiply-adds (block x pieces x input features x taps)."""
        geo, em = self.em.geo, self.em
        size = geo.window[level].size
        if level != len(geo.window) - 1 or size < 2:
            return None
        terms = em.block * len(self.pieces) * geo.group_inputs * size
        return size if terms <= UNROLLED_ROW_TERMS else None

    def zero(self, count: int) -> None:
        """Every accumulator of the first `count` blocked positions = +0."""
        b = self.em.b
        for c in range(count):
            for slot, (_, w) in zip(self.slots[c], self.pieces):
                b.store(ir.Constant(self._type(w), 0.0 if w == 1 else [0.0] * w), slot, align=self.align)

    def body(self, g, taps: list, woff) -> None:
        """For each input feature j of group g: acc[c] += x_c[j] * w[woff + j, group g's features]
        for the blocked positions c with an entry in `taps` (`tap`'s: input pointer, element
        offset, and an i1 where the input is to be read as +0 when false; or a plain input
        offset); None entries are skipped."""
        em, b = self.em, self.em.b
        geo = em.geo
        gbase = em.mul(g, geo.group_features)

        def load(t, j) -> ir.Value:
            if not isinstance(t, tuple):  # a plain input offset (cpu_conv `_window` with lhs dilation)
                t = self.tap(t, None)
            v = em.load(t[0], em.add(t[1], em.mul(j, geo.x_feature)), geo.lhs_type)
            return v if t[2] is None else b.select(t[2], v, ir.Constant(v.type, 0.0))

        masked = any(isinstance(t, tuple) and t[2] is not None for t in taps)

        def term(j) -> None:
            xs = [None if t is None else load(t, j) for t in taps]
            wj = em.add(woff, em.mul(j, geo.w_in), gbase)
            wvs: dict[int, ir.Value] = {}

            def weights(i: int) -> ir.Value:  # loaded where first used: 6 vectors live at once spilled
                if i not in wvs:
                    off, w = self.pieces[i]
                    wvs[i] = (load_vector(b, em.w, em.add(wj, off), w) if w > 1
                              else em.load(em.w, em.add(wj, off), geo.rhs_type))
                return wvs[i]

            pairs = [(i, c) for i in range(len(self.pieces)) for c in range(len(xs))]
            if masked:
                # Positions outermost in the border's copy: the same terms per accumulator, but
                # not the inside copy's sequence, whose tail SimplifyCFG otherwise merged with
                # this one's (phis through the hot path: the 7x7 stem 1.04x slower).
                pairs.sort(key=lambda ic: ic[1])
            for i, c in pairs:
                if xs[c] is None:
                    continue
                w = self.pieces[i][1]
                slot = self.slots[c][i]
                acc = b.load(slot, align=self.align)
                b.store(b.fadd(acc, b.fmul(self._splat(xs[c], w), weights(i))), slot, align=self.align)

        inputs = geo.group_inputs
        if inputs <= INPUTS_STRAIGHT:
            for j in range(inputs):
                term(const_i64(j))
            return
        with for_range(b, const_i64(0), const_i64(inputs), "j", unroll=INPUT_UNROLL > 1) as j:
            term(j)
        forbid_vectorization(j)
        if INPUT_UNROLL > 1:
            unroll_count(j, INPUT_UNROLL)

    def stores_output(self) -> bool:
        """Whether `store_output` writes the results: no epilogue, one group, the output's
        features contiguous and of the accumulation type (no rounding per element)."""
        em = self.em
        return (self.in_place and em.epilogue is None and em.geo.o_feature == 1
                and em.out_type == em.geo.acc_type)

    def store_output(self, c: int, base) -> None:
        """Store position c's accumulators to the output from element offset `base` on, a
        piece at a time (`stores_output`): no feature loop for LLVM to unroll and re-vectorise."""
        self._store_pieces(c, self.em.out, base)

    def store(self, g, count: int) -> None:
        """Store the first `count` positions' accumulators of group g to the kernel's
        per-position accumulator arrays (`em.accs`), which the epilogue and stores read."""
        if self.in_place:
            return
        gbase = self.em.mul(g, self.em.geo.group_features)
        for c in range(count):
            self._store_pieces(c, self.em.accs[c], gbase)

    def _store_pieces(self, c: int, dest: ir.Value, base) -> None:
        """Store position c's accumulator pieces to element pointer `dest` from element offset
        `base` on, each at its feature offset (a scalar piece as an element)."""
        em, b = self.em, self.em.b
        for slot, (off, w) in zip(self.slots[c], self.pieces):
            v = b.load(slot, align=self.align)
            if w == 1:
                b.store(v, b.gep(dest, [em.add(base, off)], inbounds=True))
            else:
                store_vector(b, v, dest, em.add(base, off))


def masked_taps(em, ps: list, k, d: WindowDimension, xs: list, woff, body) -> None:
    """Tap `k` of the last window dimension `d` for a feature-vector kernel's blocked positions
    (input offsets `xs` so far, weight offset `woff`): `body(taps, woff)` with each position's
    `FeatureAccumulators.tap`. Where every position's tap is on the input, the plain reads;
    otherwise, unless none is, one body for all in which a position on padding reads +0 (its
    input index selected to 0, a real element): two copies of the body a tap, where a branch
    per position made five. One masked body for every tap ran the ResNet-50 stem 1.29x slower."""
    geo, b = em.geo, em.b
    level = len(geo.window) - 1
    qs, oks = [], []
    for c in range(len(xs)):
        q, ok = window_tap(b, em.add(ps[level], c), k, d, geo.dilated_input[level], geo.out_spatial[level])
        qs.append(q)
        oks.append(None if isinstance(ok, ir.Constant) else ok)

    def offset(c: int, q) -> ir.Value:
        return em.add(xs[c], em.mul(q, geo.x_spatial[level]))

    plain = [em.fvec.tap(offset(c, q), None) for c, q in enumerate(qs)]
    if any(ok is None for ok in oks):  # always_inside: the same for every position
        body(plain, woff)
        return
    # The positions' input indices grow with the position (no lhs dilation here), so all of
    # them are on the input when the first and the last are, and some are unless all fall
    # below 0 or all past the end: two compares each, not one per position.
    limit = const_i64(geo.dilated_input[level])
    first, last = qs[0], qs[-1]
    every = b.and_(b.icmp_signed(">=", first, const_i64(0)), b.icmp_signed("<", last, limit))
    some = b.and_(b.icmp_signed(">=", last, const_i64(0)), b.icmp_signed("<", first, limit))
    if len(oks) == 1:
        with b.if_then(every):
            body(plain, woff)
        return
    with b.if_else(every, likely=True) as (inside, border):
        with inside:
            body(plain, woff)
        with border:
            with b.if_then(some):
                body([em.fvec.tap(offset(c, b.select(ok, q, const_i64(0))), ok) for c, (q, ok) in
                      enumerate(zip(qs, oks))], woff)


def fill_features(em, woff, acc, lanes: int) -> None:
    """The cold non-finite-weight path's innermost loops for a feature-vector kernel: for each
    input feature j (rolled), acc[o] += 0 * w[woff + j, o] for every output feature o, a vector
    of `lanes` at a time (`vector_loop`): each element gets its terms in j order, as the scalar
    path gives them."""
    geo, b = em.geo, em.b
    zeros = splat(em.zero, lanes)

    def inputs(j) -> None:
        wj = em.add(woff, em.mul(j, geo.w_in))

        def vector(o) -> None:
            term = b.fmul(zeros, load_vector(b, em.w, em.add(wj, o), lanes))
            store_vector(b, b.fadd(load_vector(b, acc, o, lanes), term), acc, o)

        vector_loop(b, geo.features, lanes, "fo", vector,
                    lambda o: em.madd(o, em.zero, em.load(em.w, em.add(wj, o), geo.rhs_type), acc))

    if geo.group_inputs == 1:
        inputs(const_i64(0))
        return
    with for_range(b, const_i64(0), const_i64(geo.group_inputs), "fj", unroll=False) as j:
        inputs(j)
    forbid_vectorization(j)

