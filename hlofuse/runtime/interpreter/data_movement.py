"""Reference rules of the data movement ops: broadcast, reshape, bitcast, transpose, slice,
dynamic-slice, dynamic-update-slice (XLA's start-index clamping), concatenate, pad (negative
and interior padding), reverse, iota, get-dimension-size."""
from __future__ import annotations

import numpy as np

from ...hlo.ir import HloInstruction
from ...hlo.opcodes import mark_unsupported, register_reference
from ...hlo.shapes import ArrayShape, Layout

Array = np.ndarray


def _dims(inst: HloInstruction, key: str = "dimensions") -> tuple[int, ...]:
    value = inst.attrs.get(key, ())
    if isinstance(value, int):
        return (value,)
    return tuple(int(v) for v in value)


@register_reference("broadcast")
def _broadcast(inst: HloInstruction, args: list, interp) -> Array:
    """Operand dimension i becomes result dimension dimensions[i]; the others are replicated."""
    x = np.asarray(args[0])
    if not inst.shape.dims:
        # scalar to scalar, an identity: in a batched call (Interpreter.call_batched) the
        # operand holds one scalar per batch element, and each stays what it is
        return x.copy()
    dims = _dims(inst)
    out_dims = tuple(inst.shape.dims)
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = np.transpose(x, order)  # operand dims in result order
    expanded = [1] * len(out_dims)
    for i in order:
        expanded[dims[i]] = x.shape[order.index(i)]
    return np.broadcast_to(x.reshape(expanded), out_dims).copy()


@register_reference("reshape")
def _reshape(inst: HloInstruction, args: list, interp) -> Array:
    """Row-major reshape."""
    return np.reshape(np.asarray(args[0]), inst.shape.dims).copy()


def _major_to_minor(shape: ArrayShape) -> list[int]:
    layout = shape.layout or Layout.default(shape.rank)
    return list(reversed(layout.minor_to_major))


@register_reference("bitcast")
def _bitcast(inst: HloInstruction, args: list, interp) -> Array:
    """Reinterpret the physical buffer: linearize in the operand's layout, refill in the result's."""
    x = np.asarray(args[0])
    src = inst.operands[0].shape
    dst = inst.shape
    physical = np.transpose(x, _major_to_minor(src)).reshape(-1)
    if physical.dtype != dst.dtype.numpy:
        physical = np.ascontiguousarray(physical).view(dst.dtype.numpy)
    order = _major_to_minor(dst)
    filled = physical.reshape([dst.dims[d] for d in order])
    return np.transpose(filled, np.argsort(order)).copy()


@register_reference("transpose")
def _transpose(inst: HloInstruction, args: list, interp) -> Array:
    """Result dimension i is operand dimension dimensions[i]."""
    return np.transpose(np.asarray(args[0]), _dims(inst)).copy()


@register_reference("slice")
def _slice(inst: HloInstruction, args: list, interp) -> Array:
    """Static strided slice: one (start, limit, stride) per dimension."""
    index = tuple(slice(int(s), int(l), int(st)) for s, l, st in inst.attrs["slice"])
    return np.asarray(args[0])[index].copy()


def _start_indices(args: list, rank: int) -> list[int]:
    """Start indices from scalar operands (or the old form: one rank-1 index operand)."""
    if len(args) == 1 and np.asarray(args[0]).ndim == 1:
        return [int(v) for v in np.asarray(args[0])]
    assert len(args) == rank, f"expected {rank} start indices, got {len(args)}"
    return [int(np.asarray(a)) for a in args]


def _clamp_starts(starts: list[int], dims, sizes) -> list[int]:
    # XLA clamps each start into [0, dim - size] so the window always lies inside.
    return [min(max(s, 0), d - z) for s, d, z in zip(starts, dims, sizes)]


@register_reference("dynamic-slice")
def _dynamic_slice(inst: HloInstruction, args: list, interp) -> Array:
    """Slice of `dynamic_slice_sizes` at runtime starts, each clamped into range."""
    x = np.asarray(args[0])
    sizes = _dims(inst, "dynamic_slice_sizes")
    starts = _clamp_starts(_start_indices(args[1:], x.ndim), x.shape, sizes)
    return x[tuple(slice(s, s + z) for s, z in zip(starts, sizes))].copy()


@register_reference("dynamic-update-slice")
def _dynamic_update_slice(inst: HloInstruction, args: list, interp) -> Array:
    """The operand with `update` written at runtime starts, each clamped into range."""
    x = np.array(args[0], copy=True)
    update = np.asarray(args[1])
    starts = _clamp_starts(_start_indices(args[2:], x.ndim), x.shape, update.shape)
    x[tuple(slice(s, s + z) for s, z in zip(starts, update.shape))] = update
    return x


@register_reference("concatenate")
def _concatenate(inst: HloInstruction, args: list, interp) -> Array:
    """Operands joined along `dimensions[0]`."""
    return np.concatenate([np.asarray(a) for a in args], axis=_dims(inst)[0])


def pad_array(x: Array, value, config) -> Array:
    """XLA's pad: interior padding between elements, then low/high edges (negative edges crop)."""
    x = np.asarray(x)
    config = [(int(lo), int(hi), int(interior)) for lo, hi, interior in config]
    spread = [n + max(n - 1, 0) * interior for n, (_, _, interior) in zip(x.shape, config)]
    full_shape = [max(lo, 0) + s + max(hi, 0) for s, (lo, hi, _) in zip(spread, config)]
    out = np.full(full_shape, value, dtype=x.dtype)
    out[tuple(slice(max(lo, 0), max(lo, 0) + s, interior + 1)
              for s, (lo, _, interior) in zip(spread, config))] = x
    crop = tuple(slice(max(-lo, 0), f - max(-hi, 0)) for f, (lo, hi, _) in zip(full_shape, config))
    return out[crop].copy()


@register_reference("pad")
def _pad(inst: HloInstruction, args: list, interp) -> Array:
    """Pad with the scalar second operand per `padding` (lo_hi_interior per dimension)."""
    return pad_array(args[0], np.asarray(args[1])[()], inst.attrs["padding"])


@register_reference("reverse")
def _reverse(inst: HloInstruction, args: list, interp) -> Array:
    """Elements reversed along `dimensions`."""
    dims = _dims(inst)
    x = np.asarray(args[0])
    return np.flip(x, axis=dims).copy() if dims else x.copy()


@register_reference("shuffle")
def _shuffle(inst: HloInstruction, args: list, interp) -> Array:
    """Each element from the operand index hlo/shuffle.py gives it (a rotate or a permute)."""
    from ...hlo.shuffle import source_index

    x = np.asarray(args[0])
    return x[source_index(inst, x.shape)].copy() if x.ndim else x.copy()


@register_reference("iota")
def _iota(inst: HloInstruction, args: list, interp) -> Array:
    """0, 1, 2, ... along `iota_dimension`, repeated along the others."""
    dims = tuple(inst.shape.dims)
    d = int(inst.attrs["iota_dimension"])
    dtype = inst.shape.dtype.numpy
    line = np.arange(dims[d], dtype=np.int64)
    if dtype.kind == "c" or dtype.kind == "f" or dtype.kind == "V":
        line = line.astype(np.float64)
    shape = [1] * len(dims)
    shape[d] = dims[d]
    return np.broadcast_to(line.reshape(shape), dims).astype(dtype)


@register_reference("get-dimension-size")
def _get_dimension_size(inst: HloInstruction, args: list, interp) -> Array:
    """The size of dimension `dimensions[0]` (shapes are static in the interpreter)."""
    return np.asarray(np.asarray(args[0]).shape[_dims(inst)[0]], dtype=inst.shape.dtype.numpy)


mark_unsupported("reference", "dynamic shapes are not supported by the interpreter",
                 "set-dimension-size", "dynamic-reshape")
