"""CPU convolution kernels: a direct convolution loop nest in LLVM IR, vectorized over the
contiguous feature dimension, for every convolution the interpreter runs.

    geo = conv_geometry(inst)              # None: the convolution stays a library call
    plans = plan_conv(comp, name)          # a KernelPlan with custom="conv"
    emit_conv_kernel(skel, plan)           # fills a CPU kernel skeleton

Addresses come from each operand's row-major element strides, so one loop nest serves every
dimension-number layout (NHWC, NCHW, HWIO, OIHW, batch or feature anywhere); layouts whose
feature dimensions are minor get unit-stride inner loops that LLVM vectorizes, the others the
same loops with strided accesses (slower, still compiled).

Work units are (output batch x first output spatial dimension) rows, so threads split the
output deterministically. Per output position the kernel keeps one accumulator per output
feature (a stack array of the accumulation type) and runs, for each window offset (row-major,
offsets outside the padded or between lhs-dilated input elements skipped) and each input
feature of the group, a multiply-add into the accumulators, then rounds them once into the
output. Each output element is thus summed term by term in the interpreter's order (window
offsets outside, input features inside: runtime/interpreter/convolution.py), so small float
convolutions agree bit for bit; large ones differ from the interpreter's float64 sums only by
float32 rounding.

Loop order rule (documented, not timed): with G feature (or batch) groups of `og` output
features each,
  * channels innermost (G > og: depthwise and grouped convolutions with few features per
    group): offsets -> input feature j -> o' < og -> group g innermost. For a depthwise
    convolution in NHWC/HWIO the inner loop reads input, weights and accumulators at unit
    stride: a small window reduction per output element, vectorized over channels. Over
    more than CHANNEL_BLOCK_VECTORS vectors of channels it runs in channel blocks
    (`channel_block`), and where one position's weights and input patch exceed the L1 cache
    each block runs over a whole row of positions before the next block (`row_in_blocks`).
    Where each group has one input and one output feature at unit stride, that loop is
    emitted as vectors of the host's lanes (cpu_conv_vector.py), which LLVM's vectorizer then
    leaves alone;
  * output features innermost (G <= og: dense and wide-group convolutions): group g ->
    offsets -> input feature j (its input element loaded once) -> o' < og innermost, unit
    stride in the accumulators and (for HWIO/OHWI-with-O-minor weights) in the weights.
    Up to `position_block` consecutive positions of the last output spatial dimension (4 with
    AVX-512's 32 vector registers; with AVX2's 16, 1 unless the weights stream from memory,
    measured on a Zen 1) share each weight load (register blocking). Where those positions'
    accumulators fit the vector registers (f32/f64, weights' output features contiguous), the
    feature loop is emitted as vectors of the host's lanes with the window loops rolled
    (cpu_conv_features.py), which leaves LLVM nothing to unroll and vectorise. Where they did
    not (32 features on AVX2 at 4 positions), LLVM unrolled and vectorised the scalar loop: the
    flax MNIST CNN's 3x3 1 -> 32 took 0.52 CPU-s of LLVM on the Zen 1 host.

Accumulation type: float results accumulate in f32 (f64 when the result or an operand is
f64), narrow floats widened on load; integer results in the result's integer type (at least
8 bits), wrapping, which equals the interpreter's int64 sum rounded to the result type.
Complex and pred convolutions, and accumulators larger than MAX_FEATURES, stay library calls.
Padding and lhs-dilation holes of float convolutions contribute 0 * weight, as in the
interpreter and XLA: nothing, unless the weight is inf or NaN, which makes the sum NaN whatever
the order of the terms (the accumulators start at +0 and so never hold -0: a +-0 term leaves
their bits unchanged). So the loop nest skips those taps, and each call first scans the weights
once: only when one is inf or NaN does each position then add its taps on padding and holes
(integer convolutions never need them).
"""
from __future__ import annotations

import math

from llvmlite import ir

from ...emitters.elemental import ElementalEmitter, compute_type, reg_type
from ...emitters.elemental_convert import convert_value
from ...emitters.ir_helpers import Index, const_i64, for_range, load_element, store_element
from ...hlo.dtypes import ElementType
from ...hlo.ir import HloComputation, HloInstruction
from ..planning import KernelPlan, rebuild
from .args import output_leaves, typed_pointer
from .cpu_conv_cold import fill_taps, never_on_padding, positions_along, weights_nonfinite
from .cpu_conv_geometry import (MAX_FEATURES, ConvGeometry, accumulation_type, conv_geometry,  # noqa: F401
                                dimension_numbers, find_convolution, window_tap)
from .cpu_conv_features import FeatureAccumulators, feature_lanes, masked_taps, position_block
from .cpu_conv_vector import (DEFAULT_VECTOR_BITS, channel_lanes, channels_vector_body, load_vector, splat,
                              store_vector, vector_loop)
from .loop_hints import ROLLED_AROUND, unroll_count

# Vectors of the host's f32 lanes a channels-innermost kernel accumulates at a time, at most
# (`channel_block`): 128 channels with AVX-512, 64 with AVX2.
CHANNEL_BLOCK_VECTORS = 8


def block_lanes(target) -> int:
    """The f32 lanes of `target`'s vectors, which channel blocks are counted in (`channel_block`):
    16 with AVX-512 (512-bit vectors preferred), else 8."""
    return (getattr(target, "vector_width", None) or DEFAULT_VECTOR_BITS) // 32


def channel_block(groups: int, lanes: int = 16) -> int | None:
    """The groups a channels-innermost (depthwise) kernel runs the window for at a time: the
    largest divisor of `groups` of at most CHANNEL_BLOCK_VECTORS x `lanes` (the host's f32
    lanes, `block_lanes`) that is a multiple of `lanes`; None (all groups at once) where
    `groups` is at most that, or without such a divisor.

    All at once, the taps unrolled around a vectorised loop over every group, MobileNetV2's
    576- and 960-channel depthwise kernels were one straight-line block of 2,000-6,000
    instructions after O3 (36-60 vectors of accumulators, more than the registers, spilled
    between the copies), 60-160 ms of LLVM each. In blocks the loop over blocks stays rolled
    and a block's accumulators stay in registers through the taps: MobileNetV2's 24 distinct
    convolution kernels 34,921 -> 16,195 instructions after O3 (with the cold path rolled, see
    `unroll_cold`), LLVM 1.62 -> 1.22 CPU-s; run time 0.98-1.00 of the unblocked kernels
    (interleaved, one thread, load 8-10), the same bits (docs/compile_time.md).

    Counted in vectors, not channels: on the Zen 1 AVX2 host a block of 96 or 128 channels was
    12-16 vectors of 8, a loop (`vector_loop` emits up to STRAIGHT_VECTORS as straight-line
    code) that LLVM unrolled fully around the 9 unrolled taps: MobileNetV2's depthwise kernels
    910-1,230 instructions after O3 and 140-250 ms of LLVM each. In blocks of at most 8
    vectors, 570-840 and 105-140 ms, and they ran 0.68-0.97x the time (one thread,
    docs/convolutions.md)."""
    most = CHANNEL_BLOCK_VECTORS * lanes
    if groups <= most:
        return None
    return next((d for d in range(most, lanes - 1, -lanes) if groups % d == 0), None)


# Largest accumulator row (bytes) a channel-blocked kernel keeps for a whole row of output
# positions (`row_in_blocks`), and the L1 data cache that rule assumes (32 KiB: AMD Zen 2-4,
# Intel before Ice Lake; larger L1s only make the rule conservative).
ROW_ACC_BYTES = 64 << 10
L1_BYTES = 32 << 10


def row_in_blocks(geo: ConvGeometry, lanes: int = 16) -> bool:
    """Whether a channels-innermost kernel runs each channel block over a whole row of output
    positions (the last spatial dimension) before the next block, instead of every block per
    position: where it runs in channel blocks (`channel_block` of `lanes`), one position's
    weights and input patch (taps x channels, each operand) exceed L1_BYTES, and the row's
    accumulators fit ROW_ACC_BYTES. Per position, all blocks touch every weight and the whole input patch:
    at 576 channels and 3 x 3 taps 20 KiB of each, reloaded from L2 for every position; per
    block, one block's weights (3.4 KiB at 96 channels) and its input rows stay in L1 across
    the row. Each output element gets the same terms in the same order: the same bits.
    Measured (docs/convolutions.md, "MobileNetV2 against IREE"): 576 and 960 channels gain,
    at 384 (27 KiB a position) and fewer neither order wins."""
    if not (geo.channels_innermost and geo.out_spatial and channel_block(geo.groups, lanes)):
        return False
    taps = math.prod(d.size for d in geo.window)
    patch = taps * geo.groups * geo.group_inputs * (geo.lhs_type.byte_size + geo.rhs_type.byte_size)
    return patch > L1_BYTES and geo.out_spatial[-1] * geo.features * geo.acc_type.byte_size <= ROW_ACC_BYTES


# The cold path's window loops stay rolled (`_ConvEmitter.unroll_cold`) where a window dimension
# is longer than this and they run around more than _COLD_UNROLLED features x inputs. One
# thread, CPU time, medians of 15 interleaved rounds, load 8.0-8.6, same bits: the flax MNIST
# CNN step compiles in 1.21 -> 1.02 CPU-s and runs 0.985-1.003 of its time; haiku's ResNet-18
# step (no direct convolution of it or of the other models changes) runs 0.999. With no bound on
# features x inputs haiku's step ran 1.034-1.047x slower for 1-9% less compile time.
_SHORT_WINDOW = 4
_COLD_UNROLLED = 4096


# ---- emission ---------------------------------------------------------------------------------
def _i(v: int) -> ir.Constant:
    return const_i64(v)


class _ConvEmitter:
    """Emits one convolution kernel into a CPU kernel skeleton (see the module docstring)."""

    def __init__(self, skel, conv: HloInstruction, geo: ConvGeometry) -> None:
        self.skel, self.geo = skel, geo
        self.b = b = skel.builder
        self.em = ElementalEmitter(b, skel.target, skel.param_gen)
        lhs_p, rhs_p = conv.operands
        self.x = typed_pointer(b, skel.function.args[lhs_p.parameter_number], geo.lhs_type)
        self.w = typed_pointer(b, skel.function.args[rhs_p.parameter_number], geo.rhs_type)
        self.out = skel.output_ptr(0)
        self.out_type = output_leaves(skel.comp)[0].shape.dtype
        self.epilogue = None
        self._slot = None  # (position, accumulator slot) of the result element the epilogue reads
        if skel.comp.root is not conv:
            # The epilogue's computation reads the convolution as a parameter numbered after
            # the fusion's; its generator reads the accumulators of the current position.
            self.epilogue = rebuild(skel.comp, skel.comp.root, [conv], f"{skel.comp.name}.epilogue")
        self.acc_ty = compute_type(geo.acc_type) if geo.acc_type.is_float else reg_type(geo.acc_type)
        self.zero = ir.Constant(self.acc_ty, 0.0 if geo.acc_type.is_float else 0)
        block = 1 if geo.channels_innermost or not geo.out_spatial else position_block(geo, skel.target)
        self.block = max(1, min(block, geo.out_spatial[-1] if geo.out_spatial else 1))
        # Accumulators of `block` positions, allocated once in the entry block.
        # Accumulators of each of `block` positions, allocated once in the entry block: an
        # array per position, so that LLVM promotes each to vector registers on its own. In one
        # array of 4 x 24 f32 it packed them into 6 vectors whose lanes straddled positions and
        # shuffled the weights into them for every input feature (1x1 8x40x40x144 -> 24, one
        # thread: 1.0 ms against 0.6 ms in arrays of their own; docs/convolutions.md).
        self.accs = [b.alloca(self.acc_ty, size=_i(max(geo.features, 1)), name=f"acc{c}") for c in range(self.block)]
        self.acc = self.accs[0]
        lanes = feature_lanes(geo, skel.target, self.block)
        self.rhs_count = math.prod(rhs_p.shape.dims)
        # The window and input-feature loops stay rolled around a long output-feature loop:
        # LLVM's unroller costs an outer loop by its inner loop's body, not its trip count, so
        # it unrolled them fully around 512-long feature loops, and the vectorizer then widened
        # and interleaved every copy (haiku's ResNet-18 step: 76,860 instructions for its 17
        # distinct convolution kernels, 5.2 s of LLVM; docs/compile_time.md). Around a short one
        # unrolling pays: the accumulators stay in registers only while every loop that indexes
        # them is unrolled (the flax MNIST CNN's 32 and 64 features ran 1.1x slower rolled).
        # Channels-innermost (depthwise) kernels keep LLVM's choice: rolled around 144-960
        # groups, MobileNetV2 ran 1.06-1.08x slower (twice, interleaved) for 12% less LLVM time;
        # above CHANNEL_BLOCK_VECTORS vectors of groups they run in channel blocks instead
        # (`channel_block`).
        self.unroll_taps = geo.channels_innermost or geo.group_features < ROLLED_AROUND
        # Dense kernels whose feature loop is emitted as vectors with accumulators in registers
        # (cpu_conv_features.py): nothing is left for LLVM's unroller to gain, so the window
        # loops stay rolled, and the cold path works on the accumulator arrays in memory.
        self.fvec = FeatureAccumulators(self, lanes) if lanes else None
        if self.fvec is not None:
            self.unroll_taps = False
        self.nonfinite = None  # i1: some weight is inf or NaN (float convolutions; set in emit)
        self.block_acc = None  # a channel block's accumulators (`_channel_blocks`), made on first use
        self.block_lanes = block_lanes(skel.target)  # what channel blocks are counted in
        self.row_blocks = row_in_blocks(geo, self.block_lanes)  # channel blocks outside a row's positions
        # Lanes of the channel loop emitted as vectors (cpu_conv_vector.py), or None.
        self.lanes = channel_lanes(geo, skel.target)
        # The non-finite-weight path is cold: unrolled only where the accumulators may live in
        # registers, which takes every loop indexing them unrolled (around channel blocks they
        # are read and written through the block's index anyway). In the MNIST CNN step's weight
        # gradient (a 14 x 14 "window" around 64 features x 128 inputs) LLVM unrolled none of the
        # loops indexing them but the window loop around them: 1,430 of its 5,598 instructions
        # and 23% of its LLVM time, so a long window around many features x inputs stays rolled.
        cblock = geo.channels_innermost and channel_block(geo.groups, self.block_lanes)
        self.unroll_cold = self.unroll_taps and not cblock and not (
            any(d.size > _SHORT_WINDOW for d in geo.window) and geo.features * geo.group_inputs > _COLD_UNROLLED)

    # -- small helpers
    def add(self, *terms) -> ir.Value:
        """Sum of i64 values and ints (constants folded)."""
        b, const, vals = self.b, 0, []
        for t in terms:
            if isinstance(t, int):
                const += t
            else:
                vals.append(t)
        acc = None
        for v in vals:
            acc = v if acc is None else b.add(acc, v)
        if acc is None:
            return _i(const)
        return b.add(acc, _i(const)) if const else acc

    def mul(self, v, k: int):
        """v * k for an i64 value (or int) and an int."""
        if isinstance(v, int):
            return v * k
        if k == 0:
            return 0
        return v if k == 1 else self.b.mul(v, _i(k))

    def load(self, ptr, offset, et: ElementType) -> ir.Value:
        """An element of `ptr` at `offset`, converted to the accumulation type."""
        b = self.b
        v = load_element(b, b.gep(ptr, [offset], inbounds=True), et)
        return convert_value(self.em, v, et, self.geo.acc_type)

    def madd(self, slot, xv, wv, acc=None) -> None:
        """acc[slot] += xv * wv (IEEE or wrapping integer arithmetic, no reassociation), in the
        position's accumulators or `acc`."""
        b = self.b
        p = b.gep(self.acc if acc is None else acc, [slot], inbounds=True)
        if self.geo.acc_type.is_float:
            b.store(b.fadd(b.load(p), b.fmul(xv, wv)), p)
        else:
            b.store(b.add(b.load(p), b.mul(xv, wv)), p)

    # -- the loop nest
    def emit(self) -> None:
        """The whole kernel: units -> positions -> accumulate -> store."""
        geo, b = self.geo, self.b
        sp = geo.out_spatial
        if geo.acc_type.is_float and not never_on_padding(geo):
            self.nonfinite = weights_nonfinite(self)
        with for_range(b, self.skel.begin, self.skel.end, "unit") as u:
            if sp:
                n = b.udiv(u, _i(sp[0]))
                p0 = b.urem(u, _i(sp[0]))
            else:
                n, p0 = u, None
            self._positions(n, [p0] if sp else [], 1)
        self.skel.finish()

    def _positions(self, n, ps: list, level: int) -> None:
        """Loops over output spatial dimensions `level`..; the last one in blocks."""
        geo, b = self.geo, self.b
        sp = geo.out_spatial
        if level >= len(sp):
            self._position(n, ps, 1)
            return
        if level < len(sp) - 1:
            with for_range(b, _i(0), _i(sp[level]), f"p{level}") as p:
                self._positions(n, ps + [p], level + 1)
            return
        size, blk = sp[level], self.block
        if self.row_blocks:
            self._row_in_blocks(n, ps, size)
            return
        full = size - size % blk
        if full:
            with for_range(b, _i(0), _i(full), f"p{level}", step=blk) as p:
                self._position(n, ps + [p], blk)
        if full < size:
            with for_range(b, _i(full), _i(size), f"p{level}r") as p:
                self._position(n, ps + [p], 1)

    def _row_in_blocks(self, n, ps: list, size: int) -> None:
        """The last spatial dimension's `size` positions (`row_in_blocks`): each channel block
        over every position of the row into a row of accumulators, then each position's
        non-finite taps, epilogue and stores, as `_position` does them."""
        geo, b = self.geo, self.b
        blk = channel_block(geo.groups, self.block_lanes)
        with b.goto_entry_block():
            row = b.alloca(self.acc_ty, size=_i(size * geo.features), name="row_acc")
        xbase = self.mul(n, geo.x_batch)
        with for_range(b, _i(0), _i(geo.groups), "cb", step=blk, unroll=False) as g0:
            with for_range(b, _i(0), _i(size), "rp", unroll=False) as p:
                dest = b.gep(row, [self.mul(p, geo.features)], inbounds=True)
                self._channel_block(ps + [p], xbase, g0, blk, dest)
        accs = self.accs
        with for_range(b, _i(0), _i(size), "rs", unroll=False) as p:
            self.accs = [b.gep(row, [self.mul(p, geo.features)], inbounds=True)]
            self._finish(n, ps + [p], 1)
        self.accs = accs

    def _position(self, n, ps: list, count: int) -> None:
        """Output positions ps, ps + (0..count-1 along the last spatial dimension)."""
        geo, b = self.geo, self.b
        blk = channel_block(geo.groups, self.block_lanes) if geo.channels_innermost else None
        if blk is None and self.fvec is None:  # channel blocks, feature vectors store every accumulator
            for c in range(count):
                self._fill_zero(self.accs[c], geo.features, "zero")
        xbase = self.mul(n, geo.x_batch)
        if geo.channels_innermost:
            if blk is None:
                self._window(ps, 0, [xbase] * count, 0, self._channels_body)
            else:
                self._channel_blocks(ps, xbase, blk)
        elif self.fvec is not None:
            fvec = self.fvec
            with for_range(b, _i(0), _i(geo.groups), "g") as g:
                fvec.zero(count)
                self._window(ps, 0, [self.add(xbase, self.mul(g, geo.x_group))] * count, 0,
                             lambda taps, woff: fvec.body(g, taps, woff))
                fvec.store(g, count)
        else:
            with for_range(b, _i(0), _i(geo.groups), "g") as g:
                self._window(ps, 0, [self.add(xbase, self.mul(g, geo.x_group))] * count, 0,
                             lambda xoffs, woff: self._features_body(g, xoffs, woff))
        self._finish(n, ps, count)

    def _finish(self, n, ps: list, count: int) -> None:
        """After the accumulation of positions ps (+ 0..count-1): the taps on padding where a
        weight is not finite, then the epilogue and the stores."""
        geo, b = self.geo, self.b
        if self.nonfinite is not None and geo.window:
            with b.if_then(self.nonfinite, likely=False):
                fill_taps(self, ps, count)
        obase = self.add(self.mul(n, geo.o_batch), *[self.mul(p, s) for p, s in zip(ps, geo.o_spatial)])
        ostep = geo.o_spatial[-1] if geo.o_spatial else 0
        for c in range(count):
            if self.fvec is not None and self.fvec.stores_output():
                self.fvec.store_output(c, self.add(obase, c * ostep))
                continue
            with for_range(b, _i(0), _i(geo.features), "store") as o:
                slot = (c, o)
                if self.epilogue is None:
                    dst = b.gep(self.out, [self.add(obase, self.mul(o, geo.o_feature), c * ostep)], inbounds=True)
                    store_element(b, self._conv_value_at(slot), dst, self.out_type)
                    continue
                multi = [None] * len(geo.o_dims)
                multi[geo.o_axes[0]], multi[geo.o_axes[1]] = n, o
                for k, (axis, p) in enumerate(zip(geo.o_axes[2:], ps)):
                    multi[axis] = self.add(p, c) if k == len(ps) - 1 else p
                self._slot = slot
                index = Index(b, geo.o_dims, multi=multi)
                value = self._epilogue_generator()(index)
                store_element(b, value, b.gep(self.out, [index.linear], inbounds=True), self.out_type)

    def _epilogue_generator(self):
        """A generator of the epilogue's root, from a fresh elemental emitter (values one
        emitter caches are valid only in the loop that computed them)."""
        n = len(self.skel.comp.parameters)

        def params(p: HloInstruction):
            return self._conv_value if p.parameter_number == n else self.skel.param_gen(p)

        return ElementalEmitter(self.b, self.skel.target, params).gen(self.epilogue.root)

    def _conv_value_at(self, slot: tuple) -> ir.Value:
        """The convolution's result element in accumulator `slot` (position in the block,
        feature), rounded to its type."""
        c, o = slot
        v = self.b.load(self.b.gep(self.accs[c], [o], inbounds=True))
        return convert_value(self.em, v, self.geo.acc_type, self.geo.out_type)

    def _conv_value(self, index: Index) -> ir.Value:
        """Generator of the convolution inside the epilogue: evaluated only at the index of the
        element being stored (the epilogue is elementwise at the result's index)."""
        return self._conv_value_at(self._slot)

    def _window(self, ps: list, level: int, xs: list, woff, body) -> None:
        """Loops over window offsets (row-major) from spatial dimension `level`; `body(xs, woff)`
        gets one input offset per blocked position (None where that position's tap is padding)."""
        geo, b = self.geo, self.b
        if level == len(geo.window):
            body(xs, woff)
            return
        d = geo.window[level]
        stride = geo.x_spatial[level]
        tap_unroll = self.fvec.window_unroll(level) if self.fvec is not None else None
        with for_range(b, _i(0), _i(d.size), f"k{level}", unroll=self.unroll_taps or bool(tap_unroll)) as k:
            kk = b.sub(_i(d.size - 1), k) if d.window_reversal else k
            wnext = self.add(woff, self.mul(kk, geo.w_spatial[level]))
            if self.fvec is not None and level == len(geo.window) - 1 and d.base_dilation == 1:
                masked_taps(self, ps, k, d, xs, wnext, body)
            elif level < len(geo.window) - 1 or len(xs) == 1:
                # Blocked positions differ only along the last dimension: one tap for all here.
                # A dimension whose taps are all on the input (`always_inside`: VALID, or
                # keras's explicit padding before a stride-2 layer) gets no test and no branch.
                q, ok = window_tap(b, ps[level], k, d, geo.dilated_input[level], positions_along(geo, level))
                if isinstance(ok, ir.Constant):
                    self._window(ps, level + 1, [self.add(x, self.mul(q, stride)) for x in xs], wnext, body)
                else:
                    with b.if_then(ok):
                        self._window(ps, level + 1, [self.add(x, self.mul(q, stride)) for x in xs], wnext, body)
            else:
                offs, oks = [], []
                for c, x in enumerate(xs):
                    q, ok = window_tap(b, self.add(ps[level], c), k, d, geo.dilated_input[level],
                                       positions_along(geo, level))
                    offs.append(self.add(x, self.mul(q, stride)))
                    oks.append(ok)
                if all(isinstance(ok, ir.Constant) for ok in oks):  # `always_inside`
                    body(offs, wnext)
                else:
                    self._border_taps(offs, oks, wnext, body)
        if tap_unroll:
            unroll_count(k, tap_unroll)
        if self.lanes and self.unroll_taps:
            # Vector bodies look costlier to LLVM's full unroller than the scalar loop it used to
            # unroll before vectorising: it left the outer window loop rolled (the row of taps
            # each iteration), so ask for every tap as before.
            unroll_count(k, d.size)

    def _border_taps(self, offs: list, oks: list, woff, body) -> None:
        """A tap of the blocked positions (input offsets `offs`, in-bounds flags `oks`): one body
        for all where every position's tap is on the input, else each position on its own."""
        b = self.b
        every = oks[0]
        for ok in oks[1:]:
            every = b.and_(every, ok)
        with b.if_else(every) as (inside, border):
            with inside:
                body(offs, woff)
            with border:  # near the padding: each position on its own
                for c, ok in enumerate(oks):
                    with b.if_then(ok):
                        body([offs[j] if j == c else None for j in range(len(offs))], woff)

    def _channel_blocks(self, ps: list, xbase, blk: int) -> None:
        """The window of one position for `blk` groups at a time (`channel_block`), each block
        summed in accumulators of its own (whose every index is a constant once LLVM unrolls
        the block, so they stay in registers), then stored to the position's accumulators:
        each output element gets the same terms in the same order, from the same +0."""
        with for_range(self.b, _i(0), _i(self.geo.groups), "cb", step=blk, unroll=False) as g0:
            self._channel_block(ps, xbase, g0, blk, self.accs[0])

    def _channel_block(self, ps: list, xbase, g0, blk: int, dest) -> None:
        """Groups [g0, g0 + blk) of position ps: summed from +0 in the block's accumulators,
        then stored to the position's accumulators `dest` (all of its features)."""
        geo, b = self.geo, self.b
        size = blk * geo.group_features
        if self.block_acc is None:
            with b.goto_entry_block():
                self.block_acc = b.alloca(self.acc_ty, size=_i(size), name="block_acc")
        self._fill_zero(self.block_acc, size, "bzero")
        self._window(ps, 0, [xbase], 0, lambda xoffs, woff: self._channels_body(xoffs, woff, g0, blk))
        base = self.mul(g0, geo.group_features)
        if self.lanes:
            vector_loop(b, size, self.lanes, "bstore", lambda o: store_vector(
                            b, load_vector(b, self.block_acc, o, self.lanes), dest, self.add(base, o)),
                        lambda o: b.store(b.load(b.gep(self.block_acc, [o], inbounds=True)),
                                          b.gep(dest, [self.add(base, o)], inbounds=True)))
            return
        with for_range(b, _i(0), _i(size), "bstore") as o:
            v = b.load(b.gep(self.block_acc, [o], inbounds=True))
            b.store(v, b.gep(dest, [self.add(base, o)], inbounds=True))

    def _fill_zero(self, acc, size: int, name: str) -> None:
        """acc[0..size) = 0 (in vectors where the channel loop is: `vector_loop`)."""
        b = self.b
        if self.lanes:
            zeros = splat(self.zero, self.lanes)
            vector_loop(b, size, self.lanes, name, lambda o: store_vector(b, zeros, acc, o),
                        lambda o: b.store(self.zero, b.gep(acc, [o], inbounds=True)))
            return
        with for_range(b, _i(0), _i(size), name) as o:
            b.store(self.zero, b.gep(acc, [o], inbounds=True))

    def _channels_body(self, xoffs: list, woff, g0=None, count: int | None = None) -> None:
        """Channels innermost: j -> o' -> g (one position), for groups [g0, g0 + count) into
        the block's accumulators (`_channel_blocks`), or all groups when `g0` is None."""
        geo, b = self.geo, self.b
        xoff = xoffs[0]
        if self.lanes:
            channels_vector_body(self, xoff, woff, g0, geo.groups if g0 is None else count)
            return
        with for_range(b, _i(0), _i(geo.group_inputs), "j", unroll=self.unroll_taps) as j:
            xj = self.add(xoff, self.mul(j, geo.x_feature))
            wj = self.add(woff, self.mul(j, geo.w_in))
            with for_range(b, _i(0), _i(geo.group_features), "oi") as oi:
                with for_range(b, _i(0), _i(geo.groups if g0 is None else count), "gi") as gl:
                    g = gl if g0 is None else b.add(g0, gl)
                    o = self.add(self.mul(g, geo.group_features), oi)
                    xv = self.load(self.x, self.add(xj, self.mul(g, geo.x_group)), geo.lhs_type)
                    wv = self.load(self.w, self.add(wj, self.mul(o, geo.w_out)), geo.rhs_type)
                    if g0 is None:
                        self.madd(o, xv, wv)
                    else:
                        self.madd(self.add(self.mul(gl, geo.group_features), oi), xv, wv, self.block_acc)

    def _features_body(self, g, xoffs: list, woff) -> None:
        """Output features innermost: j -> o' for group g, each weight shared by the blocked
        positions whose tap is in bounds (None entries are skipped)."""
        geo, b = self.geo, self.b
        with for_range(b, _i(0), _i(geo.group_inputs), "j", unroll=self.unroll_taps) as j:
            xvs = [None if x is None else self.load(self.x, self.add(x, self.mul(j, geo.x_feature)), geo.lhs_type)
                   for x in xoffs]
            wj = self.add(woff, self.mul(j, geo.w_in))
            gbase = self.mul(g, geo.group_features)
            with for_range(b, _i(0), _i(geo.group_features), "oi") as oi:
                o = self.add(gbase, oi)
                wv = self.load(self.w, self.add(wj, self.mul(o, geo.w_out)), geo.rhs_type)
                for c, xv in enumerate(xvs):
                    if xv is not None:
                        self.madd(o, xv, wv, self.accs[c])


def emit_conv_kernel(skel, plan) -> None:
    """Fill CPU kernel skeleton `skel` with the convolution kernel of `plan` (custom="conv")."""
    conv = find_convolution(plan.comp)
    if conv is None:
        raise ValueError(f"kernel {plan.name}: its computation is not a convolution the conv kernel handles")
    _ConvEmitter(skel, conv, conv_geometry(conv)).emit()


def plan_conv(comp: HloComputation, name: str):
    """The kernel plan computing `comp` (a convolution of parameters, with or without an
    elementwise epilogue: `find_convolution`), or None."""
    conv = find_convolution(comp)
    if conv is None:
        return None
    geo = conv_geometry(conv)
    inputs = [("in", i) for i in range(len(comp.parameters))]
    return [KernelPlan(comp, [0], geo.units, geo.unit_work, None, inputs=inputs,
                       results=[("out", 0)], name=f"{name}_conv", custom="conv")]
