"""Dots and convolutions whose products are denormal: XLA:CPU flushes each product (FTZ), so a
contraction of tiny but normal numbers is 0 there, not the sum the products would make.

The interpreter (the oracle) models it in its "flush" mode (runtime/interpreter/dot.py,
convolution.py: `denormals.tiny_product_bound`), keeps the IEEE sum in its "keep" mode (the
real GPU's), and is checked against XLA:CPU itself and the compiled CPU backend. Before, its
float64 sums gave 5.8e-38 for a 3x3 convolution of 64 features of 1e-20 (XLA: 0), and its
float32 term-by-term sums normal numbers wherever enough denormal products added up.
"""
from __future__ import annotations

import numpy as np
import pytest

from xla_oracle import run_on_xla, xla_available  # noqa: E402

import hlofuse  # noqa: E402
from hlofuse.hlo.parser import parse_hlo  # noqa: E402
from hlofuse.runtime.interpreter import evaluate  # noqa: E402

needs_xla = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA CPU client is not usable here")

# A large contraction (the interpreter's float64 path) and a small one (its term-by-term path).
DOT = """HloModule m
ENTRY e {{
  a = {t}[{m},{k}] parameter(0)
  b = {t}[{k},{n}] parameter(1)
  ROOT d = {t}[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""
CONV = """HloModule m
ENTRY e {
  x = f32[1,12,12,64] parameter(0)
  w = f32[3,3,64,16] parameter(1)
  ROOT c = f32[1,12,12,16] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}
"""
DOT_CASES = [dict(t="f32", m=64, k=256, n=48), dict(t="f32", m=3, k=5, n=2), dict(t="f64", m=8, k=40, n=8)]


def _tiny_inputs(shapes, dtype, scale, normal_rows: bool, seed=0):
    """Positive operands of magnitude about `scale`: their products, about scale**2, are
    denormal, but a few dozen of them add up to a normal number, which is what an unflushed
    sum gives. With `normal_rows`, the first operand's even rows are of magnitude 1/scale
    (their products about 1: normal, their sums the ordinary ones)."""
    rng = np.random.default_rng(seed)
    out = [(rng.uniform(0.5, 1.5, s) * scale).astype(dtype) for s in shapes]
    if normal_rows:
        even = out[0][::2]
        out[0][::2] = (even.astype(np.float64) / scale / scale).astype(dtype)
    return out


def _dot_case(case):
    text = DOT.format(**case)
    dtype = np.float32 if case["t"] == "f32" else np.float64
    scale = 2.2e-20 if dtype == np.float32 else 3.2e-155  # products about 5e-40 / 1e-309: denormal
    return text, dtype, scale, [(case["m"], case["k"]), (case["k"], case["n"])]


@pytest.mark.parametrize("case", DOT_CASES, ids=lambda c: f"{c['t']}-{c['m']}x{c['k']}x{c['n']}")
def test_dot_of_tiny_numbers_flushes_each_product(case):
    text, dtype, scale, shapes = _dot_case(case)
    a, b = _tiny_inputs(shapes, dtype, scale, normal_rows=False)
    flushed = evaluate(parse_hlo(text), [a, b])[0]
    kept = evaluate(parse_hlo(text), [a, b], denormals="keep")[0]
    assert not np.any(flushed)  # every product flushed: all zeros
    tiny = np.finfo(dtype).tiny
    assert np.all(kept >= (tiny if case["k"] >= 40 else 0))  # IEEE: the products add up, to normal numbers


@pytest.mark.parametrize("case", DOT_CASES, ids=lambda c: f"{c['t']}-{c['m']}x{c['k']}x{c['n']}")
def test_dot_with_some_tiny_rows_keeps_the_normal_rows(case):
    text, dtype, scale, shapes = _dot_case(case)
    a, b = _tiny_inputs(shapes, dtype, scale, normal_rows=True)
    got = evaluate(parse_hlo(text), [a, b])[0]
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got[::2], want[::2], rtol=1e-4, atol=1e-4)  # the ordinary sums
    assert not np.any(got[1::2])


@needs_xla
@pytest.mark.parametrize("case", DOT_CASES, ids=lambda c: f"{c['t']}-{c['m']}x{c['k']}x{c['n']}")
def test_dot_of_tiny_numbers_agrees_with_xla_and_the_cpu_backend(case):
    text, dtype, scale, shapes = _dot_case(case)
    args = _tiny_inputs(shapes, dtype, scale, normal_rows=True)
    want = run_on_xla(text, args)[0]
    got = evaluate(parse_hlo(text), args)[0]
    compiled = np.asarray(hlofuse.compiler.compile(parse_hlo(text))(*args)[0])
    assert not np.any(want[1::2]) and not np.any(got[1::2]) and not np.any(compiled[1::2])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(compiled, want, rtol=1e-4, atol=1e-4)


@needs_xla
def test_convolution_of_tiny_numbers_agrees_with_xla_and_the_cpu_backend():
    x, w = _tiny_inputs([(1, 12, 12, 64), (3, 3, 64, 16)], np.float32, 2.2e-20, normal_rows=False)
    want = run_on_xla(CONV, [x, w])[0]
    got = evaluate(parse_hlo(CONV), [x, w])[0]
    kept = evaluate(parse_hlo(CONV), [x, w], denormals="keep")[0]
    compiled = np.asarray(hlofuse.compiler.compile(parse_hlo(CONV))(x, w)[0])
    assert not np.any(want) and not np.any(got) and not np.any(compiled)
    assert np.all(kept >= np.finfo(np.float32).tiny)  # the IEEE sums are normal numbers
    # normal inputs through the same module: the ordinary result
    x1, w1 = _tiny_inputs([(1, 12, 12, 64), (3, 3, 64, 16)], np.float32, 1.0, normal_rows=False)
    np.testing.assert_allclose(evaluate(parse_hlo(CONV), [x1, w1])[0], run_on_xla(CONV, [x1, w1])[0],
                               rtol=1e-4, atol=1e-5)
