"""Column reductions whose vectors start on the input's cache lines (cpu_reduction.py).

A column kernel reading a row of K kept columns (batch-norm statistics of an NHWC batch: K
channels, every other dimension reduced) folds, for each reduced row, the row's K values into
K accumulators with a loop LLVM vectorises across the columns. Its vectors start where the
rows start; numpy's large arrays start 16 bytes into a cache line, so there every 64-byte
vector straddles two lines, and the kernel reads each line twice from L1.

When a row is a whole number of vectors (K elements of K * size bytes, a multiple of 64), the
rows of a unit are one contiguous run of elements, and each vector of the run may as well start
on a line: the kernel peels the first s elements of the run (s: up to the first line boundary,
< one vector; they are the first row's columns 0..s-1) into the accumulators, then folds the
run from there in steps of K elements into a *rotated* block of accumulators, rot[j] for
column (s + j) mod K, and the last K - s elements (the last row's columns s..K-1) into rot[0..]
as well, and rotates the block back. Every column is still folded row after row, in order:
the same operations in the same order as the unrotated kernel, so the same bits.

Measured (one thread, CPU time, interleaved, a 64 MB copy between calls, load 7.7; plain
kernel aligned / 16 bytes off, rotated aligned / 16 bytes off, ms): a sum over f32[32,56,56,96]
1.00 / 1.07, 1.01 / 1.01; sum and sum of squares 1.08 / 1.22, 1.06 / 1.08; of f32[64,56,56,64]
1.42 / 1.61, 1.41 / 1.40. The batch_norm_stats workload on numpy's arrays 1.07-1.11 -> 0.99-1.03
ms (benchmarks/bandwidth_share.py --baseline ...ROTATES_COLUMNS=False, two runs). Wider rows
are several blocks of columns (ReductionGroup.block_columns) and keep the plain loops.
"""
from __future__ import annotations

import math

from llvmlite import ir

from ...emitters.elemental import mem_type
from ...emitters.ir_helpers import I64, Index, const_i64, delinearize, for_range, load_element, store_element
from .args import param_leaf_slots
from .cpu_streaming import VECTOR_BYTES
from .loop_hints import forbid_vectorization, interleave, unroll_count
from .reduction_groups import ReductionGroup

# Whether column kernels rotate their blocks to the input's lines (False: as before).
ROTATES_COLUMNS = True
# Rows a step of the rotated loop (`llvm.loop.unroll.count`; its trip count is known only at run
# time, and LLVM leaves such a loop at one row a step). A sum over 96 columns of f32[32,56,56,96]
# (one thread, CPU time, interleaved, a 64 MB copy between calls, load 7.7): one row a step
# 1.39 ms, two 1.04, four 1.05, the unrotated kernel (whose constant inner loop LLVM unrolls
# by two) 1.06; the loop bodies are the same six loads and adds a row.
ROWS_UNROLL = 2


def stream_columns(induction: ir.PhiInstr) -> None:
    """Hints for the column loop of a block whose accumulators are in L1 (ReductionGroup.in_l1;
    the loop must also be emitted with `unroll=False`): one vector a step, each loaded, added
    to its accumulator and stored before the next. LLVM's own choice, four vectors interleaved
    and the loop unrolled, put a row's loads ahead of their adds and stores, and a sum over
    f32[12288,1024] from memory ran slower: one thread, CPU time, interleaved medians, a 64 MB
    copy between calls, load 6.5: 1.88 ms (26.8 GB/s), one vector a step 1.46 (34.4), a C loop
    of one vector a step 1.39 (36.3), of 16 loads then 16 adds and stores 1.62 (31.0)."""
    interleave(induction, 1)


def line_aligned(slot: ir.AllocaInstr) -> ir.AllocaInstr:
    """`slot` (a block of accumulators) aligned to a cache line: a block beyond the registers
    is loaded and stored a vector at a time every reduced row, and a vector that straddles two
    lines costs two accesses each way (a sum over f32[12288,1024] from memory, one 4 KiB block
    in L1, one thread, CPU time, interleaved medians, load 15: aligned 1.47 ms, 4-byte aligned
    1.68)."""
    slot.align = VECTOR_BYTES
    return slot


def rotated_input(skel, group: ReductionGroup, extras: list) -> tuple[ir.Value, int] | None:
    """(argument, element bytes) of the input a column kernel aligns its vectors to, or
    None where the kernel keeps its plain loops: not a single block of all K columns, more kept
    dimensions than the last, extra outputs (written from the same loop), a row not a whole
    number of 64-byte vectors, or no parameter with the input's elements (the first such
    parameter leaf is the one aligned to; others keep their own alignment)."""
    if not ROTATES_COLUMNS or group.is_row or extras or group.blocks != 1:
        return None
    if group.kept != [len(group.in_dims) - 1] or not all(_reads_only_elements(h) for h in group.heroes):
        return None
    count = math.prod(group.in_dims)
    for slots in param_leaf_slots(skel.comp).values():
        for k, leaf in slots:
            if leaf.is_array and leaf.element_count() == count:
                size = leaf.dtype.byte_size
                if size in (1, 2, 4, 8) and (group.in_dims[-1] * size) % VECTOR_BYTES == 0:
                    return skel.function.args[k], size
                return None
    return None


def _reads_only_elements(hero) -> bool:
    """Whether reduce `hero` folds a value computed from its input's own elements only:
    elementwise ops over parameters of the input's dimensions and scalars. A value read per
    column (batch norm's mean, broadcast along the reduced dimensions) would be read at a
    rotated column, a gather in the vectorised loop: batch-norm training ran 5-6% slower so."""
    dims = tuple(hero.operands[0].shape.dims)
    seen, stack = set(), list(hero.operands[:len(hero.operands) // 2])
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if not i.shape.is_array:
            return False
        if i.shape.rank == 0:
            continue  # a scalar: the same for every element
        if i.opcode == "broadcast":
            if i.operands[0].shape.is_array and i.operands[0].shape.rank == 0:
                continue
            return False
        if tuple(i.shape.dims) != dims or not (i.opcode == "parameter" or i.info.elementwise):
            return False
        stack.extend(i.operands)
    return True


def emit_rotated_fold(b: ir.IRBuilder, em, group: ReductionGroup, heroes, block: dict, aligned: tuple,
                      lo: ir.Value, hi: ir.Value) -> None:
    """Fold the reduced rows [lo, hi) of the outermost reduced dimension (a whole unit's rows)
    into `block` (per hero, its K accumulators, already holding the inits), with the vectors of
    the main loop on the lines of input `aligned` (`rotated_input`)."""
    ptr, size = aligned
    k = group.in_dims[-1]
    per_row = math.prod(group.in_dims[1:])  # elements per index of the outermost dimension
    f0 = b.mul(lo, const_i64(per_row), flags=["nuw", "nsw"])
    f1 = b.mul(hi, const_i64(per_row), flags=["nuw", "nsw"])
    total = b.sub(f1, f0, flags=["nuw", "nsw"])
    address = b.ptrtoint(b.gep(ptr, [b.mul(f0, const_i64(size), flags=["nuw", "nsw"])], inbounds=True), I64)
    to_line = b.and_(b.sub(const_i64(0), address), const_i64(VECTOR_BYTES - 1))
    s = b.udiv(to_line, const_i64(size))
    s = b.select(b.icmp_unsigned("<", s, total), s, total)  # an empty (or tiny) unit peels what it has
    rest = b.sub(total, s, flags=["nuw", "nsw"])
    main_end = b.add(b.add(f0, s, flags=["nuw", "nsw"]),
                     b.mul(b.udiv(rest, const_i64(k)), const_i64(k), flags=["nuw", "nsw"]), flags=["nuw", "nsw"])
    with b.goto_entry_block():
        rot = {h: [line_aligned(b.alloca(mem_type(et), size=k)) for et in h.types] for h in heroes}

    def fold_at(accs_of, f: ir.Value, slot: ir.Value, row: list, column: ir.Value) -> None:
        """Fold element `f` (linear) into slot `slot` of `accs_of`; `row` is its index in the
        reduced dimensions, `column` its kept column (both given: an operand read per column,
        as batch norm's mean, must not divide the linear index per element)."""
        index = Index(b, group.in_dims, multi=list(row) + [column], linear=f)
        for h in heroes:
            addrs = [b.gep(p, [slot], inbounds=True) for p in accs_of[h]]
            accs = [load_element(b, a, et) for a, et in zip(addrs, h.types)]
            for a, r, et in zip(addrs, h.fold(em, accs, index), h.types):
                store_element(b, r, a, et)

    # The loops run once a unit (up to K elements each): kept rolled and scalar, LLVM's time
    # goes to the main loop (vectorised, they doubled the kernel's compile time).
    def once(name: str, lo_: ir.Value, hi_: ir.Value):
        return for_range(b, lo_, hi_, name, unroll=False)

    def copy(into_rot: bool) -> None:
        """rot[j] = block[(s + j) mod K], the column rot[j] accumulates (or back): two
        contiguous runs, j < K - s and j >= K - s, each a plain copy that LLVM makes a memcpy
        (a block in L1 is 1,024 columns or more; one loop with a select per element was scalar)."""
        name = "rotate" if into_rot else "unrotate"
        wrap = b.sub(const_i64(k), s, flags=["nuw", "nsw"])
        for lo, hi, shift, suffix in ((const_i64(0), wrap, s, ""),
                                      (wrap, const_i64(k), b.sub(s, const_i64(k)), ".wrap")):
            with once(name + suffix, lo, hi) as j:
                c = b.add(j, shift)
                for h in heroes:
                    for p, q, et in zip(block[h], rot[h], h.types):
                        src, dst = (b.gep(p, [c]), b.gep(q, [j])) if into_rot else (b.gep(q, [j]), b.gep(p, [c]))
                        store_element(b, load_element(b, src, et), dst, et)
            forbid_vectorization(j)

    reduced_dims = group.in_dims[:-1]

    def row_index(start: ir.Value) -> list:
        """The reduced dimensions' index of the row starting at linear `start` (a multiple of K)."""
        return delinearize(b, b.udiv(start, const_i64(k)), reduced_dims)

    # The first row's columns before the first line boundary, in place.
    first = row_index(f0)
    with once("peel", const_i64(0), s) as t:
        fold_at(block, b.add(f0, t, flags=["nuw", "nsw"]), t, first, t)
    forbid_vectorization(t)
    copy(True)
    with for_range(b, b.add(f0, s, flags=["nuw", "nsw"]), main_end, "rows", step=k) as p:
        start = b.sub(p, s, flags=["nuw", "nsw"])  # the row holding the step's first element
        this, after = row_index(start), row_index(b.add(start, const_i64(k), flags=["nuw", "nsw"]))
        with for_range(b, const_i64(0), const_i64(k), "col", unroll=not group.in_l1) as j:
            c = b.add(j, s, flags=["nuw", "nsw"])
            wraps = b.icmp_unsigned(">=", c, const_i64(k))
            row = [b.select(wraps, a, t) for t, a in zip(this, after)]
            fold_at(rot, b.add(p, j, flags=["nuw", "nsw"]), j, row, b.select(wraps, b.sub(c, const_i64(k)), c))
        if group.in_l1:
            stream_columns(j)
    forbid_vectorization(p)  # vectorised across the columns, never along the rows (loop_hints)
    if ROWS_UNROLL > 1 and not group.in_l1:
        unroll_count(p, ROWS_UNROLL)
    # The last row's columns from s on: rot[0 ..] (they are columns s, s + 1, ...).
    last = row_index(b.sub(main_end, s, flags=["nuw", "nsw"]))
    with once("tail", const_i64(0), b.sub(f1, main_end, flags=["nuw", "nsw"])) as t:
        fold_at(rot, b.add(main_end, t, flags=["nuw", "nsw"]), t, last, b.add(s, t, flags=["nuw", "nsw"]))
    forbid_vectorization(t)
    copy(False)
