"""Row sums whose rows are one vector (f32[n,16] with AVX-512's 16 lanes): a transposed tree.

A row reduction folds each output's row in the vectorised loop and ends it with a horizontal
sum, a chain of shuffles and adds within one register. When the row *is* one vector that chain
is most of the work (sums of |x| over 48 MB as f32[786432,16], one thread: 22-23 GB/s, where
rows of 1024 read 36-38), and vectorising across outputs instead is worse (LLVM's strided
loads: 13 ms against 2.2). This kernel takes LANES rows at a time and reduces them together:
at each level of the tree every pair of vectors (rows a and b, or groups of them) becomes one,
its low half from the two vectors' low halves added to their high halves:

    level 1: [a0+a8 .. a7+a15 | b0+b8 .. b7+b15]     (16 vectors -> 8)
    level 2: [a0+a8+a4+a12 ..  | b.. | c.. | d..]     (8 -> 4), and so on,

until one vector holds the LANES rows' sums in order. Each lane of a row meets the others in
the pairing of a horizontal sum (lane i with lane i + 8, then + 4, + 2, + 1), the reduce's init
joining lane 0 first. The order is the tree's for every output, whatever the split of the
outputs over threads (a last, partial step folds the last LANES rows); the row loop's order
differs (the sums are reassociated either way: tests/codegen/test_short_rows.py checks the bits
against a numpy model of the tree). ~2 shuffles and an add per row and level, and no horizontal sum.

Rows shorter than a vector fold by the same tree without its first levels (`row` < LANES
vectors a step), but LLVM's own vectorisation across outputs does as well or better there
(f32[3145728,4] 1.63 ms against the tree's 1.78, [1572864,8] 1.71 against 1.67, sum and sum of
squares of [n,4] 2.18 against 2.44; load 8): the rule takes rows of exactly one vector.

Only where it is that simple: every reduce a float add of one value over the last dimension
alone, whose rows are exactly one vector of its type, reassociation allowed, no elementwise
outputs written from the loop, the reduction not split across cores.
"""
from __future__ import annotations

from llvmlite import ir

from ...emitters.ir_helpers import I32, Index, const_i64, for_range
from ...hlo.ir import HloComputation
from .loop_hints import forbid_vectorization
from .reduction_groups import ReductionGroup, vector_lanes

# Whether row kernels use the transposed tree where it applies (False: the row loop, as before).
TRANSPOSES_SHORT_ROWS = True


def _is_float_add(comp: HloComputation) -> bool:
    """Whether reducer `comp` is add(p0, p1) of two float scalars (either order)."""
    root = comp.root
    params = comp.parameters
    return (len(params) == 2 and root.opcode == "add" and root.shape.is_array and root.shape.dtype.is_float
            and all(op.opcode == "parameter" for op in root.operands)
            and sorted(op.parameter_number for op in root.operands) == [0, 1])


def transposes(target, group: ReductionGroup, heroes, extras: list, split: bool) -> bool:
    """Whether `group`'s row kernel folds its rows by the transposed tree (module docstring)."""
    if not TRANSPOSES_SHORT_ROWS or split or extras or not target.reassociate_reductions:
        return False
    if not group.in_dims or group.rdims != (len(group.in_dims) - 1,):
        return False
    if not all(h.n == 1 and _is_float_add(h.comp) and h.types[0].bits >= 32 for h in heroes):
        return False
    lanes, row = vector_lanes(target, group.heroes), group.in_dims[-1]
    return row == lanes >= 2 and lanes & (lanes - 1) == 0 and group.out_elements >= lanes


def _tree(b: ir.IRBuilder, vectors: list, lanes: int, row: int, flags) -> ir.Value:
    """The transposed tree over `vectors` (`row` of them, each `lanes // row` whole rows of
    `row` lanes): one vector whose lane r is row r's sum."""
    width = row // 2  # lanes of one row (or group) that each level adds to the other half
    while len(vectors) > 1:
        low, high = [], []
        for start in range(0, lanes, 2 * width):  # each group of `width` pairs in the first vector ...
            low += list(range(start, start + width))
            high += list(range(start + width, start + 2 * width))
        # ... and the same groups of the second vector (its lanes numbered from `lanes`)
        low += [lanes + i for i in low]
        high += [lanes + i for i in high]
        pairs = []
        for a, c in zip(vectors[0::2], vectors[1::2]):
            lo = b.shuffle_vector(a, c, ir.Constant(ir.VectorType(I32, lanes), low))
            hi = b.shuffle_vector(a, c, ir.Constant(ir.VectorType(I32, lanes), high))
            pairs.append(b.fadd(lo, hi, flags=flags))
        vectors = pairs
        width //= 2
    return vectors[0]


def emit_tree_rows(b: ir.IRBuilder, em, group: ReductionGroup, heroes, begin: ir.Value, end: ir.Value,
                   finish) -> None:
    """Fold outputs [begin, end) of a row group (`transposes`: at least LANES outputs) LANES at
    a time and call `finish(u, values)` for each output u (`values`: per hero, its folded
    values), in a loop over the step's outputs. A last, partial step folds the LANES rows that
    end at `end` (or start at 0) and writes only those not written yet: every output is folded
    by the same tree, whatever the split of the outputs over threads."""
    lanes, row = vector_lanes(em.target, group.heroes), group.in_dims[-1]
    floor = b.select(b.icmp_signed(">=", end, const_i64(lanes)), b.sub(end, const_i64(lanes)), const_i64(0))
    flags = ("reassoc", "contract")
    with b.goto_entry_block():
        sums = {h: b.alloca(ir.ArrayType(h.reg_types[0], lanes), name="tree.sums") for h in heroes}
        for slot in sums.values():
            slot.align = 64
    with for_range(b, begin, end, "tree", step=lanes, unroll=False) as o0:
        start = b.select(b.icmp_signed("<", o0, floor), o0, floor)
        outputs = [Index(b, group.out_dims, linear=b.add(start, const_i64(r), flags=["nuw", "nsw"]))
                   for r in range(lanes)]
        trees = {}
        for h in heroes:
            init = h.init_values(b)[0]
            vectors = []  # the step's LANES rows, contiguous: `row` vectors
            for k in range(row):
                vec = ir.Constant(ir.VectorType(h.reg_types[0], lanes), ir.Undefined)
                for j in range(lanes):
                    r, column = divmod(k * lanes + j, row)
                    index = Index(b, group.in_dims, multi=list(outputs[r].multi) + [const_i64(column)])
                    x = h.inputs[0](index)
                    if column == 0:  # the init joins a row's lane 0 first, as in LLVM's vectorised reduction
                        x = em.call_scalar(h.comp, [init, x], reduction=True)
                    vec = b.insert_element(vec, x, ir.Constant(I32, j))
                vectors.append(vec)
            trees[h] = _tree(b, vectors, lanes, row, flags)
        # The outputs' epilogue: a full step's written lane by lane (the SLP vectorizer stores a
        # plain reduce's LANES outputs as one vector; as a loop, LLVM merged it with the partial
        # step's into a memcpy call every step), the partial step's by a loop.
        stop = b.add(start, const_i64(lanes), flags=["nuw", "nsw"])
        stop = b.select(b.icmp_signed("<", stop, end), stop, end)
        with b.if_else(b.icmp_signed("==", b.sub(stop, o0), const_i64(lanes)), likely=True) as (full, partial):
            with full:
                for r in range(lanes):
                    finish(b.add(o0, const_i64(r), flags=["nuw", "nsw"]),
                           {h: [b.extract_element(trees[h], ir.Constant(I32, r))] for h in heroes})
            with partial:
                for h in heroes:
                    b.store(trees[h], b.bitcast(sums[h], trees[h].type.as_pointer()))
                with for_range(b, o0, stop, "tree.last") as u:
                    r = b.sub(u, start, flags=["nuw", "nsw"])
                    finish(u, {h: [b.load(b.gep(sums[h], [const_i64(0), r], inbounds=True))] for h in heroes})
    forbid_vectorization(o0)
