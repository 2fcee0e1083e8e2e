"""Loop kernels that read a large operand transposed walk their output in tiles.

A loop kernel walks its output in row-major order (kernels/cpu_loop.py), so it writes whole
cache lines one after another. An operand read through a transpose that moves the output's last
dimension is then read across lines: neighbouring output elements of a row are a whole operand
row apart, and each operand line read serves one element before it is evicted, to be read again
for the next output row. A transpose of f32[2048, 2048] took 29 ms on one Zen 4 core (1.2 GB/s;
XLA:CPU's 2-thread call 4.8 ms), and keras_hub Gemma's attention reads its scores so.

`transposed_tiles(comp, roots, dims, element_bytes)` finds such a read: the output index is followed to every
parameter (kernels/index_probe.py: from one point of the output and its unit steps along each
dimension), giving each parameter's stride along each output dimension. A parameter of at least
MIN_OPERAND_BYTES whose stride along the output's last dimension is at least FAR elements, and
along some other output dimension `across` is one element, is read transposed. The kernel then
walks tiles (`TileWalk`): a unit is a block of `columns` consecutive output columns (one
64-byte line of the output's elements) by `rows` consecutive indices of `across`, at one index
of the other dimensions, walked `across` outside and the columns inside. A tile writes `rows`
whole output lines and reads `columns` operand lines (one per column, `rows` contiguous elements
of each): both sides move whole lines once, and a tile touches 2 x 16 pages at most (a tile
of 16 columns over all 2048 rows of a 2048 x 2048 transpose wrote one line into each of 2048
pages: 17 ms instead of 29; tiles of 128 rows: 4.3 ms). The values are unchanged: every element
is computed by the same generators, in another order."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...hlo.ir import HloComputation, HloInstruction
from .index_probe import follow_index, strides

# Whether loop kernels may walk tiles (a switch for A/B measurements and tests).
TILED = True
# Only an operand of at least this many bytes is worth tiling for (a smaller one stays in L2
# across the rows that read it).
MIN_OPERAND_BYTES = 1 << 20
# Neighbouring output columns at least this many elements apart in an operand read it across lines.
FAR = 16
# A tile's columns hold this many bytes of the output: one cache line; and it spans this many
# indices of `across` (8 operand lines of f32 per column). One thread, CPU time, medians of 9
# (load 1), a transpose of f32[2048, 2048] / Gemma's f32[4,1,256,256,4] -> [4,1,4,256,256]:
# untiled 24.4 / 3.0 ms; tiles of 16 columns by 64 rows 4.6 / 1.5, by 128 4.3 / 1.5, by 256
# 4.2 / 1.5, by 512 4.2 / 1.5; 32 columns by 128 rows 7.5 / 2.1 (numpy's transposing copy of
# the first: 24.4 ms).
TILE_BYTES = 64
TILE_ROWS = 128


@dataclass(frozen=True)
class TileWalk:
    """Tiles of a loop kernel over `dims`: `columns` consecutive columns by `rows` consecutive
    indices of dimension `across` (the last block of `across` may be shorter), at one index of
    every other dimension, with `across` walked outside the columns."""

    dims: tuple[int, ...]
    across: int
    columns: int
    rows: int = TILE_ROWS

    @property
    def row_blocks(self) -> int:
        """Blocks of `rows` along `across`."""
        return -(-self.dims[self.across] // self.rows)

    @property
    def outer_dims(self) -> tuple[int, ...]:
        """The dimensions a unit's index is divided into besides its column block."""
        last = len(self.dims) - 1
        return tuple(d for k, d in enumerate(self.dims) if k not in (self.across, last))

    @property
    def units(self) -> int:
        """Work units: one per tile."""
        return math.prod(self.outer_dims) * self.row_blocks * (self.dims[-1] // self.columns)

    @property
    def unit_elements(self) -> int:
        """Elements per tile (at most: the last block of `across` may be shorter)."""
        return min(self.rows, self.dims[self.across]) * self.columns


def transposed_tiles(comp: HloComputation, roots: list[HloInstruction], dims: tuple[int, ...],
                     element_bytes: int) -> TileWalk | None:
    """The tile walk of a loop kernel over output `dims` (elements of `element_bytes`) writing
    `roots` (instructions of `comp`) that reads a large operand transposed, or None (the module's
    doc)."""
    dims = tuple(dims)
    rank = len(dims)
    columns = max(TILE_BYTES // max(element_bytes, 1), 1)
    if not TILED or rank < 2 or dims[-1] % columns or dims[-1] < 2 * columns:
        return None
    point = np.asarray([(d - 1) // 2 for d in dims], dtype=np.int64)
    probes = [point] + [point + np.eye(rank, dtype=np.int64)[k] if dims[k] > 1 else point for k in range(rank)]
    table = np.stack(probes, axis=1)  # [rank, rank + 1]
    multi = [table[k][None, :] for k in range(rank)]
    valid = np.ones((1, rank + 1), dtype=bool)
    best, weight = None, 0
    for param, idx, ok in follow_index(roots, dims, multi, valid):
        size = param.shape.byte_size() if param.shape.is_array else 0
        if size < MIN_OPERAND_BYTES or not ok.all():
            continue
        steps = strides(param, idx)
        if steps is None or abs(int(steps[-1])) < FAR:
            continue
        across = [k for k in range(rank - 1) if dims[k] > 1 and abs(int(steps[k])) == 1]
        if across and size > weight:
            best, weight = across[-1], size
    return None if best is None else TileWalk(dims, best, columns)
