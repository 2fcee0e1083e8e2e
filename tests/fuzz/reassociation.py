"""Whether a backend's mismatch is one a different, equally valid reduction order also makes.

XLA leaves the order in which `reduce` combines its elements unspecified, and every backend
uses its own (vector lanes, threads, numpy's pairwise sums in the interpreter). For a well-
conditioned sum the orders agree within the comparison's tolerance; for one that cancels
(`-1e20 + x + 1e20`, which the fuzzer's edge values make) they do not, and no elementwise
tolerance can tell a reassociated answer from a wrong one.

So a mismatch is rechecked against other runs of the reference that reduce in other orders:
the reverse order (every reduced dimension of every `reduce` input flipped: the same
mathematical sum, associated differently) and, for f32/f64 sums, one strictly sequential fold
(`sequential_reduction_reference`). Both are needed: the interpreter sums with numpy's pairwise
scheme, which pairs element j with element j+8, so in a row of 16 where -2^31 and +2^31 sit at
7 and 9 the pairwise sum and its reverse both absorb every small term and give 0, while a
sequential fold (a vector loop's lanes) keeps some of them (the fuzzer's seed 27: the kernel's
6.855 against the interpreter's 0, in both its orders). The CPU's column kernels fold in
windows of 32 rows (`windowed_reduction_reference`): where 1e20 and -1e20 fall in different
windows that order alone cancels them to exactly 0 (seed 63, large graphs). A fourth, precise sum
(`precise_reduction_reference`) stands for an order that cancels the large terms first, where
every f32 order the others take absorbs the small ones (seed 35). An element is *order-sensitive* when a
reference order disagrees there beyond the tolerance; a backend's element is excused only when
it is order-sensitive and the backend is no further from the reference than `SPREAD_FACTOR`
times the orders' largest distance from it (or an order disagrees on NaN-ness: `inf - inf` in
one order only; or the backend's element is NaN where the orders spread at least the element's
size, so that no order fixes the sign a later sqrt or log reads).
A bool or integer output derived from such a sum (a compare, a convert) has no spread: its
element is excused only where another order gives exactly the backend's value. Every other
element must still match, so a wrong result on a well-conditioned element is still a
mismatch. The fuzzer counts excused cases apart (outcomes.ORDER_SENSITIVE), as it does denormals.
"""
from __future__ import annotations

import math

import numpy as np

from hlofuse.runtime.compare import compare_outputs, tolerance_for

# How far beyond the spread of the two reference orders a backend's element may be: other
# orders (vector lanes, threads) can land anywhere in the range that cancellation leaves,
# which two samples only estimate.
SPREAD_FACTOR = 8.0


def reversed_reduction_reference(module, args: list, denormals: str = "flush") -> list[np.ndarray]:
    """The entry's outputs, evaluated by the interpreter with every `reduce` combining its
    elements in the reverse order of the plain interpreter's."""
    from hlofuse.runtime.interpreter.core import Interpreter

    class ReversedReductions(Interpreter):
        def evaluate_instruction(self, inst, args):
            if inst.opcode == "reduce" and not self.batched:
                dims = tuple(int(d) for d in inst.attrs.get("dimensions", ()))
                n = len(args) // 2
                if dims:
                    args = [np.flip(a, axis=dims) if isinstance(a, np.ndarray) and a.ndim > max(dims) else a
                            for a in args[:n]] + list(args[n:])
            return super().evaluate_instruction(inst, args)

    return _entry_outputs(ReversedReductions, module, args, denormals)


def sequential_reduction_reference(module, args: list, denormals: str = "flush") -> list[np.ndarray]:
    """The entry's outputs, evaluated by the interpreter with every f32/f64 sum (`reduce` of one
    input whose reducer adds its two parameters) folded strictly in sequence, the initial value
    first, then the elements in row-major order of the reduced dimensions (numpy's cumulative
    sum, which does not pair). Other reduces are the plain interpreter's."""
    return _entry_outputs(_sums_folded_by(_fold_in_sequence), module, args, denormals)


def precise_reduction_reference(module, args: list, denormals: str = "flush") -> list[np.ndarray]:
    """The entry's outputs with every f32/f64 sum computed as if exactly (f32 sums in f64, f64
    sums by math.fsum) and rounded once: the result of an order that cancels the large terms
    before the small ones can be absorbed (the fuzzer's seed 35: 1e20, -1e20 and -2**31 in a
    column of 32, whose pairwise and sequential f32 sums both give about 0, the exact sum and
    a kernel's vector lanes -2.1e9)."""
    return _entry_outputs(_sums_folded_by(_fold_precisely), module, args, denormals)


def windowed_reduction_reference(module, args: list, denormals: str = "flush") -> list[np.ndarray]:
    """The entry's outputs with every f32/f64 sum folded as the CPU's column kernels fold a
    column (kernels/cpu_reduction_windows.py, modelled by tests/support/windowed_sums.py):
    windows of 32 elements in row-major order, the first starting from the initial value,
    their sums in levels of 32. Where 1e20 and -1e20
    sit in different windows, the terms between them are absorbed and the sum is exactly 0,
    which no other order here gives (the large-graph fuzzer, seed 63: x / x of such a column
    sum was NaN on the CPU, 1 in every reference order)."""
    return _entry_outputs(_sums_folded_by(_fold_in_windows), module, args, denormals)


def _sums_folded_by(fold) -> type:
    """An Interpreter subclass computing every f32/f64 sum by `fold(inst, args)`."""
    from hlofuse.hlo.op_conditions import denormal_mode
    from hlofuse.runtime.interpreter import denormals as flush
    from hlofuse.runtime.interpreter.core import Interpreter

    class FoldedSums(Interpreter):
        # the base class's denormal handling around our fold instead of the registry's rule
        def evaluate_instruction(self, inst, args):
            if not _sequential_sum(inst, args) or self.batched:
                return super().evaluate_instruction(inst, args)
            mode = denormal_mode(inst) if self.denormals == "flush" else "keep"
            if mode == "keep":
                return fold(inst, args)
            return flush.result(inst, mode, args, fold(inst, flush.operands(inst, mode, args)))

    return FoldedSums


def _entry_outputs(interpreter: type, module, args: list, denormals: str) -> list[np.ndarray]:
    """The entry computation's outputs (tuples flattened) evaluated by `interpreter`, an
    Interpreter subclass, on `args`."""
    from hlofuse.runtime.interpreter.core import _bind_argument, flatten

    entry = module.entry
    bound = [_bind_argument(p.shape, a, f"argument {i}") for i, (p, a) in enumerate(zip(entry.parameters, args))]
    result = interpreter(module, denormals=denormals).call(entry, bound)
    return [np.array(a, copy=True) for a in flatten(result)]


def _sequential_sum(inst, args: list) -> bool:
    """Whether `inst` is a reduce of one f32/f64 array whose reducer adds its two parameters."""
    if inst.opcode != "reduce" or len(args) != 2 or not isinstance(args[0], np.ndarray):
        return False
    if args[0].dtype not in (np.float32, np.float64):
        return False
    comp = inst.called_computations()[0]
    root, params = comp.root, comp.parameters
    return (root is not None and root.opcode == "add" and len(params) == 2 and len(comp.instructions) == 3
            and set(root.operands) == set(params))


def _terms(inst, args: list) -> np.ndarray:
    """The reduce's initial value, then its elements, along the last axis (one row per output)."""
    x, init = args[0], np.asarray(args[1], dtype=args[0].dtype)
    dims = tuple(int(d) for d in inst.attrs.get("dimensions", ()))
    kept = [d for d in range(x.ndim) if d not in dims]
    moved = np.transpose(x, kept + list(dims)).reshape([x.shape[d] for d in kept] + [-1])
    start = np.broadcast_to(init, moved.shape[:-1] + (1,))
    return np.concatenate([start, moved], axis=-1)


def _fold_in_sequence(inst, args: list) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.cumsum(_terms(inst, args), axis=-1, dtype=args[0].dtype)[..., -1]


def _fold_in_windows(inst, args: list) -> np.ndarray:
    from tests.support.windowed_sums import windowed_sum  # the kernels' order, as their tests model it

    terms = _terms(inst, args)
    init, elements = terms[..., 0], terms[..., 1:]
    if not elements.shape[-1]:
        return init
    rows = np.moveaxis(elements, -1, 0).reshape(elements.shape[-1], -1).copy()
    with np.errstate(all="ignore"):
        rows[0] = (init.reshape(-1) + rows[0]).astype(rows.dtype)  # the first window starts from the init
        return windowed_sum(rows).reshape(init.shape)


def _fold_precisely(inst, args: list) -> np.ndarray:
    terms = _terms(inst, args)
    with np.errstate(all="ignore"):
        if terms.dtype == np.float32:
            return terms.astype(np.float64).sum(axis=-1).astype(np.float32)
        rows = terms.reshape(-1, terms.shape[-1])
        exact = [math.fsum(r) if np.isfinite(r).all() else float(np.sum(r)) for r in rows.tolist()]
        return np.array(exact, np.float64).reshape(terms.shape[:-1])


def other_order_references(module, args: list, denormals: str = "flush") -> list[list[np.ndarray]]:
    """The outputs in each other reduction order: reversed, sequential, windowed, then precise
    sums."""
    return [reversed_reduction_reference(module, args, denormals),
            sequential_reduction_reference(module, args, denormals),
            windowed_reduction_reference(module, args, denormals),
            precise_reduction_reference(module, args, denormals)]


def _excused(actual: np.ndarray, expected: np.ndarray, *others: np.ndarray) -> np.ndarray:
    """`actual` with every excusable element (see the module docstring) set to the reference's;
    `others`: the reference's outputs in other reduction orders."""
    if actual.shape != expected.shape or any(o.shape != expected.shape for o in others):
        return actual
    if expected.dtype.kind in "biu":
        return _excused_exactly(actual, expected, *others)
    if expected.dtype.kind not in "fc":
        return actual
    rtol, atol = tolerance_for(expected.dtype)
    e = expected.astype(np.complex128 if expected.dtype.kind == "c" else np.float64)
    a = actual.astype(e.dtype)
    spread = np.zeros(e.shape)
    order_nan = np.zeros(e.shape, dtype=bool)
    with np.errstate(all="ignore"):
        for other in others:
            o = other.astype(e.dtype)
            distance = np.abs(o - e)
            spread = np.fmax(spread, np.where(np.isfinite(distance), distance, 0.0))
            order_nan |= np.isnan(o) != np.isnan(e)
        sensitive = order_nan | (np.isfinite(spread) & (spread > atol + rtol * np.abs(e)))
        close = np.abs(a - e) <= SPREAD_FACTOR * spread
        # the orders spread at least the element's own size: they do not even fix its sign, so
        # a NaN there is what a sqrt or log after the sum gives in an order that went negative
        # (the fuzzer's seed 34: sqrt of a row where 1e20 and -1e20 cancel, exactly 0.0020;
        # the interpreter's 0, a sequential fold's 1.6, the kernel's vector lanes' NaN)
        sign_unfixed_nan = np.isnan(a) & ~np.isnan(e) & (spread >= np.abs(e))
    excuse = sensitive & (order_nan | close | sign_unfixed_nan)
    if not excuse.any():
        return actual
    out = actual.copy()
    out[excuse] = expected[excuse]
    return out


def _excused_exactly(actual: np.ndarray, expected: np.ndarray, *others: np.ndarray) -> np.ndarray:
    """`_excused` for a bool or integer output (a compare or a convert of a sum): it has no
    spread to be within, so an element is excused only where some other order gives exactly
    the backend's value (the large-graph fuzzer, seeds 85 and 86: `sum < 1e-40` of a column
    whose 1e20 terms cancel, false in the CPU's windowed order and true in the interpreter's)."""
    if actual.dtype != expected.dtype or any(o.dtype != expected.dtype for o in others):
        return actual
    excuse = np.zeros(expected.shape, dtype=bool)
    for other in others:
        excuse |= (other != expected) & (actual == other)
    if not excuse.any():
        return actual
    out = actual.copy()
    out[excuse] = expected[excuse]
    return out


def only_order_sensitive(actual: list, expected: list, *other_orders: list) -> bool:
    """True when every mismatch of `actual` against `expected` is an order-sensitive element
    that `actual` gets within the reference orders' spread (so the outputs match once those
    elements are excused), and at least one element needed excusing. `other_orders`: the
    reference's outputs in one or more other orders (`other_order_references`)."""
    if len(actual) != len(expected) or not other_orders or any(len(o) != len(expected) for o in other_orders):
        return False
    patched = [_excused(np.asarray(a), np.asarray(e), *(np.asarray(o[k]) for o in other_orders))
               for k, (a, e) in enumerate(zip(actual, expected))]
    return all(r.ok for r in compare_outputs(patched, list(expected)))
