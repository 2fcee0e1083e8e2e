"""The CPU reduction kernels' nested loops over the reduced dimensions (`reduced_loops`), and
the accumulators of its own each run of the innermost one gets in a float sum over several
reduced loops (`own_innermost_accumulators`, passed to it by cpu_reduction.py's row kernels)."""
from __future__ import annotations

from llvmlite import ir

from ...emitters.ir_helpers import const_i64, for_range
from .loop_hints import forbid_vectorization, interleave
from .reduction_groups import ReduceHero, ReductionGroup


def reduced_loops(b, group: ReductionGroup, body, level: int = 0, fixed=(), outer=None,
                  vectorize: bool = True, unroll: bool = True, accumulators: int = 1,
                  around_innermost=None) -> None:
    """Nested loops over the reduced dimensions, outermost first; body(values) inside.
    `outer` = (lo, hi) restricts the outermost one (a slice of a split reduction); with
    `vectorize` False LLVM is told not to vectorise any of them, with `unroll` False not to
    unroll any of them (loop_hints). `accumulators` > 1 asks for that many interleaved vectors
    in the innermost one and keeps it rolled (reduction_groups.row_accumulators).
    `around_innermost` = (before, after): called around each run of the innermost loop when
    there are outer reduced loops (`own_innermost_accumulators`)."""
    if level == len(group.rdims):
        body(list(fixed))
        return
    size = group.in_dims[group.rdims[level]]
    lo, hi = outer if (level == 0 and outer is not None) else (const_i64(0), const_i64(size))
    innermost = level == len(group.rdims) - 1
    interleaved = accumulators > 1 and innermost
    wrapped = around_innermost is not None and innermost and level > 0
    if wrapped:
        around_innermost[0]()
    with for_range(b, lo, hi, f"r{level}", unroll=unroll and not interleaved) as i:
        reduced_loops(b, group, body, level + 1, tuple(fixed) + (i,), vectorize=vectorize, unroll=unroll,
                      accumulators=accumulators, around_innermost=around_innermost)
    if wrapped:
        around_innermost[1]()
    if not vectorize:
        forbid_vectorization(i)
    if interleaved:
        interleave(i, accumulators)


# The innermost reduced loop's extent from which each of its runs folds into accumulators of its
# own (`own_innermost_accumulators`): shorter loops are not worth the reducer call per run.
OWN_ACCUMULATOR_EXTENT = 16

# Float types whose sums get accumulators of their own per run (register types that hold the
# float itself; bf16 and the narrow floats are held as integers and widened per fold).
_OWN_RUN_TYPES = ("f16", "f32", "f64")


def own_innermost_accumulators(b, em, group: ReductionGroup, heroes, slots: dict, arg_rows: dict, fast: dict):
    """(before, after) for `reduced_loops`: each run of the innermost reduced loop starts its
    float sums' accumulators from -0.0 (the identity of float addition) and adds them into the
    running ones after it; None where that does not apply.

    With one accumulator through all the reduced loops, LLVM's vectorizer seeds lane 0 of the
    innermost loop's vector accumulators with the running total of everything before: a sum of
    654,704,640 ones came out 0.46% low, lane 0's ones lost once the total passed 2^24 (XLA's
    simplifier test modules; the interpreter and XLA:CPU give it exactly). Folding each run
    separately keeps every lane's count to the run's, as a tree does.

    The rule depends only on the reduce (its reducer, element type, reduced extents and the
    target), never on where its init value comes from or what else the kernel computes, so a
    reduction computes the same bits alone and in a multi-output kernel: the running total
    starts from the init value and each run from the identity, whatever the init is. Only where
    the target reassociates reductions (an in-order reduction keeps its one accumulator), for
    heroes folded by their reducer (max/min and argmax rows have their own exact paths), with at
    least two reduced loops and an innermost one of OWN_ACCUMULATOR_EXTENT elements or more."""
    plain = [h for h in heroes if h not in arg_rows and h not in fast]
    if (len(group.rdims) < 2 or not plain or not all(float_sum(h) for h in plain)
            or not em.target.reassociate_reductions
            or group.in_dims[group.rdims[-1]] < OWN_ACCUMULATOR_EXTENT):
        return None
    saved: dict = {}

    def before() -> None:
        for h in plain:
            saved[h] = [b.load(s) for s in slots[h]]
            for s, t in zip(slots[h], h.reg_types):
                b.store(ir.Constant(t, -0.0), s)

    def after() -> None:
        for h in plain:
            res = em.call_scalar(h.comp, saved[h] + [b.load(s) for s in slots[h]], reduction=True)
            for s, v in zip(slots[h], list(res) if isinstance(res, tuple) else [res]):
                b.store(v, s)

    return before, after


def float_sum(h: ReduceHero) -> bool:
    """Whether `h` is a sum of one f16/f32/f64 input: its reducer adds its two parameters."""
    root = h.comp.root
    return (len(h.types) == 1 and h.types[0].name in _OWN_RUN_TYPES and root.opcode == "add"
            and len(h.comp.parameters) == 2 and set(root.operands) == set(h.comp.parameters))
