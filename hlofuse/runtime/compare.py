"""Comparison of results with a reference: exact for integers and booleans, a dtype-aware
tolerance for floating point."""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

# Relative tolerances by element width: a few units of the type's epsilon, loose enough for
# reassociated reductions and polynomial transcendentals, tight enough to catch real bugs.
_FLOAT_TOLERANCE = {
    np.dtype(np.float64): (1e-9, 1e-12),
    np.dtype(np.float32): (2e-5, 1e-6),
    np.dtype(np.complex128): (1e-9, 1e-12),
    np.dtype(np.complex64): (2e-5, 1e-6),
    np.dtype(np.float16): (2e-3, 1e-3),
    np.dtype(ml_dtypes.bfloat16): (1.6e-2, 1e-2),
    np.dtype(ml_dtypes.float8_e4m3fn): (1.3e-1, 2e-2),
    np.dtype(ml_dtypes.float8_e5m2): (2.6e-1, 4e-2),
}


# Reassociated sums (BLAS dots, vectorized and multi-threaded reductions) are exact only up to
# rounding relative to the size of the terms, not of the result: a result that cancels to a
# small value carries an absolute error on the scale of the output's largest elements. So
# every element may also be off by this fraction of the reference's largest magnitude
# (XLA's tests use the same kind of absolute error bound beside the relative one).
_SCALE_FRACTION = 0.5


def tolerance_for(dtype) -> tuple[float, float]:
    """(rtol, atol) used for arrays of `dtype`; (0, 0) means bit-exact."""
    return _FLOAT_TOLERANCE.get(np.dtype(dtype), (0.0, 0.0))


@dataclass
class ArrayComparison:
    """How one output compares with its reference."""

    index: int
    ok: bool
    dtype: str
    shape: tuple[int, ...]
    max_abs_error: float
    max_rel_error: float
    mismatches: int
    message: str

    def line(self) -> str:
        status = "ok" if self.ok else "MISMATCH"
        return (f"out{self.index}: {self.dtype}{list(self.shape)} {status}"
                f"  max_abs_err={self.max_abs_error:.3g} max_rel_err={self.max_rel_error:.3g}"
                + (f"  {self.message}" if self.message else ""))


def _as_float(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "c":
        return a.astype(np.complex128)
    return a.astype(np.float64)


def compare_arrays(actual: np.ndarray, expected: np.ndarray, index: int = 0,
                   rtol: float | None = None, atol: float | None = None) -> ArrayComparison:
    """Compare one array with its reference (NaNs must match NaNs; infinities must match)."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return ArrayComparison(index, False, str(expected.dtype), expected.shape, float("inf"), float("inf"),
                               expected.size, f"got {actual.dtype}{list(actual.shape)}")
    default_rtol, default_atol = tolerance_for(expected.dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    if expected.size == 0:
        return ArrayComparison(index, True, str(expected.dtype), expected.shape, 0.0, 0.0, 0, "")
    if rtol == 0 and atol == 0 and expected.dtype.kind not in "fc" and expected.dtype.itemsize > 0 \
            and not np.issubdtype(expected.dtype, np.floating) and expected.dtype.kind != "V":
        # Integers and booleans: exact.
        bad = actual != expected
        n_bad = int(np.count_nonzero(bad))
        diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64)) if n_bad else np.zeros(1)
        return ArrayComparison(index, n_bad == 0, str(expected.dtype), expected.shape,
                               float(diff.max()), 0.0, n_bad, "" if n_bad == 0 else f"{n_bad} elements differ")
    a = _as_float(actual)
    e = _as_float(expected)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    nan_mismatch = nan_a != nan_e
    finite = ~(nan_a | nan_e)
    abs_err = np.zeros(e.shape)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is handled below
        abs_err[finite] = np.abs(a[finite] - e[finite])
    inf_e = np.isinf(e) & finite
    inf_mismatch = np.zeros(e.shape, bool)
    inf_mismatch[inf_e] = a[inf_e] != e[inf_e]
    abs_err[inf_e] = 0.0
    finite_e = np.abs(e[np.isfinite(e)])
    scale = float(finite_e.max()) if finite_e.size else 0.0
    atol = max(atol, _SCALE_FRACTION * rtol * scale)
    bad = nan_mismatch | inf_mismatch | (abs_err > atol + rtol * np.abs(np.where(inf_e, 0, e)))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(np.abs(e) > 0, abs_err / np.abs(np.where(inf_e, 1, e)), abs_err)
    n_bad = int(np.count_nonzero(bad))
    msg = ""
    if n_bad:
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        msg = f"{n_bad} elements differ; first at {first}: {actual[first]!r} vs expected {expected[first]!r}"
    return ArrayComparison(index, n_bad == 0, str(expected.dtype), expected.shape, float(abs_err.max()),
                           float(np.nanmax(rel)) if rel.size else 0.0, n_bad, msg)


def compare_outputs(actual: list, expected: list) -> list[ArrayComparison]:
    """Compare each output with its reference; a count mismatch is reported as a failure."""
    results = [compare_arrays(a, e, i) for i, (a, e) in enumerate(zip(actual, expected))]
    if len(actual) != len(expected):
        results.append(ArrayComparison(len(results), False, "-", (), float("inf"), float("inf"), 0,
                                       f"{len(actual)} outputs, expected {len(expected)}"))
    return results
