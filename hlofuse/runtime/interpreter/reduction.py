"""Reference rule of `reduce`, including variadic reduce (argmax-style (value, index) pairs).

Reducers recognised from the computation (add, multiply, maximum, minimum, and, or, xor of
the accumulator and the element) run as one numpy reduction; any other reducer is folded
element by element along the reduced dimensions, vectorized over the kept elements when the
reducer is elementwise (it is then evaluated once per reduced position on whole arrays).
"""
from __future__ import annotations

import math

import numpy as np

from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.opcodes import register_reference
from .core import Value, is_elementwise_computation
from .elementwise import compute_dtype, to_type
from .op_helpers import ASSIGN, KEEP, recognize_combiner

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
            # Narrow floats accumulate in f32 and round once (as XLA's CPU reductions nearly do);
            # 4-bit integers in 8 bits, wrapped at the end.
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


def _tree_fold(interp, reducer: HloComputation, flat: list[Array], inits: list[Array]) -> list[Array]:
    """Pairwise combination of the columns of (kept, reduced) arrays, earlier elements on the
    left (so index-based tie breaks still prefer them), then the init values in front."""
    cols = flat
    while cols[0].shape[1] > 1:
        width = cols[0].shape[1]
        even = width - width % 2
        paired = _call_columns(interp, reducer, [c[:, 0:even:2] for c in cols], [c[:, 1:even:2] for c in cols])
        cols = [np.concatenate([p, c[:, even:]], axis=1) for p, c in zip(paired, cols)]
    n_kept = cols[0].shape[0]
    heads = [np.broadcast_to(init, (n_kept,)).copy() for init in inits]
    return _call_columns(interp, reducer, heads, [c[:, 0] for c in cols])


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
    reducers = recognize_combiner(reducer)
    out = _fast_reduce(inputs, inits, dims, reducers) if reducers is not None else None
    if out is None:
        out = fold(interp, reducer, inputs, inits, dims)
    return tuple(out) if inst.shape.is_tuple else out[0]
