"""benchmarks/precise_reference.py: where hlofuse and XLA:CPU disagree, the program run in f64
says whether hlofuse is as close to it as XLA is (real_models.py's `f64` in its match column)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import precise_reference as pr  # noqa: E402


def _arrays(n: int = 1000):
    rng = np.random.default_rng(1)
    precise = rng.standard_normal(n)
    return precise, rng.standard_normal(n)


def test_a_result_as_close_as_xlas_is_within_and_a_farther_one_is_not():
    precise, noise = _arrays()
    xla = (precise + 1e-6 * noise).astype(np.float32)
    close = (precise - 1e-6 * noise).astype(np.float32)  # the same distance, the other side
    far = (precise + 1e-4 * noise).astype(np.float32)
    one_bad = close.copy()
    one_bad[7] += 1e-3  # a single element far off: the largest error decides
    (within,) = pr.judge([close], [xla], [precise], [0])
    assert within.ok and within.ours_max <= pr.SLACK * within.xla_max
    assert "within" in within.line() and "out0" in within.line()
    (outside,) = pr.judge([far], [xla], [precise], [0])
    assert not outside.ok and "OUTSIDE" in outside.line()
    assert not pr.judge([one_bad], [xla], [precise], [0])[0].ok


def test_nan_where_the_f64_run_has_a_number_is_an_infinite_error():
    precise, noise = _arrays(8)
    xla = precise.astype(np.float32)
    ours = xla.copy()
    ours[3] = np.nan
    (v,) = pr.judge([ours], [xla], [precise], [0])
    assert not v.ok and v.ours_max == np.inf
    # NaN where the f64 run has NaN too is agreement
    precise[3] = np.nan
    xla[3] = np.nan
    (v,) = pr.judge([ours], [xla], [precise], [0])
    assert v.ok and np.isfinite(v.ours_max) and v.ours_max == v.xla_max


def test_outputs_that_do_not_line_up_give_no_verdict():
    precise, _ = _arrays(4)
    x = precise.astype(np.float32)
    assert pr.judge([x], [x, x], [precise], [0]) is None
    assert pr.judge([x[:2]], [x], [precise], [0]) is None
    assert pr.judge([x], [x], [precise.astype(np.float32)], [0]) is None  # not an f64 run


def test_f64_run_is_more_precise_and_leaves_jax_in_f32():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def cancels(x, big):  # x + 1e8 - 1e8 keeps about a tenth of x's precision in f32 (big is
        return (x * 1.1 + big) - big  # an argument: XLA would fold the constant's round trip)

    x = np.linspace(1.0, 2.0, 16, dtype=np.float32)
    big = np.float32(1e8)
    (wide,) = pr.f64_outputs(cancels, [x, big])
    assert wide.dtype == np.float64
    np.testing.assert_allclose(wide, x.astype(np.float64) * 1.1, rtol=1e-7)
    f32 = np.asarray(jax.jit(cancels)(x, big))
    assert f32.dtype == np.float32 and np.abs(f32 - wide).max() > 1  # the f32 run lost the digits
    assert jnp.ones(2).dtype == jnp.float32  # x64 was on only inside the f64 run
    # a program that fixes its dtype to f32 has no f64 run
    assert pr.f64_outputs(lambda x: (x * 2).astype(jnp.float32), [x]) is None


def test_match_word_says_f64_only_for_a_judged_difference():
    import real_models

    assert real_models.match_word({"match": True}) == "yes"
    assert real_models.match_word({"match": False, "precise_ok": True}) == "f64"
    assert real_models.match_word({"match": False, "precise_ok": False}) == "NO"
    assert real_models.match_word({"match": False, "precise_ok": None}) == "NO"
