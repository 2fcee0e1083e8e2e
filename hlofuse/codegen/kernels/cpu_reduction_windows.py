"""Column sums in windows of rows, as XLA:CPU's tree (cpu_reduction.py's column kernels).

A column kernel folds each column's rows in order into an accumulator of its block. A float sum
over many rows so folded loses accuracy as the sum grows: over f32[16384,64] its mean error was
1.25 ulps of the result against XLA:CPU's 0.42, over the 65,536 rows of batch-norm statistics
2.82 against 0.19, and a training step's bias and batch-norm gradients had 5-25x XLA's error
against the same program in f64 (docs/emitters.md, "Column sums' accuracy"). XLA:CPU sums
windows of 32 rows, then windows of 32 of those, and so on (its TreeReductionRewriter).

With windows, the block sums WINDOW rows (counted from the unit's first row: a split's slice
starts its own count), then adds itself into a first level row of partial sums and starts
again from the init value; every WINDOW of those the first level adds into a second, and so
on; at the end the levels and the block are added, the highest level first. Every column is
still folded in its rows' order, by the same adds in every path of the kernel (the plain
loops, the row tiles): they give the same bits. The levels rows live on the stack, one
column's worth of each level per column of the block.

Only f32 and f64 sums are windowed (narrower floats follow XLA's own tree, planning.py's
rewrite). The block starts a unit from the init value, every later window and every level row
from -0, the sum's identity (x + -0 is x for every x, zeros and NaNs included): the init joins
once, as in the sequential fold and the interpreter (XLA:CPU starts each window from the init
and so adds an init that is not 0 once per window).
"""
from __future__ import annotations

from llvmlite import ir

from ...emitters.elemental import mem_type
from ...emitters.ir_helpers import const_i64, for_range, load_element, store_element
from .cpu_reduction_rotated import line_aligned
from ...hlo.reducers import binary_reducer_opcode

# Rows a window folds before its level's row of partial sums takes it (XLA:CPU's 32).
WINDOW = 32
# Whether column sums fold in windows (`window_levels`); False folds each column's rows in one
# sequence, as before (for A/B measurements).
SUMS_IN_WINDOWS = True
# A block of at most this many slots is moved up as straight-line code (`Windows._add_into`).
STRAIGHT_SLOTS = 64


def _windowed_sum(hero) -> bool:
    """Whether reduce hero `hero` is an f32 or f64 sum: one accumulator, an `add` reducer of its
    two parameters."""
    return hero.n == 1 and hero.types[0].name in ("f32", "f64") and binary_reducer_opcode(hero.comp) == "add"


def windowed_heroes(heroes) -> list:
    """The heroes of a column kernel whose folds go in windows: its f32 and f64 sums (a max or
    min beside them, whose result no order changes, keeps folding its rows in one sequence)."""
    return [h for h in heroes if _windowed_sum(h)] if SUMS_IN_WINDOWS else []


def window_levels(heroes, rows: int) -> int:
    """Levels of partial sums above the block for a unit folding `rows` rows: 0 (no windows)
    unless some hero is a windowed sum (`windowed_heroes`) and the rows exceed a window; else
    the levels a tree of WINDOW-row windows needs below its last sum."""
    if rows <= WINDOW or not windowed_heroes(heroes):
        return 0
    levels, span = 0, WINDOW
    while span < rows:
        levels += 1
        span *= WINDOW
    return levels


class Windows:
    """The level rows of one column kernel (`levels` of them, `width` columns each) and the code
    that moves the block's sums up them (module docstring), for its `windowed_heroes`."""

    def __init__(self, b: ir.IRBuilder, em, heroes, width: int, levels: int) -> None:
        heroes = windowed_heroes(heroes)
        self.b, self.em, self.heroes, self.levels = b, em, heroes, levels
        with b.goto_entry_block():
            self.rows = [{h: [line_aligned(b.alloca(mem_type(et), size=width)) for et in h.types] for h in heroes}
                         for _ in range(levels)]
            self.count = b.alloca(ir.IntType(64), name="window.rows")

    def _identity(self, et) -> ir.Constant:
        return ir.Constant(mem_type(et), -0.0)

    def start(self, lo: ir.Value, hi: ir.Value) -> None:
        """A unit's start: slots [lo, hi) of every level hold -0, no row folded yet (the block
        holds the inits)."""
        b = self.b
        b.store(const_i64(0), self.count)
        with for_range(b, lo, hi, "wlinit", unroll=False) as j:
            for level in self.rows:
                for h in self.heroes:
                    for p, et in zip(level[h], h.types):
                        store_element(b, self._identity(et), b.gep(p, [j], inbounds=True), et)

    def row_done(self, block: dict, lo: ir.Value, hi: ir.Value, n: ir.Value | None = None,
                 count: int | None = None) -> None:
        """After a row's fold into slots [lo, hi) of `block` (`count` of them, where known when
        emitting): count the row (or take `n`, the rows folded so far) and, at the end of a
        window, move the sums a level up."""
        b = self.b
        if n is None:
            n = b.add(b.load(self.count), const_i64(1), flags=["nuw", "nsw"])
            b.store(n, self.count)
        self._up(0, block, n, lo, hi, WINDOW, count)

    def _up(self, level: int, below: dict, n: ir.Value, lo, hi, span: int, count: int | None) -> None:
        """Where `n` rows complete a window of `span` rows: add `below` into level row `level`
        (slots [lo, hi)), reset `below` to -0, then the same a level higher."""
        b = self.b
        full = b.icmp_unsigned("==", b.urem(n, const_i64(span)), const_i64(0))
        with b.if_then(full, likely=False):
            self._add_into(self.rows[level], below, lo, hi, count if level == 0 else None)
            if level + 1 < self.levels:
                self._up(level + 1, self.rows[level], n, lo, hi, span * WINDOW, count)

    def _add_into(self, upper: dict, lower: dict, lo, hi, count: int | None = None) -> None:
        """upper[j] = upper[j] + lower[j]; lower[j] = -0, for j in [lo, hi): a rolled loop, or
        where `count` (hi - lo, known when emitting) is at most STRAIGHT_SLOTS, straight-line
        code at lo + 0, lo + 1, ...: the block's own addresses, which LLVM keeps in registers
        across the rows (a loop over them kept it in memory: batch-norm statistics 18% slower)."""
        b = self.b
        if count is not None and count <= STRAIGHT_SLOTS:
            for c in range(count):
                self._add_slot(upper, lower, lo if c == 0 else b.add(lo, const_i64(c), flags=["nuw", "nsw"]))
            return
        with for_range(b, lo, hi, "wlup", unroll=False) as j:
            self._add_slot(upper, lower, j)

    def _add_slot(self, upper: dict, lower: dict, j) -> None:
        """upper[j] = upper[j] + lower[j]; lower[j] = -0."""
        b = self.b
        for h in self.heroes:
            ups = [b.gep(p, [j], inbounds=True) for p in upper[h]]
            downs = [b.gep(p, [j], inbounds=True) for p in lower[h]]
            accs = [load_element(b, a, et) for a, et in zip(ups, h.types)]
            parts = [load_element(b, a, et) for a, et in zip(downs, h.types)]
            for a, r, et in zip(ups, self._combine(h, accs, parts), h.types):
                store_element(b, r, a, et)
            for a, et in zip(downs, h.types):
                store_element(b, self._identity(et), a, et)

    def finish(self, block: dict, lo: ir.Value, hi: ir.Value) -> None:
        """block[j] = ((level[L-1][j] + ... ) + level[0][j]) + block[j] for j in [lo, hi): the
        unit's sums, where the rest of the kernel reads them."""
        b = self.b
        with for_range(b, lo, hi, "wlfinish", unroll=False) as j:
            for h in self.heroes:
                total = None
                for level in reversed(self.rows):
                    vals = [load_element(b, b.gep(p, [j], inbounds=True), et) for p, et in zip(level[h], h.types)]
                    total = vals if total is None else self._combine(h, total, vals)
                addrs = [b.gep(p, [j], inbounds=True) for p in block[h]]
                total = self._combine(h, total, [load_element(b, a, et) for a, et in zip(addrs, h.types)])
                for a, v, et in zip(addrs, total, h.types):
                    store_element(b, v, a, et)

    def _combine(self, h, left: list, right: list) -> list:
        res = self.em.call_scalar(h.comp, left + right, reduction=True)
        return list(res) if isinstance(res, tuple) else [res]
