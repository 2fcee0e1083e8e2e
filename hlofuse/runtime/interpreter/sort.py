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
- any other comparator is called per comparison from `functools.cmp_to_key`.
"""
from __future__ import annotations

import functools

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
    key = id(inst)
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
    mapped: dict[int, HloInstruction] = {}

    def visit(inst: HloInstruction) -> HloInstruction:
        if id(inst) not in mapped:
            if inst.opcode == "parameter":
                mapped[id(inst)] = comp.add_parameter(inst.shape, "x")
            else:
                mapped[id(inst)] = comp.add_instruction(inst.clone(operands=[visit(o) for o in inst.operands]))
        return mapped[id(inst)]

    comp.root = visit(value)
    return comp


def _sort_key(comp: HloComputation, operands: list[np.ndarray], interp):
    """An argsort key equivalent to a comparator `compare(f(lhs_i), f(rhs_i), LT|GT)` on one
    operand i (f the identity, or any elementwise function such as JAX's NaN and -0
    canonicalisation, evaluated once over the whole operand), or None."""
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
    return _ascending_key(key) if direction == "LT" else _descending_key(key)


def _parameters_of(inst: HloInstruction) -> list[HloInstruction]:
    seen: dict[int, HloInstruction] = {}
    stack = [inst]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        stack.extend(node.operands)
    return [n for n in seen.values() if n.opcode == "parameter"]


def _elementwise(comp: HloComputation) -> bool:
    from .core import is_elementwise_computation

    return is_elementwise_computation(comp)


def _order_by_calls(comp: HloComputation, operands: list[np.ndarray], interp) -> np.ndarray:
    """Stable permutation of each row (last axis) under the comparator, called per comparison."""
    n = operands[0].shape[-1]
    rows = [o.reshape(-1, n) for o in operands]
    dtypes = [o.dtype for o in operands]
    order = np.empty((rows[0].shape[0], n), dtype=np.int64)
    for r in range(rows[0].shape[0]):
        def less(i: int, j: int, r=r) -> bool:
            vals = []
            for row in rows:
                vals.extend([row[r, i], row[r, j]])
            types = [t for t in dtypes for _ in (0, 1)]
            return bool(flatten_value(interp.call(comp, scalar_args(vals, types)))[0])

        def cmp(i: int, j: int) -> int:
            return -1 if less(i, j) else (1 if less(j, i) else 0)

        order[r] = sorted(range(n), key=functools.cmp_to_key(cmp))
    return order.reshape(operands[0].shape)


def _order_by_batched_merges(less, operands: list[np.ndarray]) -> np.ndarray:
    """Stable permutation of each row (last axis) by bottom-up merge sort.

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
    attr_bool(inst, "is_stable")  # validated; both paths below are stable anyway
    comp = inst.attrs["to_apply"]
    if operands[0].ndim == 0 or operands[0].shape[dim] <= 1:
        results = [o.copy() for o in operands]
    else:
        key = _sort_key(comp, operands, interp)
        if key is not None:
            order = np.argsort(key, axis=dim, kind="stable")
        else:
            moved = [np.moveaxis(o, dim, -1) for o in operands]
            less = batched_call(comp, interp)
            if less is not None:
                perm = _order_by_batched_merges(lambda a: less(a)[0], moved)
            else:
                perm = _order_by_calls(comp, moved, interp)
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
