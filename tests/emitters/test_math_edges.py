"""Edges of the compiled math (CPU and emulated GPU): signed zeros through every odd or
sign-preserving op, and sin/cos/tan over the whole float range (Payne-Hanek reduction for
|x| >= 2**26), each against an independent reference: the numpy interpreter, numpy's float64
functions rounded once, or XLA's CPU compiler."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xla_oracle import run_on_xla, xla_available

import hlofuse
from hlofuse.hlo.parser import parse_hlo

FLOATS = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
COMPILED = ["cpu", "gpu-emulated"]


def run(text: str, args: list, backend: str) -> list[np.ndarray]:
    """Outputs of module `text` on `args`, through hlofuse's `backend`."""
    with np.errstate(all="ignore"):
        return [np.asarray(o) for o in hlofuse.compile(parse_hlo(text), target=backend)(*args)]


def same_bits(got, want) -> bool:
    """Equal values with equal signs of zero (any NaN equals any NaN)."""
    g, w = np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)
    nan = np.isnan(g)
    return bool(np.array_equal(nan, np.isnan(w)) and np.array_equal(g[~nan], w[~nan])
                and np.array_equal(np.signbit(g[~nan]), np.signbit(w[~nan])))


def unary_module(op: str, dt: str, n: int) -> str:
    """One elementwise `op` on a `dt`[n] parameter."""
    attrs = ", exponent_bits=5, mantissa_bits=10" if op == "reduce-precision" else ""
    return f"HloModule m\nENTRY e {{\n p = {dt}[{n}] parameter(0)\n ROOT r = {dt}[{n}] {op}(p){attrs}\n}}\n"


def binary_module(op: str, dt: str, n: int) -> str:
    """One elementwise `op` on two `dt`[n] parameters."""
    return (f"HloModule m\nENTRY e {{\n a = {dt}[{n}] parameter(0)\n b = {dt}[{n}] parameter(1)\n"
            f" ROOT r = {dt}[{n}] {op}(a, b)\n}}\n")


# ---- signed zeros -----------------------------------------------------------------------------
# Odd functions and the ops that keep the sign of a zero: f(-0) = -0, f(+0) = +0.
SIGN_KEEPING = ["tanh", "sine", "tan", "exponential-minus-one", "log-plus-one", "erf", "cbrt", "sqrt", "negate",
                "sign", "ceil", "floor", "round-nearest-afz", "round-nearest-even", "copy", "reduce-precision"]
# Around zero: signed zeros, subnormals of every width, and small normals (the polynomial ranges).
NEAR_ZERO = [-0.0, 0.0, -1e-45, 1e-45, -1e-30, 1e-30, -6e-8, 6e-8, -1e-4, 1e-4, -0.3, 0.3]


@pytest.mark.parametrize("dt", list(FLOATS))
@pytest.mark.parametrize("op", SIGN_KEEPING)
def test_sign_of_zero_kept_like_interpreter(op, dt):
    x = np.array(NEAR_ZERO, FLOATS[dt])
    text = unary_module(op, dt, x.size)
    want = run(text, [x], "interpreter")[0]
    zeros = want.astype(np.float64) == 0
    flips = op == "negate"
    assert np.array_equal(np.signbit(want.astype(np.float64))[zeros], np.signbit(x.astype(np.float64))[zeros] ^ flips)
    for backend in COMPILED:
        got = run(text, [x], backend)[0]
        if op in ("sign", "ceil", "floor", "round-nearest-afz", "round-nearest-even", "negate", "copy",
                  "reduce-precision", "sqrt"):
            assert same_bits(got, want), (backend, got, want)
        else:  # approximations or libm: the sign of every result, zeros included; values within 2 ULP
            assert np.array_equal(np.signbit(got.astype(np.float64)), np.signbit(want.astype(np.float64))), backend
            rtol = {"f64": 5e-16, "f32": 2.5e-7}.get(dt, 1e-2)
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol)


@pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA CPU client is not usable here")
@pytest.mark.parametrize("dt", list(FLOATS))
@pytest.mark.parametrize("op", ["tanh", "sine", "tan", "exponential-minus-one", "log-plus-one", "erf", "cbrt",
                                "sqrt", "sign", "round-nearest-afz"])
def test_sign_of_zero_vs_xla(op, dt):
    x = np.array([-0.0, 0.0], FLOATS[dt])
    text = unary_module(op, dt, 2)
    want = run_on_xla(text, [x])[0]
    for backend in ["interpreter", *COMPILED]:
        assert same_bits(run(text, [x], backend)[0], want), backend


SIGNED = [-0.0, 0.0, 1.0, -1.0, 3.0, np.inf, -np.inf, np.nan]
PAIRS = [(a, b) for a in SIGNED for b in SIGNED]


@pytest.mark.parametrize("dt", list(FLOATS))
@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
                                "atan2", "remainder"])
def test_binary_signed_zeros_like_interpreter(op, dt):
    x = np.array([p[0] for p in PAIRS], FLOATS[dt])
    y = np.array([p[1] for p in PAIRS], FLOATS[dt])
    text = binary_module(op, dt, x.size)
    want = run(text, [x, y], "interpreter")[0]
    for backend in COMPILED:
        got = run(text, [x, y], backend)[0]
        bad = [(PAIRS[i], float(got[i]), float(want[i])) for i in range(x.size) if not same_bits(got[i:i + 1], want[i:i + 1])]
        if op == "atan2" and dt == "f64":  # libm against numpy: the same zeros, values within 1 ULP
            bad = [b for b in bad if not (b[1] != 0 and abs(b[1] - b[2]) <= 4.5e-16 * abs(b[2]))]
        assert not bad, (backend, bad)


# ---- sin / cos / tan over the whole range -----------------------------------------------------
def ordered(x: np.ndarray) -> np.ndarray:
    """Integers in the order of the floats `x` (adjacent floats differ by 1)."""
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[x.dtype.itemsize]
    i = np.ascontiguousarray(x).view(bits).astype(np.int64)
    return np.where(i < 0, -(i & np.iinfo(bits).max), i)


def ulp_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """ULP distance between arrays of one float type; NaN vs NaN is 0, NaN vs a number inf."""
    nan_g, nan_w = np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64))
    zero = np.zeros((), got.dtype)
    d = np.abs(ordered(np.where(nan_g, zero, got)) - ordered(np.where(nan_w, zero, want))).astype(np.float64)
    d[nan_g != nan_w] = np.inf
    d[nan_g & nan_w] = 0
    return d


def huge_f32(seed: int, n: int = 1 << 15) -> np.ndarray:
    """f32 values with |x| >= 2**26 over every binade up to the largest float, both signs, and
    the hard cases: the f32 closest to a multiple of pi/2 (16367173 * 2**72, |r| = 1.6e-9)
    and its neighbours, the f32 nearest k*pi/2 for k across the range, 1e20, 3.4e38, 2**26,
    and just below 2**26 (the last argument of the Cody-Waite path)."""
    rng = np.random.default_rng(seed)
    exponent = rng.integers(127 + 26, 255, n).astype(np.uint32)
    mant = rng.integers(0, 1 << 23, n).astype(np.uint32)
    sign = rng.integers(0, 2, n).astype(np.uint32) << np.uint32(31)
    x = (sign | exponent << np.uint32(23) | mant).view(np.float32)
    worst = np.float32(16367173 * 2.0 ** 72)
    k = np.unique(np.round(2.0 ** rng.uniform(26, 127.5, 2000)))
    with np.errstate(over="ignore"):
        near_multiples = (k * (np.pi / 2)).astype(np.float32)
    near_multiples = near_multiples[np.isfinite(near_multiples)]
    special = np.array([worst, np.nextafter(worst, np.float32(0)), np.nextafter(worst, np.float32(np.inf)),
                        1e20, -1e20, 1e30, 3.4028235e38, -3.4028235e38, 2.0 ** 26, -(2.0 ** 26),
                        np.nextafter(np.float32(2.0 ** 26), np.float32(0)), 1e10, 123456789.0], np.float32)
    return np.concatenate([special, x, near_multiples, -near_multiples, near_multiples * np.float32(1 + 2 ** -23)])


TRIG = [("sine", np.sin), ("cosine", np.cos), ("tan", np.tan)]


@pytest.mark.parametrize("backend", COMPILED)
@pytest.mark.parametrize("op,ref", TRIG, ids=[t[0] for t in TRIG])
def test_trig_f32_huge_arguments_ulp(op, ref, backend):
    """At most 1 ULP from numpy's float64 result rounded to f32 for |x| >= 2**26 (before the
    Payne-Hanek reduction these were inf or NaN from 1e20 on, and far off from 2**26)."""
    x = huge_f32(7)
    got = run(unary_module(op, "f32", x.size), [x], backend)[0]
    want = ref(x.astype(np.float64)).astype(np.float32)
    err = ulp_error(got, want)
    assert np.all(np.isfinite(got)), x[~np.isfinite(got)][:5]
    assert err.max() <= 1, (x[err.argmax()], got[err.argmax()], want[err.argmax()])


@pytest.mark.parametrize("op,ref", TRIG, ids=[t[0] for t in TRIG])
def test_trig_f32_whole_range_ulp(op, ref):
    """Random bit patterns over all binades, small and huge, both signs, plus inf and NaN."""
    bits = np.random.default_rng(3).integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([bits.view(np.float32), np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 1.5707964, -3.1415927])])
    got = run(unary_module(op, "f32", x.size), [x], "cpu")[0]
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64)).astype(np.float32)
    err = ulp_error(got, want)
    assert err.max() <= 1, (x[err.argmax()], got[err.argmax()], want[err.argmax()])


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("op,ref", TRIG, ids=[t[0] for t in TRIG])
def test_trig_narrow_floats_huge_arguments(op, ref, dt):
    """bf16 reaches 3.4e38 (f16 65504): computed in f32 then rounded, within 1 ULP of the
    correctly rounded value."""
    npdt = FLOATS[dt]
    every = np.arange(1 << 16, dtype=np.uint16).view(npdt)
    x = every[np.isfinite(every.astype(np.float32)) & (np.abs(every.astype(np.float32)) >= 1000)]
    got = run(unary_module(op, dt, x.size), [x], "cpu")[0]
    want = ref(x.astype(np.float64)).astype(npdt)
    assert ulp_error(got, want).max() <= 1


@pytest.mark.parametrize("op,ref", TRIG, ids=[t[0] for t in TRIG])
def test_trig_f64_huge_arguments(op, ref):
    """f64 calls the C library (libm), whose reduction covers the whole range."""
    rng = np.random.default_rng(5)
    x = np.concatenate([2.0 ** rng.uniform(26, 1023, 4096) * rng.choice([-1, 1], 4096), [1e300, 1.7e308, 1e22]])
    got = run(unary_module(op, "f64", x.size), [x], "cpu")[0]
    assert ulp_error(got, ref(x)).max() <= 1


# ---- complex atan2 / remainder ------------------------------------------------------------------
@pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA CPU client is not usable here")
@pytest.mark.parametrize("dt", ["c64", "c128"])
def test_complex_atan2_vs_xla(dt):
    """XLA defines complex atan2(y, x) = -i log((x + iy) / sqrt(x^2 + y^2)); compiled code once
    returned garbage and the interpreter crashed."""
    rng = np.random.default_rng(9)
    npdt = np.complex64 if dt == "c64" else np.complex128
    y, x = ((rng.standard_normal(64) + 1j * rng.standard_normal(64)).astype(npdt) for _ in range(2))
    text = binary_module("atan2", dt, 64)
    want = run_on_xla(text, [y, x])[0]
    tol = 2e-5 if dt == "c64" else 1e-12
    for backend in ["interpreter", *COMPILED]:
        np.testing.assert_allclose(run(text, [y, x], backend)[0], want, rtol=tol, atol=tol, err_msg=backend)


@pytest.mark.parametrize("backend", ["interpreter", *COMPILED])
def test_complex_remainder_is_refused_by_the_verifier(backend):
    """XLA:CPU crashes compiling it, so the verifier refuses it (tests/hlo/test_verifier_vs_xla_types.py)."""
    from hlofuse.hlo.errors import VerifierError

    with pytest.raises(VerifierError, match="XLA:CPU cannot compile it"):
        run(binary_module("remainder", "c64", 2), [np.ones(2, np.complex64)] * 2, backend)
