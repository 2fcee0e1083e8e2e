"""Accuracy of the CPU backend's f32 transcendentals over the whole float range, in ULP
against numpy's float64 result rounded to f32 (an independent, near-correctly-rounded
reference). Run with -s to see the table of max ULP errors.

Kernels run as XLA:CPU's, with denormals flushed (docs/denormals.md): the reference is taken
on flushed operands and flushed, except where XLA's functions return a tiny x itself
(sin, tan, tanh, expm1: a denormal x comes back unchanged)."""
from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.cpu_executor import CpuProgram
from tests.fuzz.values import flush_denormals as ftz
from tests.fuzz.values import is_subnormal

N = 1 << 16


def _all_floats(seed: int, n: int = N) -> np.ndarray:
    """Finite f32 values with uniformly random bit patterns (every binade equally likely),
    plus the special values."""
    bits = np.random.default_rng(seed).integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x)]
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4028235e38, 0.5, 2.0],
                       np.float32)
    rng = np.random.default_rng(seed + 1)
    moderate = rng.uniform(-12, 12, n // 4).astype(np.float32)  # where most functions are not flat
    small = (rng.choice([-1, 1], n // 8) * 10.0 ** rng.uniform(-8, 0, n // 8)).astype(np.float32)
    return np.concatenate([special, x, moderate, small])


def _ordered(x: np.ndarray) -> np.ndarray:
    i = x.view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def ulp_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """ULP distance between f32 arrays; NaN vs NaN is 0, NaN vs a number is infinite."""
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    d = np.abs(_ordered(np.where(nan_g, 0, got).astype(np.float32)) - _ordered(np.where(nan_w, 0, want).astype(np.float32)))
    d = d.astype(np.float64)
    d[nan_g != nan_w] = np.inf
    d[nan_g & nan_w] = 0
    return d


def _run(op: str, *args: np.ndarray) -> np.ndarray:
    params = "\n".join(f"  p{i} = f32[{a.size}] parameter({i})" for i, a in enumerate(args))
    ops = ", ".join(f"p{i}" for i in range(len(args)))
    text = f"HloModule m\n\nENTRY e {{\n{params}\n  ROOT r = f32[{args[0].size}] {op}({ops})\n}}\n"
    return CpuProgram.compile(parse_hlo(text)).run(list(args))[0]


def _ref(fn, *args: np.ndarray, keeps_tiny: bool = False) -> np.ndarray:
    with np.errstate(all="ignore"):
        want = ftz(fn(*[ftz(a).astype(np.float64) for a in args]).astype(np.float32))
    if keeps_tiny:
        tiny = is_subnormal(args[0])
        want[tiny] = args[0][tiny]
    return want


KEEPS_TINY = ("exponential-minus-one", "tanh", "sine", "tan")


_erf = np.vectorize(math.erf, otypes=[np.float64])

# (opcode, numpy float64 reference, domain filter, max ULP allowed)
UNARY = [
    ("exponential", np.exp, None, 2),
    ("log", np.log, None, 2),
    ("exponential-minus-one", np.expm1, None, 3),
    ("log-plus-one", np.log1p, None, 3),
    ("tanh", np.tanh, None, 1),  # XLA:CPU's rational reaches 5 (test below)
    ("logistic", lambda x: 1 / (1 + np.exp(-x)), None, 3),
    ("erf", _erf, None, 1),  # f64 rational: 1 ULP at near-ties (XLA:CPU: 5)
    ("sine", np.sin, None, 1),  # the whole range: Payne-Hanek beyond 2**26
    ("cosine", np.cos, None, 1),  # the whole range: Payne-Hanek beyond 2**26
    ("tan", np.tan, None, 1),  # the whole range: Payne-Hanek beyond 2**26
    ("cbrt", np.cbrt, None, 1),
    ("sqrt", np.sqrt, None, 0),
    ("rsqrt", lambda x: 1 / np.sqrt(x), None, 1),
]

REPORT: dict[str, float] = {}


@pytest.mark.parametrize("op,ref,domain,bound", UNARY, ids=[u[0] for u in UNARY])
def test_unary_ulp(op, ref, domain, bound):
    x = _all_floats(zlib.crc32(op.encode()) % 1000)
    if domain is not None:
        x = x[domain(x) | ~np.isfinite(x)]
    err = ulp_error(_run(op, x), _ref(ref, x, keeps_tiny=op in KEEPS_TINY))
    worst = float(err.max())
    REPORT[op] = worst
    print(f"\n{op}: max {worst:.0f} ULP at x={x[err.argmax()]!r}")
    assert worst <= bound


def _floats_between(lo: float, hi: float, step: int) -> np.ndarray:
    """Every `step`-th f32 from `lo` up to `hi` (positive bounds)."""
    a, b = np.array([lo, hi], np.float32).view(np.int32)
    return np.arange(a, b, step, dtype=np.int32).view(np.float32)


# The dense sweep (every 7th float: 40 million values, the default run's longest test at 12-44 s)
# runs with `-m slow`; the default run keeps every 61st float (4.6 million, the same regions).
@pytest.mark.parametrize("step", [61, pytest.param(7, marks=pytest.mark.slow)], ids=lambda s: f"every {s}th")
def test_tanh_no_less_accurate_than_xla(step):
    """tanh (one divide, as XLA's rational): over every `step`-th float in [1e-4, 12], at most
    1 ULP and worst and mean errors no larger than XLA:CPU's own tanh's, region by region."""
    jax = pytest.importorskip("jax")
    x = _floats_between(1e-4, 12.0, step)
    x = np.concatenate([x, -x])
    want = _ref(np.tanh, x)
    ours = ulp_error(_run("tanh", x), want)
    xla = ulp_error(np.asarray(jax.jit(jax.numpy.tanh)(x)), want)
    ax = np.abs(x)
    for lo, hi in [(0, 0.625), (0.625, 2), (2, 9.1), (9.1, 13)]:
        sel = (ax >= lo) & (ax < hi)
        print(f"\ntanh on [{lo}, {hi}): max {ours[sel].max():.0f} ULP, mean {ours[sel].mean():.3f} "
              f"(XLA:CPU {xla[sel].max():.0f}, {xla[sel].mean():.3f})")
        assert ours[sel].max() <= min(1, xla[sel].max())
        assert ours[sel].mean() <= xla[sel].mean()


@pytest.mark.parametrize("op,ref,bound", [
    ("power", np.power, 1),
    ("atan2", np.arctan2, 1),
], ids=["power", "atan2"])
def test_binary_ulp(op, ref, bound):
    x = _all_floats(11)[: N // 2]
    y = _all_floats(12)[: x.size]
    if op == "power":
        # Mix in small exponents and exact integers, where results are mostly finite and nonzero.
        rng = np.random.default_rng(13)
        y = np.where(rng.random(x.size) < 0.5, rng.integers(-8, 9, x.size).astype(np.float32),
                     (rng.standard_normal(x.size) * 4).astype(np.float32))
        x = np.where(rng.random(x.size) < 0.5, x, np.abs(rng.standard_normal(x.size) * 10).astype(np.float32))
    err = ulp_error(_run(op, x, y), _ref(ref, x, y))
    worst = float(err.max())
    print(f"\n{op}: max {worst:.0f} ULP at x={x[err.argmax()]!r} y={y[err.argmax()]!r}")
    assert worst <= bound


def test_pow_special_cases_follow_c99():
    x = np.array([0.0, -0.0, -0.0, 0.0, -1.0, 1.0, -8.0, -8.0, np.inf, -np.inf, -np.inf, 2.0, 0.5, np.nan, 1.0],
                 np.float32)
    y = np.array([-1.0, -1.0, 3.0, 0.0, np.inf, np.nan, 1 / 3, 3.0, -2.0, 3.0, 0.5, -np.inf, -np.inf, 0.0, 7.0],
                 np.float32)
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    np.testing.assert_array_equal(_run("power", x, y), want)


def _all_doubles(seed: int, n: int = N) -> np.ndarray:
    bits = np.random.default_rng(seed).integers(0, 1 << 63, n, dtype=np.uint64) * 2 + 1
    x = bits.view(np.float64)
    x = x[np.isfinite(x)]
    rng = np.random.default_rng(seed + 1)
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 5e-324, 1e-310, 709.7, -745.0, 710.0])
    return np.concatenate([special, x, rng.uniform(-50, 50, n // 4), rng.uniform(0.5, 2.0, n // 4)])


def _ulp64(got: np.ndarray, want: np.ndarray) -> float:
    def ordered(v):
        i = v.view(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFFFFFFFFFF), i)  # int64: exact differences

    nan_g, nan_w = np.isnan(got), np.isnan(want)
    assert np.array_equal(nan_g, nan_w)
    ok = ~nan_g
    return float(np.max(np.abs(ordered(got[ok]) - ordered(want[ok]))).astype(np.float64))


@pytest.mark.parametrize("op,ref", [("exponential", np.exp), ("log", np.log)])
def test_f64_exp_log_ulp(op, ref):
    x = _all_doubles(21)
    text = f"HloModule m\n\nENTRY e {{\n  p0 = f64[{x.size}] parameter(0)\n  ROOT r = f64[{x.size}] {op}(p0)\n}}\n"
    got = CpuProgram.compile(parse_hlo(text)).run([x])[0]
    with np.errstate(all="ignore"):
        worst = _ulp64(got, ftz(ref(ftz(x))))
    print(f"\nf64 {op}: max {worst:.0f} ULP")
    assert worst <= 2
