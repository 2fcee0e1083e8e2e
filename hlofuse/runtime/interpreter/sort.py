"""Reference semantics of `sort` (any number of operands, a comparator computation, any
dimension) and `topk`.

Three paths, all stable (which satisfies `is_stable=true` and is one of the orders allowed
without it):
- a comparator `compare(f(lhs_i), f(rhs_i), LT|GT)` on one operand i, with f the identity or
  any elementwise function (JAX canonicalises NaN and -0 that way), runs as a numpy argsort on
  an order-preserving key computed from f over the whole operand at once;
- an elementwise comparator (what JAX emits: NaN/-0 canonicalisation, several keys) runs a
  bottom-up merge sort whose merges place every element by a binary search, so that each
  search step is one batched evaluation of the comparator over all elements;
- any other comparator is called per comparison, in the order XLA:CPU's sort calls it.

The first two paths give the one stable order a strict weak order allows. A comparator that
is not one (`LE`, a constant, `LT` over NaN ...) has no such order: XLA:CPU then returns
whatever its `std::stable_sort` (libstdc++) does with it, which is deterministic, and what
its `std::sort` does, which is deterministic up to 16 elements (an insertion sort) and
undefined beyond (XLA may crash). The reference reproduces those algorithms
(`comparator_sort_order`), used whenever a fast path's result shows the comparator is not
a strict weak order; either way the result is a permutation of the input.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.opcodes import register_reference
from .op_helpers import attr_bool, attr_dims, attr_int, batched_call, flatten_value, scalar_args, total_order_key


def _descending_key(key: np.ndarray) -> np.ndarray:
    """A key whose ascending order is the descending order of `key` (ties stay ties)."""
    if key.dtype == np.bool_:
        return ~key
    if key.dtype.kind in "iu":
        return ~key  # bitwise not reverses the order of signed and unsigned integers alike
    return -key.astype(np.float64) if key.dtype.kind == "V" else -key


def _ascending_key(key: np.ndarray) -> np.ndarray:
    # ml_dtypes floats (bfloat16, float8) sort through float32, which orders them identically.
    return key.astype(np.float32) if key.dtype.kind == "V" else key


def _canonical(inst: HloInstruction, side: int, memo: dict) -> tuple | None:
    """A structural form of the value `inst` computes from comparator parameters of parity
    `side` (0: the lhs parameters 2i, 1: the rhs parameters 2i+1), with each parameter named
    by its operand index i; None if it reads a parameter of the other side."""
    key = inst
    if key not in memo:
        if inst.opcode == "parameter":
            number = inst.parameter_number
            memo[key] = ("parameter", number // 2) if number % 2 == side else None
        else:
            operands = [_canonical(o, side, memo) for o in inst.operands]
            if any(o is None for o in operands):
                memo[key] = None
            else:
                literal = None if inst.literal is None else (np.asarray(inst.literal).tobytes(),
                                                             str(np.asarray(inst.literal).dtype))
                attrs = tuple(sorted((k, str(v)) for k, v in inst.attrs.items() if k != "metadata"))
                memo[key] = (inst.opcode, inst.shape.to_text(False), attrs, literal, tuple(operands))
    return memo[key]


def _key_computation(value: HloInstruction) -> HloComputation:
    """A computation of the one parameter `value` reads, computing `value`: the key function f
    of a comparator compare(f(lhs), f(rhs))."""
    comp = HloComputation("sort_key")
    mapped: dict[HloInstruction, HloInstruction] = {}

    def visit(inst: HloInstruction) -> HloInstruction:
        if inst not in mapped:
            if inst.opcode == "parameter":
                mapped[inst] = comp.add_parameter(inst.shape, "x")
            else:
                mapped[inst] = comp.add_instruction(inst.clone(operands=[visit(o) for o in inst.operands]))
        return mapped[inst]

    comp.root = visit(value)
    return comp


UNORDERED = "unordered"  # _sort_key's answer for a key comparator over NaN


def _sort_key(comp: HloComputation, operands: list[np.ndarray], interp):
    """An argsort key equivalent to a comparator `compare(f(lhs_i), f(rhs_i), LT|GT)` on one
    operand i (f the identity, or any elementwise function such as JAX's NaN and -0
    canonicalisation, evaluated once over the whole operand); UNORDERED when that key holds a
    NaN under a non-TOTALORDER compare; else None."""
    root = comp.root
    if root.opcode != "compare" or len(root.operands) != 2:
        return None
    direction = str(root.attrs.get("direction"))
    if direction not in ("LT", "GT"):
        return None
    a, b = root.operands
    ca, cb = _canonical(a, 0, {}), _canonical(b, 1, {})
    if ca is None or cb is None:  # maybe compare(f(rhs), f(lhs)): the opposite direction
        a, b = b, a
        direction = "GT" if direction == "LT" else "LT"
        ca, cb = _canonical(a, 0, {}), _canonical(b, 1, {})
    if ca is None or ca != cb:
        return None
    used = {n // 2 for n in (p.parameter_number for p in _parameters_of(a))}
    if len(used) != 1:
        return None  # a constant comparator, or a key computed from several operands
    i = used.pop()
    if a.opcode == "parameter":
        key = operands[i]
    else:
        key_comp = _key_computation(a)
        call_batched = getattr(interp, "call_batched", None)
        if call_batched is None or not _elementwise(key_comp):
            return None
        key = np.asarray(flatten_value(call_batched(key_comp, [operands[i]]))[0])
        if key.shape != operands[i].shape:
            key = np.broadcast_to(key, operands[i].shape)
    if key.dtype.kind == "c":
        return None
    if str(root.attrs.get("type", "")) == "TOTALORDER":
        key = total_order_key(key)
    elif key.dtype.kind in "fV" and np.isnan(key.astype(np.float32)).any():
        # LT/GT with a NaN is no strict weak order (NaN is unordered with everything, yet
        # the other keys are ordered): only XLA's own algorithm gives XLA's permutation.
        return UNORDERED
    return _ascending_key(key) if direction == "LT" else _descending_key(key)


def _parameters_of(inst: HloInstruction) -> list[HloInstruction]:
    seen: dict[HloInstruction, None] = {}  # an ordered set
    stack = [inst]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen[node] = None
        stack.extend(node.operands)
    return [n for n in seen if n.opcode == "parameter"]


def _elementwise(comp: HloComputation) -> bool:
    from .core import is_elementwise_computation

    return is_elementwise_computation(comp)


def _order_by_calls(comp: HloComputation, operands: list[np.ndarray], interp, stable: bool) -> np.ndarray:
    """Permutation of each row (last axis) under the comparator, called per comparison in
    the order XLA:CPU's sort calls it (`comparator_sort_order`)."""
    n = operands[0].shape[-1]
    rows = [o.reshape(-1, n) for o in operands]
    dtypes = [o.dtype for o in operands]
    types = [t for t in dtypes for _ in (0, 1)]
    order = np.empty((rows[0].shape[0], n), dtype=np.int64)
    for r in range(rows[0].shape[0]):
        def less(i: int, j: int, r=r) -> bool:
            vals = []
            for row in rows:
                vals.extend([row[r, i], row[r, j]])
            return bool(flatten_value(interp.call(comp, scalar_args(vals, types)))[0])

        order[r] = comparator_sort_order(n, less, stable)
    return order.reshape(operands[0].shape)


# ---- XLA:CPU's sort algorithms (libstdc++'s std::stable_sort and std::sort) ------------------
_CHUNK = 7  # libstdc++'s _S_chunk_size: runs first sorted by insertion
_INSERTION_LIMIT = 16  # libstdc++'s _S_threshold: std::sort of this many is one insertion sort


def comparator_sort_order(n: int, less: Callable[[int, int], bool], stable: bool = True) -> list[int]:
    """The permutation XLA:CPU's sort gives `n` elements under `less(i, j)` (the comparator
    on elements i and j of the input), for any deterministic comparator, a strict weak order
    or not: libstdc++'s std::stable_sort (a buffered merge sort over insertion-sorted runs of
    7), or for an unstable sort of at most 16 elements std::sort's insertion sort. A larger
    unstable sort with a comparator that is not a strict weak order is undefined in XLA
    (std::sort may read out of bounds); it gets the stable order, a permutation like any."""
    order = list(range(n))
    if n < 2:
        return order
    if not stable and n <= _INSERTION_LIMIT:
        _insertion_sort(order, 0, n, less)
        return order
    half = (n + 1) // 2  # the temporary buffer holds half; both halves sort through it
    _merge_sort_with_buffer(order, 0, half, less)
    _merge_sort_with_buffer(order, half, n, less)
    _merge_adaptive(order, 0, half, n, less)
    return order


def _insertion_sort(a: list[int], lo: int, hi: int, less) -> None:
    """std::__insertion_sort: an element less than the first goes to the front, any other
    moves back while it is less than its predecessor (the `k > lo` guard never fires for a
    deterministic comparator: the first element was already found not greater)."""
    for i in range(lo + 1, hi):
        v = a[i]
        if less(v, a[lo]):
            a[lo + 1:i + 1] = a[lo:i]
            a[lo] = v
        else:
            k = i
            while k > lo and less(v, a[k - 1]):
                a[k] = a[k - 1]
                k -= 1
            a[k] = v


def _move_merge(x: list[int], y: list[int], less) -> list[int]:
    """std::__move_merge: take from `y` only when its head is less than `x`'s."""
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        if less(y[j], x[i]):
            out.append(y[j])
            j += 1
        else:
            out.append(x[i])
            i += 1
    return out + x[i:] + y[j:]


def _merge_sort_loop(src: list[int], step: int, less) -> list[int]:
    """std::__merge_sort_loop: merge neighbouring runs of `step` (the last pair may be short)."""
    out, i, n = [], 0, len(src)
    while n - i >= 2 * step:
        out += _move_merge(src[i:i + step], src[i + step:i + 2 * step], less)
        i += 2 * step
    tail = min(n - i, step)
    return out + _move_merge(src[i:i + tail], src[i + tail:], less)


def _merge_sort_with_buffer(a: list[int], lo: int, hi: int, less) -> None:
    """std::__merge_sort_with_buffer: insertion-sort runs of 7, then merge passes into the
    buffer and back, two per round (the second may only copy)."""
    i = lo
    while hi - i >= _CHUNK:
        _insertion_sort(a, i, i + _CHUNK, less)
        i += _CHUNK
    _insertion_sort(a, i, hi, less)
    seg, step = a[lo:hi], _CHUNK
    while step < hi - lo:
        seg = _merge_sort_loop(seg, step, less)
        step *= 2
        seg = _merge_sort_loop(seg, step, less)
        step *= 2
    a[lo:hi] = seg


def _merge_adaptive(a: list[int], lo: int, mid: int, hi: int, less) -> None:
    """std::__merge_adaptive with a buffer large enough: a forward merge when the first run
    is the shorter, else a backward one (which compares the runs' tails)."""
    x, y = a[lo:mid], a[mid:hi]
    if len(x) <= len(y):
        a[lo:hi] = _move_merge(x, y, less)
        return
    out = [0] * (hi - lo)
    r, i, j = hi - lo, len(x) - 1, len(y) - 1
    while i >= 0 and j >= 0:
        r -= 1
        if less(y[j], x[i]):
            out[r] = x[i]
            i -= 1
        else:
            out[r] = y[j]
            j -= 1
    out[:r] = x[:i + 1] + y[:j + 1]  # one of them is empty
    a[lo:hi] = out


def _is_strict_weak_result(batched_less, rows: list[np.ndarray], perm: np.ndarray) -> bool:
    """Whether `perm` (a candidate order of each row of `rows`) is the stable order of a
    strict weak order: every row a permutation, less(x, x) false, and along each sorted row
    blocks of equivalent elements (in input order) whose heads increase strictly, every
    element equivalent to its block's head. A comparator breaking these (LE, a constant, LT
    over NaN, NE ...) makes the caller fall back to XLA's own algorithm. Non-transitivity
    between blocks that are not neighbours goes unseen (such comparators are exotic)."""
    r, n = perm.shape
    if not np.array_equal(np.sort(perm, axis=1), np.broadcast_to(np.arange(n), (r, n))):
        return False

    def less(i: np.ndarray, j: np.ndarray) -> np.ndarray:
        args = []
        for row in rows:
            args.extend([np.take_along_axis(row, i, axis=1), np.take_along_axis(row, j, axis=1)])
        return np.broadcast_to(np.asarray(batched_less(args), dtype=bool), i.shape)  # a constant is 0-d

    ident = np.broadcast_to(np.arange(n), (r, n)).copy()
    if less(ident, ident).any():
        return False
    prev, cur = perm[:, :-1], perm[:, 1:]
    if less(cur, prev).any():
        return False
    step = less(prev, cur)  # a new block starts at each strict step
    head_pos = np.maximum.accumulate(np.where(np.c_[np.ones((r, 1), bool), step], np.arange(n), 0), axis=1)
    heads = np.take_along_axis(perm, head_pos, axis=1)
    inner = head_pos[:, 1:] != np.arange(1, n)
    if (inner & (less(cur, heads[:, 1:]) | less(heads[:, 1:], cur) | (cur < prev))).any():
        return False
    prev_heads = heads[:, :-1]  # at a block start: the previous block's head
    return not (~inner & ~less(prev_heads, cur)).any()


def _order_by_batched_merges(less, operands: list[np.ndarray]) -> np.ndarray | None:
    """Stable permutation of each row (last axis) by bottom-up merge sort; None when a merge
    places two elements at one position (a comparator that is no strict weak order).

    When runs A and B (each sorted) merge, an element of A moves forward by the number of B
    elements strictly less than it, and an element of B by the number of A elements not
    greater than it; both counts are binary searches, and every search step evaluates `less`
    once over all rows and elements together.
    """
    n = operands[0].shape[-1]
    rows = [o.reshape(-1, n) for o in operands]
    r = rows[0].shape[0]
    perm = np.broadcast_to(np.arange(n), (r, n)).copy()
    pos = np.arange(n)
    width = 1
    while width < n:
        vals = [np.take_along_axis(row, perm, axis=1) for row in rows]
        start = pos // (2 * width) * (2 * width)
        in_a = pos - start < width
        b_len = np.clip(np.minimum(start + 2 * width, n) - (start + width), 0, None)
        other_start = np.where(in_a, start + width, start)
        other_len = np.where(in_a, b_len, width)
        local = np.where(in_a, pos - start, pos - start - width)
        lo = np.zeros((r, n), dtype=np.int64)
        hi = np.broadcast_to(other_len, (r, n)).astype(np.int64)
        while np.any(lo < hi):
            active = lo < hi
            mid = (lo + hi) // 2
            at = np.clip(other_start + np.minimum(mid, np.maximum(other_len - 1, 0)), 0, n - 1)
            other = [np.take_along_axis(v, at, axis=1) for v in vals]
            # A element a: is B[mid] < a?   B element b: is b < A[mid]? (then not counted)
            args = []
            for v, o in zip(vals, other):
                args.extend([np.where(in_a, o, v), np.where(in_a, v, o)])
            result = np.asarray(less(args), dtype=bool)
            counted = np.where(in_a, result, ~result)
            lo = np.where(active & counted, mid + 1, lo)
            hi = np.where(active & ~counted, mid, hi)
        new_pos = start + local + lo
        if not np.array_equal(np.sort(new_pos, axis=1), np.broadcast_to(pos, new_pos.shape)):
            return None  # two elements want one place: the comparator is no strict weak order
        new_perm = np.empty_like(perm)
        np.put_along_axis(new_perm, new_pos, perm, axis=1)
        perm = new_perm
        width *= 2
    return perm.reshape(operands[0].shape)


@register_reference("sort")
def sort_reference(inst: HloInstruction, args: list, interp) -> np.ndarray | tuple:
    """`sort(operands...), dimensions={d}, is_stable=..., to_apply=comparator`."""
    operands = [np.asarray(a) for a in args]
    dims = attr_dims(inst, "dimensions")
    if len(dims) != 1:
        raise UnsupportedError(f"sort {inst.name}: dimensions must name exactly one dimension")
    dim = dims[0] % max(operands[0].ndim, 1)
    stable = attr_bool(inst, "is_stable")
    comp = inst.attrs["to_apply"]
    if operands[0].ndim == 0 or operands[0].shape[dim] <= 1 or operands[0].size == 0:
        results = [o.copy() for o in operands]
    else:
        key = _sort_key(comp, operands, interp)
        if key is not None and key is not UNORDERED:
            order = np.argsort(key, axis=dim, kind="stable")
        else:
            moved = [np.moveaxis(o, dim, -1) for o in operands]
            less = batched_call(comp, interp) if key is None else None
            perm = None
            if less is not None:
                n = moved[0].shape[-1]
                merged = _order_by_batched_merges(lambda a: less(a)[0], moved)
                rows = [m.reshape(-1, n) for m in moved]
                if merged is not None and _is_strict_weak_result(lambda a: less(a)[0], rows, merged.reshape(-1, n)):
                    perm = merged
            if perm is None:
                perm = _order_by_calls(comp, moved, interp, stable)
            order = np.moveaxis(perm, -1, dim)
        results = [np.take_along_axis(o, order, axis=dim) for o in operands]
    return tuple(results) if inst.shape.is_tuple else results[0]


@register_reference("topk")
def topk_reference(inst: HloInstruction, args: list, interp) -> tuple:
    """`topk(operand), k=K, largest=true|false` along the last dimension: (values, s32 indices),
    ordered largest (or smallest) first, ties by lower index; floats in total order, so NaN
    counts as the largest value."""
    x = np.asarray(args[0])
    k = attr_int(inst, "k")
    key = _ascending_key(total_order_key(x))
    if attr_bool(inst, "largest", True):
        key = _descending_key(key)
    order = np.argsort(key, axis=-1, kind="stable")[..., :k]
    values = np.take_along_axis(x, order, axis=-1)
    index_dtype = inst.shape.elements[1].dtype.numpy if inst.shape.is_tuple else np.int32
    return values, order.astype(index_dtype)
