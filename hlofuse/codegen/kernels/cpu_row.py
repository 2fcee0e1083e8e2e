"""CPU row kernels: softmax-like fused computations in one pass over rows held in cache.

A fused computation whose reduces all reduce the trailing (row) dimensions of inputs of the
same dimensions D, and whose results are broadcast back along those dimensions and consumed
elementwise (softmax, log-softmax, layer norm, RMS norm, l2-normalise), would otherwise run as
several kernels, each a pass over memory: every reduce materialized into a temporary by its
own kernel, then a loop kernel reading it (codegen/planning.py). A row kernel instead takes a
row of D as its unit of work and runs, for that row, one loop per *level* of reduces (the
reduces of a level depend only on earlier levels' reduces, so they fold in the same loop:
mean and mean of squares together; a mean, then a variance around it, are two levels), then
one loop writing the outputs. The row is read from memory once and from L1/L2 by the later
loops: XLA's GPU "reduction epilogue" idea on the CPU. While the later loops of a row run, the
kernel prefetches the next row into L2 (`prefetches_next_row`: where those loops are cheap, as
in layer norm, the memory would otherwise idle while they run), and an output row the last loop
writes whole goes out with streaming stores, not read for ownership first (`streams_outputs`;
softmax's exp(x - max), summed and then divided, waits in a row buffer on the stack meanwhile,
`buffers_kept_values`, where it would otherwise be stored in the output row and read back).
A first level of max/min reduces (softmax's row max) is folded a row ahead, inside a later loop
of the row before (row_ahead.py): its chain of latency then overlaps the exp work.

Each reduce folds its row exactly as the row reduction kernel does (cpu_reduction.py: register
accumulators, the reducer's float ops carry `reassoc`, so LLVM vectorizes with several
accumulators): results equal the multi-kernel path's up to the same rounding class. A reduce
into a float narrower than f32 has XLA:CPU's tree order as part of its result; such fusions
are not made row kernels (`row_layout` refuses them).

`row_layout` is the analysis (which dimensions, which reduces per level, which outputs; or a
sentence saying why not; kernels/row_analysis.py, re-exported here), shared by the planner
(codegen/row_fusion.py) and the emitter `emit_row_kernel` (registered as custom kernel "row" in
codegen/cpu.py).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from llvmlite import ir

from ...emitters.elemental import ElementalEmitter, reg_type
from ...emitters.ir_helpers import I32, Index, const_i64, delinearize, for_range, load_element, store_element
from ...hlo.ir import HloComputation, HloInstruction
from .args import output_leaves, param_leaf_slots
from .cpu_streaming import fence, streamable, streaming_row_loop
from .fast_extremum import FAST_ACCUMULATORS, exact_needed, fast_extremum, fold_fast, magnitude_bits
from .host_caches import cache_bytes, l2_cache_bytes, l3_cache_bytes
from . import loop_hints
from .loop_hints import forbid_vectorization, interleave
from .reduction_groups import ReduceHero, computes_expensive_elements, row_accumulators, vector_lanes, wide_vectors
from .row_ahead import NextRowFold, fold_into, pipelines_first_level
from .row_analysis import RowLayout, reused_values, row_layout

__all__ = ["RowLayout", "cache_bytes", "emit_row_kernel", "input_arrays", "l2_cache_bytes", "l3_cache_bytes",
           "prefetch_function", "prefetches_next_row", "reused_values", "row_budget_bytes", "row_layout", "row_streams",
           "streams_outputs"]

# A row's working set may take at most this fraction of L2: the rest holds the outputs being
# written, the other operands (gamma, beta) and what the prefetcher brings in for the next row.
ROW_L2_FRACTION = 0.5


def row_budget_bytes() -> int:
    """The most bytes one row's inputs may take for a row kernel (the cost rule)."""
    return int(l2_cache_bytes() * ROW_L2_FRACTION)


def fast_folds(comp: HloComputation, layout: RowLayout) -> bool:
    """Whether the row kernel's max/min reduces fold fast (fast_extremum.py): not where a loop
    computes an expensive elementwise op per element (exp, tanh, divide: the rule of
    `prefetches_next_row`). There the fast max measured slower once the rows come from memory,
    though its loop is cheaper: softmax of f32[R,2048], one thread, CPU time, interleaved, load
    6.5-7 (old / fast, ns an element): R = 256 0.31 / 0.28, 512 0.31 / 0.29, 1024 0.32 / 0.36,
    3072 0.32 / 0.39 (with tanh for exp: 3072 0.33 / 0.41; two threads, the softmax workload
    2.03 / 2.46 ms CPU). Not the NaN tracking (without it, 0.38), nor the exact second fold
    (never taken there), nor the first loop's speed: interleaved 1 or 2 times the fast loop
    still takes 0.375 at R = 3072 (0.29 at 256), where llvm.maximum's slows to 0.52 / 0.42;
    prefetching the next row, from the exp loop or the max loop, made it slower (0.40-0.47);
    a 2 KB offset between input and output rows changed nothing (not 4K aliasing). Not found:
    one difference left is the order of the loads, ascending in llvm.maximum's loop and
    scattered by the scheduler across the 16 vectors of the fast one (untested). Without an
    expensive op the fast max is faster from memory too: x - max(x) rows, 0.16 -> 0.14."""
    return not computes_expensive_elements(comp, layout.in_dims)


# x86's cache line; the prefetch loop issues one prefetch per line of the next row.
CACHE_LINE_BYTES = 64
# Bytes of the widest stream's row a loop covers between two rounds of prefetches (4 lines).
PREFETCH_CHUNK_BYTES = 256
# A reduction loop that prefetches does it in this many rounds per row (chunks of that part of
# the row, PREFETCH_CHUNK_BYTES at least): each chunk of a fold ends in a horizontal sum of its
# vector accumulators into the row's scalar, a dependent chain of ~10 adds (`_fold_chunk_bytes`).
FOLD_PREFETCH_ROUNDS = 2
# The row prefetched is the first at least this many bytes (of the widest stream) ahead: the
# next row, or for rows under 4 KB a later one (`_rows_ahead`).
PREFETCH_AHEAD_BYTES = 4096
# llvm.prefetch's locality argument: 2 brings the line into L2 (and not necessarily L1), where
# the row's later loops find it; the next row may be as large as half of L2.
PREFETCH_LOCALITY = 2


def prefetch_function(module: ir.Module) -> ir.Function:
    """`llvm.prefetch(address, rw, locality, cache type)` (llvmlite's `declare_intrinsic`
    declares it once per module)."""
    return module.declare_intrinsic(
        "llvm.prefetch.p0", fnty=ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), I32, I32, I32]))


def input_arrays(skel, elements: int) -> list[tuple[ir.Value, int]]:
    """The kernel's parameter leaves of `elements` elements, as (raw argument, bytes per
    element): the arrays read element for element beside the kernel's own iteration space
    (a row kernel's rows, a column reduction's input; what those kernels prefetch)."""
    return [(skel.function.args[k], leaf.dtype.byte_size) for slots in param_leaf_slots(skel.comp).values()
            for k, leaf in slots if leaf.is_array and leaf.element_count() == elements]


def row_streams(skel, layout: RowLayout) -> list[tuple[ir.Value, int, bool]]:
    """The arrays a row kernel reads or writes a row of, as (raw argument, bytes per element,
    written): every parameter leaf of the rows' element count, and the row outputs."""
    streams = [(arg, size, False) for arg, size in input_arrays(skel, layout.rows * layout.row_elements)]
    leaves = output_leaves(skel.comp)
    streams += [(skel.function.args[skel.n_inputs + k], leaves[k].shape.dtype.byte_size, True)
                for k in layout.row_outputs]
    return streams


def _row_bytes(layout: RowLayout, streams: list) -> int:
    """Bytes of one row of all of `streams` together."""
    return layout.row_elements * sum(size for _, size, _ in streams)


def _from_memory(layout: RowLayout, streams: list) -> bool:
    """Whether the kernel's rows come from memory, not cache: its streams together exceed L3."""
    return layout.rows * _row_bytes(layout, streams) > l3_cache_bytes()


def prefetches_next_row(comp: HloComputation, layout: RowLayout, streams: list) -> bool:
    """Whether the row kernel prefetches the next row while its second loop runs.

    Its first loop reads a row from memory and the later ones find it in cache; the hardware
    prefetcher runs only a little ahead of the last miss, so while they run the memory idles
    and the next row's first loop waits for most of its lines (layer norm 6144x1024 on one
    thread: 2.1-2.3 ms, its loops 0.9 ms in cache). Prefetched a chunk at a time while the
    second loop works, the next row is in L2 when its turn comes (1.5 ms). Only when the rows
    come from memory: the streams together exceed L3 (in cache, the chunked loop only costs:
    layer norm 128x1024, 18 -> 28 us). Not when a loop computes an expensive elementwise op
    (exp, log, divide ...: XLA's IsExpensive) per element: those rows take longer to compute
    than to read, the hardware prefetcher keeps up, and the prefetches only cost (softmax
    3072x2048 on one thread: 1.95 -> 2.45 ms). The kernel needs a second loop, and the current
    and next rows of every stream must fit in L2 together."""
    if layout.passes < 2 or 2 * _row_bytes(layout, streams) > l2_cache_bytes() or not _from_memory(layout, streams):
        return False
    return not computes_expensive_elements(comp, layout.in_dims)


@contextmanager
def _row_loop(b: ir.IRBuilder, n: int, name: str, row: ir.Value | None = None, end: ir.Value | None = None,
              streams: list = (), step: int = 1, accumulators: int = 1,
              chunk_bytes: int = PREFETCH_CHUNK_BYTES, folds: bool = False) -> Iterator[ir.Value]:
    """`for j in [0, n)` over a row; with `streams`, the loop runs in chunks (`chunk_bytes`
    of the widest stream) and, before each, prefetches the same chunk of a later row of every
    stream (`_rows_ahead`: the next row where rows are 4 KB or more; unless that row is `end` or
    past it, another thread's): a few lines at a time, spread over the loop's work. (One burst of the whole next row before the loop stalls it once the core's
    miss buffers are full: on a loaded host it measured anywhere from 20% faster to 45% slower
    than no prefetch for layer norm; chunks of 64 f32 were 25-30% faster in each of five
    runs, chunks of 256 about 10%.) A reduction in a chunked loop is folded per chunk by the
    vectorised loop and across chunks in order: reassociated, as the unchunked loop is. `step`
    (which divides `n`) steps j by that many elements; chunks are a whole number of steps.
    `accumulators` > 1 (a reduction loop: reduction_groups.row_accumulators over its length)
    asks LLVM for that many interleaved vectors in the loop over j and keeps it rolled. Without
    streams, a loop of at least loop_hints.ROLLED_AROUND steps is kept rolled too, with
    loop_hints.ROLLED_INTERLEAVE vectors, unless it `folds` with one accumulator (its elements
    are expensive, `_accumulators`: LLVM's own interleaving, which a rolled loop would lose)."""
    if not streams:
        # A long row without a count of its own stays rolled (loop_hints.stays_rolled): LLVM
        # interleaved it and then unrolled the constant trip count fully (GPT-2's layer norm
        # over 512: 556 instructions after O3, 192 rolled). It keeps
        # loop_hints.ROLLED_INTERLEAVE vectors an iteration where it has no count of its own.
        rolled = accumulators > 1 or (not folds and loop_hints.stays_rolled(-(-n // step)))
        with for_range(b, const_i64(0), const_i64(n), name, step=step, unroll=not rolled) as j:
            yield j
        if rolled:
            interleave(j, accumulators if accumulators > 1 else loop_hints.ROLLED_INTERLEAVE)
        return
    fn = prefetch_function(b.module)
    chunk = -(-max(1, chunk_bytes // max(size for _, size, _ in streams)) // step) * step
    chunks = -(-n // chunk)
    nxt = b.add(row, const_i64(_rows_ahead(n, streams)), flags=["nuw", "nsw"])
    has_next = b.icmp_signed("<", nxt, end)
    with for_range(b, const_i64(0), const_i64(chunks), name + ".chunk") as c:
        start = b.mul(c, const_i64(chunk), flags=["nuw", "nsw"])
        stop = b.add(start, const_i64(chunk), flags=["nuw", "nsw"])
        stop = b.select(b.icmp_signed("<", stop, const_i64(n)), stop, const_i64(n))
        with b.if_then(has_next):
            for arg, size, written in streams:
                first = b.add(b.mul(nxt, const_i64(n * size), flags=["nuw", "nsw"]),
                              b.mul(start, const_i64(size), flags=["nuw", "nsw"]), flags=["nuw", "nsw"])
                lines = b.udiv(b.add(b.mul(b.sub(stop, start), const_i64(size)), const_i64(CACHE_LINE_BYTES - 1)),
                               const_i64(CACHE_LINE_BYTES))
                with for_range(b, const_i64(0), lines, name + ".prefetch") as line:
                    at = b.add(first, b.mul(line, const_i64(CACHE_LINE_BYTES), flags=["nuw", "nsw"]))
                    b.call(fn, [b.gep(arg, [at], inbounds=True), ir.Constant(I32, int(written)),
                                ir.Constant(I32, PREFETCH_LOCALITY), ir.Constant(I32, 1)])
        with for_range(b, start, stop, name, step=step, unroll=accumulators < 2) as j:
            yield j
        if accumulators > 1:
            interleave(j, accumulators)


def _rows_ahead(n: int, streams) -> int:
    """How many rows ahead of the current one a row kernel prefetches: the first row at least
    PREFETCH_AHEAD_BYTES of the widest stream ahead. Layer norm, one thread, CPU time,
    interleaved medians, a 64 MB copy between calls, load 8 (1 / 2 / 4 rows ahead):
    f32[12288,512] 1.28-1.30 / 1.18 / 1.28 ms (two runs), [6144,1024] 1.29 / 1.38 / 1.39,
    [3072,2048] 1.48 / 1.52 / 1.52, [24576,256] 1.16 / 1.18 / 1.19 (no difference)."""
    row_bytes = n * max(size for _, size, _ in streams)
    return max(1, -(-PREFETCH_AHEAD_BYTES // row_bytes))


def _fold_chunk_bytes(n: int, streams) -> int:
    """Bytes of the widest stream's row a prefetching fold loop covers per chunk: its row in
    FOLD_PREFETCH_ROUNDS parts, PREFETCH_CHUNK_BYTES at least.

    With its vector accumulators (`_accumulators`) a fold's chunk costs little but the
    horizontal sum at its end, a dependent chain: in 64-element chunks that chain, not the
    memory, set layer norm's pace. One thread, CPU time, interleaved medians, a 64 MB copy
    between calls, load 8 (chunks of 256 B / 1 KiB / half a row / a whole row): layer norm of
    f32[6144,1024] 1.46 / 1.51 / 1.31-1.34 / 1.32-1.41 ms (three runs), [3072,2048] 1.67 / 1.67 /
    1.50 / 1.69, [12288,512] 1.50 / 1.42 (half a row) / 1.42, [1536,4096] 1.51 / 1.48 / 1.51 /
    1.52 (no difference)."""
    widest = max(size for _, size, _ in streams)
    return max(PREFETCH_CHUNK_BYTES, n * widest // FOLD_PREFETCH_ROUNDS)


# Vectors a fold loop over expensive elements interleaves on a target without AVX-512 (16
# vector registers). LLVM's own choice there was 2 for softmax's exp-and-sum loop, which also
# folds the next row's max: its latency chains left the core waiting. Zen 1 AVX2 host, one
# thread, CPU time, medians of 15-21 interleaved rounds, load 1.2-1.7, LLVM's 2 -> 4: softmax
# over f32[3072,2048] 15.65-15.94 -> 13.83-14.07 ms (8: 15.13), causal attention 69.95 -> 68.03,
# attention 70.1 -> 71.3 (noise), shared_producer and layer norm unchanged (their folds do not
# compute the expensive op). AVX-512 keeps LLVM's choice: 8 vectors of tanh and exp measured
# 8% slower there (`computes_expensive_elements`).
EXPENSIVE_FOLD_VECTORS = 4


def _accumulators(target, comp: HloComputation, layout: RowLayout, heroes: list, n: int, streams,
                  fast: dict | None = None) -> int:
    """Interleaved vectors of a level's fold loop over rows of `n` elements (its chunks where
    it prefetches, `streams`): reduction_groups.row_accumulators, as the row reduction
    kernel's (cpu_reduction.py), and as there 1 (LLVM's choice) where the row's elements are
    expensive to compute (softmax's exp) on a target with AVX-512's vectors; on narrower ones
    `EXPENSIVE_FOLD_VECTORS`. A fast max/min (`fast`: fast_extremum.py) keeps two values a
    vector, its maximum and its NaN tracker."""
    fast = fast or {}
    if not target.reassociate_reductions:
        return 1
    length = n
    if streams:
        length = min(n, max(1, _fold_chunk_bytes(n, streams) // max(size for _, size, _ in streams)))
    lanes = vector_lanes(target, [h.inst for h in heroes])
    if computes_expensive_elements(comp, layout.in_dims):
        if wide_vectors(getattr(target, "vector_width", None)):
            return 1
        return row_accumulators(lanes, 1, length, most=EXPENSIVE_FOLD_VECTORS)
    values = sum(FAST_ACCUMULATORS if h.inst in fast else len(h.types) for h in heroes)
    return row_accumulators(lanes, values, length)


def streams_outputs(skel, layout: RowLayout, streams: list, rereads: bool) -> bool:
    """Whether the output loop writes its rows with streaming (non-temporal) stores
    (cpu_streaming.py): layer norm 6144x1024 on one thread 1.64 -> 1.49 ms. Only for rows that
    come from memory anyway (more than L3, as for `prefetches_next_row`: a streaming store
    leaves nothing in cache for the next kernel), for outputs the output loop writes once (not
    a row the reduction loop stored a value in to read back), where `streamable` allows it."""
    if not any(s[2] for s in streams) or rereads:
        return False
    leaves = output_leaves(skel.comp)
    types = [leaves[k].shape.dtype for k in layout.row_outputs]
    return streamable(skel.target, types, layout.row_elements) and _from_memory(layout, streams)


# Whether a value the output loop reads back (softmax's exp(x - max)) goes to a row buffer on
# the stack instead of its output row, so that the output rows can stream (`buffers_kept_values`).
BUFFER_KEPT_VALUES = True
# The most bytes of such row buffers a kernel keeps on its stack (a thread's stack holds them).
KEPT_BUFFER_BYTES = 32 << 10


def buffers_kept_values(skel, layout: RowLayout, kept: dict) -> bool:
    """Whether the values kept between the last reduction loop and the output loop
    (`reused_values`) go to row buffers on the stack: where that lets the output rows stream
    (`streams_outputs`, which a kept value in the output row, read back, rules out) and the
    buffers take at most KEPT_BUFFER_BYTES. Softmax then moves 48 MB for f32[3072,2048], not
    72 (the output row read for ownership, written, read back and written again): one thread,
    CPU time, four runs at load 8: 1.83-1.94 -> 1.65-1.80 ms, the same bits. (Measured slower
    when the row max still held up the exp loop: docs/emitters.md.)"""
    if not kept or not BUFFER_KEPT_VALUES:
        return False
    leaves = output_leaves(skel.comp)
    if sum(layout.row_elements * leaves[k].shape.dtype.byte_size for k in kept) > KEPT_BUFFER_BYTES:
        return False
    return streams_outputs(skel, layout, row_streams(skel, layout), False)


def emit_row_kernel(skel, kernel) -> None:
    """Fill CPU kernel skeleton `skel` with the row kernel of plan `kernel` (its units are rows)."""
    comp = kernel.comp
    layout = row_layout(comp)
    if isinstance(layout, str):
        raise RuntimeError(f"internal error: {comp.name} was planned as a row kernel but {layout}")
    b = skel.builder
    # Two emitters: `em` for the reduction loops and per-row outputs, `em_out` for the output
    # loop, where each kept value (reused_values) is read back from the output row it was stored in.
    em = ElementalEmitter(b, skel.target, skel.param_gen)
    em_out = ElementalEmitter(b, skel.target, skel.param_gen)
    leaves = output_leaves(comp)
    reduces = [r for lvl in layout.levels for r in lvl]
    slots: dict[HloInstruction, list] = {}
    with b.goto_entry_block():
        for r in reduces:
            slots[r] = [b.alloca(reg_type(op.shape.dtype)) for op in r.operands[len(r.operands) // 2:]]
    # The overrides go in before any generator is built: a later level's input (exp(x - max))
    # composes the generators of the reduces it reads, which must be the accumulators.
    for r in reduces:
        def gen(idx: Index, r=r):
            # row_layout proved every read of a reduce is at the current row.
            vals = [b.load(s) for s in slots[r]]
            return tuple(vals) if len(vals) > 1 else vals[0]

        em.override(r, gen)
        em_out.override(r, gen)
    kept_values = reused_values(comp, layout)
    n = layout.row_elements
    buffered = buffers_kept_values(skel, layout, kept_values)
    # The offset of the current row's element 0 in the arrays (set per row): a kept value's
    # element is at the same offset in its output, or at j in its row buffer.
    row_at = {}
    stored = []
    for k, value in kept_values.items():
        ptr = skel.output_ptr(k)
        if buffered:
            with b.goto_entry_block():
                ptr = b.alloca(ptr.type.pointee, size=const_i64(n), name="kept.row")
        stored.append((value, leaves[k], ptr))

    def kept_at(index: Index) -> ir.Value:
        return b.sub(index.linear, row_at["base"], flags=["nuw", "nsw"]) if buffered else index.linear

    for value, leaf, ptr in stored:
        def read_back(idx: Index, ptr=ptr, leaf=leaf):
            return load_element(b, b.gep(ptr, [kept_at(idx)], inbounds=True), leaf.shape.dtype)

        em_out.override(value, read_back)
    by_inst = {r: ReduceHero(em, r) for r in reduces}
    # The first level of max/min reduces folds a row ahead where it can (`pipelines_first_level`).
    ahead = NextRowFold(b, em, [by_inst[r] for r in layout.levels[0]], slots) if pipelines_first_level(layout) else None
    first = set(layout.levels[0]) if ahead else set()
    # Max/min reduces fold fast, with a NaN flag each, and again exactly where that is not
    # decisive (fast_extremum.py); not in a kernel computing an expensive op per element
    # (`fast_folds`); those folded a row ahead, by row_ahead.NextRowFold's rule.
    fast = ({r: kind for r in reduces if r not in first and (kind := fast_extremum(by_inst[r])) is not None}
            if fast_folds(comp, layout) else {})
    with b.goto_entry_block():
        nan_slots = {r: b.alloca(ir.IntType(r.shape.dtype.bits), name="largest.bits") for r in fast}
    row_gens = [(em_out.gen(leaves[k].inst), leaves[k], skel.output_ptr(k)) for k in layout.row_outputs]
    per_row_gens = [(em.gen(leaves[k].inst), leaves[k], skel.output_ptr(k)) for k in layout.per_row_outputs]
    in_dims, kept = layout.in_dims, layout.kept
    row_dims = in_dims[kept:]
    # The second loop of a row (the first that finds the row in cache) prefetches the next.
    streams = row_streams(skel, layout)
    prefetch = prefetches_next_row(comp, layout, streams)
    streaming = streams_outputs(skel, layout, streams, bool(stored) and not buffered)
    if streaming:  # a streamed row is written without being read: not prefetched for writing either
        streams = [s for s in streams if not s[2]]
    # The loop that folds the next row's first level: the output loop, unless it streams (or
    # there is none), else the last level's. Softmax's last level is its exp loop, which also
    # stores exp(x - max) in the output row where that row does not stream: the next row's
    # loads from memory there made it slower (f32[3072,2048] 1.97 -> 2.40 ms, one thread), in
    # the division loop faster (1.76). With a row buffer for exp(x - max) and streamed output
    # rows (`buffers_kept_values`) it is the exp loop again: 2.04 -> 1.93, 1.97 -> 1.63 ms.
    # There the next row's loads come before the stores of the same iteration: after them, one
    # process in two ran at 2.73-2.87 ms (bandwidth_share.py, five runs each way, load 8-10;
    # the offset of the output row from the input row within a 4 KB page decided it, as 4K
    # aliasing of loads on earlier stores would), before them 1.79-1.90 in five of five.
    ahead_in_output = ahead is not None and bool(row_gens) and not streaming

    def indexer(row):
        """The offset of row `row` (an i64 value) and the Index of its element j, a function of j."""
        outer = delinearize(b, row, in_dims[:kept])
        base = b.mul(row, const_i64(n), flags=["nuw", "nsw"])

        def index_at(j):
            inner = [j] if len(row_dims) == 1 else delinearize(b, j, row_dims)
            return Index(b, in_dims, multi=list(outer) + list(inner), linear=b.add(base, j, flags=["nuw", "nsw"]))

        return base, index_at

    if ahead:
        ahead.first_row(n, skel.begin, skel.end, indexer)
    with for_range(b, skel.begin, skel.end, "row") as r:
        base, index_at = indexer(r)
        row_at["base"] = base
        if ahead:
            ahead.row(r, skel.end, indexer)
        for level, lvl in enumerate(layout.levels):
            if ahead and level == 0:
                continue  # folded a row ahead
            last = level == len(layout.levels) - 1
            folds_ahead = ahead is not None and last and not ahead_in_output
            if folds_ahead:
                ahead.start()
            hs = [by_inst[x] for x in lvl]
            streamed_ahead = streams if (level == 1 and prefetch) else ()
            for h in hs:
                for s, v in zip(slots[h.inst], h.init_values(b)):
                    b.store(v, s)
                    if h.inst in fast:
                        b.store(magnitude_bits(b, v), nan_slots[h.inst])
            chunk_bytes = _fold_chunk_bytes(n, streamed_ahead) if streamed_ahead else PREFETCH_CHUNK_BYTES
            with _row_loop(b, n, "fold", r, skel.end, streamed_ahead,
                           accumulators=_accumulators(skel.target, comp, layout, hs, n, streamed_ahead, fast),
                           chunk_bytes=chunk_bytes, folds=True) as j:
                index = index_at(j)
                if folds_ahead:  # loads before stores, as in the output loop
                    ahead.fold(j)
                if last:
                    for value, leaf, ptr in stored:
                        store_element(b, em.gen(value)(index), b.gep(ptr, [kept_at(index)], inbounds=True),
                                      leaf.shape.dtype)
                for h in hs:
                    if h.inst in fast:
                        acc, seen = fold_fast(b, fast[h.inst], b.load(slots[h.inst][0]), b.load(nan_slots[h.inst]),
                                              h.inputs[0](index))
                        b.store(acc, slots[h.inst][0])
                        b.store(seen, nan_slots[h.inst])
                        continue
                    fold_into(b, em, h, slots[h.inst], index)
            for h in hs:
                if h.inst in fast:  # the rare row with a NaN or a zero extremum: folded again exactly
                    with b.if_then(exact_needed(b, b.load(slots[h.inst][0]), b.load(nan_slots[h.inst])), likely=False):
                        for s, v in zip(slots[h.inst], h.init_values(b)):
                            b.store(v, s)
                        with _row_loop(b, n, "exact") as j:
                            fold_into(b, em, h, slots[h.inst], index_at(j))
        if row_gens:
            streamed_ahead = streams if (len(layout.levels) == 1 and prefetch) else ()
            if ahead_in_output:
                ahead.start()

            def output_loop():
                with _row_loop(b, n, "col", r, skel.end, streamed_ahead) as j:
                    index = index_at(j)
                    if ahead_in_output:  # its loads before the stores (`ahead_in_output`)
                        ahead.fold(j)
                    for g, leaf, ptr in row_gens:
                        store_element(b, leaf.select(g(index)), b.gep(ptr, [index.linear], inbounds=True),
                                      leaf.shape.dtype)

            if streaming:
                streaming_row_loop(b, base, index_at, row_gens, output_loop,
                                   lambda step: _row_loop(b, n, "stream", r, skel.end, streamed_ahead, step=step))
            else:
                output_loop()
        for g, leaf, ptr in per_row_gens:
            out_index = Index(b, leaf.shape.dims, linear=r)
            store_element(b, leaf.select(g(out_index)), b.gep(ptr, [r], inbounds=True), leaf.shape.dtype)
        if ahead:
            ahead.advance(n)
    # A row of at least a vector is vectorised along itself, never across rows (loop_hints).
    if n >= vector_lanes(skel.target, reduces):
        forbid_vectorization(r)
    if streaming:  # streaming stores are weakly ordered: done before the kernel returns
        fence(b)
    skel.finish()
