"""Row reductions over several reduced loops: each run of the innermost loop folds into
accumulators of its own, combined into the running ones after it (cpu_reduction.py's row
kernels call `own_innermost_accumulators` around that loop)."""
from __future__ import annotations

import numpy as np

from .reduction_groups import ReduceHero, ReductionGroup


# The innermost reduced loop's extent from which each of its runs folds into accumulators of its
# own (`own_innermost_accumulators`): shorter loops are not worth the reducer call per run.
OWN_ACCUMULATOR_EXTENT = 16


def own_innermost_accumulators(b, em, group: ReductionGroup, heroes, slots: dict, arg_rows: dict, fast: dict):
    """(before, after) for `_reduced_loops`: each run of the innermost reduced loop starts its
    heroes' accumulators from their init values and folds them into the running ones with the
    reducer after it; None where that does not apply.

    With one accumulator through all the reduced loops, LLVM's vectorizer seeds lane 0 of the
    innermost loop's vector accumulators with the running total of everything before: a sum of
    654,704,640 ones came out 0.46% low, lane 0's ones lost once the total passed 2^24 (XLA's
    simplifier test modules; the interpreter and XLA:CPU give it exactly). Folding each run
    separately keeps every lane's count to the run's, as a tree does. Only where the target
    reassociates reductions (the order is then free; an in-order reduction keeps its one
    accumulator), for heroes folded by their reducer (max/min and argmax rows have their own
    exact paths), with at least two reduced loops and an innermost one of
    OWN_ACCUMULATOR_EXTENT elements or more, and only for sums from a constant zero
    (`sum_from_zero`): each run starts from the init value, which must be the reducer's
    identity."""
    plain = [h for h in heroes if h not in arg_rows and h not in fast]
    if (len(group.rdims) < 2 or not plain or not all(sum_from_zero(h) for h in plain)
            or not em.target.reassociate_reductions
            or group.in_dims[group.rdims[-1]] < OWN_ACCUMULATOR_EXTENT):
        return None
    saved: dict = {}

    def before() -> None:
        for h in plain:
            saved[h] = [b.load(s) for s in slots[h]]
            for s, v in zip(slots[h], h.init_values(b)):
                b.store(v, s)

    def after() -> None:
        for h in plain:
            res = em.call_scalar(h.comp, saved[h] + [b.load(s) for s in slots[h]], reduction=True)
            for s, v in zip(slots[h], list(res) if isinstance(res, tuple) else [res]):
                b.store(v, s)

    return before, after


def sum_from_zero(h: ReduceHero) -> bool:
    """Whether `h` adds its one input to an accumulator that starts from a constant zero."""
    root = h.comp.root
    if len(h.types) != 1 or root.opcode != "add" or set(root.operands) != set(h.comp.parameters):
        return False
    init = h.inst.operands[1]
    while init.opcode == "broadcast":
        init = init.operands[0]
    if init.opcode != "constant" or getattr(init, "literal", None) is None:
        return False
    value = np.asarray(init.literal)
    return value.size > 0 and bool(np.all(value.astype(np.float64) == 0))
