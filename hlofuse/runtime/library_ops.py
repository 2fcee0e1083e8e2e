"""Unfused ops the compiled backends run as library calls (numpy), and control flow; the linear
algebra rules (dot, convolution, fft, cholesky, triangular-solve) are in library_linalg.py.

Rules are attached to the op registry with `register_library(opcode)`:
`fn(inst, args, ctx) -> value`, where a value is a numpy array or a tuple of values and
`ctx.call(computation, args)` runs a called computation through the compiled program;
`ctx.host(value)` brings its result to host memory where a rule computes on it (on the real
GPU a called computation's result is device memory). A rule calling a computation per element
or per comparison (sort, scatter) asks `host_calls` first: on the real GPU such calls run on
the host, batched where the computation is elementwise (runtime/host_calls.py).
Written independently of the reference interpreter, which is the oracle for these too.
Ops with an element generator never come here: the executor emits them as loop kernels.
"""
from __future__ import annotations

import math

import numpy as np

from ..hlo.errors import UnsupportedError
from ..hlo.lapack_calls import lapack_call
from ..hlo.opcodes import mark_unsupported, register_library
from .host_calls import batched_stable_order, combine_in_rounds, host_calls, is_strict_weak_order_result
from .interpreter import op_helpers
from .interpreter.linalg import lapack_decomposition
from .interpreter.sort import comparator_sort_order
from .library_lu import lu_factor


def _np_dtype(shape):
    return shape.dtype.numpy


def _work_dtype(dt: np.dtype) -> np.dtype:
    """numpy computes low-precision floats (bf16, f16, f8) in f32."""
    dt = np.dtype(dt)
    if dt.kind == "V" or (dt.kind == "f" and dt.itemsize < 4) or dt.name in ("bfloat16",):
        return np.dtype(np.float32)
    return dt


# ---- data movement that stays unfused ---------------------------------------------------------
def _start_indices(inst, starts, operand_dims, sizes):
    out = []
    for s, n, k in zip(starts, operand_dims, sizes):
        out.append(int(np.clip(int(np.asarray(s)), 0, n - k)))
    return out


@register_library("dynamic-update-slice")
def dynamic_update_slice(inst, args, ctx):
    """A copy of the operand with `update` written at the clamped start indices."""
    operand, update, *starts = args
    idx = _start_indices(inst, starts, operand.shape, update.shape)
    out = np.array(operand, copy=True)
    out[tuple(slice(i, i + n) for i, n in zip(idx, update.shape))] = update
    return out


# maximum/minimum: XLA's -0 < +0 (np.maximum.at returns either zero of an equal pair).
_COMBINERS = {"add": np.add, "multiply": np.multiply, "maximum": op_helpers.maximum, "minimum": op_helpers.minimum,
              "or": np.logical_or, "and": np.logical_and}


def _binary_combiner(comp):
    """The numpy ufunc of a scalar computation `f(p0, p1) = op(p0, p1)`, 'assign' for
    `f(p0, p1) = p1`, or None."""
    root = comp.root
    params = comp.parameters
    if len(params) != 2:
        return None
    if root is params[1]:
        return "assign"
    if len(root.operands) == 2 and set(root.operands) == {params[0], params[1]}:
        op = _COMBINERS.get(root.opcode)
        if op is not None and root.shape.dtype.is_pred and root.opcode in ("or", "and"):
            return op
        if root.opcode in ("or", "and"):
            return np.bitwise_or if root.opcode == "or" else np.bitwise_and
        return op
    return None


@register_library("scatter")
def scatter(inst, args, ctx):
    """XLA scatter: each update element goes to operand[start(scatter index) + window offset]
    (starts are not clamped: updates whose window leaves the operand are skipped)."""
    n = (len(args) - 1) // 2
    operands, indices, updates = args[:n], args[n], args[n + 1:]
    a = inst.attrs
    uwd = tuple(a.get("update_window_dims", ()))
    iwd = tuple(a.get("inserted_window_dims", ()))
    sdod = tuple(a.get("scatter_dims_to_operand_dims", ()))
    ibd = tuple(a.get("input_batching_dims", ()))
    sibd = tuple(a.get("scatter_indices_batching_dims", ()))
    ivd = int(a["index_vector_dim"])
    comp = a["to_apply"]
    outs = [np.array(o, copy=True) for o in operands]
    op_shape = outs[0].shape
    idx = np.asarray(indices)
    if ivd == idx.ndim:
        idx = idx[..., None]
    idx = np.moveaxis(idx, ivd, -1)
    upd_shape = updates[0].shape
    scatter_dims = [d for d in range(len(upd_shape)) if d not in uwd]
    window_operand_dims = [d for d in range(len(op_shape)) if d not in iwd and d not in ibd]
    idx_batch_dims = [d for d in range(np.asarray(indices).ndim) if d != ivd]
    combiner = _binary_combiner(comp) if n == 1 else None
    # Full operand index of every update element (vectorized), then a validity mask.
    count = math.prod(upd_shape)
    grids = np.indices(upd_shape).reshape(len(upd_shape), count)
    sidx = tuple(grids[d] for d in scatter_dims)
    starts = idx[sidx] if scatter_dims else np.broadcast_to(idx.reshape(-1), (count, idx.shape[-1]))
    starts = np.asarray(starts).reshape(count, idx.shape[-1])  # explicit: count may be 0
    full = np.zeros((len(op_shape), grids.shape[1]), np.int64)
    for k, od in enumerate(sdod):
        full[od] += starts[:, k].astype(np.int64)
    for j, od in enumerate(window_operand_dims):
        full[od] += grids[uwd[j]]
    for od, idim in zip(ibd, sibd):
        full[od] = grids[scatter_dims[idx_batch_dims.index(idim)]]
    valid = np.all((full >= 0) & (full < np.array(op_shape)[:, None]), axis=0)
    # XLA drops the whole window when its start is out of bounds: check window extents.
    if len(op_shape):
        win = [1] * len(op_shape)
        for j, od in enumerate(window_operand_dims):
            win[od] = upd_shape[uwd[j]]
        wstart = np.zeros_like(full)
        for k, od in enumerate(sdod):
            wstart[od] = starts[:, k]
        ok = np.all((wstart >= 0) & (wstart + np.array(win)[:, None] <= np.array(op_shape)[:, None]), axis=0)
        valid &= ok
    target = tuple(full[:, valid])
    vals = [u.reshape(-1)[valid] for u in updates]
    # A scalar operand has no index arrays to carry the update axis: address it as [1].
    dest = outs[0] if len(op_shape) else outs[0].reshape(1)  # a view: writes land in outs[0]
    if not len(op_shape):
        target = (np.zeros(len(vals[0]), np.int64),)
    if combiner == "assign":
        dest[target] = vals[0]
    elif combiner is not None:
        combiner.at(dest, target, vals[0])
    else:
        flat_targets = np.ravel_multi_index(target, op_shape) if len(op_shape) else np.zeros(len(vals[0]), int)
        flats = [o.reshape(-1) for o in outs]
        one, batched = host_calls(ctx, comp)  # on the real GPU: on the host, not a launch each
        if batched is not None:
            combine_in_rounds(batched, flats, flat_targets, vals)
            return outs[0] if n == 1 else tuple(outs)
        for t, *vs in zip(flat_targets, *vals):
            cur = [np.asarray(f[t]) for f in flats]
            for f, r in zip(flats, one(cur + [np.asarray(v) for v in vs])):
                f[t] = r
    return outs[0] if n == 1 else tuple(outs)


def _sort_key_pattern(comp):
    """(operand k, descending, total_order) for a comparator `compare(p2k, p2k+1)`, else None."""
    root = comp.root
    if root.opcode != "compare":
        return None
    params = comp.parameters
    a, b = root.operands
    if a.opcode != "parameter" or b.opcode != "parameter":
        return None
    direction = str(root.attrs["direction"])
    if direction not in ("LT", "GT"):
        return None
    i, j = a.parameter_number, b.parameter_number
    if i // 2 != j // 2 or i == j or len(params) % 2:
        return None
    desc = (direction == "GT") == (i % 2 == 0)
    return i // 2, desc, str(root.attrs.get("type", "")) == "TOTALORDER"


@register_library("sort")
def sort(inst, args, ctx):
    """Sort along `dimensions`: an argsort on the key for a plain `compare(p2k, p2k+1)`
    comparator (a total order on that key), else XLA:CPU's own algorithm calling the compiled
    comparator per comparison (`comparator_sort_order`), which also gives XLA's permutation
    for a comparator that is not a strict weak order (LE, a constant, LT over NaN ...)."""
    dim = int(inst.attrs["dimensions"][0])
    comp = inst.attrs["to_apply"]
    stable = op_helpers.attr_bool(inst, "is_stable")
    moved = [np.moveaxis(np.asarray(x), dim, -1) for x in args]
    pattern = _sort_key_pattern(comp)
    key = None
    if pattern is not None:
        k, desc, total = pattern
        key = moved[k]
        if total:
            key = op_helpers.total_order_key(key)
        elif key.dtype.kind == "c" or (key.dtype.kind in "fV" and np.isnan(key.astype(np.float32)).any()):
            key = None  # LT/GT over NaN orders nothing consistently: run XLA's algorithm
    if key is not None:
        if key.dtype.kind == "V":
            key = key.astype(np.float32)  # bf16, f8: float32 orders them identically
        if desc:
            n = key.shape[-1]
            order = n - 1 - np.flip(np.argsort(np.flip(key, -1), axis=-1, kind="stable"), -1)
        else:
            order = np.argsort(key, axis=-1, kind="stable")
    else:
        order = _comparator_order(comp, moved, stable, ctx)
    outs = [np.moveaxis(np.take_along_axis(m, order, -1), -1, dim) for m in moved]
    outs = [np.ascontiguousarray(o) for o in outs]  # sort operands have rank >= 1
    return tuple(outs) if inst.shape.is_tuple else outs[0]


def _comparator_order(comp, moved: list[np.ndarray], stable: bool, ctx) -> np.ndarray:
    """The permutation of each row (last axis) of `moved` under comparator `comp`. Where the
    program evaluates called computations on the host (the real GPU: `host_calls`) and the
    comparator is elementwise, a batched merge sort whose result, when it shows a strict weak
    order, is the one stable order; otherwise XLA:CPU's algorithm with one call per comparison
    (on the host there, else through the compiled program)."""
    n = moved[0].shape[-1]
    one, batched = host_calls(ctx, comp)
    if batched is not None and n > 1 and moved[0].size:
        rows = [m.reshape(-1, n) for m in moved]
        perm = batched_stable_order(batched, rows)
        if perm is not None and is_strict_weak_order_result(batched, rows, perm):
            return perm.reshape(moved[0].shape)
    order = np.empty(moved[0].shape, np.int64)
    for row in np.ndindex(*moved[0].shape[:-1]):
        vals = [m[row] for m in moved]

        def less(i, j, vals=vals):
            args2 = []
            for v in vals:
                args2 += [np.asarray(v[i]), np.asarray(v[j])]
            return bool(one(args2)[0])

        order[row] = comparator_sort_order(n, less, stable)
    return order


@register_library("topk")
def topk(inst, args, ctx):
    """Top k along the last dimension: (values, indices), largest (or smallest) first, ties by
    lower index. Floats rank in XLA's total order (-NaN < -inf < ... < -0 < +0 < ... < +inf
    < +NaN), as XLA:CPU's TopK does: a plain `<` on floats would drop NaN and tie -0 with +0."""
    (x,) = args
    k = int(str(inst.attrs["k"]))
    largest = op_helpers.attr_bool(inst, "largest", True)
    key = op_helpers.total_order_key(x)  # integers and bools map to themselves
    if key.dtype.kind == "V":
        key = key.astype(np.float32)  # s4/u4/s2/u2 (ml_dtypes types): float32 orders them exactly
    if largest:
        # Descending and stable: sort the reversed row ascending, then reverse the result.
        # Negating the key instead would wrap the most negative integer and every unsigned one.
        n = key.shape[-1]
        order = n - 1 - np.flip(np.argsort(np.flip(key, -1), axis=-1, kind="stable"), -1)
    else:
        order = np.argsort(key, axis=-1, kind="stable")
    order = order[..., :k]
    values = np.take_along_axis(x, order, -1)
    index_dtype = inst.shape.elements[1].dtype.numpy if inst.shape.is_tuple else np.int32
    return np.ascontiguousarray(values), np.ascontiguousarray(order.astype(index_dtype))


def _select_direction(comp):
    """'GE' / 'GT' / 'LE' / 'LT' for a select computation `compare(p0, p1)`, else None."""
    root = comp.root
    params = comp.parameters
    if root.opcode != "compare" or len(params) != 2:
        return None
    if root.operands[0] is params[0] and root.operands[1] is params[1]:
        return str(root.attrs["direction"])
    return None


@register_library("select-and-scatter")
def select_and_scatter(inst, args, ctx):
    """For each window (one per source element) select an operand element (the select
    computation keeps the current pick while it returns true), then combine the source
    element into the output at the pick; padding positions are never picked."""
    operand, source, init = args
    direction = _select_direction(inst.attrs["select"])
    combiner = _binary_combiner(inst.attrs["scatter"])
    if direction not in ("GE", "GT", "LE", "LT") or combiner in (None, "assign"):
        raise UnsupportedError(f"select-and-scatter {inst.name}: only compare selects and ufunc scatters are supported")
    wd = inst.attrs["window"].dimensions
    work = _work_dtype(operand.dtype)
    x = operand.astype(work)
    best_val = best_idx = None
    flat_index = np.arange(x.size).reshape(x.shape)
    for offs in np.ndindex(*[d.size for d in wd]):
        coords = []
        for axis, (d, o) in enumerate(zip(wd, offs)):
            coords.append(np.arange(source.shape[axis]) * d.stride + o - d.padding_low)
        grids = np.meshgrid(*coords, indexing="ij")
        valid = np.ones(source.shape, bool)
        for axis, gr in enumerate(grids):
            valid &= (gr >= 0) & (gr < x.shape[axis])
        clipped = tuple(np.clip(gr, 0, n - 1) for gr, n in zip(grids, x.shape))
        cand, cidx = x[clipped], flat_index[clipped]
        if best_val is None:
            best_val, best_idx, have = cand.copy(), cidx.copy(), valid.copy()
            continue
        keep = {"GE": best_val >= cand, "GT": best_val > cand, "LE": best_val <= cand, "LT": best_val < cand}[direction]
        take = valid & (~have | ~keep)
        best_val = np.where(take, cand, best_val)
        best_idx = np.where(take, cidx, best_idx)
        have |= valid
    out = np.full(x.size, np.asarray(init), dtype=operand.dtype)
    combiner.at(out, best_idx[have], source[have].astype(operand.dtype))
    return out.reshape(operand.shape)


# ---- control flow ------------------------------------------------------------------------------
@register_library("while")
def while_loop(inst, args, ctx):
    """Run `body` while `condition` holds."""
    cond, body = inst.attrs["condition"], inst.attrs["body"]
    state = args[0]
    while bool(np.asarray(ctx.host(ctx.call(cond, [state])))):
        state = ctx.call(body, [state])
    return state


@register_library("conditional")
def conditional(inst, args, ctx):
    """Run the branch chosen by a pred or an index (out of range: the last branch)."""
    sel = np.asarray(args[0])
    branches = inst.attrs.get("branch_computations")
    if branches is None:
        branches = (inst.attrs["true_computation"], inst.attrs["false_computation"])
        k = 0 if bool(sel) else 1
    else:
        k = int(sel)
        if k < 0 or k >= len(branches):
            k = len(branches) - 1
    return ctx.call(branches[k], [args[1 + k]])


@register_library("call")
def call(inst, args, ctx):
    """Run the called computation."""
    return ctx.call(inst.attrs["to_apply"], list(args))


@register_library("opt-barrier", "domain")
def identity(inst, args, ctx):
    """The operand itself."""
    return args[0]


@register_library("add-dependency")
def add_dependency(inst, args, ctx):
    """The first operand (the token orders nothing here)."""
    return args[0]


@register_library("after-all")
def after_all(inst, args, ctx):
    """A token (an empty tuple)."""
    return ()


@register_library("get-dimension-size")
def get_dimension_size(inst, args, ctx):
    """The static size of a dimension."""
    return np.asarray(args[0].shape[int(inst.attrs["dimensions"][0])], dtype=_np_dtype(inst.shape))


@register_library("custom-call")
def custom_call(inst, args, ctx):
    """JAX's LAPACK LU (?getrf, hlo/lapack_calls.py: XLA has no op for it; its ?potrf and ?trsm
    become XLA's ops before this runs) through library_lu.lu_factor, its eigh, svd and qr
    routines (defined by LAPACK's algorithms) through numpy's LAPACK as the interpreter runs
    them; any other custom call is an external library call: unsupported."""
    call = lapack_call(inst)
    if call is not None and call.op in ("eigh", "svd", "qr", "householder"):
        # defined by LAPACK's algorithms alone: the interpreter's numpy LAPACK calls
        leaves = inst.shape.leaves() if inst.shape.is_tuple else [inst.shape]
        return lapack_decomposition(call, [np.asarray(a) for a in args], leaves)
    if call is not None and call.op == "lu":
        lu, ipiv, info = lu_factor(np.asarray(args[0]))
        types = [np.dtype(_np_dtype(leaf)) for leaf in inst.shape.leaves()]
        return lu.astype(types[0]), ipiv.astype(types[1]), info.astype(types[2])
    target = inst.attrs.get("custom_call_target", "?")
    raise UnsupportedError(f"custom-call {inst.name} (target {target!s}) cannot run on the CPU backend")


mark_unsupported("library", "rng and rng-get-and-update-state draw from a stream each XLA backend defines for "
                 "itself; there is nothing to reproduce", "rng", "rng-get-and-update-state")
mark_unsupported("library", "dynamic shapes are not supported by the CPU backend",
                 "dynamic-reshape", "set-dimension-size")
mark_unsupported("library", "batch-norm ops are rewritten by the batchnorm-expander pass (passes/batchnorm_expander.py), "
                 "which the standard pipeline runs first; there is no library rule",
                 "batch-norm-training", "batch-norm-inference", "batch-norm-grad")
mark_unsupported("library", "scan is rewritten into a while loop by the scan-expander pass (passes/scan_expander.py), "
                 "which the compiled backends' pipeline runs first; there is no library rule", "scan")
mark_unsupported("library", "shuffle is rewritten into slices and concatenates, or a gather, by the "
                 "shuffle-expander pass (passes/shuffle_expander.py), which the compiled backends' pipeline runs "
                 "first; there is no library rule", "shuffle")
mark_unsupported("library", "ragged-dot becomes a dot over a one-hot group dimension in the ragged-dot-expander "
                 "pass (passes/ragged_dot_expander.py) where its group sizes are one list (rank 1); per-batch "
                 "group sizes are not implemented by the compiled backends", "ragged-dot")
mark_unsupported("library", "I/O and point-to-point transfers need a host or a second device; the compiled "
                 "backends run one device (single-participant collectives: runtime/library_collectives.py)",
                 "infeed", "outfeed", "send", "send-done", "recv", "recv-done")
mark_unsupported("library", "ragged-all-to-all is not modelled (XLA:CPU does not implement it either)",
                 "ragged-all-to-all")
