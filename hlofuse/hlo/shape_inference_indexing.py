"""Shape rules of gather and scatter (XLA's general dimension numbers, with batching dims)."""
from __future__ import annotations

from .ir import HloInstruction
from .opcodes import register_shape_rule
from .shape_inference_common import (
    array_operand, array_operands, attr, check_dims_in_range, check_scalar_reducer, computation, fail,
    int_tuple, make_array, slice_sizes, text, tuple_or_single,
)
from .shapes import ArrayShape, Shape


def _sorted_dims(inst: HloInstruction, key: str, rank: int) -> tuple[int, ...]:
    dims = check_dims_in_range(inst, int_tuple(inst, key, ()), rank, key)
    if list(dims) != sorted(dims):
        fail(inst, f"{key} {list(dims)} must be sorted")
    return dims


def _index_batch_dims(inst: HloInstruction, indices: ArrayShape) -> tuple[int, tuple[int, ...], int]:
    """(index_vector_dim, the batch dimension sizes of the indices, the index vector size)."""
    ivd = attr(inst, "index_vector_dim")
    if not isinstance(ivd, int) or not 0 <= ivd <= indices.rank:
        fail(inst, f"index_vector_dim {ivd!r} is out of range for indices of rank {indices.rank}")
    if not indices.dtype.is_integer:
        fail(inst, f"indices must have an integer element type, have {indices.dtype.name}")
    if ivd == indices.rank:
        return ivd, indices.dims, 1
    batch = tuple(d for k, d in enumerate(indices.dims) if k != ivd)
    return ivd, batch, indices.dims[ivd]


def _check_index_map(inst: HloInstruction, key: str, n: int, operand_rank: int, excluded: tuple[int, ...]) -> None:
    index_map = check_dims_in_range(inst, int_tuple(inst, key), operand_rank, key)
    if len(index_map) != n:
        fail(inst, f"{key} has {len(index_map)} entries; the index vector has {n}")
    clash = set(index_map) & set(excluded)
    if clash:
        fail(inst, f"{key} must not name batching dimensions {sorted(clash)}")


def _check_batching(inst: HloInstruction, operand: ArrayShape, indices: ArrayShape, ivd: int,
                    operand_key: str, indices_key: str) -> tuple[int, ...]:
    obatch = _sorted_dims(inst, operand_key, operand.rank)
    ibatch = check_dims_in_range(inst, int_tuple(inst, indices_key, ()), indices.rank, indices_key)
    if len(obatch) != len(ibatch):
        fail(inst, f"{operand_key} and {indices_key} must have the same length")
    if ivd in ibatch:
        fail(inst, f"{indices_key} must not contain index_vector_dim {ivd}")
    for o, i in zip(obatch, ibatch):
        if operand.dims[o] != indices.dims[i]:
            fail(inst, f"batching dimension {o} of the operand (size {operand.dims[o]}) does not match "
                       f"dimension {i} of the indices (size {indices.dims[i]})")
    return obatch


@register_shape_rule("gather")
def _gather(inst: HloInstruction) -> Shape:
    """gather: offset dims take the uncollapsed slice sizes, the rest the index batch dims."""
    operand, indices = array_operands(inst, range(2))
    ivd, batch, n = _index_batch_dims(inst, indices)
    sizes = slice_sizes(inst, "slice_sizes", operand)
    collapsed = _sorted_dims(inst, "collapsed_slice_dims", operand.rank)
    obatch = _check_batching(inst, operand, indices, ivd, "operand_batching_dims", "start_indices_batching_dims")
    if set(collapsed) & set(obatch):
        fail(inst, "collapsed_slice_dims and operand_batching_dims must be disjoint")
    for d in collapsed + obatch:
        if sizes[d] > 1:
            fail(inst, f"slice size of collapsed or batching dimension {d} must be <= 1, is {sizes[d]}")
    _check_index_map(inst, "start_index_map", n, operand.rank, obatch)
    offset_sizes = [s for k, s in enumerate(sizes) if k not in collapsed and k not in obatch]
    out_rank = len(offset_sizes) + len(batch)
    offset_dims = _sorted_dims(inst, "offset_dims", out_rank)
    if len(offset_dims) != len(offset_sizes):
        fail(inst, f"offset_dims has {len(offset_dims)} entries; {len(offset_sizes)} slice dimensions "
                   "are neither collapsed nor batching")
    out, off, bat = [], iter(offset_sizes), iter(batch)
    for k in range(out_rank):
        out.append(next(off) if k in offset_dims else next(bat))
    empty = [d for d in collapsed + obatch if sizes[d] == 0]
    if empty and all(out):
        # XLA's shape inference allows it, but each output element would be read from an empty
        # slice: there is no value to give it (a compiled gather would read out of bounds)
        fail(inst, f"slice size 0 in collapsed or batching dimension {empty[0]} leaves every slice empty, "
                   f"but the output {list(out)} has elements: there is nothing to gather")
    return make_array(operand.dtype, out)


@register_shape_rule("scatter")
def _scatter(inst: HloInstruction) -> Shape:
    """scatter(operands..., indices, updates...): the result has the operands' shapes."""
    count = len(inst.operands)
    if count < 3 or count % 2 == 0:
        fail(inst, f"expects N operands, indices and N updates (an odd count >= 3), has {count}")
    n = (count - 1) // 2
    operands = array_operands(inst, range(n))
    indices = array_operand(inst, n)
    updates = array_operands(inst, range(n + 1, count))
    first = operands[0]
    for k, s in enumerate(operands[1:], 1):
        if s.dims != first.dims:
            fail(inst, f"operand {k} {text(s)} must have the dimensions of operand 0 {text(first)}")
    for k, (u, o) in enumerate(zip(updates, operands)):
        if u.dtype != o.dtype:
            fail(inst, f"update {k} has element type {u.dtype.name}, operand {k} has {o.dtype.name}")
        if u.dims != updates[0].dims:
            fail(inst, f"update {k} {text(u)} must have the dimensions of update 0 {text(updates[0])}")
    ivd, batch, nvec = _index_batch_dims(inst, indices)
    upd = updates[0]
    window = _sorted_dims(inst, "update_window_dims", upd.rank)
    inserted = _sorted_dims(inst, "inserted_window_dims", first.rank)
    obatch = _check_batching(inst, first, indices, ivd, "input_batching_dims", "scatter_indices_batching_dims")
    if set(inserted) & set(obatch):
        fail(inst, "inserted_window_dims and input_batching_dims must be disjoint")
    if len(window) + len(inserted) + len(obatch) != first.rank:
        fail(inst, f"update_window_dims ({len(window)}) + inserted_window_dims ({len(inserted)}) + "
                   f"input_batching_dims ({len(obatch)}) must equal the operand rank {first.rank}")
    _check_index_map(inst, "scatter_dims_to_operand_dims", nvec, first.rank, obatch)
    if upd.rank != len(window) + len(batch):
        fail(inst, f"updates {text(upd)} must have rank {len(window) + len(batch)} "
                   f"(window dimensions plus index batch dimensions)")
    scatter_dims = [d for k, d in enumerate(upd.dims) if k not in window]
    if tuple(scatter_dims) != tuple(batch):
        fail(inst, f"update scatter dimensions {scatter_dims} must match the index batch dimensions {list(batch)}")
    bounds = [d for k, d in enumerate(first.dims) if k not in inserted and k not in obatch]
    for w, b in zip(window, bounds):
        if upd.dims[w] > b:
            fail(inst, f"update window dimension {w} (size {upd.dims[w]}) exceeds the operand bound {b}")
    check_scalar_reducer(inst, computation(inst, "to_apply"), [o.dtype for o in operands], "update")
    return tuple_or_single([make_array(o.dtype, o.dims) for o in operands])
