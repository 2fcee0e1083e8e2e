"""Dynamic-update-slice rewrites at constant start indices, run by the scatter simplifier
(passes/scatter_simplifier.py) after it has turned constant-index scatters into
dynamic-update-slices, so that `x.at[..., 0].set(a)` followed by `x.at[..., 1].set(b)` becomes
one update:

    slice(dus(x, u, s))              -> slice(x)     the slice misses the window
                                     -> slice(u)     the slice lies inside the window
    dus(dus(x, u0, s0), u1, s1)      -> dus(x, u1, s1)              window 1 covers window 0
                                     -> dus(x, concat(u0, u1), s0)  window 1 follows window 0
                                        along one dimension, equal in the others (either order)

The inner dynamic-update-slice must have no other user for the last two (its value would still
be needed); a slice of it that the first rule resolves is no longer a user. Start indices are
taken as the op clamps them (into [0, dim - size]), so every rewrite keeps the result bit for
bit. One dynamic-update-slice of a wider window then fuses as one kernel where the chain was one
kernel per window (an in-place update cannot take another in-place update as its producer).
"""
from __future__ import annotations

from ..hlo.ir import HloInstruction
from ..hlo.shapes import array
from .simplifier_base import scalar_constant

Window = list[tuple[int, int]]  # (start, size) per dimension


def window(dus: HloInstruction) -> Window | None:
    """(start, size) per dimension of what `dus` writes, starts clamped as the op clamps them;
    None unless every start is a constant."""
    if dus.opcode != "dynamic-update-slice" or not dus.shape.is_array:
        return None
    out = []
    for d, (s, n, w) in enumerate(zip(dus.operands[2:], dus.shape.dims, dus.operands[1].shape.dims)):
        v = scalar_constant(s)  # a start index is a scalar: its value, when a constant
        if v is None:
            return None
        out.append((min(max(int(v), 0), n - w), w))
    return out


def slice_of_update(sl: HloInstruction) -> HloInstruction | None:
    """The slice of the operand or of the update that slice `sl` of a dynamic-update-slice
    reads, or None when it reads both (or the starts are not constant)."""
    dus = sl.operands[0]
    win = window(dus)
    if win is None:
        return None
    spec = sl.attrs["slice"]
    # The elements a slice takes along d lie in [lo, hi): outside the window in one dimension
    # means none of them was written.
    if any(hi <= s or lo >= s + w for (lo, hi, _st), (s, w) in zip(spec, win)):
        return HloInstruction("slice", sl.shape, [dus.operands[0]], {"slice": tuple(spec)}, name="slice")
    if all(s <= lo and hi <= s + w for (lo, hi, _st), (s, w) in zip(spec, win)):
        shifted = tuple((lo - s, hi - s, st) for (lo, hi, st), (s, _w) in zip(spec, win))
        return HloInstruction("slice", sl.shape, [dus.operands[1]], {"slice": shifted}, name="slice")
    return None


def merged_update(outer: HloInstruction) -> HloInstruction | None:
    """One dynamic-update-slice for `outer` and the one it updates, or None (see the module
    docstring for when)."""
    inner = outer.operands[0]
    w1, w0 = window(outer), window(inner)
    if w1 is None or w0 is None or len(inner.users) != 1 or inner.is_root():
        return None
    base, u0, u1 = inner.operands[0], inner.operands[1], outer.operands[1]
    if all(s1 <= s0 and s0 + n0 <= s1 + n1 for (s0, n0), (s1, n1) in zip(w0, w1)):
        return HloInstruction("dynamic-update-slice", outer.shape, [base, *outer.operands[1:]],
                              name="dynamic-update-slice")
    differ = [d for d, (a, b) in enumerate(zip(w0, w1)) if a != b]
    if len(differ) != 1:
        return None
    d = differ[0]
    (s0, n0), (s1, n1) = w0[d], w1[d]
    if s0 + n0 == s1:
        first, second, start_from = u0, u1, inner
    elif s1 + n1 == s0:
        first, second, start_from = u1, u0, outer
    else:
        return None
    dims = list(u0.shape.dims)
    dims[d] = n0 + n1
    cat = HloInstruction("concatenate", array(u0.shape.dtype, dims), [first, second], {"dimensions": (d,)},
                         name="concatenate")
    return HloInstruction("dynamic-update-slice", outer.shape, [base, cat, *start_from.operands[2:]],
                          name="dynamic-update-slice")
