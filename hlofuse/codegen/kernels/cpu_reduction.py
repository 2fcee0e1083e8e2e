"""CPU reduction kernels for input fusions (XLA's kInput with reduce heroes).

A reduction group (reduction_groups.py: reduces of the same input dimensions and reduced
dimensions, their epilogue, and elementwise outputs of the input's dimensions) is emitted
in one pass over the input.

Two loop orders, chosen so the innermost loop is contiguous in memory:
  * row (the last input dimension is reduced, or every dimension is): a unit of work is
    one output element; its reduced elements are folded into register accumulators,
    innermost loop over the last dimension. The reducer's float adds/multiplies carry
    `reassoc` (XLA reassociates reductions too), so LLVM vectorizes the loop with several
    vector accumulators (8 in a rolled loop: reduction_groups.row_accumulators): results
    differ from a sequential sum by rounding only.
    A row of exactly one vector of float adds is folded with LANES others by a transposed
    tree instead (short_rows.py), not by a horizontal sum each.
  * column (the last input dimension is kept): a unit of work is a block of output
    columns (`ReductionGroup.block_columns`: as many as 16 vector registers of accumulators
    hold) for one value of the other kept dimensions; accumulators live in a stack block that
    LLVM keeps in registers, and for each reduced position the block is updated with a
    contiguous, vectorizable loop (no reassociation needed). An input from memory whose row
    of accumulators fits L1 is one block of all its columns (`ReductionGroup.in_l1`): its
    accumulators are a row of partial sums in L1, updated one vector a step
    (cpu_reduction_rotated.stream_columns), so each unit streams whole rows. An input from
    memory of several register blocks (batch-norm statistics: a sum and a sum of squares of
    96 columns are three blocks of 32 on AVX2) is read in tiles of rows instead, each block
    folding a tile in turn (`ReductionGroup.tiles_rows`, `_emit_column_tiles`): one pass over
    memory rather than one strided pass per block.

Either order with few work units (a full reduction; batch-norm statistics of 96 channels,
one column block) and many elements each is split by the planner (codegen/planning.py) into
a partial kernel, whose units are slices of the outermost reduced dimension (so every core
streams its share of the input), and a combine kernel folding each output's slices in order
(a float column sum is then reassociated at the slices' seams, as XLA allows).

A reduce into a float narrower than f32 is the exception to reassociation: it rounds to its
type after every step, as XLA:CPU does, so its order is part of its result. Kernel planning
has rewritten it into XLA:CPU's tree of reduce-windows (codegen/planning.py), and its
kernel is emitted without reassociation (`in_order_target`) and never split across cores, so
each output is folded exactly in XLA's order.

A max/min reducer's inputs are frozen (`freeze`, no instruction in the machine code) in row
kernels: otherwise InstCombine turns a masked row max, maximum(acc, select(m, x, -inf)) as in
causal attention, into select(m, maximum(acc, x), acc), a conditional reduction that LLVM's
loop vectorizer does not recognise for llvm.maximum, and the row stays scalar (~57
instructions an element). Frozen, it is the plain maximum reduction LLVM vectorises, with
llvm.maximum's NaN propagation and -0 < +0 kept. Where the loop computes nothing expensive a
max/min folds faster still, with the same bits (fast_extremum.py).

An argmax/argmin reduce (a (value, index) reducer that arg_reduction.recognize proves is
jax's) is not folded by its reducer in row kernels: its closed form is computed by two
vectorised passes over the row (arg_reduction.py; ~7 -> 0.4 ns an element).

Only outputs that read the reduces at their own output index can be an epilogue: the kernel
holds one output element's accumulated value at a time (`reads_heroes_at_output_index`);
others (a reverse, a transpose, a slice ... of the reduce) leave the reduction kernel.
"""
from __future__ import annotations

import math

from llvmlite import ir

from ...emitters.elemental import ElementalEmitter, mem_type
from ...emitters.ir_helpers import I32, Index, const_i64, delinearize, for_range, freeze, load_element, store_element
from ...hlo.ir import HloComputation
from . import arg_reduction
from .args import output_leaves
from .cpu_row import CACHE_LINE_BYTES, PREFETCH_LOCALITY, input_arrays, prefetch_function
from .cpu_reduction_rotated import emit_rotated_fold, line_aligned, rotated_input, stream_columns
from .cpu_reduction_windows import Windows, window_levels
from .fast_extremum import FAST_ACCUMULATORS, exact_needed, fast_extremum, fold_fast, magnitude_bits
from .loop_hints import ROLLED_AROUND, forbid_vectorization, stays_rolled
from .reduced_loops import own_innermost_accumulators, reduced_loops
from .reduction_groups import (ReduceHero, ReductionGroup, computes_expensive_elements, in_order_target,
                               override_heroes, row_accumulators, vector_lanes, without_reassociation)
from .short_rows import emit_tree_rows, transposes


def emit_reduction_kernel(skel, comp: HloComputation, group: ReductionGroup, stage: str = "single",
                          parts: int = 1) -> None:
    """Fill kernel skeleton `skel` with the loops of reduction group `group`.

    `stage` "partial" and "combine" split a reduction with few work units (row: outputs;
    column: blocks of columns) over `parts` slices of its outermost reduced dimension, so the
    cores share it: the partial kernel writes each slice's accumulators to the skeleton's
    scratch buffers (one per accumulator, laid out [part][output]); the combine kernel (a unit
    per output) folds the slices in slice order with the reducer and runs the epilogue."""
    b = skel.builder
    em = ElementalEmitter(b, _reduction_target(skel.target, group), skel.param_gen)
    heroes = [ReduceHero(em, h) for h in group.heroes]
    leaves = output_leaves(comp)
    extras = [(skel.output_ptr(k), em.gen(leaves[k].inst), leaves[k]) for k in group.extras]
    epilogue_ptrs = [skel.output_ptr(k) for k in group.epilogue]
    if stage != "single":
        types = [et for h in heroes for et in h.types]
        scratch = [skel.scratch_ptr(i, et) for i, et in enumerate(types)]
        if stage == "partial" and group.is_row:
            _emit_row(skel, em, group, heroes, extras, [], [], parts=parts, scratch=scratch)
        elif stage == "partial":
            _emit_column(skel, em, group, heroes, extras, [], [], parts=parts, scratch=scratch)
        else:
            _emit_combine(skel, em, group, heroes, epilogue_ptrs, [leaves[k] for k in group.epilogue], parts, scratch)
        skel.finish()
        return
    if group.is_row:
        _emit_row(skel, em, group, heroes, extras, epilogue_ptrs, [leaves[k] for k in group.epilogue])
    else:
        _emit_column(skel, em, group, heroes, extras, epilogue_ptrs, [leaves[k] for k in group.epilogue])
    skel.finish()


def _reduction_target(target, group: ReductionGroup):
    """The target to emit `group`'s folds with: `in_order_target`'s, and for a column group
    whose block of columns fills a vector register, one that does not reassociate them.

    A column kernel folds each column in order, so reassociation is not needed to vectorise it
    across the block's columns; but it lets LLVM vectorise along the reduced dimension instead,
    which it does once it has fully unrolled a short constant column loop: 16 or 32 columns
    became one interleaved group of 16 or 32 strided loads per vector, with a shuffle per column
    (f32 [262144, 16] on one thread: 0.84 ns an element; [131072, 32]: 0.66). Without
    reassociation the unrolled block is vectorised across its columns (0.047 and 0.038, as 64 to
    256 columns always were). A block narrower than a vector keeps reassociation: packing
    several reduced positions into a vector is then the better use of it (3 columns: 0.055 ns
    an element with it, 0.158 without)."""
    target = in_order_target(target, group.heroes)
    if group.is_row or not target.reassociate_reductions:
        return target
    if min(group.block_columns, group.in_dims[-1]) < vector_lanes(target, group.heroes):
        return target
    return without_reassociation(target)


def _fold_at(b, em, heroes, block: dict, slot, index: Index) -> None:
    """Fold the input element at `index` into every hero's accumulators at `slot` of its block
    (`block`: per hero, one stack row per accumulator)."""
    for h in heroes:
        addrs = [b.gep(p, [slot], inbounds=True) for p in block[h]]
        accs = [load_element(b, a, et) for a, et in zip(addrs, h.types)]
        for a, v, et in zip(addrs, h.fold(em, accs, index), h.types):
            store_element(b, v, a, et)


def _store_extras(b, index: Index, extras) -> None:
    for ptr, g, leaf in extras:
        store_element(b, leaf.select(g(index)), b.gep(ptr, [index.linear], inbounds=True), leaf.shape.dtype)


def _input_index(b, group: ReductionGroup, kept_vals, reduced_vals) -> Index:
    multi = [None] * len(group.in_dims)
    for d, v in zip(group.kept, kept_vals):
        multi[d] = v
    for d, v in zip(group.rdims, reduced_vals):
        multi[d] = v
    return Index(b, group.in_dims, multi=multi)


def _row_accumulators(em, comp: HloComputation, group: ReductionGroup, heroes, arg_rows: dict, parts: int,
                      fast: dict | None = None) -> int:
    """The interleave count of a row kernel's innermost reduced loop (`row_accumulators`): 1
    where the reducers keep their order (`in_order_target`) or the loop computes expensive
    elements (`computes_expensive_elements`), else counted over every value the loop folds (an
    argmax folds one, its maximum, in this loop; a fast max/min, `fast`, is counted as
    fast_extremum.FAST_ACCUMULATORS) and the loop's length (a split's slice where the sliced dimension is the
    only one)."""
    if not em.target.reassociate_reductions or computes_expensive_elements(comp, group.in_dims):
        return 1
    if not group.rdims:  # a reduce over no dimensions (a rank-0 operand, dimensions={}): one element
        return 1
    fast = fast or {}
    accumulators = sum(1 if h in arg_rows else FAST_ACCUMULATORS if h in fast else len(h.types) for h in heroes)
    row = group.in_dims[group.rdims[-1]] // (parts if len(group.rdims) == 1 else 1)
    return row_accumulators(vector_lanes(em.target, group.heroes), accumulators, row)


# Bytes of a column block's accumulators (every hero's, every column) below which its reduced
# loops stay rolled (`rolls_reduced_loops`): 1,024 f32.
ROLLED_ACCUMULATOR_BYTES = 4096


def rolls_reduced_loops(block_columns: int, heroes, lanes: int) -> bool:
    """Whether a column kernel keeps the reduced loops around its block of `block_columns`
    columns rolled (`llvm.loop.unroll.disable`): from `ROLLED_AROUND` columns (the direct
    convolution's rule) or eight of the target's vectors (`lanes` columns each) if fewer,
    while the block's accumulators take under `ROLLED_ACCUMULATOR_BYTES`.

    Unrolled, every copy of a reduced loop repeats the whole vectorised column loop: haiku's
    ResNet-18 step's 89 reduction kernels were 47,439 instructions after O3, 22,915 rolled
    (LLVM 2.48 -> 1.57 CPU-s). Rolled, they ran as fast or faster, one thread, CPU time,
    interleaved, load 7-9 (rolled / unrolled): sum and sum of squares of f32[16,8,8,C] over C
    = 192, 256, 320, 384 columns 0.93, 0.91-0.93, 0.79, 0.92 (in cache), f32[32,28,28,256]
    1.01 (from memory), the sum alone of 512 columns 0.94; but both sums of 512-column blocks
    (4 KiB of accumulators) ran 1.05-1.13 slower rolled (f32[8,7,7,2048], [4,8,8,1024],
    [8,8,8,512]): unrolled, LLVM forwards each accumulator from one copy of the row to the next
    instead of storing and reloading it (docs/compile_time.md).

    Eight vectors rather than 128 columns on AVX2 (64 f32): haiku's weight gradients of 64
    channels (one sum over f32[16,16,16,64]) were 1,316 lines after O3, the reduced loop of 16
    around 8 vectors unrolled whole, and 185 ms of LLVM; rolled, a module of that reduction
    alone compiled in 0.08-0.09 CPU-s instead of 0.22-0.44, and it ran 0.80-0.84x the time in cache, 0.99-1.00x over
    f32[32,56,56,64] from memory, haiku's step 1.00x (one thread, CPU time, interleaved
    medians of 21-61, load 1.1-1.7, the same bits)."""
    acc_bytes = block_columns * sum(et.bits // 8 or 1 for h in heroes for et in h.types)
    return block_columns >= min(ROLLED_AROUND, 8 * lanes) and acc_bytes < ROLLED_ACCUMULATOR_BYTES


def _emit_row(skel, em, group, heroes, extras, epilogue_ptrs, epilogue_leaves, parts: int = 1,
              scratch=None) -> None:
    b = skel.builder
    n_out = group.out_elements
    slots = {}
    with b.goto_entry_block():
        for h in heroes:
            slots[h] = [b.alloca(reg) for reg in h.reg_types]
    # argmax/argmin heroes fold by their closed form, in two vectorised passes (arg_reduction).
    arg_rows = {}
    if math.prod(group.in_dims[d] for d in group.rdims) > 0:
        for h in heroes:
            spec = arg_reduction.recognize(h.inst)
            if spec is not None:
                arg_rows[h] = arg_reduction.ArgRow(b, em, h, spec, [group.in_dims[d] for d in group.rdims])
    # Max/min heroes fold fast and, where that is not decisive, again exactly (fast_extremum.py).
    fast = {} if computes_expensive_elements(skel.comp, group.in_dims) else {
        h: kind for h in heroes if h not in arg_rows and (kind := fast_extremum(h)) is not None}
    with b.goto_entry_block():
        largest = {h: b.alloca(ir.IntType(h.types[0].bits), name="largest.bits") for h in fast}
    at = {}
    override_heroes(em, heroes, lambda h: [b.load(s) for s in slots[h]], lambda: at["index"])
    epilogue_gens = [em.gen(leaf.inst) for leaf in epilogue_leaves]

    def write_epilogue(u: ir.Value, out_index: Index) -> None:
        for g, leaf, ptr in zip(epilogue_gens, epilogue_leaves, epilogue_ptrs):
            store_element(b, leaf.select(g(out_index)), b.gep(ptr, [u], inbounds=True), leaf.shape.dtype)

    if not arg_rows and not fast and transposes(em.target, group, heroes, extras, scratch is not None):
        def finish(u: ir.Value, values: dict) -> None:
            for h in heroes:
                for s, v in zip(slots[h], values[h]):
                    b.store(v, s)
            out_index = at["index"] = Index(b, group.out_dims, linear=u)
            write_epilogue(u, out_index)

        emit_tree_rows(b, em, group, heroes, skel.begin, skel.end, finish)
        return
    # Around a long innermost reduced loop the loop over outputs stays rolled: LLVM unrolled it
    # at run time (a prologue copy and a second copy of the whole vectorised row: the flax
    # block's row sums over 512, 185 instructions after O3 against 68, 11.8 -> 7.1 ms).
    rolled = stays_rolled(group.in_dims[group.rdims[-1]]) if group.rdims else False
    with for_range(b, skel.begin, skel.end, "out", unroll=not rolled) as unit:
        outer = None
        u = unit
        if scratch is not None:  # unit = part * n_out + output
            part, u = b.udiv(unit, const_i64(n_out)), b.urem(unit, const_i64(n_out))
            outer = _split_slice(b, part, group.in_dims[group.rdims[0]], parts)
        out_index = at["index"] = Index(b, group.out_dims, linear=u)
        for h in heroes:
            if h in arg_rows:
                arg_rows[h].start()
                continue
            for s, v in zip(slots[h], h.init_values(b)):
                b.store(v, s)
                if h in fast:
                    b.store(magnitude_bits(b, v), largest[h])

        def body(reduced, only=None):
            index = _input_index(b, group, out_index.multi, reduced)
            for h in (heroes if only is None else [only]):
                if h in arg_rows:
                    arg_rows[h].step(index)
                    continue
                ss = slots[h]
                if h in fast and only is None:
                    acc, big = fold_fast(b, fast[h], b.load(ss[0]), b.load(largest[h]), h.inputs[0](index))
                    b.store(acc, ss[0])
                    b.store(big, largest[h])
                    continue
                for s, r in zip(ss, _fold_row(b, em, h, [b.load(s) for s in ss], index)):
                    b.store(r, s)
            if only is None:
                _store_extras(b, index, extras)

        reduced_loops(b, group, body, outer=outer,
                      accumulators=_row_accumulators(em, skel.comp, group, heroes, arg_rows, parts, fast),
                      around_innermost=own_innermost_accumulators(b, em, group, heroes, slots, arg_rows, fast))
        for h in fast:  # the rare row with a NaN or a zero extremum: folded again exactly
            with b.if_then(exact_needed(b, b.load(slots[h][0]), b.load(largest[h])), likely=False):
                for s, v in zip(slots[h], h.init_values(b)):
                    b.store(v, s)
                reduced_loops(b, group, lambda reduced, h=h: body(reduced, only=h), outer=outer)
        for h, row in arg_rows.items():
            values = row.finish(lambda f: reduced_loops(b, group, f, outer=outer),
                                lambda reduced: _input_index(b, group, out_index.multi, reduced))
            for s, v in zip(slots[h], values):
                b.store(v, s)
        if scratch is not None:
            values = [(s, et) for h in heroes for s, et in zip(slots[h], h.types)]
            for (s, et), ptr in zip(values, scratch):
                store_element(b, b.load(s), b.gep(ptr, [unit], inbounds=True), et)
        write_epilogue(u, out_index)
    # A row of at least a vector is vectorised along itself, never across outputs (loop_hints).
    # Fewer units than a vector's lanes never fill one: vectorising across them only costs
    # LLVM's time. (LLVM 22's loop vectorizer ran for minutes on such a loop over a single
    # output whose whole body was loop-invariant, a min of two elements under cbrt and atan2:
    # its VPlan uniformity check, vputils::isUniformAcrossVFsAndUFs, walks the operand DAG
    # without remembering what it saw; the HLO graph fuzzer, seed 42.)
    lanes = vector_lanes(em.target, group.heroes)
    if group.unit_elements // max(parts, 1) >= lanes or n_out * max(parts, 1) < lanes:
        forbid_vectorization(unit)


def _is_extremum_reducer(comp: HloComputation) -> bool:
    """Whether reducer `comp` takes a float maximum or minimum (max, min, argmax-like)."""
    return any(i.opcode in ("maximum", "minimum") and i.shape.is_array and i.shape.dtype.is_float
               for i in comp.instructions)


def _fold_row(b: ir.IRBuilder, em, h: ReduceHero, accs: list, index: Index) -> list:
    """`h.fold` for a row kernel: float inputs of a max/min reducer frozen (module docstring)."""
    if not _is_extremum_reducer(h.comp):
        return h.fold(em, accs, index)
    values = [g(index) for g in h.inputs]
    values = [freeze(b, v) if isinstance(v.type, (ir.FloatType, ir.DoubleType)) else v for v in values]
    res = em.call_scalar(h.comp, list(accs) + values, reduction=True)
    return list(res) if isinstance(res, tuple) else [res]


def _emit_combine(skel, em, group, heroes, epilogue_ptrs, epilogue_leaves, parts: int, scratch) -> None:
    """Fold the partial accumulators of a split reduction, then write the epilogue outputs."""
    b = skel.builder
    n_out = group.out_elements
    finals = {}
    at = {}
    override_heroes(em, heroes, lambda h: finals[h], lambda: at["index"])
    epilogue_gens = [em.gen(leaf.inst) for leaf in epilogue_leaves]
    with for_range(b, skel.begin, skel.end, "out") as u:
        k = 0
        for h in heroes:
            ptrs = scratch[k:k + len(h.types)]
            k += len(h.types)

            def partial(p, ptrs=ptrs, h=h):
                at = b.add(b.mul(const_i64(p), const_i64(n_out)), u)
                return [load_element(b, b.gep(ptr, [at], inbounds=True), et) for ptr, et in zip(ptrs, h.types)]

            acc = partial(0)
            for p in range(1, parts):
                res = em.call_scalar(h.comp, acc + partial(p), reduction=True)
                acc = list(res) if isinstance(res, tuple) else [res]
            finals[h] = acc
        out_index = at["index"] = Index(b, group.out_dims, linear=u)
        for g, leaf, ptr in zip(epilogue_gens, epilogue_leaves, epilogue_ptrs):
            store_element(b, leaf.select(g(out_index)), b.gep(ptr, [u], inbounds=True), leaf.shape.dtype)


def _split_slice(b, part, size: int, parts: int) -> tuple:
    """[lo, hi) of slice `part` of `parts` near-equal slices of a dimension of `size`."""
    return (b.udiv(b.mul(part, const_i64(size)), const_i64(parts)),
            b.udiv(b.mul(b.add(part, const_i64(1)), const_i64(size)), const_i64(parts)))


def _emit_column(skel, em, group, heroes, extras, epilogue_ptrs, epilogue_leaves, parts: int = 1,
                 scratch=None) -> None:
    """Column loops: a unit is a block of group.block_columns columns of one row of kept dimensions,
    accumulated in a stack block. With `scratch` (a split's partial stage), unit = part *
    group.units + block: the block folds slice `part` of the outermost reduced dimension and
    stores its accumulators to scratch at [part][output] instead of running the epilogue."""
    if group.tiles_rows:
        _emit_column_tiles(skel, em, group, heroes, extras, epilogue_ptrs, epilogue_leaves, parts, scratch)
        return
    b = skel.builder
    last = group.in_dims[-1]
    nb = group.blocks
    n_out = group.out_elements
    width = group.block_columns
    block = {}  # per hero, its accumulators for the unit's block of columns
    with b.goto_entry_block():
        for h in heroes:
            block[h] = [line_aligned(b.alloca(mem_type(et), size=width)) for et in h.types]
    position = {}

    def current(h):
        return [load_element(b, b.gep(p, [position["j"]], inbounds=True), et)
                for p, et in zip(block[h], h.types)]

    override_heroes(em, heroes, current, lambda: position["index"])
    epilogue_gens = [em.gen(leaf.inst) for leaf in epilogue_leaves]
    levels = window_levels(heroes, _unit_rows(group, parts if scratch is not None else 1))
    windows = Windows(b, em, heroes, width, levels) if levels else None
    # Windows count rows in the plain loops; the rotated ones fold two rows' columns a step.
    aligned = rotated_input(skel, group, extras) if windows is None else None
    with for_range(b, skel.begin, skel.end, "unit") as unit:
        u, outer_slice, part = unit, None, None
        if scratch is not None:
            part, u = b.udiv(unit, const_i64(group.units)), b.urem(unit, const_i64(group.units))
            outer_slice = _split_slice(b, part, group.in_dims[group.rdims[0]], parts)
        o = b.udiv(u, const_i64(nb))
        j0 = b.mul(b.urem(u, const_i64(nb)), const_i64(width))
        j1 = b.add(j0, const_i64(width))
        j1 = b.select(b.icmp_signed("<", j1, const_i64(last)), j1, const_i64(last))
        outer = delinearize(b, o, group.out_dims[:-1])
        row = b.mul(o, const_i64(last))
        inits = [h.init_values(b) for h in heroes]
        with for_range(b, j0, j1, "init") as j:
            slot = b.sub(j, j0)
            for h, vals in zip(heroes, inits):
                for v, p, et in zip(vals, block[h], h.types):
                    store_element(b, v, b.gep(p, [slot], inbounds=True), et)
        columns = b.sub(j1, j0)
        if windows is not None:
            windows.start(const_i64(0), columns)

        def body(reduced):
            with for_range(b, j0, j1, "col", unroll=not group.in_l1) as j:
                index = _input_index(b, group, list(outer) + [j], reduced)
                _fold_at(b, em, heroes, block, b.sub(j, j0), index)
                _store_extras(b, index, extras)
            if group.in_l1:
                stream_columns(j)
            if windows is not None:  # a block of `width` columns unless the row ends sooner
                windows.row_done(block, const_i64(0), columns, count=width if last % width == 0 else None)

        # A block of at least a vector is vectorised across its columns, never along the
        # reduced dimensions (loop_hints; floats: _reduction_target).
        block_columns = min(width, last)
        if aligned is not None:  # the same folds, the vectors on the input's lines
            lo, hi = outer_slice if outer_slice is not None else (const_i64(0), const_i64(group.in_dims[0]))
            emit_rotated_fold(b, em, group, heroes, block, aligned, lo, hi)
        else:
            reduced_loops(b, group, body, outer=outer_slice,
                          vectorize=block_columns < vector_lanes(em.target, group.heroes),
                          unroll=not (group.in_l1 or windows is not None or rolls_reduced_loops(
                              block_columns, heroes, vector_lanes(em.target, group.heroes))))
        if windows is not None:
            windows.finish(block, const_i64(0), columns)
        if scratch is not None:
            _store_partials(b, heroes, block, scratch, j0, j1, b.add(b.mul(part, const_i64(n_out)), row))
        else:
            _store_epilogue(b, position, group, outer, row, j0, j1, epilogue_gens, epilogue_leaves, epilogue_ptrs)


def _emit_column_tiles(skel, em, group, heroes, extras, epilogue_ptrs, epilogue_leaves, parts: int,
                       scratch) -> None:
    """Column loops of a `tiles_rows` group (every dimension but the last reduced): the unit is
    every block of the columns (with `scratch`, of slice `part` of the group's `split_extent`:
    the outermost reduced dimension, the same slices as `_emit_column`'s, or the rows for a
    batch of one), its rows taken a tile of
    `group.tile_rows` at a time, and each block folds the tile's rows in turn into its
    accumulators (a stack row of all the columns, LLVM keeping the block's in registers
    across the rows). Each column is folded over the same rows in the same order as
    `_emit_column` folds it: the same bits."""
    b = skel.builder
    last = group.in_dims[-1]
    width = group.block_columns
    rows = math.prod(group.in_dims[:-1])
    inner = rows // group.split_extent  # rows per index of what the split slices
    with b.goto_entry_block():
        block = {h: [line_aligned(b.alloca(mem_type(et), size=last)) for et in h.types] for h in heroes}
    position = {}
    override_heroes(em, heroes, lambda h: [load_element(b, b.gep(p, [position["j"]], inbounds=True), et)
                                           for p, et in zip(block[h], h.types)], lambda: position["index"])
    epilogue_gens = [em.gen(leaf.inst) for leaf in epilogue_leaves]
    lanes = vector_lanes(em.target, group.heroes)
    tile = const_i64(group.tile_rows)
    reduced_dims = group.in_dims[:-1]
    levels = window_levels(heroes, _unit_rows(group, parts if scratch is not None else 1))
    windows = Windows(b, em, heroes, last, levels) if levels else None
    streams = input_arrays(skel, rows * last) if TILE_PREFETCH else []
    with for_range(b, skel.begin, skel.end, "unit") as unit:
        if scratch is not None:
            lo, hi = _split_slice(b, unit, group.split_extent, parts)
            lo, hi = b.mul(lo, const_i64(inner)), b.mul(hi, const_i64(inner))
        else:
            lo, hi = const_i64(0), const_i64(rows)
        inits = [h.init_values(b) for h in heroes]
        with for_range(b, const_i64(0), const_i64(last), "init") as j:
            for h, vals in zip(heroes, inits):
                for v, p, et in zip(vals, block[h], h.types):
                    store_element(b, v, b.gep(p, [j], inbounds=True), et)
        if windows is not None:
            windows.start(const_i64(0), const_i64(last))

        with for_range(b, lo, hi, "tile", step=group.tile_rows, unroll=False) as t:
            end = b.add(t, tile, flags=["nuw", "nsw"])
            end = b.select(b.icmp_signed("<", end, hi), end, hi)

            def fold_block(j0, columns: int) -> None:
                # the rows of the tile for `columns` columns from j0 (a constant trip count, so
                # LLVM unrolls and vectorises the column loop and keeps its accumulators)
                with for_range(b, t, end, "row", unroll=not rolls_reduced_loops(columns, heroes, lanes)) as r:
                    multi = delinearize(b, r, reduced_dims)
                    base = b.mul(r, const_i64(last), flags=["nuw", "nsw"])
                    if TILE_PREFETCH:
                        _prefetch_next_tile(b, streams, r, j0, columns, last, group.tile_rows)
                    with for_range(b, j0, b.add(j0, const_i64(columns), flags=["nuw", "nsw"]), "col") as j:
                        index = Index(b, group.in_dims, multi=list(multi) + [j],
                                      linear=b.add(base, j, flags=["nuw", "nsw"]))
                        _fold_at(b, em, heroes, block, j, index)
                        _store_extras(b, index, extras)
                    if windows is not None:  # rows counted from the unit's first, as the plain loops do
                        windows.row_done(block, j0, b.add(j0, const_i64(columns), flags=["nuw", "nsw"]),
                                         n=b.add(b.sub(r, lo), const_i64(1)), count=columns)
                if columns >= lanes:
                    forbid_vectorization(r)

            whole = last // width
            with for_range(b, const_i64(0), const_i64(whole), "block", unroll=False) as k:
                fold_block(b.mul(k, const_i64(width), flags=["nuw", "nsw"]), width)
            forbid_vectorization(k)
            if last % width:
                fold_block(const_i64(whole * width), last % width)
        forbid_vectorization(t)
        if windows is not None:
            windows.finish(block, const_i64(0), const_i64(last))
        if scratch is not None:
            _store_partials(b, heroes, block, scratch, const_i64(0), const_i64(last),
                            b.mul(unit, const_i64(group.out_elements)))
        else:
            _store_epilogue(b, position, group, [], const_i64(0), const_i64(0), const_i64(last),
                            epilogue_gens, epilogue_leaves, epilogue_ptrs)


# Whether each block of a tiled column kernel prefetches its columns of the next tile's rows
# into L2 while it folds the current tile (see _prefetch_next_tile).
TILE_PREFETCH = True


def _prefetch_next_tile(b, streams, r, j0, columns: int, last: int, tile_rows: int) -> None:
    """Prefetch (into L2) the lines of columns [j0, j0 + columns) of row r + tile_rows of every
    stream: each block brings in its own part of the next tile while it folds this one, so the
    tile's strided reads (a block reads a part of every row) find their lines in cache."""
    fn = prefetch_function(b.module)
    row = b.add(r, const_i64(tile_rows), flags=["nuw", "nsw"])
    for arg, size in streams:
        first = b.mul(b.add(b.mul(row, const_i64(last), flags=["nuw", "nsw"]), j0, flags=["nuw", "nsw"]),
                      const_i64(size), flags=["nuw", "nsw"])
        for line in range(0, columns * size, CACHE_LINE_BYTES):
            at = b.add(first, const_i64(line), flags=["nuw", "nsw"])
            b.call(fn, [b.gep(arg, [at]), ir.Constant(I32, 0), ir.Constant(I32, PREFETCH_LOCALITY),
                        ir.Constant(I32, 1)])


def _unit_rows(group: ReductionGroup, parts: int) -> int:
    """The most reduced rows a column kernel's unit folds: all of them, or with a split into
    `parts` the largest slice's (of the outermost reduced dimension, or of `split_extent`)."""
    rows = math.prod(group.in_dims[d] for d in group.rdims)
    if parts <= 1:
        return rows
    extent = group.split_extent  # what the planner sliced
    return -(-extent // parts) * (rows // extent)


def _store_epilogue(b, position: dict, group, outer, row, j0, j1, gens, leaves, ptrs) -> None:
    """Write the epilogue outputs of columns [j0, j1) of kept row `outer` (linear start `row`)."""
    with for_range(b, j0, j1, "epilogue") as j:
        position["j"] = b.sub(j, j0)
        out_index = position["index"] = Index(b, group.out_dims, multi=list(outer) + [j], linear=b.add(row, j))
        for g, leaf, ptr in zip(gens, leaves, ptrs):
            store_element(b, leaf.select(g(out_index)), b.gep(ptr, [out_index.linear], inbounds=True),
                          leaf.shape.dtype)


def _store_partials(b, heroes, block: dict, scratch: list, j0, j1, at0) -> None:
    """Copy the block accumulators of columns [j0, j1) to the scratch buffers (one per
    accumulator, in hero order), column j at at0 + j."""
    with for_range(b, j0, j1, "partial") as j:
        slot, at = b.sub(j, j0), b.add(at0, j)
        ptrs = iter(scratch)
        for h in heroes:
            for p, et in zip(block[h], h.types):
                value = load_element(b, b.gep(p, [slot], inbounds=True), et)
                store_element(b, value, b.gep(next(ptrs), [at], inbounds=True), et)
