"""Reference semantics of `reduce-window` (variadic, strides, padding, base and window
dilation) and `select-and-scatter`.

Both walk the window offsets in row-major order (a Python loop over the few elements of one
window) and handle every output position at once with numpy. As in XLA, padding and the holes
of base dilation are not visited: the accumulator starts at the init value and only real
input elements are combined into it, in window order, every step rounded to the element type
(XLA:CPU's window loop for bf16 and the 8-bit floats; for f16 it lets LLVM vectorize windows
of about 128 elements and more, an order that depends on the host's vector width and is not
modelled). A narrow-float reduce-window that XLA's simplifier turns into a reduce (no stride,
padding or dilation, each window dimension of size 1 or whole) takes XLA's reduce order.
"""
from __future__ import annotations

import itertools
from typing import Iterator

import numpy as np

from ...hlo.attributes import Window
from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloInstruction
from ...hlo.opcodes import register_reference
from .convolution import dilate_and_pad
from .op_helpers import (ASSIGN, KEEP, batched_call, flatten_value, leaf_dtypes, recognize_combiner,
                         scalar_args, total_order_key)
from .reduction import is_narrow_float_reduce, tree_reduce

_COMPARE = {"LT": np.less, "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal}
_SWAPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}


def window_output_shape(in_shape: tuple[int, ...], window: Window) -> tuple[int, ...]:
    """Number of window positions per dimension (after base dilation and padding)."""
    out = []
    for size, d in zip(in_shape, window.dimensions):
        dilated = (size - 1) * d.base_dilation + 1 if size > 0 else 0
        padded = dilated + d.padding_low + d.padding_high
        span = (d.size - 1) * d.window_dilation + 1
        out.append(max(0, (padded - span) // d.stride + 1) if padded >= span else 0)
    return tuple(out)


def window_taps(in_shape: tuple[int, ...], window: Window) -> Iterator[tuple[tuple[np.ndarray, ...], np.ndarray]]:
    """For each window offset in row-major order: per-dimension input index arrays (for
    `np.ix_`, clipped to be addressable) and the mask of output positions where the offset
    hits a real input element (not padding, not a base-dilation hole)."""
    out_shape = window_output_shape(in_shape, window)
    dims = window.dimensions
    for offset in itertools.product(*(range(d.size) for d in dims)):
        index, valid = [], []
        for size, n_out, k, d in zip(in_shape, out_shape, offset, dims):
            pos = np.arange(n_out) * d.stride + k * d.window_dilation - d.padding_low
            ok = (pos >= 0) & (pos <= (size - 1) * d.base_dilation) & (pos % d.base_dilation == 0)
            index.append(np.clip(pos // d.base_dilation, 0, max(size - 1, 0)))
            valid.append(ok)
        mask = np.ones(out_shape, dtype=bool)
        for axis, ok in enumerate(valid):
            shape = [1] * len(out_shape)
            shape[axis] = len(ok)
            mask = mask & ok.reshape(shape)
        yield tuple(index), mask


def _window_of(inst: HloInstruction, rank: int) -> Window:
    window = inst.attrs.get("window")
    if not isinstance(window, Window) or len(window.dimensions) != rank:
        raise UnsupportedError(f"{inst.opcode} {inst.name}: window does not have one entry per "
                               f"dimension of the rank-{rank} operand")
    return window


@register_reference("reduce-window")
def reduce_window_reference(inst: HloInstruction, args: list, interp) -> np.ndarray | tuple:
    """`reduce-window(inputs..., inits...)`: to_apply folds each window into its init value."""
    n = len(args) // 2
    inputs = [np.asarray(a) for a in args[:n]]
    inits = [np.asarray(a) for a in args[n:]]
    window = _window_of(inst, inputs[0].ndim)
    out_shape = window_output_shape(inputs[0].shape, window)
    dtypes = leaf_dtypes(inst.shape)
    accs = [np.full(out_shape, init, dtype=dt) for init, dt in zip(inits, dtypes)]
    comp = inst.attrs["to_apply"]
    reduce_dims = effective_reduce_dims(window, out_shape)
    if reduce_dims and is_narrow_float_reduce(dtypes) and not any(s == 0 for s in inputs[0].shape):
        # XLA's algebraic simplifier makes this reduce-window a reduce, and a narrow-float
        # reduce then follows XLA:CPU's tree order, every step rounded (reduction.tree_reduce).
        return tree_reduce(interp, comp, inputs[0], inits[0], reduce_dims).reshape(out_shape)
    reducers = recognize_combiner(comp, interp.denormals)
    batched = batched_call(comp, interp) if reducers is None else None
    empty = any(s == 0 for s in inputs[0].shape)
    if not empty and reducers is not None and _fold_strided(inputs, accs, reducers, window, out_shape):
        return tuple(accs) if inst.shape.is_tuple else accs[0]
    for index, mask in ([] if empty else window_taps(inputs[0].shape, window)):
        grid = np.ix_(*index)
        values = [x[grid] for x in inputs]
        if reducers is not None:
            for i, (reducer, value) in enumerate(zip(reducers, values)):
                if reducer is ASSIGN:
                    accs[i] = np.where(mask, value, accs[i]).astype(dtypes[i], copy=False)
                elif reducer is not KEEP:
                    accs[i] = np.where(mask, reducer(accs[i], value), accs[i]).astype(dtypes[i], copy=False)
        elif batched is not None:
            results = batched(accs + values)
            accs = [np.where(mask, r, a).astype(dt, copy=False) for a, r, dt in zip(accs, results, dtypes)]
        else:
            _fold_by_calls(comp, accs, values, mask, interp)
    return tuple(accs) if inst.shape.is_tuple else accs[0]


def effective_reduce_dims(window: Window, out_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The dimensions a reduce-window reduces whole when XLA's algebraic simplifier turns it
    into a reduce: no stride, dilation or padding anywhere, and every window dimension of size
    1 or giving one output (so covering its whole dimension); () when it does not."""
    dims = []
    for i, d in enumerate(window.dimensions):
        if (d.stride != 1 or d.window_dilation != 1 or d.base_dilation != 1
                or d.padding_low or d.padding_high):
            return ()
        if d.size == 1:
            continue
        if out_shape[i] != 1:
            return ()
        dims.append(i)
    return tuple(dims)


def _identity(reducer, dtype: np.dtype):
    """The element that `reducer` leaves every value unchanged with, bit for bit, if `dtype`
    can represent it (-0.0 for float add: x + -0.0 == x even for x = -0.0), else None."""
    dtype = np.dtype(dtype)
    is_float = dtype.kind in "fcV" and "int" not in dtype.name
    if dtype.kind == "b":
        table = {np.logical_or: False, np.logical_and: True, np.logical_xor: False}
    elif is_float:
        table = {np.add: -0.0, np.multiply: 1.0, np.maximum: -np.inf, np.minimum: np.inf}
    else:
        info = np.iinfo(dtype) if dtype.kind in "iu" else None
        if info is None:
            return None
        table = {np.add: 0, np.multiply: 1, np.maximum: info.min, np.minimum: info.max,
                 np.bitwise_or: 0, np.bitwise_xor: 0, np.bitwise_and: -1 if dtype.kind == "i" else info.max}
    if reducer not in table:
        return None
    value = np.array(table[reducer]).astype(dtype)
    if is_float and not np.array_equal(value.astype(np.complex128), np.array(table[reducer], np.complex128)):
        return None  # e.g. float8_e4m3fn has no infinity
    return value


def _fold_strided(inputs: list[np.ndarray], accs: list[np.ndarray], reducers: list, window: Window,
                  out_shape: tuple[int, ...]) -> bool:
    """Fold recognised reducers over strided views of the inputs padded and dilated with the
    reducers' identities (equal to not visiting those positions); False when some reducer has
    no identity (assign, or a type that cannot hold it) and the masked path must run."""
    identities = [None if r is KEEP else _identity(r, a.dtype) if r is not ASSIGN else None
                  for r, a in zip(reducers, accs)]
    if any(i is None and r is not KEEP for i, r in zip(identities, reducers)):
        return False
    axes = list(range(inputs[0].ndim))
    dims = window.dimensions
    padded = [None if r is KEEP else dilate_and_pad(x.astype(a.dtype, copy=False), axes, list(dims), ident)
              for x, a, r, ident in zip(inputs, accs, reducers, identities)]
    for offset in itertools.product(*(range(d.size) for d in dims)):
        view = tuple(slice(k * d.window_dilation, k * d.window_dilation + d.stride * (n - 1) + 1, d.stride)
                     for k, d, n in zip(offset, dims, out_shape))
        for i, (reducer, x) in enumerate(zip(reducers, padded)):
            if reducer is not KEEP:
                # np.asarray: a ufunc of rank-0 arrays gives a numpy scalar, not an array
                accs[i] = np.asarray(reducer(accs[i], x[view])).astype(accs[i].dtype, copy=False)
    return True


def _fold_by_calls(comp, accs: list[np.ndarray], values: list[np.ndarray], mask: np.ndarray, interp) -> None:
    """acc = comp(acc..., value...) at every masked position, one call per element."""
    acc_types = [a.dtype for a in accs]
    val_types = [v.dtype for v in values]
    for pos in zip(*np.nonzero(mask)):
        call_args = scalar_args([a[pos] for a in accs], acc_types) + scalar_args([v[pos] for v in values], val_types)
        for a, r in zip(accs, flatten_value(interp.call(comp, call_args))):
            a[pos] = r


def _simple_select(comp):
    """The compare of a select computation `compare(p0, p1)` as a numpy function of
    (selected, candidate), or None."""
    root = comp.root
    params = comp.parameters
    if root.opcode != "compare" or len(params) != 2:
        return None
    direction = str(root.attrs.get("direction"))
    if direction not in _COMPARE:
        return None
    if root.operands[0] is params[0] and root.operands[1] is params[1]:
        fn = _COMPARE[direction]
    elif root.operands[0] is params[1] and root.operands[1] is params[0]:
        fn = _COMPARE[_SWAPPED[direction]]
    else:
        return None
    if str(root.attrs.get("type", "")) == "TOTALORDER":
        return lambda a, b: fn(total_order_key(a), total_order_key(b))
    return fn


@register_reference("select-and-scatter")
def select_and_scatter_reference(inst: HloInstruction, args: list, interp) -> np.ndarray:
    """`select-and-scatter(operand, source, init)`: in each window `select` picks one element
    (the current pick is kept while select(pick, next) is true), and the source value of that
    window is combined into the result at the pick with `scatter`."""
    operand, source, init = (np.asarray(a) for a in args)
    window = _window_of(inst, operand.ndim)
    if any(d.base_dilation != 1 or d.window_dilation != 1 for d in window.dimensions):
        raise UnsupportedError(f"select-and-scatter {inst.name}: dilated windows are not allowed")
    out_shape = window_output_shape(operand.shape, window)
    if tuple(source.shape) != out_shape:
        raise UnsupportedError(f"select-and-scatter {inst.name}: source shape {source.shape} is not "
                               f"the window output shape {out_shape}")
    result = np.full(operand.shape, init, dtype=operand.dtype)
    if operand.size == 0 or source.size == 0:
        return result
    select, scatter = inst.attrs["select"], inst.attrs["scatter"]
    picked, have = _select_positions(select, operand, window, out_shape, interp)
    flat = result.reshape(-1)
    targets, values = picked[have], source[have]
    # scatter is called as scatter(source value, current value): recognize_combiner reads its
    # parameters as (accumulator, update), so its ASSIGN means "keep the current value" here
    # and its KEEP means "store the source value".
    reducers = recognize_combiner(scatter, interp.denormals)
    if reducers is not None:
        if reducers[0] is KEEP:
            flat[targets] = values
        elif reducers[0] is not ASSIGN:
            reducers[0].at(flat, targets, values.astype(flat.dtype, copy=False))
    else:
        for t, v in zip(targets.tolist(), values):
            # XLA's evaluator calls scatter(source value, current result value).
            call_args = scalar_args([v, flat[t]], [source.dtype, flat.dtype])
            flat[t] = flatten_value(interp.call(scatter, call_args))[0]
    return result


def _select_positions(select, operand: np.ndarray, window: Window, out_shape, interp):
    """Flat operand index of the element selected in each window, and whether any was."""
    picked = np.zeros(out_shape, dtype=np.int64)
    best = np.zeros(out_shape, dtype=operand.dtype)
    have = np.zeros(out_shape, dtype=bool)
    fast = _simple_select(select)
    batched = batched_call(select, interp) if fast is None else None
    for index, mask in window_taps(operand.shape, window):
        grid = np.ix_(*index)
        value = operand[grid]
        flat_index = np.ravel_multi_index(np.broadcast_arrays(*grid), operand.shape)
        if fast is not None:
            take = mask & (~have | ~fast(best, value))
        elif batched is not None:
            take = mask & (~have | ~np.asarray(batched([best, value])[0], dtype=bool))
        else:
            take = mask & ~have
            for pos in zip(*np.nonzero(mask & have)):
                keep = flatten_value(interp.call(select, scalar_args([best[pos], value[pos]], [operand.dtype] * 2)))[0]
                take[pos] = not bool(keep)
        best = np.where(take, value, best)
        picked = np.where(take, flat_index, picked)
        have |= mask
    return picked, have
