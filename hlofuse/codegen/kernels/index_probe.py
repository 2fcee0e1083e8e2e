"""The index an element of a fused computation reads each instruction at, followed numerically.

Some loop decisions depend on how the output's index maps to the indices the fused computation
reads: where a concatenate or pad changes side along a row (kernels/row_splits.py), how far
apart in a parameter neighbouring output elements are (kernels/transposed_tiles.py). Both follow
numpy arrays of output indices (a few sample rows, or a point and its unit steps) through the
computation: elementwise ops, broadcasts, row-major reshapes and bitcasts, transposes, slices,
reverses, concatenates and pads map them to their operands' indices (`follow_index`); any other
op (dynamic slices, gathers, reductions, dots, ...) ends the walk along that path. The results
only choose loop orders and bounds, never values, so a path the walk does not follow costs
speed at most.
"""
from __future__ import annotations

import numpy as np

from ...hlo.ir import HloInstruction
from ...hlo.opcodes import op_info

# The walk stops after this many instruction visits (a DAG is walked as the tree of its paths).
MAX_VISITS = 2048
# The data movement the walk follows to an operand's index (elementwise ops besides).
FOLLOWED = frozenset({"broadcast", "reshape", "bitcast", "transpose", "slice", "reverse", "concatenate", "pad"})


def follows(inst: HloInstruction) -> bool:
    """Whether the walk maps `inst`'s index to its operands' (or `inst` is a leaf: nothing to
    map)."""
    return inst.opcode in FOLLOWED or inst.info.elementwise or inst.info.arity == 0


def strides(param: HloInstruction, idx: list[np.ndarray]) -> np.ndarray | None:
    """The element offsets in row-major `param` of probe columns 1.. from probe column 0 (index
    arrays `idx` of shape [1, columns], as `follow_index` returns them), or None for a parameter
    not read row-major."""
    shape = param.shape
    if not shape.is_array or not shape.is_row_major() or not idx:
        return None
    linear = np.zeros_like(idx[0])
    for v, size in zip(idx, shape.dims):
        linear = linear * size + v
    return linear[0, 1:] - linear[0, 0]


def _dims(inst: HloInstruction) -> tuple[int, ...]:
    return tuple(inst.shape.dims)


def delinearize_array(linear: np.ndarray, dims: tuple[int, ...]) -> list[np.ndarray]:
    multi = []
    for size in reversed(dims):
        multi.append(linear % size if size else linear * 0)
        linear = linear // size if size else linear
    return multi[::-1]


def _linearize(multi: list[np.ndarray], dims: tuple[int, ...]) -> np.ndarray:
    linear = np.zeros_like(multi[0]) if multi else np.zeros(1, np.int64)
    for v, size in zip(multi, dims):
        linear = linear * size + v
    return linear


def _operands(inst: HloInstruction, multi: list[np.ndarray], valid: np.ndarray, sides: list | None) -> list:
    """(operand, its index arrays, validity) for each operand `inst` reads at an index that
    follows from `multi`, recording in `sides` the side a concatenate or pad takes at each
    column (with its validity); [] where the walk stops."""
    op = inst.opcode
    if not inst.shape.is_array:
        return []
    if op in FOLLOWED:
        src = inst.operands[0]
        if not src.shape.is_array:
            return []
    if op == "broadcast":
        return [(inst.operands[0], [multi[d] for d in inst.attrs.get("dimensions", ())], valid)]
    if op in ("reshape", "bitcast"):
        src = inst.operands[0]
        if not (inst.shape.is_row_major() and src.shape.is_row_major()):
            return []
        # (a rank-0 value reshaped has no index arrays: its linear index is 0 at every probe)
        linear = _linearize(multi, _dims(inst)) if multi else np.zeros(valid.shape, dtype=np.int64)
        return [(src, delinearize_array(linear, _dims(src)), valid)]
    if op == "transpose":
        perm = tuple(inst.attrs["dimensions"])
        out = [None] * len(perm)
        for i, p in enumerate(perm):
            out[p] = multi[i]
        return [(inst.operands[0], out, valid)]
    if op == "slice":
        spec = inst.attrs["slice"]
        return [(inst.operands[0], [start + stride * v for v, (start, _limit, stride) in zip(multi, spec)], valid)]
    if op == "reverse":
        dims = _dims(inst)
        flip = set(inst.attrs.get("dimensions", ()))
        return [(inst.operands[0], [dims[d] - 1 - v if d in flip else v for d, v in enumerate(multi)], valid)]
    if op == "concatenate":
        dim = int(inst.attrs["dimensions"][0])
        sizes = [_dims(o)[dim] for o in inst.operands]
        ends = np.cumsum(sizes)
        side = np.searchsorted(ends, multi[dim], side="right")
        if sides is not None:
            sides.append((side, valid))
        out, start = [], 0
        for k, (o, size) in enumerate(zip(inst.operands, sizes)):
            if size:
                idx = list(multi)
                idx[dim] = np.clip(multi[dim] - start, 0, size - 1)
                out.append((o, idx, valid & (side == k)))
            start += size
        return out
    if op == "pad":
        src = inst.operands[0]
        inside = valid.copy()
        idx = []
        for v, (lo, _hi, interior), size in zip(multi, inst.attrs["padding"], _dims(src)):
            t = v - lo
            step = interior + 1
            inside &= (t >= 0) & (t % step == 0) & (t // step < size)
            idx.append(np.clip(t // step, 0, max(size - 1, 0)))
        if sides is not None:
            sides.append((inside.astype(np.int64), valid))
        return [(src, idx, inside)]
    info = op_info(op)
    if info.elementwise:
        dims = _dims(inst)
        return [(o, multi, valid) for o in inst.operands if o.shape.is_array and _dims(o) == dims]
    return []


def follow_index(roots: list[HloInstruction], dims: tuple[int, ...], multi: list[np.ndarray], valid: np.ndarray,
                 sides: list | None = None) -> list[tuple[HloInstruction, list[np.ndarray], np.ndarray]]:
    """Follow output indices `multi` (one array per dimension of `dims`, all of one shape;
    `valid` the same shape: which entries are real) from each of `roots` whose dimensions are
    `dims` down through the computation. Returns (parameter, its index arrays, validity) for
    every path that reaches a parameter; appends to `sides`, when given, (side taken, validity)
    for every concatenate (the operand read) and pad (1 inside the operand, 0 on padding) met."""
    reached = []
    stack = [(root, list(multi), valid) for root in roots if root.shape.is_array and tuple(root.shape.dims) == tuple(dims)]
    visits = 0
    while stack and visits < MAX_VISITS:
        inst, idx, ok = stack.pop()
        visits += 1
        if not ok.any():
            continue
        if inst.opcode == "parameter":
            reached.append((inst, idx, ok))
            continue
        stack.extend(_operands(inst, idx, ok, sides))
    return reached
