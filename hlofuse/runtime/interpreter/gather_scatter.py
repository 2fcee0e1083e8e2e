"""Reference semantics of `gather` and `scatter` with all dimension numbers, batching
dimensions included.

Both ops are computed the same way: the index vectors are turned into full start indices
into the operand (one row per batch position), and the slice (gather) or update window
(scatter) is addressed with broadcast numpy index arrays.
"""
from __future__ import annotations

import math

import numpy as np

from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloInstruction
from ...hlo.opcodes import register_reference
from .op_helpers import (ASSIGN, KEEP, attr_dims, attr_int, batched_call, flatten_value, recognize_combiner,
                         scalar_args)

_INDEX_MAX = 2**62  # larger unsigned indices clamp to this before the int64 cast


def index_vectors(indices: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """Indices as [batch..., vector] in int64 (an implicit trailing vector of size 1 when
    index_vector_dim equals the rank)."""
    if index_vector_dim == indices.ndim:
        indices = indices[..., None]
    else:
        indices = np.moveaxis(indices, index_vector_dim, -1)
    if indices.dtype.kind == "u":
        # Widen first: a Python bound beside a narrow unsigned array is cast to its type
        # (OverflowError for u8/u16/u32), and u64 values past 2**63 would wrap negative.
        indices = np.minimum(indices.astype(np.uint64), np.uint64(_INDEX_MAX))
    return indices.astype(np.int64)


def start_rows(vectors: np.ndarray, operand_rank: int, index_map: tuple[int, ...],
               operand_batching: tuple[int, ...], indices_batching: tuple[int, ...],
               index_vector_dim: int) -> np.ndarray:
    """[number of batch positions, operand rank] start indices: index-vector entries placed at
    `index_map`, and each operand batching dimension taking the coordinate of its paired
    indices batching dimension."""
    batch_shape = vectors.shape[:-1]
    # The row count is explicit: -1 cannot be inferred when the index vectors are empty
    # (s32[0] indices with index_vector_dim=0 are one empty vector, as into a scalar).
    flat = vectors.reshape(math.prod(batch_shape), vectors.shape[-1])
    starts = np.zeros((flat.shape[0], operand_rank), dtype=np.int64)
    for k, d in enumerate(index_map):
        starts[:, d] = flat[:, k]
    if operand_batching:
        grid = np.indices(batch_shape).reshape(len(batch_shape), -1) if batch_shape else None
        for od, idim in zip(operand_batching, indices_batching):
            pos = idim if idim < index_vector_dim else idim - 1
            starts[:, od] = grid[pos]
    return starts


def window_indices(starts: np.ndarray, sizes: list[int]) -> tuple[np.ndarray, ...]:
    """Index arrays of shape [rows, *sizes] addressing each row's window of the operand."""
    rank = len(sizes)
    out = []
    for d, size in enumerate(sizes):
        shape = [1] * (rank + 1)
        shape[0] = starts.shape[0]
        offset_shape = [1] * (rank + 1)
        offset_shape[d + 1] = size
        out.append(starts[:, d].reshape(shape) + np.arange(size).reshape(offset_shape))
    return tuple(out)


@register_reference("gather")
def gather_reference(inst: HloInstruction, args: list, interp) -> np.ndarray:
    """`gather(operand, start_indices)`; start indices are clamped so each slice is in bounds."""
    operand, indices = (np.asarray(a) for a in args)
    ivd = attr_int(inst, "index_vector_dim")
    offset_dims = attr_dims(inst, "offset_dims")
    collapsed = attr_dims(inst, "collapsed_slice_dims")
    index_map = attr_dims(inst, "start_index_map")
    op_batching = attr_dims(inst, "operand_batching_dims")
    idx_batching = attr_dims(inst, "start_indices_batching_dims")
    slice_sizes = list(attr_dims(inst, "slice_sizes"))
    if len(slice_sizes) != operand.ndim:
        raise UnsupportedError(f"gather {inst.name}: slice_sizes has {len(slice_sizes)} entries "
                               f"for an operand of rank {operand.ndim}")
    vectors = index_vectors(indices, ivd)
    batch_shape = vectors.shape[:-1]
    starts = start_rows(vectors, operand.ndim, index_map, op_batching, idx_batching, ivd)
    starts = np.clip(starts, 0, np.array(operand.shape) - np.array(slice_sizes))
    if operand.ndim:
        sliced = operand[window_indices(starts, slice_sizes)]  # [rows, *slice_sizes]
    else:  # a scalar operand: every (empty) index vector reads it
        sliced = np.broadcast_to(operand, (starts.shape[0],))
    kept = [s for d, s in enumerate(slice_sizes) if d not in collapsed and d not in op_batching]
    current = sliced.reshape((*batch_shape, *kept))
    # Output dimension offset_dims[i] is slice dimension i; batch dimensions fill the rest in order.
    rank = len(batch_shape) + len(kept)
    batch_positions = [p for p in range(rank) if p not in offset_dims]
    perm = [0] * rank
    for i, p in enumerate(batch_positions):
        perm[p] = i
    for i, p in enumerate(offset_dims):
        perm[p] = len(batch_shape) + i
    return current.transpose(perm).astype(operand.dtype, copy=False)


@register_reference("scatter")
def scatter_reference(inst: HloInstruction, args: list, interp) -> np.ndarray | tuple:
    """`scatter(operands..., scatter_indices, updates...)`, to_apply combining old and new
    values. An update window that does not lie wholly inside the operand is skipped."""
    n = (len(args) - 1) // 2
    operands = [np.array(a, copy=True) for a in args[:n]]
    indices = np.asarray(args[n])
    updates = [np.asarray(a) for a in args[n + 1:]]
    ivd = attr_int(inst, "index_vector_dim")
    window_dims = attr_dims(inst, "update_window_dims")
    inserted = attr_dims(inst, "inserted_window_dims")
    index_map = attr_dims(inst, "scatter_dims_to_operand_dims")
    op_batching = attr_dims(inst, "input_batching_dims")
    idx_batching = attr_dims(inst, "scatter_indices_batching_dims")
    rank = operands[0].ndim
    upd_shape = updates[0].shape
    scatter_dims = [d for d in range(len(upd_shape)) if d not in window_dims]
    operand_window_dims = [d for d in range(rank) if d not in inserted and d not in op_batching]
    if len(operand_window_dims) != len(window_dims):
        raise UnsupportedError(f"scatter {inst.name}: update_window_dims do not match the operand rank "
                               "less inserted_window_dims and input_batching_dims")
    sizes = [1] * rank
    for od, ud in zip(operand_window_dims, window_dims):
        sizes[od] = upd_shape[ud]
    vectors = index_vectors(indices, ivd)
    starts = start_rows(vectors, rank, index_map, op_batching, idx_batching, ivd)
    valid = np.all((starts >= 0) & (starts <= np.array(operands[0].shape) - np.array(sizes)), axis=1)
    starts = starts[valid]
    where = window_indices(starts, sizes)
    targets = operands
    if rank == 0:
        # A scalar operand has no index arrays to carry the row axis: address it as [1].
        targets = [o.reshape(1) for o in operands]  # views: writes land in `operands`
        where = (np.zeros(starts.shape[0], dtype=np.int64),)
    # One window per index vector; the row count is explicit since -1 cannot be inferred
    # when a window (or the update) has no elements.
    rows = valid.shape[0]
    windows = [u.transpose(scatter_dims + list(window_dims)).reshape(rows, *sizes)[valid] for u in updates]
    comp = inst.attrs["to_apply"]
    reducers = recognize_combiner(comp, interp.denormals)
    if reducers is not None:
        for operand, window, reducer in zip(targets, windows, reducers):
            if reducer is ASSIGN:
                operand[where] = window
            elif reducer is not KEEP:
                reducer.at(operand, where, window.astype(operand.dtype, copy=False))
    elif (batched := batched_call(comp, interp)) is not None:
        _scatter_in_rounds(batched, targets, where, windows)
    else:
        _scatter_by_calls(comp, targets, where, windows, interp)
    return tuple(operands) if n > 1 or inst.shape.is_tuple else operands[0]


def _scatter_in_rounds(batched, operands: list[np.ndarray], where, windows: list[np.ndarray]) -> None:
    """Apply an elementwise combiner with batched calls. Round r combines, for every operand
    element, its r-th update (in update order), so each round touches distinct elements and
    each element still sees its updates in order."""
    flat_index = np.ravel_multi_index(tuple(np.broadcast_arrays(*where)), operands[0].shape).reshape(-1)
    if flat_index.size == 0:
        return
    order = np.argsort(flat_index, kind="stable")
    sorted_index = flat_index[order]
    first = np.r_[0, np.flatnonzero(np.diff(sorted_index)) + 1]
    run_start = np.repeat(first, np.diff(np.r_[first, sorted_index.size]))
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size) - run_start
    flat_ops = [o.reshape(-1) for o in operands]
    flat_upd = [w.reshape(-1) for w in windows]
    for r in range(int(rank.max()) + 1):
        pick = np.flatnonzero(rank == r)
        targets = flat_index[pick]
        results = batched([o[targets] for o in flat_ops] + [u[pick] for u in flat_upd])
        for o, res in zip(flat_ops, results):
            o[targets] = np.broadcast_to(np.asarray(res, dtype=o.dtype), targets.shape)


def _scatter_by_calls(comp, operands: list[np.ndarray], where, windows: list[np.ndarray], interp) -> None:
    """Apply a general combiner one element at a time, in update order."""
    flat_index = np.ravel_multi_index(tuple(np.broadcast_arrays(*where)), operands[0].shape).reshape(-1)
    flat_ops = [o.reshape(-1) for o in operands]  # views: writes land in `operands`
    flat_upd = [w.reshape(-1) for w in windows]
    op_types = [o.dtype for o in operands]
    upd_types = [w.dtype for w in windows]
    for j, pos in enumerate(flat_index.tolist()):
        call_args = scalar_args([o[pos] for o in flat_ops], op_types) + \
            scalar_args([u[j] for u in flat_upd], upd_types)
        results = flatten_value(interp.call(comp, call_args))
        for o, r in zip(flat_ops, results):
            o[pos] = r
