"""The tiled-GEMM convolution kernel (custom="conv_gemm"): per unit, pack a tile of patches,
multiply it by the weights (blas_call.GemmCall: oneDNN's sgemm or BLAS's `?gemm_`), run the
fused epilogue over the tile.

    emit_conv_gemm_kernel(skel, plan)

The layout, the rule and the planning are in cpu_conv_gemm.py (its docstring describes the
kernel); this module emits it into a CPU kernel skeleton (cpu_skeleton.py).
"""
from __future__ import annotations

import dataclasses

import math

from llvmlite import ir

from ...emitters.elemental import ElementalEmitter, mem_type
from ...emitters.ir_helpers import I64, Index, const_i64, delinearize, for_range, load_element, store_element
from ...hlo.ir import HloInstruction
from ...runtime.jit_builtins import SCRATCH_ALLOC, SCRATCH_FREE
from ..planning import rebuild
from .args import output_leaves, typed_pointer
from .blas_call import GemmCall, blas_operands, declare, trap_if
from .cpu_conv_geometry import find_convolution, window_tap
from .cpu_conv_gemm import IN, ConvGemm, conv_gemm, row_major_matrix
from .cpu_conv_vector import DEFAULT_VECTOR_BITS
from .cpu_gemm import SHORT_EPILOGUE_ROW
from .gemm_layout import Matrix
from .loop_hints import ROLLED_AROUND, forbid_vectorization

I8P = ir.IntType(8).as_pointer()

# Whether `batch_minor` patch tiles are packed a run of rows at a time (`_pack_runs`); False
# packs them row by row as before (for A/B measurements).
BATCH_MINOR_RUNS = True
# Whether the epilogue of an output whose rows are contiguous and features strided (NCHW)
# loops over the rows innermost (`_ConvGemmEmitter._rows_inner`); False keeps the features
# innermost, as before (for A/B measurements).
FEATURE_MAJOR_EPILOGUE = True
# One vector register of AVX-512, the most a run's block transposes at a time (16 f32, 8 f64);
# a target of narrower vectors takes one of its own (`block_bytes`).
VECTOR_BYTES = 64


def block_bytes(target) -> int:
    """The bytes of the rows a run's block transposes at a time (`_pack_block_leaf`): one
    vector register of `target`, at most VECTOR_BYTES. Two AVX2 registers a vector (VECTOR_BYTES
    on the Zen 1 host) made haiku's ResNet-18 step's and the MNIST CNN step's weight-gradient
    kernels 387-579 instructions, their 16 transposed rows the code generator's to split: LLVM
    2.08 -> 1.83 CPU-s over their 24 distinct GEMM convolution kernels (the 16x16 window's 226
    -> 150 ms, MNIST's 14x14 183 -> 99 ms); run time 1.00 and 1.02 (one thread, 15 interleaved
    rounds, load 4.7, a control of 1.01-1.08), the same bits."""
    return min(VECTOR_BYTES, (getattr(target, "vector_width", None) or DEFAULT_VECTOR_BITS) // 8)


def _i(v: int) -> ir.Constant:
    return const_i64(v)


def _row_major(rows: int, cols: int) -> Matrix:
    """A dense row-major [rows, cols] tile as a Matrix (cpu_conv_gemm.row_major_matrix: one
    column is a unit-stride column, so BLAS's leading dimension is never below the rows it reads)."""
    return row_major_matrix((rows, cols), [], [0], [1])


class _ConvGemmEmitter:
    """Emits one tiled-GEMM convolution kernel into a CPU kernel skeleton (module docstring)."""

    def __init__(self, skel, conv: HloInstruction, layout: ConvGemm) -> None:
        self.skel, self.g, self.geo = skel, layout, layout.geo
        self.b = b = skel.builder
        self.et = self.geo.out_type
        elem = mem_type(self.et)
        lhs_p, rhs_p = conv.operands
        self.x = typed_pointer(b, skel.function.args[lhs_p.parameter_number], self.et)
        self.w = typed_pointer(b, skel.function.args[rhs_p.parameter_number], self.et)
        self.out = skel.output_ptr(0)
        self.out_type = output_leaves(skel.comp)[0].shape.dtype
        self.epilogue = None
        if skel.comp.root is not conv:
            # The epilogue reads the convolution as a parameter numbered after the fusion's.
            self.epilogue = rebuild(skel.comp, skel.comp.root, [conv], f"{skel.comp.name}.epilogue")
        t, k, o = layout.tile, layout.k, self.geo.features
        # The per-thread tiles, in one allocation of this call (64-byte aligned parts).
        patch_elems = 0 if layout.direct_input is not None else -(-t * k // 16) * 16
        c_elems = 0 if layout.out is not None else t * o
        self.scratch = self._allocate((patch_elems + c_elems) * (self.et.bits // 8)) if patch_elems + c_elems else None
        base = None if self.scratch is None else b.bitcast(self.scratch, elem.as_pointer())
        self.patch = base if patch_elems else None
        self.ctile = None if not c_elems else b.gep(base, [_i(patch_elems)], inbounds=True)
        self.a = layout.direct_input or _row_major(t, k)
        self.block_lanes = block_bytes(skel.target) * 8 // self.et.bits  # rows a packing block transposes
        self.c = layout.out or _row_major(t, o)

    def _allocate(self, nbytes: int) -> ir.Value:
        """`nbytes` of 64-byte aligned scratch for this call (trap when there is none)."""
        b, m = self.b, self.skel.module
        p = b.call(declare(m, SCRATCH_ALLOC, ir.FunctionType(I8P, [I64, I64])), [_i(64), _i(-(-nbytes // 64) * 64)])
        trap_if(b, m, b.icmp_unsigned("==", p, ir.Constant(I8P, None)))
        return p

    def _release(self) -> None:
        """Free this call's scratch."""
        if self.scratch is None:
            return
        free = declare(self.skel.module, SCRATCH_FREE, ir.FunctionType(ir.VoidType(), [I8P]))
        self.b.call(free, [self.scratch])

    def emit(self) -> None:
        """The whole kernel: per unit, pack the tile's patches (unless this call packed them for
        the previous unit), GEMM over the unit's column panel, epilogue."""
        b, g, geo = self.b, self.g, self.geo
        # Per-tap weights: each call multiplies the tap's column block of the patch tile
        # ([rows, I] at row stride K) by the tap's [I, O] block of the weights.
        a = self.a if not g.tap_offsets else dataclasses.replace(self.a, cols=geo.group_inputs)
        swapped, (t1, ld1), (t2, ld2), ldc = blas_operands(a, g.weights, self.c)
        call = GemmCall(b, self.skel.module, self.et)
        flags = (call.char(t1), call.char(t2))
        p_k, p_o = call.dim(geo.group_inputs if g.tap_offsets else g.k), call.dim(geo.features)
        p_ld1, p_ld2, p_ldc = call.dim(ld1), call.dim(ld2), call.dim(ldc)
        with for_range(b, self.skel.begin, self.skel.end, "unit") as unit:
            tile, col0, cols = self._panel(unit)
            row0, count = self._tile(tile)
            n0, p0 = b.udiv(row0, _i(g.positions)), b.urem(row0, _i(g.positions))
            if self.patch is not None:
                if g.col_panels == 1:
                    self._pack(row0, count)
                else:
                    # The call's units are consecutive, row tile-major: the tile's patches are
                    # in scratch already unless this is the call's first unit or its tile's first.
                    first_unit = b.icmp_unsigned("==", unit, self.skel.begin)
                    with b.if_then(b.or_(first_unit, b.icmp_unsigned("==", col0, _i(0)))):
                        self._pack(row0, count)
                a_ptr = self.patch
            else:
                a_ptr = b.gep(self.x, [self._offset(self.a, n0, p0, row0)], inbounds=True)
            c_ptr = self.ctile if self.ctile is not None else b.gep(self.out, [self._offset(self.c, n0, p0, row0)],
                                                                     inbounds=True)
            w_ptr = self.w
            if g.col_panels > 1:  # the panel's first column of the weights and of C
                w_ptr = b.gep(w_ptr, [b.mul(col0, _i(g.weights.col_stride))], inbounds=True)
                c_ptr = b.gep(c_ptr, [b.mul(col0, _i(self.c.col_stride))], inbounds=True)
            p_rows, p_cols = call.dim(count), p_o if g.col_panels == 1 else call.dim(cols)
            sizes = (p_rows, p_cols) if swapped else (p_cols, p_rows)
            # One call, or one per tap summing into C in K's order (the tap's inputs are the
            # patch tile's columns tap * I .. (tap + 1) * I - 1).
            for i, offset in enumerate(g.tap_offsets or (0,)):
                a_tap = a_ptr if not g.tap_offsets else b.gep(a_ptr, [_i(i * geo.group_inputs)], inbounds=True)
                w_tap = w_ptr if not offset else b.gep(w_ptr, [_i(offset)], inbounds=True)
                first, second = (a_tap, w_tap) if swapped else (w_tap, a_tap)
                call.call(flags, (*sizes, p_k), (first, p_ld1), (second, p_ld2), (c_ptr, p_ldc), accumulate=i > 0)
            if self.epilogue is not None or self.ctile is not None:
                self._epilogue(row0, count, c_ptr, col0, cols)
        call.finish()
        self._release()
        self.skel.finish()

    def _panel(self, unit: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        """(row tile, first output feature, feature count) of work unit `unit`: units are
        numbered row tile-major, the last column panel holding the features left."""
        b, g = self.b, self.g
        features = self.geo.features
        if g.col_panels == 1:
            return unit, _i(0), _i(features)
        tile, panel = b.udiv(unit, _i(g.col_panels)), b.urem(unit, _i(g.col_panels))
        col0 = b.mul(panel, _i(g.cols))
        left = b.sub(_i(features), col0)
        return tile, col0, b.select(b.icmp_signed("<", left, _i(g.cols)), left, _i(g.cols))

    def _tile(self, tile: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(first row, row count) of row tile `tile`: TILE rows of the batch x positions rows,
        the last tile (of the whole, or of each batch element) holding what is left."""
        b, g = self.b, self.g
        if g.span_batch:
            row0, end = b.mul(tile, _i(g.tile)), _i(g.rows)
        else:
            per = -(-g.positions // g.tile)
            n, t = b.udiv(tile, _i(per)), b.urem(tile, _i(per))
            start = b.mul(n, _i(g.positions))
            row0, end = b.add(start, b.mul(t, _i(g.tile))), b.add(start, _i(g.positions))
        left = b.sub(end, row0)
        return row0, b.select(b.icmp_signed("<", left, _i(g.tile)), left, _i(g.tile))

    def _offset(self, m: Matrix, n0: ir.Value, p0: ir.Value, row0: ir.Value) -> ir.Value:
        """Element offset of row `row0` (batch element n0, position p0) of matrix `m`."""
        b = self.b
        if not m.batch_strides:
            return b.mul(row0, _i(m.row_stride))
        return b.add(b.mul(n0, _i(m.batch_strides[0])), b.mul(p0, _i(m.row_stride)))

    def _position(self, row: ir.Value) -> tuple[ir.Value, list]:
        """(batch element, output spatial index) of row `row` (batch-major rows, or
        position-major ones where the layout's rows are `batch_minor`)."""
        b, g = self.b, self.g
        if g.batch_minor:
            p, n = b.udiv(row, _i(g.geo.batch)), b.urem(row, _i(g.geo.batch))
        else:
            n, p = b.udiv(row, _i(g.positions)), b.urem(row, _i(g.positions))
        return n, (delinearize(b, p, self.geo.out_spatial) if self.geo.out_spatial else [])

    # -- packing the patch tile
    def _pack(self, row0: ir.Value, count: ir.Value) -> None:
        """patch[t, :] = the K inputs output row row0 + t reads (zeros off the input)."""
        b = self.b
        lanes = self.block_lanes
        # Runs need consecutive batch elements at unit stride, a vector's worth of them.
        if self.g.batch_minor and BATCH_MINOR_RUNS and self.geo.x_batch == 1 and self.geo.batch >= lanes:
            self._pack_runs(row0, count)
            return
        # Every packing loop around another stays rolled (`for_range`'s unroll=False): the
        # patch is gathered element by element, each loaded and stored once, so unrolling buys
        # no speed, only size (haiku's ResNet-18 step: a 16-input 2x2 window unrolled to 64
        # copies of the tap's bounds check and put, 1,739 instructions and 0.15 CPU-s of LLVM,
        # 741 and 0.03 s rolled; docs/compile_time.md). The innermost loop is LLVM's to unroll
        # or vectorize.
        with for_range(b, _i(0), count, "prow", unroll=False) as t:
            n, ps = self._position(b.add(row0, t))
            self._pack_level(0, ps, b.mul(n, _i(self.geo.x_batch)), None, b.mul(t, _i(self.g.k)))

    def _pack_runs(self, row0: ir.Value, count: ir.Value) -> None:
        """The patch tile of `batch_minor` rows (position-major, batch element minor), a run of
        rows at a time: the tile's rows of one output position are consecutive batch elements,
        which read the same window taps at consecutive input addresses (jax's weight gradients:
        the batch element is the forward's input feature, unit stride in NHWC). A run's rows go
        in blocks of a vector's worth (`_pack_block_leaf`: vector loads along the batch, an
        in-register transpose, each tap's bounds checked once per block), the rest row by row
        as before (a scalar load at the batch stride per element, every input cache line read
        again for each of its rows). The patch holds the same values either way."""
        b, g, geo = self.b, self.g, self.geo
        batch, lanes = _i(geo.batch), self.block_lanes
        end = b.add(row0, count)
        first, last = b.udiv(row0, batch), b.udiv(b.sub(end, _i(1)), batch)
        with for_range(b, first, b.add(last, _i(1)), "prun", unroll=False) as p:
            p_row = b.mul(p, batch)
            start = b.select(b.icmp_signed("<", p_row, row0), row0, p_row)
            stop = b.add(p_row, batch)
            stop = b.select(b.icmp_signed("<", end, stop), end, stop)
            ps = delinearize(b, p, geo.out_spatial) if geo.out_spatial else []
            xoff = b.mul(b.sub(start, p_row), _i(geo.x_batch))
            koff = b.mul(b.sub(start, row0), _i(g.k))
            run = b.sub(stop, start)
            whole = b.sub(run, b.urem(run, _i(lanes)))
            with for_range(b, _i(0), whole, "pvrow", step=lanes, unroll=False) as j:
                self._pack_level(0, ps, b.add(xoff, j), None, b.add(koff, b.mul(j, _i(g.k))), True)
            with for_range(b, whole, run, "prow", unroll=False) as j:
                self._pack_level(0, ps, b.add(xoff, j), None, b.add(koff, b.mul(j, _i(g.k))))

    def _pack_level(self, level: int, ps: list, xoff: ir.Value, ok, koff: ir.Value, block: bool = False) -> None:
        """K factors from `level` on: `xoff` the input offset so far, `ok` (None: true) whether
        every tap so far is on an input element, `koff` the patch offset so far; `block`: for a
        vector's worth of consecutive batch-minor rows at once, from consecutive batch elements
        (`_pack_runs`), else for one row."""
        b, g, geo = self.b, self.g, self.geo
        f = g.k_order[level]
        inner = math.prod(g.k_size(h) for h in g.k_order[level + 1:])
        last = level == len(g.k_order) - 1
        if last and block:
            self._pack_block_leaf(level, ps, xoff, ok, koff)
            return
        if f == IN:
            if not last:
                with for_range(b, _i(0), _i(geo.group_inputs), "pi", unroll=False) as i:
                    self._pack_level(level + 1, ps, b.add(xoff, b.mul(i, _i(geo.x_feature))), ok,
                                     b.add(koff, b.mul(i, _i(inner))), block)
                return
            if ok is None:
                self._copy_features(xoff, koff)
                return
            with b.if_else(ok) as (inside, outside):
                with inside:
                    self._copy_features(xoff, koff)
                with outside:
                    with for_range(b, _i(0), _i(geo.group_inputs), "pz") as i:
                        self._put(b.add(koff, i), None)
            return
        d = geo.window[f]
        with for_range(b, _i(0), _i(d.size), f"pk{f}", unroll=last) as kk:
            q, tap_ok = window_tap(b, ps[f], kk, d, geo.dilated_input[f])
            both = tap_ok if ok is None else b.and_(ok, tap_ok)
            xo = b.add(xoff, b.mul(q, _i(geo.x_spatial[f])))
            ko = b.add(koff, b.mul(kk, _i(inner)))
            if not last:
                self._pack_level(level + 1, ps, xo, both, ko, block)
            else:
                with b.if_else(both) as (inside, outside):
                    with inside:
                        self._put(ko, xo)
                    with outside:
                        self._put(ko, None)

    def _pack_block_leaf(self, level: int, ps: list, xoff: ir.Value, ok, koff: ir.Value) -> None:
        """The innermost K factor (`level`; its elements consecutive in each patch row) for a
        block of V rows (a vector's worth of consecutive batch elements from `xoff`; patch rows
        from `koff`): per `width` factor elements, one vector load along the batch each (zeros
        off the input), transposed in registers (`_transpose`) into `width` elements of each
        of the V rows. The block's rows are written as V sequential streams while the inputs
        are read once, a cache line per tap."""
        b, g, geo = self.b, self.g, self.geo
        f = g.k_order[level]
        size, lanes = g.k_size(f), self.block_lanes
        width = math.gcd(size, lanes)
        elem = mem_type(self.et)
        vt = ir.VectorType(elem, lanes)
        zero, align = ir.Constant(vt, [0.0] * lanes), elem_align(elem)
        with for_range(b, _i(0), _i(size), "pvk", step=width, unroll=False) as k0:
            vecs = []
            for w in range(width):
                kk = b.add(k0, _i(w))
                if f == IN:
                    xo, valid = b.add(xoff, b.mul(kk, _i(geo.x_feature))), ok
                else:
                    q, valid = window_tap(b, ps[f], kk, geo.window[f], geo.dilated_input[f])
                    valid = valid if ok is None else b.and_(ok, valid)
                    xo = b.add(xoff, b.mul(q, _i(geo.x_spatial[f])))
                if valid is not None:  # a tap off the input loads x's first elements, then zeros
                    xo = b.select(valid, xo, _i(0))
                v = b.load(b.bitcast(b.gep(self.x, [xo], inbounds=True), vt.as_pointer()), align=align)
                vecs.append(v if valid is None else b.select(valid, v, zero))
            vecs += [ir.Constant(vt, ir.Undefined)] * (lanes - width)
            piece_t = ir.VectorType(elem, width)
            first = ir.Constant(ir.VectorType(ir.IntType(32), width), list(range(width)))
            for r, row in enumerate(_transpose(b, vecs)):
                if width < lanes:
                    row = b.shuffle_vector(row, row, first)
                dst = b.gep(self.patch, [b.add(koff, b.add(_i(r * g.k), k0))], inbounds=True)
                b.store(row, b.bitcast(dst, piece_t.as_pointer()), align=align)

    def _copy_features(self, xoff: ir.Value, koff: ir.Value) -> None:
        """patch[koff + i] = x[xoff + i * feature stride] for every input feature i."""
        b = self.b
        with for_range(b, _i(0), _i(self.geo.group_inputs), "pc") as i:
            self._put(b.add(koff, i), b.add(xoff, b.mul(i, _i(self.geo.x_feature))))

    def _put(self, koff: ir.Value, xoff) -> None:
        """patch[koff] = x[xoff], or 0 when xoff is None."""
        b = self.b
        v = (ir.Constant(mem_type(self.et), 0.0) if xoff is None
             else load_element(b, b.gep(self.x, [xoff], inbounds=True), self.et))
        store_element(b, v, b.gep(self.patch, [koff], inbounds=True), self.et)

    # -- the epilogue on the tile
    def _epilogue(self, row0: ir.Value, count: ir.Value, c_base: ir.Value, col0: ir.Value, cols: ir.Value) -> None:
        """For each element of the unit's C (`c_base`: its first row's feature `col0`; `cols`
        features): the epilogue's value at its output index, stored in place (C is the output)
        or at that index (C is the scratch tile). The inner loop runs along C's contiguous
        dimension: the features (NHWC), or the rows where only they are contiguous (NCHW
        outputs, `_rows_inner`)."""
        b = self.b
        if self._rows_inner():
            # Around a long row loop the feature loop stays rolled; the rows are vectorized,
            # never the features (a gather and scatter at the features' stride).
            with for_range(b, _i(0), cols, "ecol", unroll=False) as j:
                with for_range(b, _i(0), count, "erow") as t:
                    self._epilogue_element(row0, t, c_base, col0, j)
            forbid_vectorization(j)
            return
        width = self.g.cols
        # Around a long feature loop the row loop stays rolled, as in the GEMM's epilogue
        # (cpu_gemm._emit_epilogue: unrolled, each row repeats the vectorized feature loop).
        with for_range(b, _i(0), count, "erow", unroll=width < ROLLED_AROUND) as t:
            with for_range(b, _i(0), cols, "ecol") as j:
                self._epilogue_element(row0, t, c_base, col0, j)
        # Vectorize the feature loop, never the row loop: with 32 features LLVM unrolled the
        # feature loop and vectorized the rows with gathers and scatters (docs/convolutions.md).
        if width > SHORT_EPILOGUE_ROW:
            forbid_vectorization(t)

    def _rows_inner(self) -> bool:
        """Whether the epilogue's inner loop is over rows: C (the output itself) has unit-stride
        rows and strided features, as an NCHW output does (FEATURE_MAJOR_EPILOGUE)."""
        c = self.c
        return FEATURE_MAJOR_EPILOGUE and self.ctile is None and c.row_stride == 1 and c.col_stride != 1

    def _epilogue_element(self, row0: ir.Value, t: ir.Value, c_base: ir.Value, col0: ir.Value, j: ir.Value) -> None:
        """The epilogue's value for the unit's row `t` and feature `j` (of its panel from
        `col0`), read from C and stored (see `_epilogue`)."""
        b, geo, c = self.b, self.geo, self.c
        n, ps = self._position(b.add(row0, t))
        c_ptr = b.gep(c_base, [b.add(b.mul(t, _i(c.row_stride)), b.mul(j, _i(c.col_stride)))], inbounds=True)
        o = j if self.g.col_panels == 1 else b.add(col0, j)
        multi = [None] * len(geo.o_dims)
        multi[geo.o_axes[0]], multi[geo.o_axes[1]] = n, o
        for axis, p in zip(geo.o_axes[2:], ps):
            multi[axis] = p
        index = Index(b, geo.o_dims, multi=multi)
        value = self._value(index, c_ptr)
        # In place through the very pointer the value came from: LLVM then sees the store
        # cannot clobber a later load and vectorizes the inner loop.
        dst = c_ptr if self.ctile is None else b.gep(self.out, [index.linear], inbounds=True)
        store_element(b, value, dst, self.out_type)

    def _value(self, index: Index, c_ptr: ir.Value) -> ir.Value:
        """The epilogue's root (or the convolution itself) at `index`, reading C at `c_ptr`."""
        def conv_value(_index: Index) -> ir.Value:
            return load_element(self.b, c_ptr, self.et)

        if self.epilogue is None:
            return conv_value(index)
        n = len(self.skel.comp.parameters)

        def params(p: HloInstruction):
            return conv_value if p.parameter_number == n else self.skel.param_gen(p)

        return ElementalEmitter(self.b, self.skel.target, params).gen(self.epilogue.root)(index)


def elem_align(elem: ir.Type) -> int:
    """The byte alignment of one `elem` (an unaligned vector access aligns to its element)."""
    return 8 if isinstance(elem, ir.DoubleType) else 4


def _transpose(b: ir.IRBuilder, vecs: list) -> list:
    """The V x V transpose of V vectors of V lanes (V a power of two): result r's lane c is
    input c's lane r. log2(V) stages of V two-input shuffles, each stage swapping the
    off-diagonal blocks of half the size of the last (blocks of V/2 lanes first)."""
    lanes = len(vecs)
    mask_t = ir.VectorType(ir.IntType(32), lanes)
    bs = lanes // 2
    while bs:
        out = list(vecs)
        for i in range(lanes):
            if i & bs:
                continue
            j = i + bs
            lo = [l if not l & bs else lanes + l - bs for l in range(lanes)]
            hi = [l + bs if not l & bs else lanes + l for l in range(lanes)]
            out[i] = b.shuffle_vector(vecs[i], vecs[j], ir.Constant(mask_t, lo))
            out[j] = b.shuffle_vector(vecs[i], vecs[j], ir.Constant(mask_t, hi))
        vecs, bs = out, bs // 2
    return vecs


def emit_conv_gemm_kernel(skel, plan) -> None:
    """Fill CPU kernel skeleton `skel` with the tiled-GEMM convolution kernel of `plan`
    (custom="conv_gemm")."""
    conv = find_convolution(plan.comp)
    layout = None if conv is None else conv_gemm(conv, output_leaves(plan.comp)[0].shape.dtype)
    if layout is None:
        raise ValueError(f"kernel {plan.name}: its computation is not a convolution the GEMM kernel runs")
    _ConvGemmEmitter(skel, conv, layout).emit()
