"""Reference semantics of `sort` (any number of operands, a comparator computation, any
dimension) and `topk`.

A comparator that is a single LT or GT compare of operand 0's two parameters is run as a
stable numpy argsort on an order-preserving key; any other comparator is called through the
interpreter from `functools.cmp_to_key` on each slice. Both paths are stable, which satisfies
`is_stable=true` and is one of the orders allowed without it.
"""
from __future__ import annotations

import functools

import numpy as np

from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.opcodes import register_reference
from .op_helpers import attr_bool, attr_dims, attr_int, flatten_value, scalar_args, total_order_key


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


def _fast_key(comp: HloComputation, operand0: np.ndarray):
    """The argsort key of a comparator `compare(p0, p1, LT|GT)` (either operand order), or None."""
    root, params = comp.root, comp.parameters
    if root.opcode != "compare" or len(root.operands) != 2 or operand0.dtype.kind == "c":
        return None
    direction = str(root.attrs.get("direction"))
    a, b = root.operands
    if a is params[1] and b is params[0]:
        direction = {"LT": "GT", "GT": "LT"}.get(direction, direction)
    elif not (a is params[0] and b is params[1]):
        return None
    if direction not in ("LT", "GT"):
        return None
    key = operand0
    if str(root.attrs.get("type", "")) == "TOTALORDER":
        key = total_order_key(key)
    return _ascending_key(key) if direction == "LT" else _descending_key(key)


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


@register_reference("sort")
def sort_reference(inst: HloInstruction, args: list, interp):
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
        key = _fast_key(comp, operands[0])
        if key is not None:
            order = np.argsort(key, axis=dim, kind="stable")
        else:
            moved = [np.moveaxis(o, dim, -1) for o in operands]
            order = np.moveaxis(_order_by_calls(comp, moved, interp), -1, dim)
        results = [np.take_along_axis(o, order, axis=dim) for o in operands]
    return tuple(results) if inst.shape.is_tuple else results[0]


@register_reference("topk")
def topk_reference(inst: HloInstruction, args: list, interp):
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
