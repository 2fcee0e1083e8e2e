"""Shape rules of reductions and windowed ops: reduce, reduce-window, select-and-scatter,
sort and topk."""
from __future__ import annotations

from .attributes import Window
from .dtypes import S32
from .ir import HloInstruction
from .opcodes import register_shape_rule
from .shape_inference_common import (
    array_operands, attr, check_dims_in_range, check_predicate_computation, check_scalar_reducer,
    check_signature, computation, fail, int_attr, int_tuple, make_array, text, tuple_or_single,
)
from .shapes import ArrayShape, Shape, TupleShape


def _inputs_and_inits(inst: HloInstruction) -> tuple[list[ArrayShape], list[ArrayShape]]:
    """Split N inputs + N scalar inits; inputs share dimensions; init i has input i's type."""
    count = len(inst.operands)
    if count < 2 or count % 2:
        fail(inst, f"expects N inputs followed by N init values (an even count >= 2), has {count}")
    n = count // 2
    inputs = array_operands(inst, range(n))
    inits = array_operands(inst, range(n, count))
    for k, (x, init) in enumerate(zip(inputs, inits)):
        if x.dims != inputs[0].dims:
            fail(inst, f"input {k} {text(x)} must have the dimensions of input 0 {text(inputs[0])}")
        if init.rank != 0:
            fail(inst, f"init value {k} must be a scalar, is {text(init)}")
        if init.dtype != x.dtype:
            fail(inst, f"init value {k} has element type {init.dtype.name}, input {k} has {x.dtype.name}")
    return inputs, inits


@register_shape_rule("reduce")
def _reduce(inst: HloInstruction) -> Shape:
    """reduce(x0..xn-1, init0..initn-1), dimensions, to_apply: reduced dimensions removed."""
    inputs, inits = _inputs_and_inits(inst)
    rank = inputs[0].rank
    dims = check_dims_in_range(inst, int_tuple(inst, "dimensions"), rank, "reduce dimension")
    check_scalar_reducer(inst, computation(inst, "to_apply"), [i.dtype for i in inits])
    kept = [d for k, d in enumerate(inputs[0].dims) if k not in dims]
    return tuple_or_single([make_array(i.dtype, kept) for i in inits])


def window_output_size(size: int, w) -> int:
    """The number of window positions along one dimension of `size` elements (XLA's
    dilated-and-padded base divided by the stride)."""
    base = (size - 1) * w.base_dilation + 1 if size > 0 else 0
    padded = base + w.padding_low + w.padding_high
    span = (w.size - 1) * w.window_dilation + 1
    if padded < span:
        return 0
    return (padded - span) // w.stride + 1


def check_window(inst: HloInstruction, window: Window, rank: int) -> None:
    """Fail unless `window` has `rank` dimensions with positive sizes, strides and dilations."""
    if not isinstance(window, Window):
        fail(inst, f"window must be a window attribute, got {window!r}")
    if len(window.dimensions) != rank:
        fail(inst, f"window has {len(window.dimensions)} dimensions, the operand has rank {rank}")
    for k, w in enumerate(window.dimensions):
        if w.size < 0 or w.stride < 1 or w.base_dilation < 1 or w.window_dilation < 1:
            fail(inst, f"window dimension {k} needs size >= 0, stride >= 1 and dilations >= 1")


def windowed_dims(inst: HloInstruction, dims: tuple[int, ...], window: Window) -> list[int]:
    """The output dimensions of a window sliding over `dims`."""
    check_window(inst, window, len(dims))
    return [window_output_size(d, w) for d, w in zip(dims, window.dimensions)]


@register_shape_rule("reduce-window")
def _reduce_window(inst: HloInstruction) -> Shape:
    """reduce-window: each input reduced over the window; one result per input."""
    inputs, inits = _inputs_and_inits(inst)
    out = windowed_dims(inst, inputs[0].dims, attr(inst, "window"))
    check_scalar_reducer(inst, computation(inst, "to_apply"), [i.dtype for i in inits])
    return tuple_or_single([make_array(i.dtype, out) for i in inits])


@register_shape_rule("select-and-scatter")
def _select_and_scatter(inst: HloInstruction) -> Shape:
    """select-and-scatter(operand, source, init): the source has the windowed shape."""
    x, source, init = array_operands(inst, range(3))
    if init.rank != 0 or init.dtype != x.dtype:
        fail(inst, f"init value must be a {x.dtype.name} scalar, is {text(init)}")
    if source.dtype != x.dtype:
        fail(inst, f"source element type {source.dtype.name} differs from the operand's {x.dtype.name}")
    out = windowed_dims(inst, x.dims, attr(inst, "window"))
    if list(source.dims) != out:
        fail(inst, f"source {text(source)} must have the windowed shape {out}")
    s = make_array(x.dtype, ())
    check_predicate_computation(inst, computation(inst, "select"), [s, s], "select")
    check_signature(inst, computation(inst, "scatter"), [s, s], s, "scatter")
    return make_array(x.dtype, x.dims)


@register_shape_rule("sort")
def _sort(inst: HloInstruction) -> Shape:
    """sort(x0..xn-1), dimensions={d}, to_apply: a comparator of 2N scalars to pred."""
    shapes = array_operands(inst)
    if not shapes:
        fail(inst, "sort needs at least one operand")
    for k, s in enumerate(shapes):
        if s.dims != shapes[0].dims:
            fail(inst, f"operand {k} {text(s)} must have the dimensions of operand 0 {text(shapes[0])}")
    dims = int_tuple(inst, "dimensions")
    if len(dims) != 1:
        fail(inst, f"sort takes one dimension, got {list(dims)}")
    check_dims_in_range(inst, dims, shapes[0].rank, "sort dimension")
    params = []
    for s in shapes:
        params += [make_array(s.dtype, ()), make_array(s.dtype, ())]
    check_predicate_computation(inst, computation(inst, "to_apply"), params, "comparator")
    return tuple_or_single([make_array(s.dtype, s.dims, s.dynamic) for s in shapes])


@register_shape_rule("topk")
def _topk(inst: HloInstruction) -> Shape:
    """topk(x), k: (values, s32 indices), the last dimension cut to k."""
    (x,) = array_operands(inst, range(1))
    if x.rank == 0:
        fail(inst, "topk needs an operand of rank >= 1")
    k = int_attr(inst, "k")
    if not 0 <= k <= x.dims[-1]:
        fail(inst, f"k={k!r} must be in [0, {x.dims[-1]}]")
    dims = x.dims[:-1] + (k,)
    if isinstance(inst.shape, TupleShape) and len(inst.shape.elements) == 2:
        idx_type = inst.shape.elements[1].dtype if isinstance(inst.shape.elements[1], ArrayShape) else S32
    else:
        idx_type = S32
    return TupleShape((make_array(x.dtype, dims), make_array(idx_type, dims)))

