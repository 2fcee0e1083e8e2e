"""The edge fuzzer's judgement where a backend and XLA:CPU disagree on a math function
(tests/fuzz/edge.py): the function computed in a wider type (f64 for f32, long double for f64)
decides. Seed 40: log1p(-0.40792511644853346) in f64, hlofuse -0.5241221596120459 (the correctly
rounded value), XLA:CPU -0.5241221596120365 (about 80 ulps off, over the f64 tolerance)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.fuzz import outcomes as oc
from tests.fuzz.edge import _edge_result, precise_values

X = np.array([-0.40792511644853346, 0.5, 2.0], np.float64)
OURS = np.log1p(X)
XLA = OURS.copy()
XLA[0] = -0.5241221596120365

needs_long_double = pytest.mark.skipif(np.finfo(np.longdouble).nmant <= 52,
                                       reason="long double is no wider than double on this host")


@needs_long_double
def test_the_wider_function_is_the_correctly_rounded_value():
    precise = precise_values("log-plus-one f64", [X])
    assert precise.dtype == np.longdouble
    assert precise.astype(np.float64)[0] == -0.5241221596120459
    assert precise_values("add f64", [X]) is None  # not a math function of the table


@needs_long_double
def test_xla_off_where_the_backend_is_right():
    r = _edge_result("cpu", "log-plus-one f64", 64.0, [X], OURS, XLA, OURS)
    assert r["outcome"] == oc.XLA_LESS_ACCURATE, r
    assert "-0.5241221596120459" in r["message"] and "XLA -0.5241221596120365" in r["message"]


@needs_long_double
def test_a_backend_off_too_stays_a_mismatch():
    wrong = OURS.copy()
    wrong[0] = -0.5241221596121  # 5e-14 (about 500 ulps) from the wider value and from XLA
    assert _edge_result("cpu", "log-plus-one f64", 64.0, [X], wrong, XLA, wrong)["outcome"] == oc.MISMATCH
    # and where the backend is off and XLA right, the same
    assert _edge_result("cpu", "log-plus-one f64", 64.0, [X], XLA, OURS, XLA)["outcome"] == oc.MISMATCH


def test_f32_is_judged_in_f64():
    x = np.array([0.3, 1.7], np.float32)
    precise = precise_values("exponential f32", [x])
    assert precise.dtype == np.float64
    np.testing.assert_array_equal(precise, np.exp(x.astype(np.float64)))


def test_a_convert_rounded_once_against_xlas_twice():
    """Seed 89: convert f64 -> f16 of -2.5263670860825496, 1e-7 below the f16 midpoint
    -2.5263671875. Rounded once (hlofuse, numpy) it is -2.525390625; XLA:CPU converts through
    f32, whose nearest value is the midpoint itself, which then rounds to even: -2.52734375.
    The input is the exact value, so XLA is the one off; a backend off by as much stays a
    mismatch."""
    x = np.array([-2.5263670860825496, 1.0, 0.1], np.float64)
    ours = x.astype(np.float16)
    xla = x.astype(np.float32).astype(np.float16)
    assert ours[0] == np.float16(-2.525390625) and xla[0] == np.float16(-2.52734375)
    assert np.array_equal(precise_values("convert f64->f16", [x]), x)
    r = _edge_result("cpu", "convert f64->f16", 0.0, [x], ours, xla, ours)
    assert r["outcome"] == oc.XLA_LESS_ACCURATE, r
    assert _edge_result("cpu", "convert f64->f16", 0.0, [x], xla, ours, xla)["outcome"] == oc.MISMATCH
