"""Whether a backend's mismatch is one a different, equally valid reduction order also makes.

XLA leaves the order in which `reduce` combines its elements unspecified, and every backend
uses its own (vector lanes, threads, numpy's pairwise sums in the interpreter). For a well-
conditioned sum the orders agree within the comparison's tolerance; for one that cancels
(`-1e20 + x + 1e20`, which the fuzzer's edge values make) they do not, and no elementwise
tolerance can tell a reassociated answer from a wrong one.

So a mismatch is rechecked against a second run of the reference that reduces in the reverse
order (every reduced dimension of every `reduce` input flipped: the same mathematical sum,
associated differently). An element is *order-sensitive* when the two reference orders
themselves disagree there beyond the tolerance; a backend's element is excused only when it is
order-sensitive and the backend is no further from the reference than `SPREAD_FACTOR` times the
two orders' own distance (or the orders disagree on NaN-ness: `inf - inf` in one order only).
Every other element must still match, so a wrong result on a well-conditioned element is still a
mismatch. The fuzzer counts excused cases apart (outcomes.ORDER_SENSITIVE), as it does denormals.
"""
from __future__ import annotations

import numpy as np

from hlofuse.runtime.compare import compare_outputs, tolerance_for

# How far beyond the spread of the two reference orders a backend's element may be: other
# orders (vector lanes, threads) can land anywhere in the range that cancellation leaves,
# which two samples only estimate.
SPREAD_FACTOR = 8.0


def reversed_reduction_reference(module, args: list, denormals: str = "flush") -> list[np.ndarray]:
    """The entry's outputs, evaluated by the interpreter with every `reduce` combining its
    elements in the reverse order of the plain interpreter's."""
    from hlofuse.runtime.interpreter.core import Interpreter, _bind_argument, flatten

    class ReversedReductions(Interpreter):
        def evaluate_instruction(self, inst, args):
            if inst.opcode == "reduce" and not self.batched:
                dims = tuple(int(d) for d in inst.attrs.get("dimensions", ()))
                n = len(args) // 2
                if dims:
                    args = [np.flip(a, axis=dims) if isinstance(a, np.ndarray) and a.ndim > max(dims) else a
                            for a in args[:n]] + list(args[n:])
            return super().evaluate_instruction(inst, args)

    entry = module.entry
    bound = [_bind_argument(p.shape, a, f"argument {i}") for i, (p, a) in enumerate(zip(entry.parameters, args))]
    result = ReversedReductions(module, denormals=denormals).call(entry, bound)
    return [np.array(a, copy=True) for a in flatten(result)]


def _excused(actual: np.ndarray, expected: np.ndarray, other_order: np.ndarray) -> np.ndarray:
    """`actual` with every excusable element (see the module docstring) set to the reference's."""
    if expected.dtype.kind not in "fc" or actual.shape != expected.shape or other_order.shape != expected.shape:
        return actual
    rtol, atol = tolerance_for(expected.dtype)
    e = expected.astype(np.complex128 if expected.dtype.kind == "c" else np.float64)
    o = other_order.astype(e.dtype)
    a = actual.astype(e.dtype)
    with np.errstate(all="ignore"):
        spread = np.abs(o - e)
        order_nan = np.isnan(o) != np.isnan(e)
        sensitive = order_nan | (np.isfinite(spread) & (spread > atol + rtol * np.abs(e)))
        close = np.abs(a - e) <= SPREAD_FACTOR * spread
    excuse = sensitive & (order_nan | close)
    if not excuse.any():
        return actual
    out = actual.copy()
    out[excuse] = expected[excuse]
    return out


def only_order_sensitive(actual: list, expected: list, other_order: list) -> bool:
    """True when every mismatch of `actual` against `expected` is an order-sensitive element
    that `actual` gets within the reference orders' spread (so the outputs match once those
    elements are excused), and at least one element needed excusing."""
    if len(actual) != len(expected) or len(other_order) != len(expected):
        return False
    patched = [_excused(np.asarray(a), np.asarray(e), np.asarray(o)) for a, e, o in zip(actual, expected, other_order)]
    return all(r.ok for r in compare_outputs(patched, list(expected)))
