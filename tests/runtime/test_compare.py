"""Result comparison: exact for integers, tolerant for floats, NaN and infinity aware."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from hlofuse.runtime.compare import compare_arrays, compare_outputs


def test_integers_must_match_exactly():
    a = np.array([1, 2, 3], np.int32)
    assert compare_arrays(a, a.copy()).ok
    r = compare_arrays(a, np.array([1, 2, 4], np.int32))
    assert not r.ok and r.mismatches == 1


def test_float_tolerance_scales_with_magnitude():
    e = np.array([1e6, 1.0], np.float32)
    assert compare_arrays(e * np.float32(1 + 1e-6), e).ok
    assert not compare_arrays(e * np.float32(1 + 1e-3), e).ok


def test_nan_and_infinity_positions_must_agree():
    e = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    assert compare_arrays(e.copy(), e).ok
    assert not compare_arrays(np.array([0.0, np.inf, -np.inf, 1.0], np.float32), e).ok
    assert not compare_arrays(np.array([np.nan, -np.inf, -np.inf, 1.0], np.float32), e).ok
    assert not compare_arrays(np.array([np.nan, np.inf, -np.inf, np.inf], np.float32), e).ok


def test_bfloat16_uses_its_own_precision():
    e = np.array([1.0, 2.0], ml_dtypes.bfloat16)
    assert compare_arrays(np.array([1.0078125, 2.0], ml_dtypes.bfloat16), e).ok  # one bf16 ulp
    assert not compare_arrays(np.array([1.25, 2.0], ml_dtypes.bfloat16), e).ok


def test_shape_dtype_and_count_mismatches_fail():
    e = np.zeros(3, np.float32)
    assert not compare_arrays(np.zeros(4, np.float32), e).ok
    assert not compare_arrays(np.zeros(3, np.float64), e).ok
    results = compare_outputs([e], [e, e])
    assert not all(r.ok for r in results)


def test_cancellation_error_is_judged_against_the_output_scale():
    # A dot that cancels to a small value keeps an absolute error on the scale of the others.
    e = np.array([1.0, 0.005104795], np.float32)
    assert compare_arrays(np.array([1.0, 0.005103508], np.float32), e).ok
    assert not compare_arrays(np.array([1.0, 0.0052], np.float32), e).ok
