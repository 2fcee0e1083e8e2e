"""Row kernels' first level of max/min reduces folded one row ahead (kernels/cpu_row.py).

A row kernel (cpu_row.emit_row_kernel) computes, per row, one loop per level of reduces and
then the outputs. Where the first level is only max/min reduces (softmax's row max), the row
kernel folds it for row r + 1 inside a later loop of row r (`pipelines_first_level`,
`NextRowFold`), so that its chain of latency overlaps the exp work of the row before instead of
holding up the row's own exp loop. `fold_into` is the fold of one element into a reduce's
accumulators that every row loop uses.
"""
from __future__ import annotations

from llvmlite import ir

from ...emitters.elemental import ElementalEmitter
from ...emitters.ir_helpers import Index, const_i64, for_range, freeze
from ...hlo.ir import HloInstruction
from .fast_extremum import exact_needed, fast_extremum, fold_fast, magnitude_bits
from . import loop_hints
from .reduction_groups import ReduceHero
from .row_analysis import RowLayout

# Whether a row kernel whose first level is only max/min reduces folds that level one row
# ahead (`pipelines_first_level`); a switch for A/B measurements (benchmarks/row_limits.py
# --baseline hlofuse.codegen.kernels.row_ahead.PIPELINE_FIRST_LEVEL=False).
PIPELINE_FIRST_LEVEL = True
# Whether the max/min folded a row ahead folds fast (fast_extremum.py) where it can; an A/B switch.
FAST_FOLD_AHEAD = True


def _is_extremum(r: HloInstruction) -> bool:
    """Whether reduce `r` folds one float value with exactly `maximum` or `minimum` of its
    reducer's parameters: its result does not depend on the order of the fold."""
    comp = r.attrs["to_apply"]
    root = comp.root
    return (len(r.operands) == 2 and r.shape.is_array and r.shape.dtype.is_float and root is not None
            and root.opcode in ("maximum", "minimum") and len(comp.instructions) == 3
            and len(comp.parameters) == 2 and set(root.operands) == set(comp.parameters))


def pipelines_first_level(layout: RowLayout) -> bool:
    """Whether the row kernel folds its first level of reduces one row ahead: row r + 1's in
    a later loop of row r (`NextRowFold`), instead of in a loop of its own at the start of
    each row.

    Softmax's row max (llvm.maximum, NaN propagating: a chain of five dependent instructions
    per vector and accumulator) and the horizontal maximum after it are a chain of latency
    that the row's exp loop, which needs their result, waits for: in cache (one thread, CPU
    time, the marginal cost of 64 more rows of 2048 f32, load 6-7) a row kernel computing
    exp(x - max(x)) took 0.27 ns an element where the loop kernel computing exp(x) took 0.14,
    softmax 0.28-0.29. Folded a row ahead, the max is ready when its row starts (softmax 0.26,
    log-softmax 0.29 -> 0.27 in cache; from memory, f32[3072,2048], 1.97 -> 1.76 and 1.90 ->
    1.66 ms). Only for a first level of max/min reduces, whose results do not depend on the
    order of the fold: the bits are the same; with a later level (a loop that can take it)."""
    return PIPELINE_FIRST_LEVEL and len(layout.levels) >= 2 and all(_is_extremum(r) for r in layout.levels[0])


class NextRowFold:
    """The first level of reduces folded one row ahead (`pipelines_first_level`): `slots`
    hold the current row's values (the generators of those reduces read them), `ahead` the
    next row's, folded by a later loop of the current row (`fold`, between `start` and
    `advance`). The range's first row is folded before the loop over rows (`first_row`); its
    last row folds itself again (no row of another thread is read), the result unused.

    A max/min folds fast (fast_extremum.py: maxnum and a NaN tracker, where llvm.maximum
    lowers to six instructions a vector) and, in the rare row with a NaN or a zero extremum,
    again exactly (`advance`): the same bits. One thread, CPU time, load 8 (exact / fast):
    softmax f32[3072,2048] 1.63-1.79 / 1.57-1.73 ms and in cache 0.27-0.30 / 0.21-0.23 ns an
    element (three runs), log-softmax 1.57-1.88 / 1.53-1.74 ms, causal_attention 9.80 / 9.54
    ms. (Folded at the row's start, the fast max had measured slower from memory there:
    `fast_folds`.)"""

    def __init__(self, b: ir.IRBuilder, em: ElementalEmitter, heroes: list[ReduceHero], slots: dict) -> None:
        self.b, self.em, self.heroes, self.slots = b, em, heroes, slots
        self.fast = {h.inst: kind for h in heroes if FAST_FOLD_AHEAD and (kind := fast_extremum(h)) is not None}
        with b.goto_entry_block():
            self.ahead = {h.inst: [b.alloca(s.type.pointee, name="ahead") for s in slots[h.inst]] for h in heroes}
            self.largest = {r: b.alloca(ir.IntType(r.shape.dtype.bits), name="ahead.largest") for r in self.fast}
        self.index_at = None

    def _init(self, where: dict) -> None:
        for h in self.heroes:
            for s, v in zip(where[h.inst], h.init_values(self.b)):
                self.b.store(v, s)

    def first_row(self, n: int, begin: ir.Value, end: ir.Value, indexer) -> None:
        """Fold row `begin` into the current values, where the range [begin, end) has a row."""
        b = self.b
        with b.if_then(b.icmp_signed("<", begin, end)):
            self._init(self.slots)
            index_at = indexer(begin)[1]
            # Once per range of rows: kept rolled (LLVM fully unrolled its vector loop).
            with for_range(b, const_i64(0), const_i64(n), "first", unroll=not loop_hints.stays_rolled(n)) as j:
                for h in self.heroes:
                    fold_into(b, self.em, h, self.slots[h.inst], index_at(j))

    def row(self, row: ir.Value, end: ir.Value, indexer) -> None:
        """At the start of row `row`: the next row (or `row` itself, the range's last) is the
        one `fold` reads."""
        b = self.b
        nxt = b.add(row, const_i64(1), flags=["nuw", "nsw"])
        self.index_at = indexer(b.select(b.icmp_signed("<", nxt, end), nxt, row))[1]

    def start(self) -> None:
        """Before the loop that folds the next row: its accumulators get their init values."""
        self._init(self.ahead)
        for r, slot in self.largest.items():
            self.b.store(magnitude_bits(self.b, self.b.load(self.ahead[r][0])), slot)

    def fold(self, j: ir.Value) -> None:
        """Fold element `j` of the next row (in the loop over the current row's elements)."""
        b = self.b
        for h in self.heroes:
            if h.inst in self.fast:
                acc, seen = fold_fast(b, self.fast[h.inst], b.load(self.ahead[h.inst][0]), b.load(self.largest[h.inst]),
                                      h.inputs[0](self.index_at(j)))
                b.store(acc, self.ahead[h.inst][0])
                b.store(seen, self.largest[h.inst])
                continue
            fold_into(b, self.em, h, self.ahead[h.inst], self.index_at(j))

    def advance(self, n: int) -> None:
        """At the end of the row: the next row's values become the current ones."""
        b = self.b
        for h in self.heroes:
            if h.inst in self.fast:  # the rare row with a NaN or a zero extremum: folded again exactly
                with b.if_then(exact_needed(b, b.load(self.ahead[h.inst][0]), b.load(self.largest[h.inst])),
                               likely=False):
                    for s, v in zip(self.ahead[h.inst], h.init_values(b)):
                        b.store(v, s)
                    # Rarely taken in real data, but random inputs take it on every row:
                    # vectorised (scalar, BERT and GPT-2 ran 1.27x slower), a maximum's chain
                    # through each vector, so rolled it keeps loop_hints.ROLLED_INTERLEAVE.
                    rolled = loop_hints.stays_rolled(n)
                    with for_range(b, const_i64(0), const_i64(n), "exact.ahead", unroll=not rolled) as j:
                        fold_into(b, self.em, h, self.ahead[h.inst], self.index_at(j))
                    if rolled:
                        loop_hints.interleave(j, loop_hints.ROLLED_INTERLEAVE)
        for h in self.heroes:
            for s, t in zip(self.slots[h.inst], self.ahead[h.inst]):
                self.b.store(self.b.load(t), s)


def _frozen_fold(b, em: ElementalEmitter, h: ReduceHero, accs: list, index: Index) -> list:
    """`h.fold`, with the float inputs of a max/min reducer frozen: otherwise InstCombine turns a
    masked row max, maximum(acc, select(m, x, -inf)) as in causal attention, into select(m,
    maximum(acc, x), acc), a conditional reduction LLVM's loop vectorizer does not recognise for
    llvm.maximum, and the row stays scalar. Frozen (no machine instruction), it is the plain
    maximum reduction LLVM vectorises, NaN propagation kept (cpu_reduction.py does the same)."""
    if not any(i.opcode in ("maximum", "minimum") and i.shape.is_array and i.shape.dtype.is_float
               for i in h.comp.instructions):
        return h.fold(em, accs, index)
    values = [g(index) for g in h.inputs]
    values = [freeze(b, v) if isinstance(v.type, (ir.FloatType, ir.DoubleType)) else v for v in values]
    res = em.call_scalar(h.comp, list(accs) + values, reduction=True)
    return list(res) if isinstance(res, tuple) else [res]


def fold_into(b, em: ElementalEmitter, h: ReduceHero, slots: list, index: Index) -> None:
    """The element at `index` folded (`_frozen_fold`) into the accumulators held in `slots`."""
    accs = [b.load(s) for s in slots]
    for s, v in zip(slots, _frozen_fold(b, em, h, accs, index)):
        b.store(v, s)
