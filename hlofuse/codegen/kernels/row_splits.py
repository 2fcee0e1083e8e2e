"""Where a loop kernel's row changes which operand a concatenate or a pad reads: the row loop
is then emitted as one loop per piece, so that each piece reads its operands at affine indices.

A concatenate's element generator (emitters/elemental_data.py) is a select between its
operands, each read at an index clamped into its bounds; a pad's is a select between its
operand, read at a clamped index, and the padding value. Branch-free, so a row loop over them
stays one loop, but the clamped index of each read is no affine function of the column: LLVM's
loop vectorizer can read it only with gathers, and where it judges those dearer than scalar
code it leaves the loop scalar. So it did for the rotary position embedding of every Llama-style
attention (keras_hub's Llama and Gemma: `concatenate(-x[..., 32:], x[..., :32])`, the angles'
`concatenate(t, t)` under a reshape, cos and sin of them): each of its four kernels over
f32[4,256,8,64] ran scalar, 8.6 ms against 1.1 ms for the same multiply of a cosine without the
concatenates (one thread). Within one piece of the row [lo, hi) every such select takes the
same side, and LLVM, knowing the loop's bounds, folds the select and the clamps away: the reads
are contiguous again and the loop vectorizes.

`row_walk(comp, roots, dims)` finds the pieces by following the output's index through the
fused computation numerically (kernels/index_probe.py: numpy index arrays over the row, for a
few sample rows) to every concatenate and pad, where the side taken at each column is
recorded; a change of side between two neighbouring columns of a sample row is a cut. A row is split only into pieces of at least
MIN_PIECE elements and at most MAX_PIECES of them (each piece is one more copy of the element's
code for LLVM to compile). Where the side changes at every column but repeats with a short
period P (an interleaving concatenate: Gemma's rotary embedding stacks its two halves along a
last dimension of 2, `stack([x1, x2], -1)`, so the sides alternate), the row is walked P
elements an iteration instead, each of the P emitted with its own column: within it every
select takes one side, and LLVM vectorizes the loop over groups with interleaved accesses
(that kernel of keras_hub's Gemma, f32[4,256,4,128]: 2.5 -> 1.0 ms, one thread).

The cuts are only a choice of loop bounds: every piece still computes every element with the
full generators, so a cut missed or one too many changes the speed, never the values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...hlo.ir import HloComputation, HloInstruction
from .index_probe import delinearize_array, follow_index

# At most this many pieces per row (the element's code is emitted once per piece) ...
MAX_PIECES = 4
# ... each at least this long (a shorter one would not fill the vectors it is split for).
MIN_PIECE = 16
# ... or, where the side repeats along the row, a period of at most this many elements.
MAX_PERIOD = 4
# Rows longer than this are walked whole (the probe holds a row's indices per sample row).
MAX_ROW = 1 << 16
# Sample rows followed (the first, the second, one in the middle, the last): the cuts are those
# of any of them.
SAMPLE_ROWS = 4
# Whether loop kernels split their rows (a switch for A/B measurements).
ROW_SPLITS = True


def _sample_rows(rows: int) -> np.ndarray:
    picks = sorted({0, min(1, rows - 1), rows // 2, rows - 1})
    return np.asarray(picks[:SAMPLE_ROWS], dtype=np.int64)


def _cuts_of(side: np.ndarray, valid: np.ndarray) -> set[int]:
    """Columns j where `side` differs from column j - 1 in some sample row (both valid)."""
    change = (side[:, 1:] != side[:, :-1]) & valid[:, 1:] & valid[:, :-1]
    return {int(j) + 1 for j in np.nonzero(change.any(axis=0))[0]}


def _periodic(side: np.ndarray, valid: np.ndarray, period: int) -> bool:
    """Whether `side` takes, at every column j, the value it takes at column j mod `period`
    (of the same sample row, where valid)."""
    rows, n = side.shape
    s = side.reshape(rows, n // period, period)
    v = valid.reshape(rows, n // period, period)
    first = np.where(v, s, np.iinfo(np.int64).min).max(axis=1, keepdims=True)  # a valid value per residue
    return bool(np.all(~v | (s == first)))


@dataclass(frozen=True)
class RowWalk:
    """How a row of a loop kernel is walked: `pieces`, one loop each, in order; within each,
    elements one at a time (`period` 1) or `period` at a time, the loop running over groups of
    `period` consecutive elements with each group's elements emitted one after another (an
    interleaving concatenate, such as a stack along a last dimension of 2, takes the same side
    at every element of a residue class: LLVM then vectorizes the loop over groups with
    interleaved accesses)."""

    pieces: tuple[tuple[int, int], ...]
    period: int = 1

    @property
    def shortest(self) -> int:
        """Iterations of the shortest piece's loop."""
        return min(hi - lo for lo, hi in self.pieces) // self.period


def row_walk(comp: HloComputation, roots: list[HloInstruction], dims: tuple[int, ...]) -> RowWalk:
    """How a loop kernel over output `dims` (rows mode: its last dimension is the row) writing
    `roots` (instructions of `comp`) walks each row: the whole row one element at a time,
    unless some concatenate or pad changes side along it (the module's doc): then in pieces
    where the side changes at a few columns, or `period` elements at a time where it repeats
    with a period of at most MAX_PERIOD."""
    n = dims[-1] if dims else 0
    whole = RowWalk(((0, n),))
    if not ROW_SPLITS or len(dims) < 2 or not 2 * MIN_PIECE <= n <= MAX_ROW:
        return whole
    rows = _sample_rows(math.prod(dims[:-1]))
    outer = delinearize_array(rows, tuple(dims[:-1])) if rows.size else []
    cols = np.arange(n, dtype=np.int64)
    start = [np.broadcast_to(v[:, None], (rows.size, n)) for v in outer] + [np.broadcast_to(cols, (rows.size, n))]
    valid = np.ones((rows.size, n), dtype=bool)
    sides: list = []
    follow_index(roots, tuple(dims), start, valid, sides)
    cuts: set[int] = set()
    for side, ok in sides:
        cuts |= _cuts_of(side, ok)
    bounds = sorted(c for c in cuts if 0 < c < n)
    if not bounds:
        return whole
    edges = [0, *bounds, n]
    pieces = tuple(zip(edges[:-1], edges[1:]))
    if len(pieces) <= MAX_PIECES and all(hi - lo >= MIN_PIECE for lo, hi in pieces):
        return RowWalk(pieces)
    for period in range(2, MAX_PERIOD + 1):
        if n % period == 0 and n // period >= MIN_PIECE and all(_periodic(side, ok, period) for side, ok in sides):
            return RowWalk(((0, n),), period)
    return whole
