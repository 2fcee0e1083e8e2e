"""Called computations that library rules evaluate per element or per comparison (a sort's
comparator, a scatter's combiner), run on the host instead of through the compiled program.

On the real GPU every `ctx.call` of a scalar computation is a kernel launch plus a copy of
its result back to the host; a sort of 8 rows of 1,237 elements with XLA's TopK comparator
makes about 100,000 of them (minutes, where the CPU backend takes seconds); in the GPU
emulation each is a run of the emulated grid through its driver (about 0.25 ms). A program whose
called computations are that expensive offers a host interpreter instead
(`ProgramBase.host_interpreter`, the target's denormal semantics); these helpers evaluate the
computation with it, elementwise over whole arrays at once where the computation allows
(`Interpreter.call_batched`), else one call per element, still without a device round trip.

The sort algorithm here (a batched stable merge sort and the check that its result is the
one order a strict weak order allows) is this backend's own; the interpreter only evaluates
the comparator.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..hlo.ir import HloComputation
from .interpreter import Interpreter, is_elementwise_computation
from .interpreter.op_helpers import flatten_value

Batched = Callable[[list], list]


def host_calls(ctx, comp: HloComputation) -> tuple[Callable[[list], list], Batched | None]:
    """(per-call, batched) evaluators of scalar computation `comp` for library rule context
    `ctx`. Where `ctx` has a host interpreter (GPU programs, real or emulated:
    `host_interpreter`) both run on the host; elsewhere the per-call one runs `comp` through `ctx` (host programs, whose compiled
    calls are cheap) and the batched one is None, as it is when `comp` is not elementwise. Each
    takes the computation's arguments (0-d arrays, or equal-shaped arrays for the batched one)
    and returns its flattened results as arrays."""
    interp: Interpreter | None = getattr(ctx, "host_interpreter", lambda: None)()
    if interp is None:
        def called(args: list) -> list:
            return flatten_value(ctx.host(ctx.call(comp, args)))

        return called, None

    def one(args: list) -> list:
        return flatten_value(interp.call(comp, args))

    if not is_elementwise_computation(comp):
        return one, None

    def batched(args: list) -> list:
        return flatten_value(interp.call_batched(comp, args))

    return one, batched


def _less_on(less: Batched, rows: list[np.ndarray], i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """less(row[i], row[j]) over every row of `rows` ([r, n] each) for index arrays i, j ([r, m])."""
    args = []
    for row in rows:
        args += [np.take_along_axis(row, i, axis=1), np.take_along_axis(row, j, axis=1)]
    return np.broadcast_to(np.asarray(less(args)[0], dtype=bool), i.shape)  # a constant is 0-d


def batched_stable_order(less: Batched, rows: list[np.ndarray]) -> np.ndarray | None:
    """A stable order of each row of `rows` ([r, n] each, the sort's operands) under the
    batched comparator `less`, by bottom-up merges; None when a merge sends two elements to
    one place (the comparator is no strict weak order). Correct only for a strict weak order:
    check the result with `is_strict_weak_order_result`.

    At each merge of neighbouring sorted runs A and B, an element of A lands after the B
    elements less than it, an element of B after the A elements it is not less than; both
    counts are binary searches run for all elements of all rows together, one batched
    comparator evaluation per search step (about log2(n)^2 evaluations in all)."""
    r, n = rows[0].shape
    perm = np.tile(np.arange(n), (r, 1))
    pos = np.arange(n)
    width = 1
    while width < n:
        start = pos // (2 * width) * (2 * width)
        middle = np.minimum(start + width, n)
        end = np.minimum(start + 2 * width, n)
        in_a = pos < middle
        other_start = np.where(in_a, middle, start)
        lo = np.zeros((r, n), np.int64)
        hi = np.tile(np.where(in_a, end - middle, middle - start), (r, 1))
        while (lo < hi).any():
            active = lo < hi
            mid = (lo + hi) // 2
            other = np.take_along_axis(perm, np.minimum(other_start + mid, n - 1), axis=1)
            # A element a: is other < a (counted)?  B element b: is b < other (then not counted)?
            lhs = np.where(in_a, other, perm)
            rhs = np.where(in_a, perm, other)
            result = _less_on(less, rows, lhs, rhs)
            counted = np.where(in_a, result, ~result)
            lo = np.where(active & counted, mid + 1, lo)
            hi = np.where(active & ~counted, mid, hi)
        new_pos = np.where(in_a, pos - start, pos - middle) + start + lo
        if not (np.sort(new_pos, axis=1) == pos).all():
            return None
        merged = np.empty_like(perm)
        np.put_along_axis(merged, new_pos, perm, axis=1)
        perm = merged
        width *= 2
    return perm


def is_strict_weak_order_result(less: Batched, rows: list[np.ndarray], perm: np.ndarray) -> bool:
    """Whether `perm` ([r, n]) is the stable sorted order of `rows` under a comparator that
    is a strict weak order on them: nothing less than itself; along each sorted row, no
    element less than its predecessor; runs of equivalent elements in input order, each
    element equivalent to its run's first; each run's first greater than the previous run's.
    Then it is the one order XLA's stable sort gives too. A comparator that is no strict weak
    order (LE, a constant true, LT over NaN ...) fails (non-transitivity between runs that are
    not neighbours goes unseen)."""
    r, n = perm.shape
    if not (np.sort(perm, axis=1) == np.arange(n)).all():
        return False
    ident = np.tile(np.arange(n), (r, 1))
    if _less_on(less, rows, ident, ident).any():
        return False
    prev, cur = perm[:, :-1], perm[:, 1:]
    if _less_on(less, rows, cur, prev).any():
        return False
    new_run = _less_on(less, rows, prev, cur)
    if (~new_run & (cur < prev)).any():
        return False  # equivalent neighbours out of input order: not stable
    first_pos = np.maximum.accumulate(np.where(np.c_[np.ones((r, 1), bool), new_run], np.arange(n), 0), axis=1)
    first = np.take_along_axis(perm, first_pos, axis=1)
    inner = ~new_run
    run_first = first[:, 1:]
    if (inner & (_less_on(less, rows, cur, run_first) | _less_on(less, rows, run_first, cur))).any():
        return False
    return not (new_run & ~_less_on(less, rows, first[:, :-1], cur)).any()


def combine_in_rounds(batched: Batched, flats: list[np.ndarray], targets: np.ndarray, values: list[np.ndarray]) -> None:
    """Apply a scatter's combiner for every update in order: flats[k][t] = combiner(flats[..][t],
    values[..][u])[k] for update u with flat target t, updates to one target in their order.
    Round k combines every target's k-th update, all at once (targets are distinct within a
    round), so a target hit m times costs m rounds, not the whole loop m times."""
    m = len(targets)
    if m == 0:
        return
    by_target = np.argsort(targets, kind="stable")
    sorted_targets = targets[by_target]
    first = np.r_[True, sorted_targets[1:] != sorted_targets[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(m), 0))
    rank = np.empty(m, np.int64)
    rank[by_target] = np.arange(m) - group_start
    for k in range(int(rank.max()) + 1):
        chosen = rank == k
        t = targets[chosen]
        results = batched([f[t] for f in flats] + [v[chosen] for v in values])
        for f, res in zip(flats, results):
            f[t] = np.broadcast_to(res, t.shape)
