"""LAPACK's LU factorization (?getrf) for the compiled backends' library rule of JAX's
`lapack_?getrf_ffi` custom call (runtime/library_ops.custom_call; hlo/lapack_calls.py), which
XLA has no op for. Written apart from the interpreter's unblocked elimination
(interpreter/linalg._lu), its oracle."""
from __future__ import annotations

import numpy as np


_LU_PANEL = 64


def lu_factor(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LAPACK ?getrf (P A = L U, partial pivoting) of each matrix of `a` ([..., m, n]) in f64
    (c128), blocked as LAPACK blocks it: a panel of _LU_PANEL columns factored column by column
    (the pivot the first row of largest |value|, whole rows swapped), the panel's rows of U to
    its right by a unit-lower triangular solve, the trailing matrix updated by one matmul.
    Returns (the packed factors, the 1-based row interchanges, info: 0 or the 1-based index of
    the first zero pivot). Written apart from the interpreter's unblocked elimination, its
    oracle."""
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    m, n = a.shape[-2:]
    k_max = min(m, n)
    flat = a.reshape(-1, m, n).astype(wide)
    ipiv = np.zeros((flat.shape[0], k_max), dtype=np.int64)
    info = np.zeros(flat.shape[0], dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        for b, lu in enumerate(flat):
            for j0 in range(0, k_max, _LU_PANEL):
                j1 = min(j0 + _LU_PANEL, k_max)
                for k in range(j0, j1):
                    p = k + int(np.argmax(np.abs(lu[k:, k])))
                    ipiv[b, k] = p + 1
                    if p != k:
                        lu[[k, p]] = lu[[p, k]]
                    if lu[k, k] == 0:
                        info[b] = info[b] or k + 1
                        continue
                    lu[k + 1:, k] /= lu[k, k]
                    lu[k + 1:, k + 1:j1] -= np.outer(lu[k + 1:, k], lu[k, k + 1:j1])
                if j1 < n:
                    unit_lower = np.tril(lu[j0:j1, j0:j1], -1) + np.eye(j1 - j0, dtype=wide)
                    lu[j0:j1, j1:] = np.linalg.solve(unit_lower, lu[j0:j1, j1:])
                    if j1 < m:
                        lu[j1:, j1:] -= lu[j1:, j0:j1] @ lu[j0:j1, j1:]
    batch = a.shape[:-2]
    return flat.reshape(a.shape), ipiv.reshape(batch + (k_max,)), info.reshape(batch)
