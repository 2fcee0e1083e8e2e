"""Reference rule of `reduce`, including variadic reduce (argmax-style (value, index) pairs).

Reducers recognised from the computation (add, multiply, maximum, minimum, and, or, xor of
the accumulator and the element) run as one numpy reduction; any other reducer is folded
element by element along the reduced dimensions, vectorized over the kept elements when the
reducer is elementwise (it is then evaluated once per reduced position on whole arrays).

A (non-variadic) reduce into a float narrower than f32 (bf16, f16, the f8 types) follows
XLA:CPU step for step instead (`tree_reduce`), because there the order is the result: every
step rounds to the narrow type, so a bf16 sum of 64 elements depends on which elements are
added first. What XLA:CPU does (found by running such modules through it and reading its
optimized HLO, see tests/codegen/test_reduce_precision_accumulation.py):
  * the reducer is not widened: float normalization computes each of its ops in f32 and
    converts back, `convert(convert(add(f32 a, f32 b)) to bf16) to f32` - the accumulator is
    rounded to the narrow type after every step (no f32 accumulation, no single final rounding);
  * TreeReductionRewriter (window 32) first rewrites reduce(x) into reduce(reduce-window(x))
    while any reduced dimension is longer than 32: windows of min(n, 32) along every reduced
    dimension, stride = window, "same" padding (half the padding low, the odd one high) whose
    positions are skipped, every window starting from the init value (so the init value joins
    once per window: XLA takes it to be the reducer's identity);
  * each window, and the last reduce, folds its elements sequentially in row-major order
    from the init value.
The CPU and GPU backends compute exactly this (codegen/planning.tree_reduction_rewrite
and the sequential per-output GPU kernel), so all three agree bit for bit.
"""
from __future__ import annotations

import math

import numpy as np

from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.opcodes import register_reference
from .core import Value, is_elementwise_computation
from .elementwise import compute_dtype, is_float, to_type
from .op_helpers import ASSIGN, KEEP, maximum, minimum, recognize_combiner

Array = np.ndarray


def _fast_reduce(inputs: list[Array], inits: list[Array], dims: tuple[int, ...], reducers) -> list[Array] | None:
    """One numpy reduction per output when every output has a recognised ufunc reducer."""
    if any(r in (ASSIGN, KEEP) for r in reducers):
        return None
    out = []
    for x, init, ufunc in zip(inputs, inits, reducers):
        reduced_count = math.prod(x.shape[d] for d in dims)
        if reduced_count == 0:
            kept = tuple(s for i, s in enumerate(x.shape) if i not in dims)
            out.append(np.broadcast_to(init, kept).astype(x.dtype))
            continue
        if not dims:
            r = x
        else:
            # 4-bit integers accumulate in 8 bits, wrapped at the end (narrow floats do not get
            # here: tree_reduce).
            wide = compute_dtype(x.dtype)
            r = ufunc.reduce(x.astype(wide, copy=False), axis=dims)
            init = init.astype(wide, copy=False)
        # The init value joins once; for the recognised reducers its position does not matter.
        out.append(to_type(ufunc(r, init), x.dtype))
    return out


# Up to this many reduced elements a generic reducer is folded in index order; longer rows are
# combined pairwise (XLA fixes no order: the reducer is meant to be associative).
SEQUENTIAL_LIMIT = 64


def _call_columns(interp, reducer: HloComputation, left: list[Array], right: list[Array]) -> list[Array]:
    """The reducer applied elementwise to equal-shape arrays (accumulators first)."""
    shape = left[0].shape
    result = interp.call_batched(reducer, [a.reshape(-1) for a in left] + [b.reshape(-1) for b in right])
    values = list(result) if len(left) > 1 else [result]
    return [np.broadcast_to(np.asarray(v), (math.prod(shape),)).astype(a.dtype).reshape(shape)
            for v, a in zip(values, left)]


def _pair_up(arrays: list[Array], combine) -> list[Array]:
    """Fold equal-shape `arrays` over their last axis pairwise: each step hands `combine` the
    even and the odd positions (lists, one per array: earlier elements on the left, so
    index-based tie breaks still prefer them) and keeps an odd last one for the next step."""
    while arrays[0].shape[-1] > 1:
        even = arrays[0].shape[-1] - arrays[0].shape[-1] % 2
        paired = combine([a[..., 0:even:2] for a in arrays], [a[..., 1:even:2] for a in arrays])
        arrays = [np.concatenate([p, a[..., even:]], axis=-1) for p, a in zip(paired, arrays)]
    return [a[..., 0] for a in arrays]


def _tree_fold(interp, reducer: HloComputation, flat: list[Array], inits: list[Array]) -> list[Array]:
    """Pairwise combination of the columns of (kept, reduced) arrays (`_pair_up`), then the
    init values in front."""
    folded = _pair_up(flat, lambda left, right: _call_columns(interp, reducer, left, right))
    heads = [np.broadcast_to(init, (folded[0].shape[0],)).copy() for init in inits]
    return _call_columns(interp, reducer, heads, folded)


def fold(interp, reducer: HloComputation, inputs: list[Array], inits: list[Array],
         dims: tuple[int, ...]) -> list[Array]:
    """Fold `reducer` over `dims` of `inputs` starting from `inits`, in index order."""
    rank = inputs[0].ndim
    kept = [d for d in range(rank) if d not in dims]
    kept_shape = tuple(inputs[0].shape[d] for d in kept)
    n_kept = math.prod(kept_shape)
    n_red = math.prod(inputs[0].shape[d] for d in dims)
    flat = [np.transpose(x, kept + list(dims)).reshape(n_kept, n_red) for x in inputs]
    n = len(inputs)
    if is_elementwise_computation(reducer) and n_red > SEQUENTIAL_LIMIT:
        acc = _tree_fold(interp, reducer, flat, inits)
    elif is_elementwise_computation(reducer):
        acc = [np.broadcast_to(init, (n_kept,)).copy() for init in inits]
        for k in range(n_red):
            result = interp.call_batched(reducer, acc + [f[:, k] for f in flat])
            values = list(result) if n > 1 else [result]
            acc = [np.broadcast_to(np.asarray(v), (n_kept,)).astype(init.dtype) for v, init in zip(values, inits)]
    else:
        acc = [np.empty((n_kept,), dtype=init.dtype) for init in inits]
        for i in range(n_kept):
            state = [np.asarray(init) for init in inits]
            for k in range(n_red):
                result = interp.call(reducer, state + [np.asarray(f[i, k]) for f in flat])
                state = list(result) if n > 1 else [result]
            for a, s in zip(acc, state):
                a[i] = s
    return [a.reshape(kept_shape) for a in acc]


# XLA's TreeReductionRewriter window on CPU (cpu_compiler.cc: TreeReductionRewriter()).
TREE_WINDOW = 32


def is_narrow_float_reduce(dtypes) -> bool:
    """Whether a (non-variadic) reduce into these accumulator types takes XLA:CPU's tree order
    with per-step rounding: floats narrower than f32."""
    return len(dtypes) == 1 and is_float(np.dtype(dtypes[0])) and np.dtype(dtypes[0]).itemsize < 4


def tree_windows(n: int) -> tuple[int, int, int]:
    """(window, windows, padding_low) of one reduced dimension of length n > TREE_WINDOW in
    one TreeReductionRewriter step: "same" padding puts the smaller half of it low."""
    w = min(n, TREE_WINDOW)
    count = -(-n // w)
    return w, count, (count * w - n) // 2


def _fold_windows(interp, reducer: HloComputation, ufunc, x: Array, init: Array, dims: tuple[int, ...],
                  windowed: bool) -> Array:
    """One level of the tree: fold every window of `x` (windows from `tree_windows` along the
    reduced `dims` when `windowed`, else all of each reduced dimension, which it then drops)
    sequentially in row-major order from `init`, rounding to x's type after every step;
    padding positions are skipped."""
    dtype = x.dtype
    padded, valid = x, np.ones(x.shape, dtype=bool)
    grid, win = [], []
    for d in range(x.ndim):
        n = x.shape[d]
        if d not in dims:
            grid.append(n)
            win.append(1)
            continue
        w, count, lo = tree_windows(n) if windowed else (n, 1, 0)
        pad = [(0, 0)] * x.ndim
        pad[d] = (lo, count * w - n - lo)
        padded = np.pad(padded, pad)
        valid = np.pad(valid, pad, constant_values=False)
        grid.append(count)
        win.append(w)
    # Split each dimension into (window index, position in window), positions last.
    split = [s for g, w in zip(grid, win) for s in (g, w)]
    order = list(range(0, 2 * x.ndim, 2)) + list(range(1, 2 * x.ndim, 2))
    width = math.prod(win)
    cols = np.transpose(padded.reshape(split), order).reshape(tuple(grid) + (width,))
    mask = np.transpose(valid.reshape(split), order).reshape(tuple(grid) + (width,))
    acc = np.broadcast_to(init, tuple(grid)).astype(dtype)
    wide = compute_dtype(dtype)
    if width > SEQUENTIAL_LIMIT and grouping_free(ufunc):
        # the same result as the sequence below, in log2(width) whole-array steps: a reduce of
        # f16[16,31,28,16] to a scalar is one window of 222,208 positions (the large-graph
        # fuzzer, seed 74: 11 s one position at a time)
        tree, valid_any = _pairwise(ufunc, cols, mask, wide, dtype)
        acc = np.where(valid_any, to_type(ufunc(acc.astype(wide), tree.astype(wide)), dtype), acc)
        return acc if windowed else acc.reshape(tuple(g for d, g in enumerate(grid) if d not in dims))
    for k in range(width):
        xk = cols[..., k]
        if ufunc is not None:
            step = to_type(ufunc(acc.astype(wide), xk.astype(wide)), dtype)
        else:
            step = np.asarray(interp.call_batched(reducer, [acc.reshape(-1), xk.reshape(-1)]))
            step = np.broadcast_to(step, (acc.size,)).astype(dtype).reshape(acc.shape)
        acc = np.where(mask[..., k], step, acc)
    if windowed:
        return acc
    return acc.reshape(tuple(g for d, g in enumerate(grid) if d not in dims))


# Combiners whose fold does not depend on how the sequence is grouped: max and min (exact, the
# first NaN in order propagating, op_helpers.SignedZeroExtremum's signed zeros, a
# FlushingCombiner's flushes idempotent) and the logical and bitwise and/or/xor.
_GROUPING_FREE = (maximum, minimum, np.logical_and, np.logical_or, np.logical_xor,
                  np.bitwise_and, np.bitwise_or, np.bitwise_xor)


def grouping_free(ufunc) -> bool:
    """Whether folding `ufunc` (a recognised combiner, possibly flushing) over a sequence in
    order equals folding it pairwise, earlier elements on the left."""
    return ufunc is not None and any(ufunc == u for u in _GROUPING_FREE)


def _pairwise(ufunc, cols: Array, mask: Array, wide, dtype) -> tuple[Array, Array]:
    """`ufunc` folded over the last axis of `cols` pairwise (`_pair_up`), positions where
    `mask` is False skipped; (the folds, whether each had a valid position)."""
    def combine(left: list[Array], right: list[Array]) -> list[Array]:
        (x, m_left), (y, m_right) = left, right
        both = to_type(ufunc(x.astype(wide), y.astype(wide)), dtype)
        return [np.where(m_left & m_right, both, np.where(m_left, x, y)), m_left | m_right]

    return tuple(_pair_up([cols, mask], combine))


def tree_reduce(interp, reducer: HloComputation, x: Array, init: Array, dims: tuple[int, ...]) -> Array:
    """Reduce narrow-float `x` over `dims` in XLA:CPU's order (see the module docstring):
    reduce-window levels while a reduced dimension is longer than TREE_WINDOW, then one
    sequential fold per output, every step rounded to x's type."""
    recognised = recognize_combiner(reducer, interp.denormals)
    ufunc = recognised[0] if recognised is not None and recognised[0] not in (ASSIGN, KEEP) else None
    init = np.asarray(init).astype(x.dtype)
    if math.prod(x.shape[d] for d in dims) == 0:
        kept = tuple(s for i, s in enumerate(x.shape) if i not in dims)
        return np.broadcast_to(init, kept).astype(x.dtype)
    while any(x.shape[d] > TREE_WINDOW for d in dims):
        x = _fold_windows(interp, reducer, ufunc, x, init, dims, windowed=True)
    return _fold_windows(interp, reducer, ufunc, x, init, dims, windowed=False)


@register_reference("reduce")
def _reduce(inst: HloInstruction, args: list, interp) -> Value:
    """Reduce N inputs with N init values over `dimensions` using `to_apply`."""
    n = len(args) // 2
    inputs = [np.asarray(a) for a in args[:n]]
    inits = [np.asarray(a) for a in args[n:]]
    dims = tuple(sorted(int(d) for d in inst.attrs.get("dimensions", ())))
    reducer = inst.attrs["to_apply"]
    if all(inputs[0].shape[d] == 1 for d in dims):
        # One element per output: XLA takes the init value to be the reducer's identity and
        # the reduce to be a reshape (its simplifier rewrites it so), whatever the init is.
        kept = tuple(inst.shape.leaves()[0].dims)
        out = [x.reshape(kept).copy() for x in inputs]
        return tuple(out) if inst.shape.is_tuple else out[0]
    reducers = recognize_combiner(reducer, interp.denormals)
    if is_narrow_float_reduce([x.dtype for x in inputs]) or (
            n == 1 and reducers is None and inputs[0].dtype.kind == "c"):
        # Also a complex reduce with an unrecognised (order-dependent) reducer, such as
        # complex max/min, whose ties keep the accumulator: XLA:CPU's tree order decides.
        return tree_reduce(interp, reducer, inputs[0], inits[0], dims)
    out = _fast_reduce(inputs, inits, dims, reducers) if reducers is not None else None
    if out is None:
        out = fold(interp, reducer, inputs, inits, dims)
    return tuple(out) if inst.shape.is_tuple else out[0]
