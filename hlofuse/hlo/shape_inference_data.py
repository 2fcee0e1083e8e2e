"""Shape rules of leaves, tuples and data movement: constants, iota, broadcast, reshape,
transpose, slices, concatenate, pad, reverse and dynamic-shape helpers."""
from __future__ import annotations

import math
import re

import numpy as np

from .dtypes import S32, U32
from .ir import HloInstruction
from .opcodes import register_shape_rule
from .shape_inference_common import (
    array_operand, array_operands, attr, check_dims_in_range, declared_array, fail, int_tuple,
    is_integer_scalar, legacy_start_index_vector, make_array, slice_sizes, text,
)
from .shapes import ArrayShape, Shape, TupleShape


@register_shape_rule("parameter")
def _parameter(inst: HloInstruction) -> Shape:
    """parameter: the declared shape; the number must be non-negative."""
    if inst.parameter_number < 0:
        fail(inst, f"parameter number must be >= 0, is {inst.parameter_number}")
    return inst.shape


@register_shape_rule("constant")
def _constant(inst: HloInstruction) -> Shape:
    """constant: the declared shape; a literal, when present, must have its dimensions."""
    lit = inst.literal
    if lit is not None and isinstance(inst.shape, ArrayShape):
        got = tuple(np.shape(lit))
        if got != inst.shape.dims and math.prod(got) != inst.shape.element_count():
            fail(inst, f"literal has dimensions {list(got)}, declared shape is {text(inst.shape)}")
    return inst.shape


@register_shape_rule("iota")
def _iota(inst: HloInstruction) -> Shape:
    """iota: a declared array of rank >= 1 with iota_dimension in range."""
    out = declared_array(inst)
    if out.rank == 0:
        fail(inst, "iota needs a result of rank >= 1")
    d = attr(inst, "iota_dimension")
    if not isinstance(d, int) or not 0 <= d < out.rank:
        fail(inst, f"iota_dimension {d!r} is out of range for rank {out.rank}")
    if not (out.dtype.is_integer or out.dtype.is_float or out.dtype.is_complex):
        fail(inst, f"iota of element type {out.dtype.name} is not defined")
    return out


@register_shape_rule("replica-id", "partition-id")
def _replica_id(inst: HloInstruction) -> Shape:
    """replica-id / partition-id: u32[]."""
    return make_array(U32, ())


@register_shape_rule("broadcast")
def _broadcast(inst: HloInstruction) -> Shape:
    """broadcast: operand dimension i becomes result dimension dimensions[i] (equal sizes)."""
    x = array_operand(inst, 0)
    out = declared_array(inst)
    dims = int_tuple(inst, "dimensions", ())
    if len(dims) != x.rank:
        fail(inst, f"dimensions {list(dims)} must have one entry per operand dimension ({x.rank})")
    check_dims_in_range(inst, dims, out.rank, "broadcast dimension")
    for i, d in enumerate(dims):
        if x.dims[i] != out.dims[d]:
            fail(inst, f"operand dimension {i} (size {x.dims[i]}) does not match result dimension {d} "
                       f"(size {out.dims[d]})")
    return make_array(x.dtype, out.dims, out.dynamic)


@register_shape_rule("reshape")
def _reshape(inst: HloInstruction) -> Shape:
    """reshape: the declared dimensions, with the operand's element type and count."""
    x = array_operand(inst, 0)
    out = declared_array(inst)
    if x.element_count() != out.element_count():
        fail(inst, f"cannot reshape {text(x)} ({x.element_count()} elements) to {text(out)} "
                   f"({out.element_count()} elements)")
    return make_array(x.dtype, out.dims, out.dynamic)


_ELEMENT_BITS = re.compile(r"E\((\d+)\)")


def _buffer_bytes(shape: ArrayShape) -> int:
    """XLA's ShapeUtil::ByteSizeOf of a dense array: a byte per sub-byte element unless the layout
    packs them (`E(4)`), otherwise the element width times the element count."""
    m = _ELEMENT_BITS.search(shape.layout.suffix) if shape.layout is not None else None
    if m is not None and int(m.group(1)) > 0:
        return -(-shape.element_count() * int(m.group(1)) // 8)
    return shape.element_count() * shape.dtype.byte_size


@register_shape_rule("bitcast")
def _bitcast(inst: HloInstruction) -> Shape:
    """bitcast: the declared shape, whose buffer must have the operand's size in bytes.

    This is XLA's (layout-sensitive) verifier rule, and all it checks: a bitcast may change the
    dimensions, the layout and the element type, width included (XLA's own optimized HLO holds
    `s32[] bitcast(f32[])`). XLA's verifier before layout assignment checks nothing at all, and
    XLA:CPU refuses every bitcast still in its input at layout assignment, whatever the types,
    so neither of those can tell which bitcasts are meaningful: the byte size can."""
    x = array_operand(inst, 0)
    out = declared_array(inst)
    if _buffer_bytes(x) != _buffer_bytes(out):
        fail(inst, f"bitcast changes the size in bytes: {text(x)} ({_buffer_bytes(x)} bytes) to "
                   f"{text(out)} ({_buffer_bytes(out)} bytes)")
    return out


@register_shape_rule("transpose")
def _transpose(inst: HloInstruction) -> Shape:
    """transpose: result dimension i is operand dimension dimensions[i]."""
    x = array_operand(inst, 0)
    perm = int_tuple(inst, "dimensions")
    if sorted(perm) != list(range(x.rank)):
        fail(inst, f"dimensions {list(perm)} are not a permutation of 0..{x.rank - 1}")
    return make_array(x.dtype, [x.dims[p] for p in perm], [x.dynamic[p] for p in perm])


@register_shape_rule("slice")
def _slice(inst: HloInstruction) -> Shape:
    """slice: per dimension [start:limit:stride] with 0 <= start <= limit <= size, stride >= 1."""
    x = array_operand(inst, 0)
    ranges = attr(inst, "slice")
    if len(ranges) != x.rank:
        fail(inst, f"slice has {len(ranges)} ranges for an operand of rank {x.rank}")
    dims = []
    for i, (start, limit, stride) in enumerate(ranges):
        if stride < 1:
            fail(inst, f"stride {stride} of dimension {i} must be >= 1")
        if not 0 <= start <= limit <= x.dims[i]:
            fail(inst, f"slice [{start}:{limit}] of dimension {i} is out of bounds for size {x.dims[i]}")
        dims.append(-(-(limit - start) // stride))
    return make_array(x.dtype, dims)


def _start_indices(inst: HloInstruction, first: int, rank: int) -> None:
    """Operands first.. are the start indices: `rank` integer scalars of one type (or one
    integer vector of length `rank`, the legacy form)."""
    idx = inst.operands[first:]
    if (vector := legacy_start_index_vector(inst)) is not None:
        s = vector.shape
        if not s.dtype.is_integer or s.dims[0] != rank:
            fail(inst, f"start index vector must be an integer vector of length {rank}, is {text(s)}")
        return
    if len(idx) != rank:
        fail(inst, f"expects {rank} start indices (one per operand dimension), has {len(idx)}")
    for k, op in enumerate(idx):
        if not is_integer_scalar(op.shape):
            fail(inst, f"start index {k} ({op.name}) must be an integer scalar, is {op.shape}")
        if op.shape.dtype != idx[0].shape.dtype:
            fail(inst, "start indices must all have the same element type")


@register_shape_rule("dynamic-slice")
def _dynamic_slice(inst: HloInstruction) -> Shape:
    """dynamic-slice(x, i0..ir-1), dynamic_slice_sizes: each size within the operand's."""
    x = array_operand(inst, 0)
    _start_indices(inst, 1, x.rank)
    return make_array(x.dtype, slice_sizes(inst, "dynamic_slice_sizes", x))


@register_shape_rule("dynamic-update-slice")
def _dynamic_update_slice(inst: HloInstruction) -> Shape:
    """dynamic-update-slice(x, update, i0..): the update fits in x; the result is x's shape."""
    x, u = array_operands(inst, range(2))
    if u.dtype != x.dtype:
        fail(inst, f"update element type {u.dtype.name} differs from operand type {x.dtype.name}")
    if u.rank != x.rank:
        fail(inst, f"update {text(u)} must have the operand's rank {x.rank}")
    for i, (s, d) in enumerate(zip(u.dims, x.dims)):
        if s > d:
            fail(inst, f"update dimension {i} (size {s}) is larger than the operand's ({d})")
    _start_indices(inst, 2, x.rank)
    return make_array(x.dtype, x.dims, x.dynamic)


@register_shape_rule("concatenate")
def _concatenate(inst: HloInstruction) -> Shape:
    """concatenate along `dimensions`: equal ranks, types and other dimensions."""
    shapes = array_operands(inst)
    if not shapes:
        fail(inst, "concatenate needs at least one operand")
    dims = int_tuple(inst, "dimensions")
    if len(dims) != 1:
        fail(inst, f"concatenate takes one dimension, got {list(dims)}")
    d = dims[0]
    first = shapes[0]
    check_dims_in_range(inst, dims, first.rank, "concatenate dimension")
    total = 0
    for i, s in enumerate(shapes):
        if s.dtype != first.dtype:
            fail(inst, f"operand {i} has element type {s.dtype.name}, operand 0 has {first.dtype.name}")
        if s.rank != first.rank or any(a != b for k, (a, b) in enumerate(zip(s.dims, first.dims)) if k != d):
            fail(inst, f"operand {i} {text(s)} does not match operand 0 {text(first)} outside dimension {d}")
        total += s.dims[d]
    out = list(first.dims)
    out[d] = total
    return make_array(first.dtype, out)


@register_shape_rule("pad")
def _pad(inst: HloInstruction) -> Shape:
    """pad(x, value), padding lo_hi_interior per dimension; interior >= 0."""
    x, v = array_operands(inst, range(2))
    if v.rank != 0 or v.dtype != x.dtype:
        fail(inst, f"padding value must be a {x.dtype.name} scalar, is {text(v)}")
    cfg = attr(inst, "padding")
    if len(cfg) != x.rank:
        fail(inst, f"padding has {len(cfg)} dimensions for an operand of rank {x.rank}")
    dims = []
    for i, ((lo, hi, interior), d) in enumerate(zip(cfg, x.dims)):
        if interior < 0:
            fail(inst, f"interior padding {interior} of dimension {i} must be >= 0")
        n = lo + hi + d + max(d - 1, 0) * interior
        if n < 0:
            fail(inst, f"padding {lo}_{hi}_{interior} makes dimension {i} negative ({n})")
        dims.append(n)
    return make_array(x.dtype, dims)


@register_shape_rule("reverse")
def _reverse(inst: HloInstruction) -> Shape:
    """reverse: `dimensions` given (XLA's parser requires it, `{}` for none), distinct and in
    range; the operand's shape."""
    x = array_operand(inst, 0)
    check_dims_in_range(inst, int_tuple(inst, "dimensions"), x.rank, "reverse dimension")
    return make_array(x.dtype, x.dims, x.dynamic)


@register_shape_rule("dynamic-reshape")
def _dynamic_reshape(inst: HloInstruction) -> Shape:
    """dynamic-reshape(x, d0..): one s32 scalar size per result dimension."""
    x = array_operand(inst, 0)
    out = declared_array(inst)
    if len(inst.operands) != out.rank + 1:
        fail(inst, f"expects {out.rank} dimension sizes, has {len(inst.operands) - 1}")
    for k, op in enumerate(inst.operands[1:]):
        if not is_integer_scalar(op.shape):
            fail(inst, f"size operand {k} must be an integer scalar, is {op.shape}")
    return make_array(x.dtype, out.dims, out.dynamic)


@register_shape_rule("get-dimension-size")
def _get_dimension_size(inst: HloInstruction) -> Shape:
    """get-dimension-size: s32[] of a dimension in range."""
    x = array_operand(inst, 0)
    check_dims_in_range(inst, int_tuple(inst, "dimensions"), x.rank, "dimension")
    return make_array(S32, ())


@register_shape_rule("set-dimension-size")
def _set_dimension_size(inst: HloInstruction) -> Shape:
    """set-dimension-size(x, size): x's shape with that dimension dynamic."""
    x, size = array_operands(inst, range(2))
    if not is_integer_scalar(size):
        fail(inst, f"size must be an integer scalar, is {text(size)}")
    (d,) = check_dims_in_range(inst, int_tuple(inst, "dimensions"), x.rank, "dimension")
    dyn = list(x.dynamic)
    dyn[d] = True
    return make_array(x.dtype, x.dims, dyn)


@register_shape_rule("tuple")
def _tuple(inst: HloInstruction) -> Shape:
    """tuple: the tuple of the operand shapes."""
    return TupleShape(tuple(op.shape for op in inst.operands))


@register_shape_rule("get-tuple-element")
def _get_tuple_element(inst: HloInstruction) -> Shape:
    """get-tuple-element: element `index` of a tuple operand."""
    if not inst.operands:
        fail(inst, "expects a tuple operand")
    t = inst.operands[0].shape
    if not isinstance(t, TupleShape):
        fail(inst, f"operand {inst.operands[0].name} must be a tuple, is {t}")
    i = attr(inst, "index")
    if not isinstance(i, int) or not 0 <= i < len(t.elements):
        fail(inst, f"index {i!r} is out of range for a tuple of {len(t.elements)} elements")
    return t.elements[i]


@register_shape_rule("shuffle")
def _shuffle(inst: HloInstruction) -> Shape:
    """shuffle(x), dimensions, mode=rotate (shifts, one per dimension) or permute (indices that
    fit x, in range): the result has x's shape (hlo/shuffle.py)."""
    from . import shuffle

    (x,) = array_operands(inst, range(1))
    dims = tuple(int(d) for d in inst.attrs.get("dimensions", ()))
    if not dims or len(set(dims)) != len(dims) or any(not 0 <= d < x.rank for d in dims):
        fail(inst, f"shuffle dimensions {list(dims)} must be distinct dimensions of the rank-{x.rank} operand")
    mode = shuffle.mode(inst)
    if mode not in shuffle.MODES:
        fail(inst, f"shuffle mode must be one of {', '.join(shuffle.MODES)}, not {mode!r}")
    if mode == "rotate" and len(shuffle.shifts(inst)) != len(dims):
        fail(inst, f"a rotate shuffle needs one shift per dimension: {len(dims)} dimensions, "
                   f"{len(shuffle.shifts(inst))} shifts")
    if mode == "permute":
        try:
            shuffle.permute_coordinates(inst, tuple(x.dims))
        except ValueError as e:
            fail(inst, str(e))
    return make_array(x.dtype, x.dims, x.dynamic)
