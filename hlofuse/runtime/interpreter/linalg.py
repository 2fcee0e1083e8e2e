"""Reference semantics of `cholesky`, `triangular-solve` and the `batch-norm-*` ops.

Everything is computed in float64 (complex128 for complex types) and rounded once to the
result type. Options the parser keeps as raw words (`lower=true`, `transpose_a=ADJOINT`,
`epsilon=0.001`, `feature_index=1`) are read through the attribute helpers.
"""
from __future__ import annotations

import numpy as np

from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloInstruction
from ...hlo.lapack_calls import lapack_call
from ...hlo.opcodes import register_reference
from .op_helpers import attr_bool, attr_float, attr_int, attr_str, leaf_dtypes, result_dtype


def _wide(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind == "c":
        return x.astype(np.complex128)
    return x.astype(np.float32).astype(np.float64) if x.dtype.kind == "V" else x.astype(np.float64)


def _adjoint(x: np.ndarray) -> np.ndarray:
    return np.conj(np.swapaxes(x, -1, -2))


@register_reference("cholesky")
def cholesky_reference(inst: HloInstruction, args: list, interp) -> np.ndarray:
    """`cholesky(a), lower=...`: l with a = l l^H (lower) or u with a = u^H u (upper), reading
    only that triangle of a. The other triangle of the result is zero; a matrix that is not
    positive definite gives NaNs (XLA leaves both implementation-defined)."""
    return _cholesky(_wide(args[0]), attr_bool(inst, "lower", False)).astype(result_dtype(inst.shape))


def _cholesky(a: np.ndarray, lower: bool) -> np.ndarray:
    """The Cholesky factor of (f64/c128) `a` (`cholesky_reference`), NaN where a matrix of the
    batch is not positive definite."""
    strict = np.tril(a, -1) if lower else np.triu(a, 1)
    diag = np.real(np.diagonal(a, axis1=-2, axis2=-1)).astype(a.dtype)
    hermitian = strict + _adjoint(strict)
    idx = np.arange(a.shape[-1])
    hermitian[..., idx, idx] = diag
    flat = hermitian.reshape(-1, *a.shape[-2:])
    out = np.full_like(flat, np.nan)
    for i, m in enumerate(flat):
        try:
            out[i] = np.linalg.cholesky(m)
        except np.linalg.LinAlgError:
            pass
    out = out.reshape(a.shape)
    return out if lower else _adjoint(out)


def _lu(a: np.ndarray) -> tuple:
    """LAPACK ?getrf on each matrix of `a` ([..., m, n], f64/c128): P A = L U by Gaussian
    elimination with partial pivoting, column by column (the pivot the first row of largest
    |value| in the column, as LAPACK's i?amax), returned packed (L's multipliers below the
    diagonal, U on and above), with the 1-based row interchanges and `info` (0, or the 1-based
    index of the first zero pivot, the elimination going on past it)."""
    m, n = a.shape[-2:]
    k_max = min(m, n)
    flat = a.reshape(-1, m, n).copy()
    ipiv = np.zeros((flat.shape[0], k_max), dtype=np.int64)
    info = np.zeros(flat.shape[0], dtype=np.int64)
    for b, lu in enumerate(flat):
        for k in range(k_max):
            p = k + int(np.argmax(np.abs(lu[k:, k])))
            ipiv[b, k] = p + 1
            if p != k:
                lu[[k, p]] = lu[[p, k]]
            pivot = lu[k, k]
            if pivot == 0:
                if info[b] == 0:
                    info[b] = k + 1
                continue
            lu[k + 1:, k] /= pivot
            lu[k + 1:, k + 1:] -= np.outer(lu[k + 1:, k], lu[k, k + 1:])
    batch = a.shape[:-2]
    return flat.reshape(a.shape), ipiv.reshape(batch + (k_max,)), info.reshape(batch)


def lapack_decomposition(call, args: list, leaves: list) -> tuple | np.ndarray:
    """The LAPACK routines whose results LAPACK's algorithms alone define (signs, orders: the
    compiled backends call this too, runtime/library_ops.custom_call): ?syevd (eigh), ?gesdd
    (svd), ?geqrf (qr's packed reflectors) through numpy's LAPACK, which runs the same
    routines, and ?orgqr (the reflectors' product Q = H_1 ... H_k) multiplied out here. `leaves`:
    the result's array shapes. Outputs LAPACK leaves undefined (vectors not asked for) are zero."""
    dtypes = [leaf.dtype.numpy for leaf in leaves]
    # in the operand's own precision, as LAPACK's s/d/c/z routine JAX calls computes it (the
    # signs of eigenvectors depend on it); narrow floats in f32
    a = np.asarray(args[0])
    if a.dtype.kind not in "fc" or a.dtype.itemsize < 4:
        a = a.astype(np.float32)
    batch = a.shape[:-2]
    if call.op == "eigh":
        w, v = np.linalg.eigh(a, UPLO="L" if call.lower else "U")
        if call.mode != "V":
            v = np.zeros_like(a)
        info = np.zeros(batch, np.int64)
        return v.astype(dtypes[0]), w.astype(dtypes[1]), info.astype(dtypes[2])
    if call.op == "svd":
        if call.mode in ("A", "S"):
            u, s, vt = np.linalg.svd(a, full_matrices=call.mode == "A")
        else:
            s = np.linalg.svd(a, compute_uv=False)
            u, vt = None, None
        out = [np.zeros(leaves[0].dims, dtypes[0]), s.astype(dtypes[1])]
        for k, x in ((2, u), (3, vt)):
            out.append(np.zeros(leaves[k].dims, dtypes[k]) if x is None else x.astype(dtypes[k]))
        out.append(np.zeros(batch, dtypes[4]))
        return tuple(out)
    if call.op == "qr":
        flat = a.reshape(-1, *a.shape[-2:])
        packed, taus = [], []
        for one in flat:
            h, tau = np.linalg.qr(one, mode="raw")
            packed.append(h.T)
            taus.append(tau)
        k = min(a.shape[-2:])
        return (np.stack(packed).reshape(a.shape).astype(dtypes[0]),
                np.stack(taus).reshape(batch + (k,)).astype(dtypes[1]))
    # ?orgqr: Q's first n columns, Q = H_1 ... H_k, H_i = I - tau_i v_i v_i^H with v_i 1 at i,
    # the reflector below it, zeros above
    a, tau = _wide(args[0]), _wide(args[1])
    m, n = a.shape[-2:]
    flat, tflat = a.reshape(-1, m, n), tau.reshape(-1, tau.shape[-1])
    qs = []
    for one, t in zip(flat, tflat):
        q = np.eye(m, n, dtype=one.dtype)
        for i in range(t.shape[-1] - 1, -1, -1):
            v = np.zeros(m, one.dtype)
            v[i] = 1
            v[i + 1:] = one[i + 1:, i]
            q -= t[i] * np.outer(v, np.conj(v) @ q)
        qs.append(q)
    return np.stack(qs).reshape(a.shape).astype(dtypes[0])


def lapack_reference(inst: HloInstruction, args: list) -> tuple | np.ndarray:
    """A LAPACK custom call (hlo/lapack_calls.py) computed as LAPACK defines it: ?potrf's factor
    in its `uplo` triangle, the other triangle left as the input's, and `info` 0 per matrix
    where the factorization succeeded (1 where it did not: LAPACK's is the order of the failing
    minor; the factor is NaN there); ?trsm's solution (solve_triangular)."""
    call = lapack_call(inst)
    if call.op in ("eigh", "svd", "qr", "householder"):
        return lapack_decomposition(call, args, inst.shape.leaves() if inst.shape.is_tuple else [inst.shape])
    if call.op == "lu":
        lu, ipiv, info = _lu(_wide(args[0]))
        dtypes = leaf_dtypes(inst.shape)
        return lu.astype(dtypes[0]), ipiv.astype(dtypes[1]), info.astype(dtypes[2])
    if call.op == "cholesky":
        a = _wide(args[0])
        factor = _cholesky(a, call.lower)
        n = a.shape[-1]
        keep = np.tri(n, dtype=bool) if call.lower else np.tri(n, dtype=bool).T
        out = np.where(keep, factor, a)
        info = np.where(np.isfinite(factor).all(axis=(-2, -1)), 0, 1)
        dtypes = leaf_dtypes(inst.shape)
        return out.astype(dtypes[0]), np.asarray(info, dtype=dtypes[1])
    x = solve_triangular(args[0], args[1], call.lower, call.unit_diagonal, call.transpose_a, call.left_side)
    return x.astype(result_dtype(inst.shape))


def _substitute(m: np.ndarray, b: np.ndarray, lower: bool) -> np.ndarray:
    """Solve m x = b for triangular m ([..., k, k]) by forward or back substitution; a zero
    on the diagonal gives inf/NaN, as a division would."""
    k = m.shape[-1]
    x = np.zeros(np.broadcast_shapes(m.shape[:-2], b.shape[:-2]) + b.shape[-2:], dtype=np.result_type(m, b))
    rows = range(k) if lower else range(k - 1, -1, -1)
    for i in rows:
        rest = slice(0, i) if lower else slice(i + 1, k)
        partial = np.einsum("...j,...jn->...n", m[..., i, rest], x[..., rest, :])
        x[..., i, :] = (b[..., i, :] - partial) / m[..., i, i][..., None]
    return x


def solve_triangular(a: np.ndarray, b: np.ndarray, lower: bool, unit_diagonal: bool, transpose: str,
                     left_side: bool) -> np.ndarray:
    """x with op(a) x = b (left_side) or x op(a) = b, op per `transpose` (NO_TRANSPOSE,
    TRANSPOSE, ADJOINT), by substitution in f64 (c128), whatever the BLAS: only the `lower` or
    upper triangle of a is read, and with unit_diagonal its diagonal is taken to be ones.
    Raises ValueError for another `transpose`."""
    a, b = _wide(a), _wide(b)
    m = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        idx = np.arange(a.shape[-1])
        m[..., idx, idx] = 1
    transpose = transpose.upper()
    if transpose == "TRANSPOSE":
        m, lower = np.swapaxes(m, -1, -2), not lower
    elif transpose == "ADJOINT":
        m, lower = _adjoint(m), not lower
    elif transpose != "NO_TRANSPOSE":
        raise ValueError(f"unknown transpose_a {transpose}")
    with np.errstate(divide="ignore", invalid="ignore"):
        if left_side:
            return _substitute(m, b, lower)
        # x m = b  <=>  m^T x^T = b^T
        return np.swapaxes(_substitute(np.swapaxes(m, -1, -2), np.swapaxes(b, -1, -2), not lower), -1, -2)


@register_reference("triangular-solve")
def triangular_solve_reference(inst: HloInstruction, args: list, interp) -> np.ndarray:
    """`triangular-solve(a, b)`: solve_triangular with the instruction's options."""
    try:
        x = solve_triangular(args[0], args[1], attr_bool(inst, "lower", False),
                             attr_bool(inst, "unit_diagonal", False),
                             attr_str(inst, "transpose_a", "NO_TRANSPOSE"), attr_bool(inst, "left_side", False))
    except ValueError as e:
        raise UnsupportedError(f"triangular-solve {inst.name}: {e}") from None
    return x.astype(result_dtype(inst.shape))


def _feature_layout(inst: HloInstruction, x: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(axes reduced over, shape that broadcasts a feature vector against the operand)."""
    f = attr_int(inst, "feature_index")
    if not 0 <= f < x.ndim:
        raise UnsupportedError(f"{inst.opcode} {inst.name}: feature_index {f} is out of range for rank {x.ndim}")
    axes = tuple(d for d in range(x.ndim) if d != f)
    shape = tuple(x.shape[f] if d == f else 1 for d in range(x.ndim))
    return axes, shape


@register_reference("batch-norm-training")
def batch_norm_training_reference(inst: HloInstruction, args: list, interp) -> tuple:
    """(normalized, batch mean, batch variance) with the biased (population) variance."""
    x, scale, offset = (_wide(a) for a in args)
    axes, fshape = _feature_layout(inst, x)
    eps = attr_float(inst, "epsilon")
    mean = x.mean(axis=axes)
    var = ((x - mean.reshape(fshape)) ** 2).mean(axis=axes)
    y = (x - mean.reshape(fshape)) / np.sqrt(var.reshape(fshape) + eps) * scale.reshape(fshape) + offset.reshape(fshape)
    dtypes = leaf_dtypes(inst.shape)
    return y.astype(dtypes[0]), mean.astype(dtypes[1]), var.astype(dtypes[2])


@register_reference("batch-norm-inference")
def batch_norm_inference_reference(inst: HloInstruction, args: list, interp) -> np.ndarray:
    """(x - mean) / sqrt(variance + epsilon) * scale + offset, per feature."""
    x, scale, offset, mean, var = (_wide(a) for a in args)
    _, fshape = _feature_layout(inst, x)
    eps = attr_float(inst, "epsilon")
    y = (x - mean.reshape(fshape)) / np.sqrt(var.reshape(fshape) + eps) * scale.reshape(fshape) + offset.reshape(fshape)
    return y.astype(result_dtype(inst.shape))


@register_reference("batch-norm-grad")
def batch_norm_grad_reference(inst: HloInstruction, args: list, interp) -> tuple:
    """(grad operand, grad scale, grad offset) of batch-norm-training at the given mean and
    variance, per XLA's operation semantics."""
    x, scale, mean, var, dy = (_wide(a) for a in args)
    axes, fshape = _feature_layout(inst, x)
    eps = attr_float(inst, "epsilon")
    centered = x - mean.reshape(fshape)
    inv_std = 1.0 / np.sqrt(var + eps)
    grad_offset = dy.sum(axis=axes)
    grad_scale = (dy * centered).sum(axis=axes) * inv_std
    count = int(np.prod([x.shape[d] for d in axes]))
    mean_dy = grad_offset / count
    mean_dy_centered = (dy * centered).sum(axis=axes) / count
    grad_x = (scale * inv_std).reshape(fshape) * (
        dy - mean_dy.reshape(fshape) - centered * (mean_dy_centered / (var + eps)).reshape(fshape))
    dtypes = leaf_dtypes(inst.shape)
    return grad_x.astype(dtypes[0]), grad_scale.astype(dtypes[1]), grad_offset.astype(dtypes[2])
