"""CPU loop kernels: write every output of a (multi-output) loop fusion from one loop nest.

The loop nest runs over a range of *units* [begin, end) of the CPU kernel skeleton
(cpu_skeleton.py), so a thread pool can split the outer loop across cores:
  * rows mode: a unit is a row of the last output dimension; the innermost loop walks the
    row contiguously, so LLVM vectorizes it. A very short row (<= 4, e.g. RGB channels) is
    unrolled completely, and LLVM vectorizes across rows with interleaved accesses (loads of
    a broadcast channel vector become loop invariant);
  * plane mode (rank >= 3 with such a short last dimension, and enough planes for the
    threads): a unit is a plane of the last two dimensions, walked by two loops, the inner one
    unrolled. Only the unit number is split into outer indices (divisions); the two inner
    indices are loop variables. In rows mode every short row divided its row number into
    (n, h, w), and an operand read at another shape (the slice a dynamic-update-slice writes
    back, a channel of an image) recombined them: LLVM cannot see that ((r/W/H)*H +
    (r/W)%H)*W + r%W is r again, so it read such operands with gathers. In plane mode the
    index of w is affine and those reads are strided loads. Where the only reads that depend
    on the column are broadcasts along the plane (per-channel constants), a plane is one flat
    loop instead, those broadcasts read from buffers filled once a call (plane_patterns.py):
    unit-stride accesses, none of the interleaved groups' shuffles;
  * flat mode (rank <= 1 or a last dimension of 5..31): a unit is one element; but where some
    instruction reads at other than the output's linear index (a broadcast along rows, a
    transpose, a slice), its index is the element's row and column, divided out of the linear
    index per element, and LLVM read those operands with gathers: such a kernel walks short
    rows instead (`short_rows`);
  * tiled mode (a large operand read transposed, kernels/transposed_tiles.py): a unit is a
    block of one cache line's columns by up to 128 indices of the one other dimension along
    which that operand is contiguous, at one index of the rest, that dimension walked outside
    the columns (`kernel_loop_shape` decides it from the computation).
Index arithmetic is affine in the loop variables (GEP on the linear index), so LLVM sees
unit-stride accesses. In rows mode a row along which a fused concatenate or pad changes side
is walked in pieces, or a few columns an iteration (`row_splits.row_walk`), so that each read
stays affine there too.

An element that goes through floating-point math functions (exp, tanh, erf, a divide, ...) is
a long chain of dependent instructions; one vector per iteration leaves the core waiting on
that chain's latency, so such loops ask LLVM to interleave `_INTERLEAVE` vectors (4 on
16-register AVX2 targets: `interleave_limit`; `interleave_count`, loop_hints.interleave).
Measured on the 2-core znver5 (AVX-512) host, one thread,
f32[256,1024] in cache, CPU time per call (load ~6.5): erf(logistic(log1p(exp(tanh x))))
974 us with LLVM's choice (one vector), 420 us with 4 and 332 us with 8; GELU-tanh 81 -> 69
-> 67 us; an LSTM-like gate expression 165 -> 152 -> 163 us. Each interleaved copy is more IR
for LLVM: a chain of 32 math functions in one loop took 0.2-0.4 CPU-s to compile with one
vector, 1.25-1.35 with 8. So the copies of math functions are bounded (`_INTERLEAVE_BUDGET`):
a long chain gets fewer vectors, and one of more than half the budget none.

In rows and plane mode, a kernel whose data exceed L3 writes its rows (planes) with streaming
stores (`streams_rows`, cpu_streaming.py), saving the read for ownership of every output line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llvmlite import ir

from ...emitters import math_calls
from ...emitters.elemental import ElementalEmitter
from ...emitters.ir_helpers import Index, const_i64, delinearize, for_range, store_element
from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.opcodes import op_info
from . import cpu_row, plane_patterns
from .args import output_leaves
from .cpu_concat import emit_concat_loop
from .cpu_streaming import BUFFER_BYTES, buffered_streaming_row, fence, streamable
from .index_probe import follow_index, follows, strides
from .linear_reads import all_linear
from .loop_hints import fold_tail, forbid_vectorization, interleave, rolls_transposed_rows
from .reduction_groups import lanes_of, wide_vectors
from .row_splits import RowWalk, row_walk
from .transposed_tiles import TileWalk, transposed_tiles

_MIN_ROW = 32  # shorter last dimensions use flat mode ...
_UNROLLED_ROW = 4  # ... unless so short that LLVM unrolls the row and vectorizes across rows
# Plane mode needs this many planes: threads take units in 4 chunks each (codegen/driver.py),
# so fewer planes than 4 chunks x 16 threads would leave threads idle or unbalanced.
_MIN_PLANES = 64
# Vectors in flight per iteration of a latency-bound loop, and the most copies of math
# functions the interleaved loop may hold (see the module docstring). _INTERLEAVE was measured
# with AVX-512's 32 vector registers; with 16 (AVX2) eight interleaved vectors of a math chain
# spill their constants and partial results to the stack, so such a target interleaves
# _NARROW_INTERLEAVE (`interleave_limit`). Measured on the Zen 1 AVX2 host (one thread, CPU
# time, medians of 9-15 interleaved rounds, load 3.6-6.2, the same bits), 8 -> 4 vectors:
# run.py's erf(logistic(log1p(exp(tanh x)))) over 25 MB 83.1 -> 75.2 ms (2 vectors: 81.7),
# GELU-tanh 17.9 -> 17.5 ms (in cache, f32[64,1024]: 48.1 -> 45.8 cycles a vector), the LSTM
# cell 148 -> 144 ms, iou_matrix, box_decode and shared_producer within 0.5%.
_INTERLEAVE = 8
_NARROW_INTERLEAVE = 4
_INTERLEAVE_BUDGET = 48
# Math functions the core computes in one or two instructions of its divider (the registry's
# `math` names): no long chain to hide, so an element whose only math functions are these
# interleaves at most _DIVIDER_INTERLEAVE vectors. Eight interleaved vectors of iou_matrix
# (a divide; eight values of two box sets live per vector) spilled a third of their registers to
# the stack: one thread, CPU time, medians of 15 (load 1), 8 vectors 8.8 ms, 4 6.5, 2 6.1, 1 6.5.
_DIVIDER_MATH = frozenset({"div", "sqrt", "rsqrt"})
_DIVIDER_INTERLEAVE = 2
# Whether a latency-bound loop kernel streams its rows on a target without AVX-512 as it does
# with AVX-512 (`streams_rows`: it writes plain stores there); a switch for A/B measurements and
# for tests of the buffered streaming of interleaved rows on any host.
NARROW_LATENCY_BOUND_STREAMS = False
# Whether loop kernels whose flat mode would gather walk short rows (`short_rows`); a switch for
# A/B measurements.
SHORT_ROWS = True


@dataclass
class LoopShape:
    """How a loop kernel walks `dims`: units and elements per unit."""

    dims: tuple[int, ...]
    rows_mode: bool
    inner: int = 1  # in rows mode, how many trailing dimensions a unit spans (2: plane mode)
    tiles: TileWalk | None = None  # tiled mode (not rows mode)

    @property
    def units(self) -> int:
        """Work units the launcher splits across threads."""
        if self.tiles is not None:
            return self.tiles.units
        if self.rows_mode:
            return math.prod(self.dims[:-self.inner])
        return max(math.prod(self.dims), 0)

    @property
    def unit_elements(self) -> int:
        """Elements computed per unit."""
        if self.tiles is not None:
            return self.tiles.unit_elements
        return math.prod(self.dims[-self.inner:]) if self.rows_mode else 1


def loop_shape(dims) -> LoopShape:
    """How a loop kernel over output `dims` walks them (rows, plane or flat mode)."""
    dims = tuple(dims)
    rows = len(dims) >= 2 and (dims[-1] >= _MIN_ROW or dims[-1] <= _UNROLLED_ROW)
    planes = (len(dims) >= 3 and rows and dims[-1] <= _UNROLLED_ROW and dims[-2] > 1
              and math.prod(dims[:-2]) >= _MIN_PLANES)
    return LoopShape(dims, rows, 2 if planes else 1)


def _math_names(comp: HloComputation) -> list[str]:
    """The math function (the op registry's `math` name: exp, log, tanh, erf, div, sqrt, ...)
    of each of `comp`'s floating-point elementwise instructions that has one."""
    return [op_info(i.opcode).math for i in comp.instructions if i.shape.is_array and i.shape.dtype.is_float
            and op_info(i.opcode).elementwise and op_info(i.opcode).math]


def _math_ops(comp: HloComputation) -> int:
    """How many of `comp`'s instructions are floating-point math functions (`_math_names`):
    each a long chain of dependent instructions in the element's computation."""
    return len(_math_names(comp))


def interleave_limit(vector_bits: int | None) -> int:
    """The most vectors a latency-bound loop interleaves on a target whose kernels prefer
    `vector_bits`-bit vectors: `_INTERLEAVE` with AVX-512's (`reduction_groups.wide_vectors`), else
    `_NARROW_INTERLEAVE`, never more than `_INTERLEAVE` (which A/B runs and tests lower to
    turn interleaving off on every target)."""
    return _INTERLEAVE if wide_vectors(vector_bits) else min(_INTERLEAVE, _NARROW_INTERLEAVE)


def interleave_count(comp: HloComputation, ls: LoopShape, vector_bits: int | None) -> int:
    """How many vectors the innermost loop of a loop kernel for `comp` should interleave: 1
    (LLVM's own choice) unless its element goes through math functions (`_math_ops`), else
    `interleave_limit` (8 with AVX-512, 4 with AVX2; _DIVIDER_INTERLEAVE where its only math
    functions are divides and square roots), halved until the copies of its math functions fit
    `_INTERLEAVE_BUDGET` and the interleaved vectors fit in a row, or in flat mode in the whole range (a range shorter
    than them would run in the scalar remainder loop, or with its tail folded in one masked
    iteration: copies LLVM compiles for nothing); 1 where that leaves fewer than 2. The
    vector's lanes are counted for the widest element type read or written (what sets LLVM's
    vectorization factor). Plane mode's inner loop is unrolled, not vectorised: 1. A row of up
    to _INTERLEAVE vectors read from wider rows (`_reads_wider_rows`) is walked whole, one row
    an iteration."""
    names = _math_names(comp)
    math_ops = len(names)
    if (ls.rows_mode and ls.inner != 1) or ls.tiles is not None or not math_ops:
        return 1
    params = [leaf for p in comp.parameters for leaf in p.shape.leaves()]
    memory = params + comp.root.shape.leaves()
    bits = max((leaf.dtype.bits for leaf in memory), default=32)
    lanes = max(lanes_of(vector_bits, bits), 1)
    count = interleave_limit(vector_bits)
    if set(names) <= _DIVIDER_MATH:
        count = min(count, _DIVIDER_INTERLEAVE)
    span = ls.dims[-1] if ls.rows_mode else ls.units  # a flat loop's range is at most its units
    while count > 1 and (count * math_ops > _INTERLEAVE_BUDGET or count * lanes > span):
        count //= 2
    row = ls.dims[-1] if ls.rows_mode else 0
    if row % lanes == 0 and count < row // lanes <= _INTERLEAVE and _reads_wider_rows(params, row):
        return row // lanes  # one iteration per row (see _reads_wider_rows)
    return count if count >= 2 else 1


def calls_math(comp: HloComputation) -> bool:
    """Whether a loop kernel for `comp` calls its f32 math functions (emitters/math_calls.py)
    instead of inlining each use: where its element has so many (`_math_ops`) that the loop
    interleaves no vectors (`interleave_count`'s budget), so a call loses no overlap of
    vectors. Measured (one thread, CPU time, medians of 11 interleaved rounds, load 8.8-9.2,
    same bits; chains of exp on f32[256,64]): 35, 65, 100 and 250 exponentials per element run
    1.003, 1.005, 0.997, 1.001 of the inlined loop's time, and LLVM's time per kernel falls
    3-5x (cold compile CPU 0.20 -> 0.05, 0.22 -> 0.08, 0.39 -> 0.09, 1.09 -> 0.22 s); with 15
    or 24, interleaved 2 vectors, calls ran 1.17x slower, so those stay inlined."""
    return 2 * _math_ops(comp) > _INTERLEAVE_BUDGET


def _reads_wider_rows(params: list, row: int) -> bool:
    """Whether a loop over rows of `row` elements reads a parameter leaf (`params`) whose rows
    are wider (a slice of it: the LSTM gates' four column slices of [N, 4H]). Each row of such
    an operand starts away from where the last one ended, so the hardware's stream prefetcher
    starts it anew; a load instruction that walks the same place of every row instead strides
    by a constant, which the core's stride prefetcher follows. So a row of up to _INTERLEAVE
    vectors is walked in one iteration, over the copies budget. LSTM gates (f32[16384,128] from
    two f32[16384,512], 3 logistic and 2 tanh as exp/divide and tanh), one thread, CPU time,
    interleaved: 4 vectors an iteration 8.6 ms, the whole row (8) 2.9 ms; one column slice each
    of four f32[16384,512] 14.7 -> 4.0 ms; four contiguous f32[16384,128] (not affected) 2.3."""
    return any(leaf.rank >= 2 and leaf.dims[-1] > row for leaf in params)


def emit_loop(skel, ls: LoopShape, body, interleaved: int = 1, streamed: list | None = None,
              rolled: bool = False, flat_planes: "plane_patterns.PlanePatterns | None" = None,
              walk: RowWalk | None = None) -> None:
    """Emit the loop nest over units [skel.begin, skel.end); `body(index)` emits one element.
    `interleaved` > 1 asks LLVM to interleave that many vectors in the innermost loop of rows
    and flat mode (loop_hints.interleave). `streamed` (rows and plane mode; `streams_rows`):
    the (generator, output leaf, pointer) of every output, each row (plane) then written with
    streaming stores a chunk at a time (cpu_streaming.buffered_streaming_row). `rolled`: rows
    mode's loop over rows stays rolled (loop_hints.rolls_transposed_rows). `flat_planes` (plane
    mode; plane_patterns.fill_patterns): each plane is one flat loop, its broadcasts read from
    pattern buffers. `walk` (rows mode; row_splits.row_walk): the row is walked as one loop per
    piece, `walk.period` elements an iteration (a streamed row only where one chunk holds it)."""
    b = skel.builder
    dims = ls.dims
    if ls.tiles is not None:
        _emit_tiles(skel, ls.tiles, body)
    elif ls.rows_mode and ls.inner == 2:
        m, n = dims[-2], dims[-1]
        with for_range(b, skel.begin, skel.end, "plane") as r:
            outer = delinearize(b, r, dims[:-2])
            base = b.mul(r, const_i64(m * n), flags=["nuw", "nsw"])

            def plane(put):
                if flat_planes is not None:
                    flat_planes.walk(b, dims, outer, base, put)
                    return
                with for_range(b, const_i64(0), const_i64(m), "row") as i:
                    row = b.mul(i, const_i64(n), flags=["nuw", "nsw"])
                    with for_range(b, const_i64(0), const_i64(n), "col") as j:
                        at = b.add(row, j, flags=["nuw", "nsw"])
                        put(at, Index(b, dims, multi=list(outer) + [i, j], linear=b.add(base, at, flags=["nuw", "nsw"])))

            if streamed:  # the plane is one chunk (streams_rows: it fits the buffers)
                buffered_streaming_row(b, m * n, base, streamed, lambda c0, count, put: plane(put), chunk=m * n)
            else:
                plane(lambda at, index: body(index))
    elif ls.rows_mode:
        n = dims[-1]
        # `rolled` only where the row is its own loop: a row of up to _UNROLLED_ROW is unrolled
        # and LLVM vectorizes the loop over rows (unroll.disable would leave it one vector).
        with for_range(b, skel.begin, skel.end, "row", unroll=not (rolled and n > _UNROLLED_ROW)) as r:
            outer = delinearize(b, r, dims[:-1])
            base = b.mul(r, const_i64(n), flags=["nuw", "nsw"])

            def index_at(j):
                return Index(b, dims, multi=list(outer) + [j], linear=b.add(base, j, flags=["nuw", "nsw"]))

            def walked(emit, name):
                """The row's loops (`walk`): emit(j) for every column j."""
                period = walk.period if walk else 1
                for lo, hi in walk.pieces if walk else [(0, n)]:
                    with for_range(b, const_i64(lo // period), const_i64(hi // period), name) as g:
                        for s in range(period):
                            emit(g if period == 1 else b.add(b.mul(g, const_i64(period), flags=["nuw", "nsw"]),
                                                           const_i64(s), flags=["nuw", "nsw"]))
                    if interleaved > 1:
                        interleave(g, interleaved)

            def fill(c0, count, put):
                if walk and isinstance(count, ir.Constant) and count.constant == n:  # one chunk: c0 is 0
                    walked(lambda j: put(j, index_at(j)), "fill")
                    return
                with for_range(b, const_i64(0), count, "fill") as j:
                    put(j, index_at(b.add(c0, j, flags=["nuw", "nsw"])))
                if interleaved > 1:
                    interleave(j, interleaved)

            if streamed:
                buffered_streaming_row(b, n, base, streamed, fill, interleaved=interleaved)
            else:
                walked(lambda j: body(index_at(j)), "col")
        if n > _UNROLLED_ROW:
            # The row is the loop to vectorize: a row of 32 LLVM unrolled fully and then
            # vectorized the loop over rows with gathers and scatters (x / 4 over
            # f32[256,14,14,32], the flax MNIST CNN's pooling divide: 2.7 -> 0.11 ms, one thread).
            forbid_vectorization(r)
    else:
        with for_range(b, skel.begin, skel.end, "elem") as i:
            body(Index(b, dims, linear=i))
        if interleaved > 1:
            interleave(i, interleaved)
        fold_tail(i, ls.units)  # a short range: one masked vector loop (loop_hints.FOLD_TAIL_UNITS)


def streams_rows(skel, comp: HloComputation, ls: LoopShape, outputs: list) -> bool:
    """Whether a loop kernel writes its output rows (`outputs`: output leaves) with streaming
    stores (cpu_streaming.py): where `streamable` allows it for its rows (in plane mode, its
    planes, each written as one chunk, so a plane's buffers must fit BUFFER_BYTES), and the
    kernel's parameters and outputs together exceed L3 (they come from and go to memory anyway;
    in cache a streaming store would evict what the next kernel reads). A loop kernel writes
    each output element once and never reads it back. Not a latency-bound loop (one that
    interleaves vectors of math functions, `interleave_count`) on a target without AVX-512
    (`reduction_groups.wide_vectors`): its compute, not memory, bounds it there, and the chunk's trip through
    the L1 buffer costs more than the read for ownership saves. Zen 1 AVX2 host, CPU
    time, medians of 11-21 interleaved rounds, load 4-6.8, plain stores against streaming:
    gelu_tanh 0.96x on one thread and 0.95x on two, transcendental_chain 0.98x, iou_matrix
    0.97x, shared_producer 1.00x (on the znver5 AVX-512 host the same kernels gained from
    streaming: cpu_streaming.py). A loop without math functions keeps streaming there
    (scaled_add, two threads: 3.69 ms CPU streamed, 4.85 with plain stores), and so does plane
    mode (interleaving nothing: image_normalize's divide)."""
    if not ls.rows_mode:
        return False
    width = getattr(skel.target, "vector_width", None)
    if not NARROW_LATENCY_BOUND_STREAMS and not wide_vectors(width) and interleave_count(comp, ls, width) > 1:
        return False
    row = ls.unit_elements
    if not streamable(skel.target, [leaf.shape.dtype for leaf in outputs], row):
        return False
    if ls.inner == 2 and row * sum(leaf.shape.dtype.byte_size for leaf in outputs) > BUFFER_BYTES:
        return False
    moved = sum(p.shape.byte_size() for p in comp.parameters) + sum(leaf.shape.byte_size() for leaf in outputs)
    return moved > cpu_row.l3_cache_bytes()


def window_reshape_source(comp: HloComputation, chosen: list) -> HloInstruction | None:
    """The operand of a loop kernel's one output when that output is a reshape (or bitcast)
    keeping the row-major element order, and `comp` reduces windows: the loop then walks the
    operand's dimensions (same linear index, same stores) and skips the reshape. A window
    reduction's element generator indexes its operand per dimension; walked at the reshaped
    dimensions, each element's index was divided back out of the linear one and LLVM read the
    windows with gathers. The flax MNIST CNN's second pool, fused with its divide and the
    flattening reshape to f32[256,3136], one thread, CPU time: 3.37 ms walking [256,3136], 0.60 ms
    walking [256,7,7,64] (the kernel apart from the reshape: 1.20 ms; load 8)."""
    if len(chosen) != 1 or chosen[0].path:
        return None
    inst = chosen[0].inst
    if inst.opcode not in ("reshape", "bitcast") or not inst.shape.is_array:
        return None
    src = inst.operands[0]
    if not (src.shape.is_array and src.shape.dtype == inst.shape.dtype and src.shape.is_row_major()
            and inst.shape.is_row_major()):
        return None
    if not any(i.opcode == "reduce-window" for i in comp.instructions):
        return None
    return src


def _emit_tiles(skel, tiles: TileWalk, body) -> None:
    """Tiled mode's loops over units [skel.begin, skel.end): per tile, its rows of
    `tiles.across` outside and its columns inside."""
    b = skel.builder
    dims, last = tiles.dims, len(tiles.dims) - 1
    blocks, extent = dims[-1] // tiles.columns, dims[tiles.across]
    with for_range(b, skel.begin, skel.end, "tile") as u:
        column_block = b.urem(u, const_i64(blocks))
        rest = b.udiv(u, const_i64(blocks))
        row_block = b.urem(rest, const_i64(tiles.row_blocks))
        outer = iter(delinearize(b, b.udiv(rest, const_i64(tiles.row_blocks)), tiles.outer_dims))
        fixed = [None if k in (tiles.across, last) else next(outer) for k in range(len(dims))]
        first_column = b.mul(column_block, const_i64(tiles.columns), flags=["nuw", "nsw"])
        first_row = b.mul(row_block, const_i64(tiles.rows), flags=["nuw", "nsw"])
        end_row = b.add(first_row, const_i64(tiles.rows), flags=["nuw", "nsw"])
        if extent % tiles.rows:  # the last block is shorter
            end_row = b.select(b.icmp_unsigned("<", end_row, const_i64(extent)), end_row, const_i64(extent))
        with for_range(b, first_row, end_row, "across") as a:
            with for_range(b, const_i64(0), const_i64(tiles.columns), "col") as c:
                multi = list(fixed)
                multi[tiles.across] = a
                multi[last] = b.add(first_column, c, flags=["nuw", "nsw"])
                body(Index(b, dims, multi=multi))
        # LLVM unrolled the columns and vectorized `across` instead: contiguous reads, but every
        # store a scatter (a 2048 x 2048 transpose, tiles of 16 rows: 12.2 ms on one core; with
        # this, the columns read by gathers and stored as one vector: 7.5 ms)
        forbid_vectorization(a)


def _rows_read_along(roots: list, dims: tuple[int, ...]) -> bool:
    """Whether every parameter the walk from `roots` reaches (index_probe.follow_index) is read
    along the output's rows at a stride of 0 or 1 elements (a broadcast along them, or
    contiguously): a row then reads splats and whole vectors."""
    rank = len(dims)
    point = np.asarray([(d - 1) // 2 for d in dims], dtype=np.int64)
    step = point + np.eye(rank, dtype=np.int64)[-1]
    multi = [np.asarray([[point[k], step[k]]]) for k in range(rank)]
    for param, idx, ok in follow_index(roots, dims, multi, np.ones((1, 2), dtype=bool)):
        steps = strides(param, idx) if ok.all() else None
        if steps is not None and abs(int(steps[0])) > 1:
            return False
    return True


def short_rows(comp: HloComputation, roots: list, dims: tuple[int, ...]) -> bool:
    """Whether a loop kernel over `dims`, whose last dimension (5..31) would put it in flat
    mode, walks rows instead: where some instruction of `comp` reads at other than the
    output's linear index (linear_reads.all_linear) but every parameter is read along the rows
    contiguously or as a splat (`_rows_read_along`: a transposing read, as a GEMM operand's
    packing, gathers either way, and flat mode's loop does more per gather: keras_hub Llama's
    f32[4,256,64,8] packing ran 1.2x slower as rows), and the rows are a multiple of 4 long or
    the element has no math function. Flat mode then divided each element's linear index
    into its row and column and LLVM read such operands with gathers. One thread, CPU time,
    medians of 11, the same bits, y = x * w[col] + c[row] over 4M elements, flat -> rows:
    rows of 5 3.61 -> 1.48 ms, 7 3.74 -> 1.45, 8 1.56 -> 1.07, 12 3.82 -> 1.29, 16 2.03 -> 1.60,
    24 3.37 -> 1.16, 31 5.34 -> 1.32; with a tanh of it, 8 19.1 -> 2.4, 12 5.0 -> 2.5, 16 18.8
    -> 2.4, 24 5.7 -> 2.6, but 5 8.0 -> 9.9, 7 5.6 -> 8.3, 31 5.4 -> 6.2 (rows of whole
    vectors' worth vectorize the math; odd rows leave it to a scalar remainder, where flat mode
    interleaves it over gathers). A selective scan's exp(-exp(A) dt) over f32[4,1024,128,16]:
    46.6 -> 4.1 ms."""
    n = dims[-1] if dims else 0
    if not SHORT_ROWS or len(dims) < 2 or not (_UNROLLED_ROW < n < _MIN_ROW) or all_linear(comp, dims):
        return False
    if not all(follows(i) and i.opcode != "transpose" for i in comp.instructions if i.shape.is_array):
        return False  # a read the probe does not follow; a transposed one gathers either way
    return (n % 4 == 0 or not _math_names(comp)) and _rows_read_along(roots, dims)



def kernel_loop_shape(comp: HloComputation, chosen: list) -> LoopShape:
    """How a loop kernel writing output leaves `chosen` of `comp` walks them: `loop_shape` of
    `walked_dims` (short rows where flat mode would gather: `short_rows`), or tiled mode where
    it reads a large operand transposed (transposed_tiles.py)."""
    source = window_reshape_source(comp, chosen)
    if source is not None:
        return loop_shape(tuple(source.shape.dims))
    dims = tuple(chosen[0].shape.dims)
    tiles = transposed_tiles(comp, [leaf.inst for leaf in chosen], dims,
                             max(leaf.shape.dtype.byte_size for leaf in chosen))
    if tiles is not None:
        return LoopShape(dims, False, tiles=tiles)
    if short_rows(comp, [leaf.inst for leaf in chosen], dims):
        return LoopShape(dims, True)
    return loop_shape(dims)


def walked_dims(comp: HloComputation, chosen: list) -> tuple[int, ...]:
    """The dimensions a loop kernel writing output leaves `chosen` of `comp` walks: theirs, or
    those of `window_reshape_source` (kernel planning counts the work units with them too)."""
    source = window_reshape_source(comp, chosen)
    return tuple(source.shape.dims if source is not None else chosen[0].shape.dims)


def emit_loop_kernel(skel, comp: HloComputation, outputs: list[int]) -> LoopShape:
    """Fill kernel skeleton `skel` with a loop writing output leaves `outputs` of `comp`
    (all of the same dimensions); returns the loop shape (for the launcher). A reshaped window
    reduction is walked at its own dimensions (`window_reshape_source`)."""
    leaves = output_leaves(comp)
    chosen = [leaves[k] for k in outputs]
    source = window_reshape_source(comp, chosen)
    ls = kernel_loop_shape(comp, chosen)
    em = ElementalEmitter(skel.builder, skel.target, skel.param_gen)
    ptrs = [skel.output_ptr(k) for k in outputs]
    if source is None and len(chosen) == 1 and emit_concat_loop(skel, ls, em, chosen[0], ptrs[0]):
        return ls  # a concatenate, written operand by operand (cpu_concat.py)
    flat_planes = None
    if plane_patterns.FLAT_PLANES and source is None and ls.rows_mode and ls.inner == 2:
        patterns = plane_patterns.pattern_broadcasts(comp, [leaf.inst for leaf in chosen], ls.dims)
        if patterns:  # before the outputs' generators, which then read the patterns
            flat_planes = plane_patterns.fill_patterns(skel.builder, em, ls.dims, patterns)
    gens = [em.gen(source if source is not None else leaf.inst) for leaf in chosen]

    def body(index):
        b = skel.builder
        for g, leaf, ptr in zip(gens, chosen, ptrs):
            v = leaf.select(g(index))
            store_element(b, v, b.gep(ptr, [index.linear], inbounds=True), leaf.shape.dtype)

    streaming = streams_rows(skel, comp, ls, chosen)
    walk = None
    if ls.rows_mode and ls.inner == 1 and ls.dims[-1] > _UNROLLED_ROW:
        walk = row_walk(comp, [source] if source is not None else [leaf.inst for leaf in chosen], ls.dims)
    # each piece is a loop of its own: its vectors are interleaved within the shortest one
    walked = ls if walk is None or walk.shortest == ls.dims[-1] else LoopShape(ls.dims[:-1] + (walk.shortest,), True)
    with math_calls.calling(calls_math(comp)):
        emit_loop(skel, ls, body, interleave_count(comp, walked, getattr(skel.target, "vector_width", None)),
                  list(zip(gens, chosen, ptrs)) if streaming else None,
                  rolled=source is None and all(rolls_transposed_rows(leaf.inst) for leaf in chosen),
                  flat_planes=flat_planes, walk=walk)
    if streaming:  # streaming stores are weakly ordered: done before the kernel returns
        fence(skel.builder)
    skel.finish()
    return ls
