"""Library rules of linear algebra for the compiled backends' unfused ops (numpy / BLAS): dot,
convolution, fft, cholesky, triangular-solve. Registered like library_ops.py's (hlo/rule_loader
loads both) and written independently of the reference interpreter, which is their oracle.
"""
from __future__ import annotations

import math

import numpy as np

from ..hlo.errors import UnsupportedError
from ..hlo.opcodes import register_library
from .interpreter.op_helpers import attr_bool
from .library_ops import _np_dtype, _work_dtype

_SMALL_DOT = 1 << 15  # multiply-adds
_MEDIUM_DOT = 1 << 22

# ---- linear algebra --------------------------------------------------------------------------
@register_library("dot")
def dot(inst, args, ctx):
    """General dot: batch dims, contracting dims, then lhs free and rhs free dims (XLA order)."""
    lhs, rhs = args
    a = inst.attrs
    lb, lc = list(a.get("lhs_batch_dims", ())), list(a.get("lhs_contracting_dims", ()))
    rb, rc = list(a.get("rhs_batch_dims", ())), list(a.get("rhs_contracting_dims", ()))
    lf = [d for d in range(lhs.ndim) if d not in lb and d not in lc]
    rf = [d for d in range(rhs.ndim) if d not in rb and d not in rc]
    out_dt = np.dtype(_np_dtype(inst.shape))
    work = _work_dtype(out_dt)
    if out_dt.kind in "iu":
        work = out_dt
    B = [lhs.shape[d] for d in lb]
    M = math.prod(lhs.shape[d] for d in lf)
    N = math.prod(rhs.shape[d] for d in rf)
    K = math.prod(lhs.shape[d] for d in lc)
    nb = math.prod(B)
    # An integer dot whose every partial sum is an integer a float type holds exactly: BLAS
    # computes it (numpy's integer matmul is a plain loop: an int8 x int8 -> int32 layer of
    # 2048 x 1024 x 4096 took 34 s), in any order, with the exact value; the result then wraps
    # to the output type as the integer sum would.
    exact = _exact_float(lhs.dtype, rhs.dtype, K) if out_dt.kind in "iu" else None
    if exact is not None:
        work = exact
    x = np.transpose(lhs, lb + lf + lc).astype(work, copy=False).reshape(nb, M, K)
    y = np.transpose(rhs, rb + rc + rf).astype(work, copy=False).reshape(nb, K, N)
    if exact is not None:
        out = np.matmul(x, y).astype(np.int64)
    elif out_dt.kind in "fc" and nb * M * N * K <= _SMALL_DOT:
        # Small dots: accumulate term by term in increasing contracting index, in the result's
        # precision, the way XLA's CPU backend runs small dots (a naive loop, not a GEMM);
        # rounding then matches it rather than a blocked BLAS order.
        out = np.zeros((nb, M, N), work)
        for k in range(K):
            out += x[:, :, k, None] * y[:, None, k, :]
    elif out_dt.kind in "fc" and nb * M * N * K <= _MEDIUM_DOT:
        # Medium dots: one matmul in double precision (cheap at this size, and the result is
        # then correctly rounded rather than carrying a blocked f32 summation's error).
        wide = np.complex128 if out_dt.kind == "c" else np.float64
        out = np.matmul(x.astype(wide), y.astype(wide))
    else:
        out = np.matmul(x, y)
    dims = tuple(inst.shape.dims)
    return out.reshape(dims).astype(out_dt, copy=False)


def _magnitude(dt: np.dtype) -> int:
    """The largest absolute value of integer (or bool) type `dt`."""
    if dt.kind == "b":
        return 1
    info = np.iinfo(dt)
    return max(abs(int(info.min)), int(info.max))


def _exact_float(lhs: np.dtype, rhs: np.dtype, k: int):
    """The narrowest of float32 and float64 that holds every partial sum of a dot of integer
    operands of types `lhs` and `rhs` over `k` terms exactly (all integers up to 2^24 and 2^53),
    or None (wider: such a dot keeps the integer matmul, whose sums wrap)."""
    if lhs.kind not in "iub" or rhs.kind not in "iub":
        return None
    bound = max(k, 1) * _magnitude(lhs) * _magnitude(rhs)
    if bound <= 1 << 24:
        return np.float32
    if bound <= 1 << 53:
        return np.float64
    return None


def _spatial_pad(x, axis, lo, hi):
    """Pad (or crop, for negative amounts) `x` along `axis` with zeros."""
    n = x.shape[axis]
    start, stop = max(-lo, 0), n - max(-hi, 0)
    sl = [slice(None)] * x.ndim
    sl[axis] = slice(start, max(stop, start))
    x = x[tuple(sl)]
    widths = [(0, 0)] * x.ndim
    widths[axis] = (max(lo, 0), max(hi, 0))
    return np.pad(x, widths)


def _dilate(x, axis, factor):
    if factor == 1 or x.shape[axis] == 0:
        return x
    shape = list(x.shape)
    shape[axis] = (shape[axis] - 1) * factor + 1
    out = np.zeros(shape, x.dtype)
    sl = [slice(None)] * x.ndim
    sl[axis] = slice(None, None, factor)
    out[tuple(sl)] = x
    return out


@register_library("convolution")
def convolution(inst, args, ctx):
    """Convolution with XLA's dimension numbers, padding, dilations, feature and batch groups:
    one strided tensordot per kernel spatial position."""
    lhs, rhs = args
    dn = inst.attrs["dim_labels"]
    window = inst.attrs.get("window")
    fgc = int(inst.attrs.get("feature_group_count", 1))
    bgc = int(inst.attrs.get("batch_group_count", 1))
    out_dt = _np_dtype(inst.shape)
    work = _work_dtype(out_dt)
    x = np.transpose(lhs, [dn.input_batch, dn.input_feature, *dn.input_spatial]).astype(work)
    w = np.transpose(rhs, [dn.kernel_output_feature, dn.kernel_input_feature, *dn.kernel_spatial]).astype(work)
    nsp = len(dn.input_spatial)
    wdims = window.dimensions if window is not None else ()
    strides, wdil = [], []
    # Per spatial dimension, the [first, end) of the padded input that holds the operand's
    # elements (the rest is padding, whose products with finite weights add +0).
    held = []
    for s in range(nsp):
        wd = wdims[s] if s < len(wdims) else None
        if wd is None:
            strides.append(1)
            wdil.append(1)
            held.append((0, x.shape[2 + s]))
            continue
        size = x.shape[2 + s]
        extent = (size - 1) * wd.base_dilation + 1 if size else 0
        held.append((wd.padding_low, wd.padding_low + extent))
        x = _dilate(x, 2 + s, wd.base_dilation)
        x = _spatial_pad(x, 2 + s, wd.padding_low, wd.padding_high)
        if wd.window_reversal:
            w = np.flip(w, 2 + s)
        strides.append(wd.stride)
        wdil.append(wd.window_dilation)
    N, C = x.shape[:2]
    O, I = w.shape[:2]
    ksp = w.shape[2:]
    out_sp = [max(0, (x.shape[2 + s] - ((ksp[s] - 1) * wdil[s] + 1)) // strides[s] + 1) for s in range(nsp)]
    nb = N // bgc
    out = np.zeros((nb, O) + tuple(out_sp), work)
    og = O // (fgc * bgc)
    # Outputs whose input at a kernel position is padding are skipped (a weight-gradient
    # convolution's large padded window is mostly padding: XLA's swap-conv-operands test took
    # minutes); with an inf or NaN weight, 0 * weight is NaN, so every output is computed.
    skip_padding = bool(np.isfinite(w).all())
    for g in range(fgc * bgc):
        fg, bg = (g, 0) if bgc == 1 else (0, g)
        xs = x[bg * nb:(bg + 1) * nb, fg * I:(fg + 1) * I]
        ws = w[g * og:(g + 1) * og]
        for kpos in np.ndindex(*ksp):
            starts = [kpos[s] * wdil[s] for s in range(nsp)]
            ranges = [(0, out_sp[s]) for s in range(nsp)]
            if skip_padding:  # outputs o with held[s][0] <= o * stride + start < held[s][1]
                ranges = [(max(0, -(-(held[s][0] - starts[s]) // strides[s])),
                           min(out_sp[s], -(-(held[s][1] - starts[s]) // strides[s]))) for s in range(nsp)]
            if any(hi <= lo for lo, hi in ranges):
                continue
            sl = [slice(None), slice(None)] + [slice(start + lo * st, start + (hi - 1) * st + 1, st)
                                               for (lo, hi), start, st in zip(ranges, starts, strides)]
            osl = [slice(None), slice(g * og, (g + 1) * og)] + [slice(lo, hi) for lo, hi in ranges]
            patch = xs[tuple(sl)]  # nb, I, outputs of this position...
            k = ws[(slice(None), slice(None)) + kpos]  # og, I
            out[tuple(osl)] += _contract_features(patch, k)
    return _to_layout(out, dn, out_dt)


def _contract_features(patch: np.ndarray, k: np.ndarray) -> np.ndarray:
    """patch [nb, I, spatial...] times k [og, I], summed over I: [nb, og, spatial...].
    BLAS skips the products with a zero element in some paths (np.dot's matrix-vector product),
    so 0 * inf or 0 * NaN would count as 0, not NaN as in IEEE, the interpreter and XLA; where
    either operand holds an inf or NaN, einsum's plain loops do the sum instead."""
    if np.isfinite(patch).all() and np.isfinite(k).all():
        return np.moveaxis(np.tensordot(patch, k, axes=([1], [1])), -1, 1)
    return np.einsum("ni...,oi->no...", patch, k)


def _to_layout(out, dn, out_dt):
    order = [None] * out.ndim
    order[dn.output_batch] = 0
    order[dn.output_feature] = 1
    for s, d in enumerate(dn.output_spatial):
        order[d] = 2 + s
    return np.ascontiguousarray(np.transpose(out, order)).astype(out_dt, copy=False)


@register_library("fft")
def fft(inst, args, ctx):
    """FFT / IFFT / RFFT / IRFFT over the trailing `fft_length` dimensions."""
    (x,) = args
    kind = str(inst.attrs["fft_type"]).upper()
    lengths = tuple(inst.attrs["fft_length"])
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    out_dt = _np_dtype(inst.shape)
    if kind == "FFT":
        r = np.fft.fftn(x, axes=axes)
    elif kind == "IFFT":
        r = np.fft.ifftn(x, axes=axes)
    elif kind == "RFFT":
        r = np.fft.rfftn(x, s=lengths, axes=axes)
    elif kind == "IRFFT":
        r = np.fft.irfftn(x, s=lengths, axes=axes)
    else:
        raise UnsupportedError(f"fft {inst.name}: unknown fft_type {kind}")
    return r.astype(out_dt)


@register_library("cholesky")
def cholesky(inst, args, ctx):
    """Cholesky factor (lower, or upper with lower=false)."""
    (a,) = args
    lower = "lower=true" in str(inst.attrs.get("cholesky_options", "")) or attr_bool(inst, "lower")
    work = _work_dtype(a.dtype)
    m = a.astype(work) if lower else np.swapaxes(a, -1, -2).astype(work)
    try:
        l = np.linalg.cholesky(m)
    except np.linalg.LinAlgError:
        # A matrix that is not positive definite: XLA leaves its factor implementation-defined
        # and XLA:CPU gives NaN; the batch's other matrices keep their factors.
        flat = m.reshape(-1, *m.shape[-2:])
        l = np.full_like(flat, np.nan)
        for i, one in enumerate(flat):
            try:
                l[i] = np.linalg.cholesky(one)
            except np.linalg.LinAlgError:
                pass
        l = l.reshape(m.shape)
    return (l if lower else np.swapaxes(l, -1, -2)).astype(a.dtype)


@register_library("triangular-solve")
def triangular_solve(inst, args, ctx):
    """Solve op(a) x = b (left_side) or x op(a) = b with a triangular (XLA's options), in f64
    (c128) by blocks (`_blocked_solve`): O(n^2) like substitution, its work in BLAS and LAPACK calls
    (row by row in Python, a Gaussian process's two solves of 1,024 took 35 ms of its 75)."""
    trans = str(inst.attrs.get("transpose_a", "NO_TRANSPOSE")).upper()
    if trans not in ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"):
        raise UnsupportedError(f"triangular-solve {inst.name}: unknown transpose_a {trans}")
    a, b = args
    wide = np.complex128 if a.dtype.kind == "c" or b.dtype.kind == "c" else np.float64
    lower = attr_bool(inst, "lower")
    m = np.tril(a) if lower else np.triu(a)
    m = m.astype(wide)
    if attr_bool(inst, "unit_diagonal"):
        idx = np.arange(m.shape[-1])
        m[..., idx, idx] = 1
    if trans != "NO_TRANSPOSE":
        m = np.swapaxes(m, -1, -2)
        if trans == "ADJOINT":
            m = np.conj(m)
        lower = not lower
    rhs = b.astype(wide)
    with np.errstate(divide="ignore", invalid="ignore"):
        if attr_bool(inst, "left_side"):
            x = _blocked_solve(m, rhs, lower)
        else:  # x m = b  <=>  m^T x^T = b^T
            x = np.swapaxes(_blocked_solve(np.swapaxes(m, -1, -2), np.swapaxes(rhs, -1, -2), not lower), -1, -2)
    return x.astype(_np_dtype(inst.shape))


_SOLVE_BLOCK = 64


def _blocked_solve(m: np.ndarray, b: np.ndarray, lower: bool) -> np.ndarray:
    """x with m x = b for triangular m ([..., n, n]) by blocks of _SOLVE_BLOCK rows: each block's
    right-hand side less what the solved blocks contribute (a matmul), then the block's own
    triangle solved by LAPACK (numpy's solve: a triangular block's LU is the block itself); a
    block with a zero on its diagonal by substitution, giving the inf or NaN a division would."""
    n = m.shape[-1]
    x = np.zeros(np.broadcast_shapes(m.shape[:-2], b.shape[:-2]) + b.shape[-2:], dtype=np.result_type(m, b))
    starts = list(range(0, n, _SOLVE_BLOCK))
    for s0 in (starts if lower else starts[::-1]):
        s1 = min(s0 + _SOLVE_BLOCK, n)
        done = slice(0, s0) if lower else slice(s1, n)
        rhs = b[..., s0:s1, :] - m[..., s0:s1, done] @ x[..., done, :]
        block = m[..., s0:s1, s0:s1]
        diagonal = np.diagonal(block, axis1=-2, axis2=-1)
        if np.all(diagonal != 0) and np.all(np.isfinite(block)):
            x[..., s0:s1, :] = np.linalg.solve(np.broadcast_to(block, rhs.shape[:-2] + block.shape[-2:]), rhs)
            continue
        rows = range(s1 - s0) if lower else range(s1 - s0 - 1, -1, -1)
        for i in rows:
            inner = slice(0, i) if lower else slice(i + 1, s1 - s0)
            partial = np.einsum("...j,...jn->...n", block[..., i, inner], x[..., s0:s1, :][..., inner, :])
            x[..., s0 + i, :] = (rhs[..., i, :] - partial) / block[..., i, i][..., None]
    return x

