"""How a GEMM kernel's work is cut into work units: batch elements x row panels x column panels.

The runtime's threads (codegen/driver.py, libgomp) take a kernel's units in chunks; a unit is
always computed whole, by one thread, with one BLAS call and its epilogue. The cut is chosen
here from the dot's shape alone, by the rule below, never from the thread count or a timing:
BLAS's rounding of an element may depend on its place in the register tile, so a cut that
followed the thread count could change low bits between machines; this one cannot.

The rule (`gemm_partition`):

1. Row panels, as measured before column panels existed: a whole matrix per unit for
   WHOLE_MATRIX_BATCH or more batch elements or <= MIN_PANEL_ROWS rows, otherwise at most
   MAX_PANELS panels of >= MIN_PANEL_ROWS rows. Each unit's BLAS call packs its columns of the
   rhs again, so rows are cut only while a panel stays tall.
2. Column panels for short matrices: a dot whose batch and row panels give fewer than
   MAX_PANELS units (an LSTM step's [32, 768] x [768, 2048], a decode step's dots, a few small
   batched dots) would otherwise run on one or two threads. Its columns are cut into enough
   panels for TARGET_UNITS units in all, but never so narrow that a panel is under
   MIN_PANEL_COLS columns (each unit packs its rows of the lhs again) nor so small that a unit
   has under min_unit_multiply_adds multiply-adds: one thread's minimum share in the driver's
   thread rule (codegen/region_cost.py, a parallel region's wake-up cost in BLAS work), which
   would not give a smaller unit a thread of its own; a dot under it stays whole. Panel widths are whole multiples of
   COLUMN_GRANULE_BYTES of the GEMM's element type, so every panel but the last starts on a
   whole register tile of BLAS's kernels (OpenBLAS's sgemm tiles are 16 wide, dgemm's 4-16,
   cgemm's 8, zgemm's 4) and on a cache line. A short matrix gains most from the cut (nothing
   else splits it) and pays least (the lhs rows each unit packs again are few); a taller one
   keeps rule 1's units: cutting its columns as well cost 2-17% on one thread, as each unit
   packs a tall lhs panel again (OPENBLAS_CORETYPE=Haswell, load ~4-5, interleaved medians:
   [512,2048]x[2048,512] 9.6 -> 10.1 ms, 2048^3 208 -> 217 ms with 16 units instead of 4).

Units are numbered batch element, then row panel, then column panel, so the consecutive units
one thread takes share their lhs panel.

The same units serve oneDNN's sgemm (f32, runtime/gemm_provider.py): each unit's call runs on
its thread alone (blas_call.GemmCall keeps oneDNN from starting a team of its own). Measured
against one whole-GEMM call on oneDNN's own team of two threads, per shape class (square,
tall-skinny, short-wide, batched attention: docs/dots.md), these units were as fast within the
noise, and they keep the bits independent of the thread count.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...hlo.dtypes import element_type
from ..region_cost import min_multiply_adds_per_thread, multiply_add_ns
from .gemm_layout import DotDims

# Rows of the lhs per work unit. A unit's BLAS call packs its rhs columns again, which costs
# K*N copies against 2*rows*K*N flops, so panels stay at least MIN_PANEL_ROWS high; a single
# matrix is cut into at most MAX_PANELS row panels, and batched dots with several batch
# elements take whole matrices per unit. Measured on 2048^3 (one thread, load ~10 on 2 cores):
# 2 or 4 panels 504 ms, 8 panels 556 ms, 16 panels 606 ms.
MIN_PANEL_ROWS = 64
MAX_PANELS = 4
WHOLE_MATRIX_BATCH = 4
# A short matrix's columns are cut until the GEMM has this many units: the driver cuts a
# kernel's units into CHUNKS_PER_THREAD (4) chunks per thread, so 16 units keep 4 threads
# balanced, or 16 threads one unit each, without tying the cut to this machine's thread count.
TARGET_UNITS = 16
# A column panel is at least this many columns wide (the unit's BLAS call packs its lhs panel
# again: one copy per MIN_PANEL_COLS multiply-adds at worst) ...
MIN_PANEL_COLS = 64
# ... and a whole number of 128-byte granules of the GEMM's type: 32 f32, 16 f64 or c64, 8 c128.
COLUMN_GRANULE_BYTES = 128
# No column cut makes a unit smaller than one thread's minimum share in the driver's thread rule
# (codegen/region_cost.py: REGION_NS of BLAS multiply-adds, 4.8 M of f32's; `min_unit_multiply_adds`
# scales it to the GEMM's type by the cost of its multiply-add there): a smaller unit would never
# be given a thread of its own, and its extra BLAS call (packing its lhs rows again) would be
# pure cost. scan_rnn's step dot ([128,128] x [128,256], 4.2 M multiply-adds) took 41 us cut
# into 8 units on two threads and 38 us whole on one (idle machine).
MIN_UNIT_MULTIPLY_ADDS = min_multiply_adds_per_thread("f32")


def min_unit_multiply_adds(dtype: str) -> int:
    """The fewest multiply-adds of a column-cut unit of a GEMM in BLAS type `dtype`:
    MIN_UNIT_MULTIPLY_ADDS (f32's) times f32's multiply-add cost over `dtype`'s."""
    return max(1, int(MIN_UNIT_MULTIPLY_ADDS * multiply_add_ns("f32") / multiply_add_ns(dtype)))


def panel_rows(dd: DotDims) -> int:
    """Rows of the lhs per work unit (rule 1 of the module docstring)."""
    if dd.batch >= WHOLE_MATRIX_BATCH or dd.m <= MIN_PANEL_ROWS:
        return max(dd.m, 1)
    return max(MIN_PANEL_ROWS, -(-dd.m // MAX_PANELS))


def column_granule(dtype: str) -> int:
    """Columns per COLUMN_GRANULE_BYTES of GEMM element type `dtype` (f32, f64, c64, c128)."""
    return max(1, COLUMN_GRANULE_BYTES // element_type(dtype).byte_size)


@dataclass(frozen=True)
class GemmPartition:
    """The work units of a GEMM kernel: `batch` elements x `row_panels` panels of `rows` lhs
    rows x `col_panels` panels of `cols` rhs columns (the last row and column panel may be
    partial); unit u is (batch element, row panel, column panel) in that nesting order."""

    batch: int
    m: int
    n: int
    k: int
    rows: int
    cols: int

    @property
    def row_panels(self) -> int:
        """Row panels per batch element."""
        return -(-self.m // self.rows)

    @property
    def col_panels(self) -> int:
        """Column panels per row panel."""
        return -(-self.n // self.cols)

    @property
    def units(self) -> int:
        """Work units in all."""
        return self.batch * self.row_panels * self.col_panels

    @property
    def unit_multiply_adds(self) -> int:
        """Multiply-adds of a full unit (rows x cols x K)."""
        return self.rows * self.cols * self.k

    @property
    def unit_elements(self) -> int:
        """The `unit_elements` the driver's thread rule reads for one unit: its multiply-adds
        (codegen/region_cost.py costs a GEMM kernel's work per multiply-add)."""
        return max(1, self.unit_multiply_adds)


def panel_cols(dd: DotDims, rows: int, dtype: str) -> int:
    """Columns of the rhs per work unit when row panels are `rows` high (rule 2 of the module
    docstring): N itself unless the batch and row panels give fewer than MAX_PANELS units and
    cutting the columns adds units toward TARGET_UNITS while each panel keeps MIN_PANEL_COLS
    columns and each unit min_unit_multiply_adds(dtype) multiply-adds."""
    n = max(dd.n, 1)
    have = dd.batch * -(-max(dd.m, 1) // rows)
    if have >= MAX_PANELS:  # tall enough (or batched enough): the row cut's units stand
        return n
    wanted = -(-TARGET_UNITS // have)
    by_width = n // MIN_PANEL_COLS
    by_work = rows * n * dd.k // min_unit_multiply_adds(dtype)
    panels = min(wanted, by_width, by_work)
    if panels < 2:
        return n
    granule = column_granule(dtype)
    cols = -(-n // panels)
    cols = -(-cols // granule) * granule  # round the width up to whole granules
    return min(n, max(cols, MIN_PANEL_COLS))


def gemm_partition(dd: DotDims, dtype: str) -> GemmPartition:
    """The work units of a GEMM of sizes `dd` computed in BLAS type `dtype`, from the shape
    alone (see the module docstring)."""
    rows = panel_rows(dd)
    return GemmPartition(dd.batch, dd.m, dd.n, dd.k, rows, panel_cols(dd, rows, dtype))
