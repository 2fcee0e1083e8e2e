"""Dense convolutions as tiled im2col + BLAS GEMM, with the fused epilogue applied per tile.

    plans = plan_convolution(comp, name)   # the rule: GEMM kernels or the direct kernel (cpu_conv.py)
    emit_conv_gemm_kernel(skel, plan)      # cpu_conv_gemm_kernel.py: fills a CPU kernel skeleton

A dense convolution (one feature group, one batch group) is a matrix product: with the
output positions of every batch element as rows (`rows` = batch x positions) and the window
taps x input features as the contraction (K = taps x I),

    out[rows, O] = patches[rows, K] x weights[K, O].

Work units are tiles of up to 512 rows (`tile_rows`: a patch tile [rows, K] of at most 4 MiB,
in L2 or L3: more rows per BLAS call beat a smaller tile, docs/convolutions.md), at least two
(an even count) where one would hold 128+ rows, the rows shared evenly (`split_tile`); a
convolution of ONE tile is cut into column panels of output features as well (`panel_cols`),
so that its units can share the threads, and so is one that a tile could hold whole and that
has more output features than rows (`columns_first`: each unit then packs its share of the
weights rather than all of them). Per unit the kernel packs the tile's patches into
per-thread scratch (zeros on padding and between lhs-dilated inputs; once for the consecutive
panels of one tile in one kernel call), calls the GEMM library (blas_call.py: oneDNN's sgemm
for f32 where it is installed, OpenBLAS's `?gemm_` otherwise and for f64) against the weights
(of the unit's panel) read in place as [K, O] through BLAS's flags and leading dimension,
writing the unit's part of the output, and then runs the fused kOutput epilogue (bias,
activation, residual, convert) over that part while it is in cache. Tiles run across batch elements when the output's (batch, positions) collapse into one
strided dimension (NHWC), else within one batch element (NCHW).

- K's order follows the weights, so they are a plain matrix: (window offsets row-major, input
  feature) for HWIO-like weights, (input feature, window offsets) for OIHW-like ones. Weights
  in neither order (jax's input gradients, `01oi`), or with window reversal, run one GEMM per
  window tap (`tap_offsets`: each tap's [I, O] block read in place, the calls summing into C)
  when those blocks have a unit stride; otherwise (`0io1`) they are first packed by a loop
  kernel into a temporary in (window..., I, O) order (once per call; the GEMM kernel's
  computation then holds a convolution of that temporary with `01..io` labels).
- A 1x1 convolution with unit strides, no padding and no dilation needs no patches: BLAS reads
  the input in place as [rows, I].
- The output (a layout BLAS can write, the convolution's own type) is C itself; otherwise (an
  epilogue converting to a narrower type, a layout whose positions do not collapse) the tile's C
  is a second scratch tile the epilogue reads.
- An output whose rows collapse only position-major (jax's weight gradients, `01bf`: a few
  positions per batch element) has its rows in that order, batch element minor
  (`ConvGemm.batch_minor`), tiles across all of them.

Per-thread scratch: the driver runs each call of a kernel (a chunk of units) on one thread, so
the kernel allocates its tiles once per call (runtime/jit_builtins.py registers libc's
aligned_alloc and free as `hlofuse_scratch_alloc`/`_free`: the program's temporaries are shared
by all threads and live as long as the program, and the stack cannot hold a tile of a few MB)
and reuses them for every unit of the call, so the packed tile is in cache for the next unit's
writes. At most SCRATCH_BYTES per thread: a convolution whose smallest tile would need more
keeps the direct kernel. A failed allocation stops the process (llvm.trap), as OpenBLAS does
when its own buffers cannot be allocated.

Summation order is BLAS's (blocked), not the interpreter's term-by-term order, so results agree
with it to float rounding, not bit for bit; they do not depend on the thread count (tiles are
fixed by the shape, each computed by one single-threaded BLAS call). Padding taps are zeros in
the patch matrix, so an inf or NaN weight gives NaN there as in the interpreter and XLA.

The rule choosing this kernel over the direct one (`prefers_gemm`) is by shape class, measured
(docs/convolutions.md), never timed at run time.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

from ...emitters.ir_helpers import row_major_strides
from ...hlo.dtypes import ElementType, element_type
from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.shapes import array
from ...runtime.gemm_provider import gemm_provider
from ..planning import KernelPlan, plan_fusion, rebuild
from .args import output_leaves
from .cpu_conv import ConvGeometry, conv_geometry, dimension_numbers, find_convolution, plan_conv
from .cpu_conv_onednn import plan_onednn_conv, prefers_onednn
from .gemm_layout import INT32_MAX, Matrix, strided_matrix
from .gemm_partition import MIN_PANEL_COLS, column_granule, min_unit_multiply_adds

# The patch tile's budget. Measured (docs/convolutions.md): each BLAS call packs the whole
# weight matrix again, so rows per call matter more than the tile staying in L2: 256 rows of
# K = 4608 (4.5 MiB, in L3) ran 1.4-2x faster than the 32 that fit half of a 1 MiB L2.
TILE_BYTES = 4 << 20
# Tile rows: at most MAX_TILE_ROWS, a multiple of 8; a convolution with tiles of fewer than
# MIN_TILE_ROWS rows keeps the direct kernel.
MIN_TILE_ROWS, MAX_TILE_ROWS = 32, 512
# Where the direct kernel would read the weights' output features strided (`w_out != 1`),
# tiles of this many rows already take the GEMM kernel (`prefers_gemm`). The class: NCHW weight
# gradients (`fb01_io01->fb01`: rows are the stem's 1-3 input channels x 3x3 positions) and
# input gradients of a few positions. Measured (one thread of two busy, wall, medians of 5-15,
# load 0.1-0.5, docs/conv_gradients.md): GEMM / direct 0.06-0.58, 1.00 at K = 128.
MIN_STRIDED_TILE_ROWS = 8
# A kernel call's scratch (patch tile + C tile) stays below this.
SCRATCH_BYTES = 16 << 20
# Rows a tile keeps at least where `split_tile` cuts a convolution that one tile would hold.
SPLIT_TILE_ROWS = 64
# A convolution of one row tile is cut into at most this many column panels (output features).
# Each more panel is one more BLAS call, which on one thread cost keras ResNet-50's ten such
# convolutions about 1% of their time per call (least step times: 2 panels +1.5-2.8%, 4 panels
# +3.3-3.7%); on two threads 2 and 4 panels gained alike (docs/convolutions.md, Threads).
COLUMN_PANELS = 2
# K's factor standing for the input feature (window dimensions are 0, 1, ...).
IN = -1


@dataclass(frozen=True)
class ConvGemm:
    """A dense convolution as tiled GEMMs: C[rows, O] = P[rows, K] x W[K, O]."""

    geo: ConvGeometry
    k_order: tuple[int, ...]  # K's factors, major to minor: window dimensions and IN
    k: int
    positions: int  # output positions per batch element
    tile: int  # rows per work unit
    cols: int  # output features per work unit (a column panel; `features` when uncut)
    span_batch: bool  # tiles run across batch elements (else within one)
    weights: Matrix  # the weights as [K, O]
    direct_input: Matrix | None  # the input as [rows, K] read in place (1x1 convolutions), else packed patches
    out: Matrix | None  # the output as [rows, O] written by BLAS, else a C tile in scratch
    # Rows ordered output position-major, batch element minor (the output's batch dimension
    # inside its spatial ones: jax's weight gradients, `01bf`, whose batch is the forward
    # convolution's input features); tiles then span the whole (positions x batch) rows.
    batch_minor: bool = False
    # Weights that are no [K, O] matrix but whose every window tap's [I, O] block is (jax's
    # input gradients, `01oi`, window reversal too): `weights` is tap 0's block and these the
    # element offsets of each tap's, in K's (window-major) order; one GEMM per tap accumulates.
    tap_offsets: tuple[int, ...] = ()

    @property
    def rows(self) -> int:
        return self.geo.batch * self.positions

    @property
    def row_units(self) -> int:
        """Row tiles of `tile` rows (per batch element unless they span batch elements)."""
        if self.span_batch:
            return -(-self.rows // self.tile)
        return self.geo.batch * -(-self.positions // self.tile)

    @property
    def col_panels(self) -> int:
        """Column panels of `cols` output features per row tile (the last may be narrower)."""
        return -(-self.geo.features // self.cols)

    @property
    def units(self) -> int:
        """Work units: row tiles x column panels, numbered row tile-major (the consecutive
        units one kernel call takes share their patch tile)."""
        return self.row_units * self.col_panels

    def k_size(self, factor: int) -> int:
        return self.geo.group_inputs if factor == IN else self.geo.window[factor].size


def _gemm_types(conv: HloInstruction) -> str | None:
    """The BLAS type of a convolution whose operands and result all have it (f32 or f64)."""
    types = {conv.shape.dtype.name} | {op.shape.dtype.name for op in conv.operands}
    return types.pop() if len(types) == 1 and types <= {"f32", "f64"} else None


def tile_rows(k: int, itemsize: int) -> int:
    """Rows of a patch tile of K columns: TILE_BYTES' worth, within [MIN, MAX]_TILE_ROWS."""
    rows = TILE_BYTES // max(1, k * itemsize)
    return max(MIN_TILE_ROWS, min(MAX_TILE_ROWS, rows - rows % 8))


def split_tile(rows: int, most: int) -> int:
    """Rows per tile for `rows` rows (of the whole, or of each batch element) in tiles of at
    most `most`: the fewest tiles, at least two where each keeps SPLIT_TILE_ROWS rows, their
    count rounded up to even, and the rows shared evenly (a multiple of 8 each, the last tile
    holding what is left). A tile is a work unit, computed whole by one thread: one tile of
    MobileNetV2's 5x5 stage (200 rows) ran on one thread of two, and 800 rows in tiles of 512
    and 288 kept one thread busy 1.8x as long as the other. The tiles follow the shape only,
    so results stay the same bits on any thread count."""
    tiles = -(-rows // most)
    if tiles == 1 and rows >= 2 * SPLIT_TILE_ROWS:
        tiles = 2
    tiles += tiles % 2 if tiles > 1 else 0
    tile = -(-rows // tiles)
    return max(8, min(most, -(-tile // 8) * 8))


def panel_cols(row_units: int, rows: int, features: int, k: int, dtype: str) -> int:
    """Output features per work unit of a convolution of `row_units` row tiles of up to `rows`
    rows, `features` output features and contraction `k` in BLAS type `dtype`: all of them
    unless it is one tile, which is cut into up to COLUMN_PANELS panels, each at least
    MIN_PANEL_COLS wide and of at least min_unit_multiply_adds(dtype) multiply-adds
    (gemm_partition's bounds: each unit's BLAS call packs the patch tile again, and a smaller
    unit would not get a thread of its own), widths in whole 128-byte granules. One tile runs
    on one thread whatever the thread count: keras ResNet-50's 4x4-position convolutions (64
    rows) were 19% of its contraction time on one thread. The cut follows the shape only, and
    each output element's sum over K stays in one BLAS call, so the bits do not depend on the
    thread count. Two or more row tiles stay uncut (docs/convolutions.md, Threads)."""
    if row_units != 1:
        return features
    panels = min(COLUMN_PANELS, features // MIN_PANEL_COLS, rows * features * k // min_unit_multiply_adds(dtype))
    if panels < 2:
        return features
    granule = column_granule(dtype)
    cols = -(-features // panels)
    cols = -(-cols // granule) * granule  # round the width up to whole granules
    return min(features, max(cols, MIN_PANEL_COLS))


def row_major_matrix(dims: tuple[int, ...], batch: list[int], rows: list[int], cols: list[int]) -> Matrix | None:
    """The row-major array of `dims` as matrices (gemm_layout.strided_matrix), with a single
    row or column given the other stride past it: both strides 1 would leave BLAS's flags to
    pick a leading dimension below the extent it reads."""
    m = strided_matrix(dims, row_major_strides(dims), batch, rows, cols)
    if m is not None and m.row_stride == m.col_stride == 1:
        if m.cols == 1:
            m = dataclasses.replace(m, col_stride=max(m.rows, 1))
        elif m.rows == 1:
            m = dataclasses.replace(m, row_stride=max(m.cols, 1))
    return m


def _input_feature_minor(conv: HloInstruction) -> bool:
    """Whether the input feature of `conv`'s input is minor to its spatial dimensions (NHWC,
    and jax's weight gradients' `f01b`), so that a patch row in K order (window..., IN) reads
    runs of input features; otherwise (NCHW, equinox's and PyTorch's `bf01`, its weight
    gradients' `fb01`) K order (IN, window...) reads runs of the innermost spatial dimension,
    where window-major order would read one element per input feature, a stride apart."""
    dn = dimension_numbers(conv)
    x_strides = row_major_strides(tuple(conv.operands[0].shape.dims))
    return all(x_strides[dn.input_feature] <= x_strides[a] for a in dn.input_spatial)


# Whether packed weights follow the input's contiguity (`_packed_order`); False packs
# every convolution's weights window-major, as before (for A/B measurements).
PACKED_K_FOLLOWS_INPUT = True


def _packed_order(conv: HloInstruction) -> list[int]:
    """The weights' dimensions in the order `conv`'s weights are packed: (window..., I, O), or
    (I, window..., O) where the input's feature is not minor (`_input_feature_minor`), so that
    the GEMM's K is input-feature-major, following the input's contiguous spatial dimension."""
    dn = dimension_numbers(conv)
    if PACKED_K_FOLLOWS_INPUT and not _input_feature_minor(conv):
        return [dn.kernel_input_feature, *dn.kernel_spatial, dn.kernel_output_feature]
    return [*dn.kernel_spatial, dn.kernel_input_feature, dn.kernel_output_feature]


def _weights(conv: HloInstruction) -> tuple[tuple[int, ...], Matrix | None]:
    """(K order, the weights as [K, O] in it) for convolution `conv`: the order in which its
    weights are a plain matrix, preferring the input's own order (input feature minor or major);
    (that order, None) when neither is (the weights must be packed), or with window reversal."""
    dn = dimension_numbers(conv)
    dims = tuple(conv.operands[1].shape.dims)
    nsp = len(dn.kernel_spatial)
    minor, major = tuple(range(nsp)) + (IN,), (IN,) + tuple(range(nsp))
    orders = (minor, major) if _input_feature_minor(conv) else (major, minor)
    window = conv.attrs.get("window")
    if window is not None and any(d.window_reversal for d in window.dimensions):
        return orders[0], None
    for order in orders:
        axes = [dn.kernel_input_feature if f == IN else dn.kernel_spatial[f] for f in order]
        m = row_major_matrix(dims, [], axes, [dn.kernel_output_feature])
        if m is not None:
            return order, m
    return orders[0], None


def conv_gemm(conv: HloInstruction, out_type: ElementType | None = None) -> ConvGemm | None:
    """The tiled GEMM of convolution `conv` whose kernel writes an output of `out_type` (None:
    the convolution's own type), or None when the GEMM kernel cannot run it as it stands:
    grouped, not f32/f64 throughout, empty, over BLAS's int32 sizes, a tile over the scratch
    budget (SCRATCH_BYTES), or weights BLAS cannot read in place (`_weights`: plan_conv_gemm
    packs them)."""
    geo = conv_geometry(conv)
    et = _gemm_types(conv)
    if geo is None or et is None or geo.groups != 1:
        return None
    order, w = _weights(conv)
    taps: tuple[int, ...] = ()
    if w is None and PER_TAP_WEIGHTS:
        order, w, taps = _tap_weights(conv)
    k = geo.group_inputs * math.prod(d.size for d in geo.window)
    positions = math.prod(geo.out_spatial)
    if w is None or min(k, geo.features, geo.batch * positions) <= 0 or max(k, geo.features) > INT32_MAX:
        return None
    itemsize = element_type(et).bits // 8
    dn = dimension_numbers(conv)
    od, xd = tuple(conv.shape.dims), tuple(conv.operands[0].shape.dims)
    direct = None
    if all(d.size == 1 and d.stride == 1 and d.padding_low == d.padding_high == 0 and d.base_dilation == 1
           for d in geo.window) and geo.dilated_input == geo.out_spatial:
        direct = (row_major_matrix(xd, [], [dn.input_batch, *dn.input_spatial], [dn.input_feature]),
                  row_major_matrix(xd, [dn.input_batch], list(dn.input_spatial), [dn.input_feature]))
    c_all = row_major_matrix(od, [], [dn.output_batch, *dn.output_spatial], [dn.output_feature])
    c_one = row_major_matrix(od, [dn.output_batch], list(dn.output_spatial), [dn.output_feature])
    # Rows (positions, batch element) when only that order collapses (`01bf`, weight gradients:
    # a few positions per batch element, too few rows for tiles within each); patches always.
    c_pos = (row_major_matrix(od, [], [*dn.output_spatial, dn.output_batch], [dn.output_feature])
             if BATCH_MINOR_ROWS and c_all is None and direct is None and dn.output_spatial else None)
    if out_type is not None and out_type.name != et:  # the epilogue converts: C cannot be the output
        c_all = c_one = c_pos = None
    batch_minor = c_pos is not None
    span = batch_minor or ((c_all is not None or c_one is None) and (direct is None or direct[0] is not None))
    x = None if direct is None else direct[0 if span else 1]
    c = c_pos if batch_minor else c_all if span else c_one
    if direct is not None and x is None:  # the input does not collapse: pack it
        direct = None
    tile = tile_rows(k, itemsize)
    per_row = ((0 if x is not None else k) + (0 if c is not None else geo.features)) * itemsize
    if tile * per_row > SCRATCH_BYTES:
        tile = SCRATCH_BYTES // per_row
        tile -= tile % 8
        if tile < MIN_TILE_ROWS:
            return None
    rows = geo.batch * positions if span else positions
    if (span or geo.batch == 1) and columns_first(rows, tile, geo.features, k, et):
        tile, row_units = -(-rows // 8) * 8, 1  # all rows in one tile, cut into column panels
    else:
        tile = split_tile(rows, tile)
        row_units = -(-rows // tile) * (1 if span else geo.batch)
    cols = panel_cols(row_units, min(tile, rows), geo.features, k, et)
    return ConvGemm(geo, order, k, positions, tile, cols, span, w, x, c, batch_minor, taps)


# Whether weights that are no [K, O] matrix run as one GEMM per window tap (`_tap_weights`)
# rather than being packed by a loop kernel first (`_packed_layout`); False for A/B.
PER_TAP_WEIGHTS = True


def _tap_weights(conv: HloInstruction) -> tuple[tuple[int, ...], Matrix | None, tuple[int, ...]]:
    """(K order (window..., IN), tap 0's [I, O] block of the weights, each tap's element offset
    in K's order, a reversed window dimension counted from its end) of convolution `conv`;
    (order, None, ()) when the block is no strided matrix."""
    dn = dimension_numbers(conv)
    dims = tuple(conv.operands[1].shape.dims)
    strides = row_major_strides(dims)
    nsp = len(dn.kernel_spatial)
    order = tuple(range(nsp)) + (IN,)
    m = row_major_matrix(dims, [], [dn.kernel_input_feature], [dn.kernel_output_feature])
    if m is None or not nsp:
        return order, None, ()
    window = conv.attrs.get("window")
    reversed_ = [bool(window is not None and window.dimensions[f].window_reversal) for f in range(nsp)]
    offsets = []
    for tap in itertools.product(*(range(dims[a]) for a in dn.kernel_spatial)):
        offsets.append(sum((dims[a] - 1 - t if rev else t) * strides[a]
                           for t, a, rev in zip(tap, dn.kernel_spatial, reversed_)))
    return order, m, tuple(offsets)


# Whether an output whose rows collapse only position-major (`01bf`: jax's weight gradients)
# runs as GEMM tiles over those rows (`ConvGemm.batch_minor`); False leaves such convolutions to
# the direct kernel, as before (for A/B measurements).
BATCH_MINOR_ROWS = True

# Whether a convolution that one tile holds and with more output features than rows is cut
# into column panels instead of row tiles (`columns_first`); False restores the row tiles
# (the A/B of benchmarks/conv_classes.py --rows-first).
COLUMNS_FIRST = True


def columns_first(rows: int, most: int, features: int, k: int, dtype: str) -> bool:
    """Whether `rows` rows (at most `most`, one tile) times `features` output features with
    contraction `k` are cut into column panels rather than row tiles: when there are more
    output features than rows and the cut gives panels (`panel_cols`). Every unit's BLAS call
    packs all of its [K, cols] weights and its [rows, K] patches: with row tiles each unit packs
    the whole K x features weights, with column panels only its share of them and the whole
    patch tile, which is the smaller of the two exactly when features > rows. keras ResNet-50's
    conv4_x 1x1 convolutions to 1024 features over 256 rows (4 images of 8x8) are this class,
    its 512 -> 1024 stride-2 one packing 2 MB of weights in each row tile's call
    (docs/convolutions.md, "Column panels before row tiles")."""
    return (COLUMNS_FIRST and rows <= most and features > rows
            and panel_cols(1, rows, features, k, dtype) < features)


def valid_tap_fraction(geo: ConvGeometry) -> float:
    """The fraction of window taps that read an input element (not padding, not a hole between
    lhs-dilated elements), over all output positions: the GEMM multiplies the others' zeros,
    the direct kernel skips them."""
    fraction = 1.0
    for d, size, limit in zip(geo.window, geo.out_spatial, geo.dilated_input):
        if size == 0 or d.size == 0:
            continue
        valid = 0
        for p in range(size):
            for k in range(d.size):
                q = p * d.stride + k * d.window_dilation - d.padding_low
                valid += 0 <= q < limit and q % d.base_dilation == 0
        fraction *= valid / (size * d.size)
    return fraction


# Output features from which the GEMM kernel runs a dense convolution whose weights the direct
# kernel reads at unit stride, per GEMM library (docs/convolutions.md). oneDNN's sgemm: the
# direct kernel keeps POSITION_BLOCK x O accumulators, and from 112 f32 features on (28 of the
# 32 AVX-512 registers, plus the weights) they spill: GEMM took 0.23-0.68x its CPU time on every
# such convolution measured, at 96 features 0.90-1.02x, at 64 0.84-1.17x. OpenBLAS (f64, and
# f32 under HLOFUSE_GEMM=openblas), half oneDNN's speed here: 256, as measured before oneDNN.
MIN_GEMM_FEATURES = {"onednn": 112, "openblas": 256}
# With oneDNN's sgemm, from 96 output features GEMM also takes a convolution whose contraction
# (taps x input features) is at least MIN_DEEP_K: 4 x 96 accumulators are 24 of the 32 AVX-512
# registers, which with a term's 6 weight vectors and its inputs leave none to spare. In
# MobileNetV2 (one thread, least step times of 31 profiled runs): 1x1 10x10 384 -> 96 and
# 576 -> 96 GEMM 0.64-0.70x the direct kernel's time, 192 -> 96 at 28x28 0.90-1.02x; but 1x1
# 80x80 16 -> 96 (K = 16) 1.42-1.49x, where GEMM's packing and short K loop do not pay.
MIN_DEEP_GEMM_FEATURES = {"onednn": 96}
MIN_DEEP_K = 128
# Weight gradients (rows `batch_minor`: a few output positions per batch element, the
# contraction the forward's batch x positions) from this many output features with a
# contraction of MIN_DEEP_K or more: haiku ResNet-18's 64-feature ones (one thread, CPU time)
# took 0.86x the direct kernel's time as GEMM (16x16 window, K = 4096) and 0.46x (the stem's,
# 32x32 window dilated by 2, K = 16384). Fewer features are not measured.
MIN_WEIGHT_GRAD_FEATURES = 64
# The share of window taps on input elements below which the direct kernel, which skips the
# padding's taps, keeps the convolution (GEMM multiplies their zeros). OpenBLAS: as fast at 0.69
# and faster at 0.44. oneDNN: GEMM took 0.42-0.44x the time at 0.44 and 0.56; its work grows as
# 1 / share, so it stays ahead down to about 0.2 (extrapolated, not measured below 0.44).
MIN_VALID_TAPS = {"onednn": 0.25, "openblas": 0.75}


def prefers_gemm(conv: HloInstruction) -> bool:
    """The rule (docs/convolutions.md: measured per shape class, never timed at run time): a
    dense f32/f64 convolution with at least 8 output features runs as tiled GEMMs where the
    direct kernel is weak:
      * weights whose output features are not contiguous (jax's input gradients, `01oi`; NCHW
        convolutions' `oi01`, their weight gradients' `io01`: the direct kernel's inner loop
        reads them strided; GEMM 2.5-14x faster, NCHW stems of 1-4 input features 0.24-0.76x
        the direct kernel's time), in tiles of MIN_STRIDED_TILE_ROWS rows or more, or,
    with at least 8 input features and tiles of MIN_TILE_ROWS rows or more,
      * MIN_GEMM_FEATURES or more output features for the GEMM library that would run it
        (runtime/gemm_provider.py, decided at compile time like the kernel's call), or
        MIN_DEEP_GEMM_FEATURES with a contraction of MIN_DEEP_K or more: the direct kernel's
        accumulators leave the registers, or, for weight gradients (`ConvGemm.batch_minor`
        rows), MIN_WEIGHT_GRAD_FEATURES with such a contraction; with at least
        MIN_VALID_TAPS of the taps on input elements;
    the others (fewer output features: the direct kernel as fast or faster), and depthwise and
    grouped convolutions, keep the direct kernel."""
    layout = gemm_layout(conv)
    if layout is None:
        return False
    geo = conv_geometry(conv)  # the convolution's own (the layout's may have packed weights)
    strided = geo.w_out != 1
    if geo.features < 8 or (geo.group_inputs < 8 and not strided):
        return False
    rows = layout.rows if layout.span_batch else layout.positions
    if rows < (MIN_STRIDED_TILE_ROWS if strided else MIN_TILE_ROWS):
        return False
    if strided:
        return True
    provider = gemm_provider(geo.acc_type.name)
    k = geo.group_inputs * math.prod(d.size for d in geo.window)
    wide = geo.features >= MIN_GEMM_FEATURES[provider] or (
        geo.features >= MIN_DEEP_GEMM_FEATURES.get(provider, MIN_GEMM_FEATURES[provider]) and k >= MIN_DEEP_K) or (
        layout.batch_minor and geo.features >= MIN_WEIGHT_GRAD_FEATURES and k >= MIN_DEEP_K)
    return wide and valid_tap_fraction(geo) >= MIN_VALID_TAPS[provider]


def gemm_layout(conv: HloInstruction) -> ConvGemm | None:
    """The tiled GEMM the GEMM kernels would run convolution `conv` with, its weights packed
    first where they need it (None: the GEMM kernels cannot run it)."""
    return conv_gemm(conv) or _packed_layout(conv)


def _needs_packing(conv: HloInstruction) -> bool:
    """Whether `conv` is dense f32/f64 with weights BLAS cannot read in place (`_weights`), so
    the GEMM kernel can run it only after a loop kernel packs them."""
    geo = conv_geometry(conv)
    return geo is not None and geo.groups == 1 and _gemm_types(conv) is not None and _weights(conv)[1] is None


def _packed_layout(conv: HloInstruction) -> ConvGemm | None:
    """The GEMM layout `conv` has once its weights are packed (None: the GEMM kernel cannot run
    it even then)."""
    if not _needs_packing(conv):
        return None
    comp = HloComputation("probe")
    x = comp.add_instruction(HloInstruction("parameter", conv.operands[0].shape, name="x"))
    x.parameter_number = 0
    w = comp.add_instruction(HloInstruction("parameter", conv.operands[1].shape, name="w"))
    w.parameter_number = 1
    comp.root = comp.add_instruction(conv.clone(operands=[x, w]))
    packed = _packed_weights_comp(comp, comp.root, "probe.packw").root.shape
    return conv_gemm(find_convolution(_with_packed_weights(comp, comp.root, packed, "probe.gemm")))


# ---- planning ------------------------------------------------------------------------------------

def _packed_weights_comp(comp: HloComputation, conv: HloInstruction, name: str) -> HloComputation:
    """A computation of `comp`'s parameters computing the weights of `conv` in `_packed_order`,
    window reversal applied."""
    dn = dimension_numbers(conv)
    w = conv.operands[1]
    sub = rebuild(comp, w, [], name)
    x = sub.root
    window = conv.attrs.get("window")
    rev = [dn.kernel_spatial[s] for s, d in enumerate(window.dimensions if window else ()) if d.window_reversal]
    if rev:
        x = sub.add_instruction(HloInstruction("reverse", x.shape, [x], {"dimensions": tuple(rev)}, name="pack.rev"))
    order = _packed_order(conv)
    dims = [w.shape.dims[d] for d in order]
    sub.root = sub.add_instruction(HloInstruction("transpose", array(w.shape.dtype, dims), [x],
                                                  {"dimensions": tuple(order)}, name="pack"))
    return sub


def _with_packed_weights(comp: HloComputation, conv: HloInstruction, packed, name: str) -> HloComputation:
    """`comp` with `conv` reading its weights from a new parameter (numbered after comp's) of
    shape `packed` in `_packed_order` (`01..io` labels, or `i01..o`); no window reversal."""
    new = rebuild(comp, comp.root, [], name)
    conv_new = next(i for i in new.instructions if i.opcode == "convolution")
    q = HloInstruction("parameter", packed, name="packed_weights")
    q.parameter_number = len(comp.parameters)
    q = new.add_instruction(q)
    old = conv_new
    dn = dimension_numbers(conv)
    at = {d: k for k, d in enumerate(_packed_order(conv))}  # a weights dimension's packed place
    dn = dataclasses.replace(dn, kernel_spatial=tuple(at[d] for d in dn.kernel_spatial),
                             kernel_input_feature=at[dn.kernel_input_feature],
                             kernel_output_feature=at[dn.kernel_output_feature])
    attrs = dict(old.attrs)
    attrs["dim_labels"] = dn.to_labels() if isinstance(old.attrs.get("dim_labels"), str) else dn
    window = attrs.get("window")
    if window is not None:
        attrs["window"] = dataclasses.replace(window, dimensions=tuple(
            dataclasses.replace(d, window_reversal=False) for d in window.dimensions))
    fresh = new.add_instruction(HloInstruction("convolution", old.shape, [old.operands[0], q], attrs, name=old.name))
    old.replace_all_uses_with(fresh)
    if new.root is old:
        new.root = fresh
    new.remove_instruction(old)
    return new


def plan_conv_gemm(comp: HloComputation, name: str):
    """(kernels, temporaries) computing `comp` (a convolution of parameters, perhaps with its
    elementwise epilogue) as GEMM kernels: a weight packing loop kernel first when the weights
    need it; None when the GEMM kernel cannot run the convolution."""
    conv = find_convolution(comp)
    if conv is None:
        return None
    out_type = output_leaves(comp)[0].shape.dtype
    layout = conv_gemm(conv, out_type)
    if layout is not None:
        return [_gemm_plan(comp, layout, [("in", i) for i in range(len(comp.parameters))], name)], []
    if not _needs_packing(conv):
        return None  # not for want of plain weights: the GEMM kernel cannot run it
    sub = _packed_weights_comp(comp, conv, f"{comp.name}.packw")
    kernels, temps = plan_fusion(sub, f"{name}_packw")
    slot = len(temps)
    for k in kernels:
        k.results = [("tmp", slot) if kind == "out" else (kind, i) for kind, i in k.results]
    temps.append(sub.root.shape)
    gcomp = _with_packed_weights(comp, conv, sub.root.shape, f"{comp.name}.gemm")
    layout = conv_gemm(find_convolution(gcomp), out_type)
    if layout is None:
        return None
    inputs = [("in", i) for i in range(len(comp.parameters))] + [("tmp", slot)]
    return kernels + [_gemm_plan(gcomp, layout, inputs, name)], temps


def _gemm_plan(comp: HloComputation, layout: ConvGemm, inputs: list, name: str) -> KernelPlan:
    work = layout.tile * layout.k * layout.cols
    return KernelPlan(comp, [0], layout.units, work, None, inputs=inputs, results=[("out", 0)],
                      name=f"{name}_convgemm", custom="conv_gemm")


def plan_convolution(comp: HloComputation, name: str):
    """The kernels of `comp` (a convolution of parameters, perhaps with its epilogue), or None:
    a oneDNN primitive when `prefers_onednn` (cpu_conv_onednn.py), else GEMM kernels when
    `prefers_gemm` and the GEMM kernel runs it, else the direct kernel."""
    conv = find_convolution(comp)
    if conv is None:
        return None
    if prefers_onednn(comp):
        plans = plan_onednn_conv(comp, name)
        if plans is not None:
            return plans
    if prefers_gemm(conv):
        plans = plan_conv_gemm(comp, name)
        if plans is not None:
            return plans
    return plan_conv(comp, name)
