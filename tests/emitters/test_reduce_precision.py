"""Regression from tests/fuzz: reduce-precision to an f16 operand's own format flushed its
subnormals on every hlofuse backend (f16 was widened to f32 and the 5-bit exponent check then
ran on f32 bits); XLA keeps them. The class: every (exponent_bits, mantissa_bits) pair of the
bf16, f16 and 8-bit float formats, each operand type's identity and wider or degenerate pairs,
on f32, f64, f16, bf16 and the narrow floats, over subnormals, infinities, NaNs, rounding ties
and random bit patterns, against XLA and the interpreter.

XLA runs reduce-precision on the bits of the type XLA:CPU computes the operand in: f32 and f64
their own, f16 its own (so mantissa rounding happens at a fixed bit position, also in f16's
subnormals, and only an exponent narrower than 5 bits flushes them), the 8-bit floats widened
to f16 (f8e8m0fnu to f32), bf16 widened to f32 (the same result as its own layout). A NaN comes
back unchanged, also with mantissa_bits=0.

XLA:CPU flushes f32/f64 subnormals in float arithmetic (denormals-are-zero), not in
reduce-precision: the f32 identity (8, 23) keeps subnormals there when nothing else touches them,
so the cases here apply reduce-precision to parameters directly.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from backend_oracle import HAS_XLA, bits_equal, check_everywhere, needs_xla, run
from xla_oracle import run_on_xla

FLOATS = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64}
NARROW = {"f8e5m2": ml_dtypes.float8_e5m2, "f8e4m3fn": ml_dtypes.float8_e4m3fn, "f8e4m3": ml_dtypes.float8_e4m3,
          "f8e3m4": ml_dtypes.float8_e3m4, "f8e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
          "f8e5m2fnuz": ml_dtypes.float8_e5m2fnuz, "f8e4m3b11fnuz": ml_dtypes.float8_e4m3b11fnuz,
          "f8e8m0fnu": ml_dtypes.float8_e8m0fnu}
# (exponent_bits, mantissa_bits): bf16, f16, f32, f64, the 8-bit formats, then wider, mixed and
# degenerate ones (1 exponent bit, no mantissa).
PAIRS = [(8, 7), (5, 10), (8, 23), (11, 52), (5, 2), (4, 3), (3, 4), (8, 0), (5, 3), (6, 1), (8, 10),
         (10, 40), (5, 23), (4, 52), (2, 1), (1, 0), (2, 0)]
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def float_edges(dtype) -> np.ndarray:
    """Zeros, the smallest subnormals and their neighbours, the subnormal/normal boundary, the
    largest finite values, infinities, NaNs (quiet, signalling, negative), rounding ties to the
    bf16/f16/f8 mantissas, values at the boundaries of narrower exponent ranges, then random
    bit patterns."""
    fi = ml_dtypes.finfo(dtype)
    tiny, least_normal, big = float(fi.smallest_subnormal), float(fi.smallest_normal), float(fi.max)
    values = [0.0, tiny, 2 * tiny, 3 * tiny, 5 * tiny, 7 * tiny, least_normal - tiny, least_normal,
              least_normal * 1.5, big, np.inf, 1.0, 1.5, 1.0 + float(fi.eps), 1 / 3, 2 / 3]
    values += [1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -4, 1 + 3 * 2.0 ** -4]
    values += [65504.0, 65520.0, 2.0 ** -14, 2.0 ** -24, 1.5 * 2.0 ** -24, 2.0 ** -25, 3e-5, 6e-8, 448.0, 464.0,
               57344.0, 2.0 ** -126, 2.0 ** -149, 3e38, 2.0 ** -1022, 2.0 ** -15, 2.0 ** 15, 2.0 ** 16]
    with np.errstate(all="ignore"):
        x = np.array(values, np.float64).astype(dtype)
    x = np.concatenate([x, -x])
    ut = UINT[np.dtype(dtype).itemsize]
    top = ut(np.iinfo(ut).max)
    exp_ones = (top >> ut(1)) & ~ut((1 << int(fi.nmant)) - 1)  # the exponent field, all ones
    nans = [exp_ones | ut(1), exp_ones | (ut(1) << ut(int(fi.nmant) - 1)), exp_ones | (top >> ut(1))]
    nans = np.array(nans + [n | ~(top >> ut(1)) for n in nans], ut).view(dtype)
    rand = np.random.default_rng(np.dtype(dtype).itemsize).integers(0, top, 200, dtype=ut, endpoint=True)
    return np.concatenate([x, nans, rand.view(dtype)])


def module(ty: str, n: int, pairs) -> str:
    """One reduce-precision of parameter p per pair, in a tuple (one loop fusion when fused)."""
    lines = [f"  p = {ty}[{n}] parameter(0)"]
    lines += [f"  r{i} = {ty}[{n}] reduce-precision(p), exponent_bits={e}, mantissa_bits={m}"
              for i, (e, m) in enumerate(pairs)]
    shapes = ", ".join([f"{ty}[{n}]"] * len(pairs))
    lines.append(f"  ROOT t = ({shapes}) tuple({', '.join(f'r{i}' for i in range(len(pairs)))})")
    return "HloModule m\nENTRY e {\n" + "\n".join(lines) + "\n}\n"


def test_reported_case_f16_keeps_subnormals():
    text = ("HloModule m\nENTRY e {\n  x = f16[2] parameter(0)\n"
            "  ROOT r = f16[2] reduce-precision(x), exponent_bits=5, mantissa_bits=10\n}\n")
    x = np.array([6e-8, 3e-5], np.float16)  # both f16 subnormals: the identity keeps them
    for backend in ["interpreter", "cpu", "gpu-emulated"]:
        np.testing.assert_array_equal(run(text, [x], backend)[0].view(np.uint16), x.view(np.uint16), backend)
    check_everywhere(text, [x])


@pytest.mark.parametrize("ty", list(FLOATS))
def test_reduce_precision_pairs(ty):
    """Every pair on every element of float_edges, all backends, fused and unfused."""
    x = float_edges(FLOATS[ty])
    check_everywhere(module(ty, x.size, PAIRS), [x])


@pytest.mark.parametrize("ty", list(NARROW))
def test_reduce_precision_narrow_floats(ty):
    """The 8-bit floats, on all 256 bit patterns."""
    x = np.arange(256, dtype=np.uint8).view(NARROW[ty])
    check_everywhere(module(ty, x.size, PAIRS), [x])


@pytest.mark.parametrize("ty, own", [("f16", (5, 10)), ("bf16", (8, 7)), ("f32", (8, 23)), ("f64", (11, 52))])
def test_identity_keeps_every_bit_pattern(ty, own):
    """The operand's own format is the identity, subnormals and NaN payloads included."""
    x = float_edges(FLOATS[ty])
    text = module(ty, x.size, [own])
    ut = UINT[x.dtype.itemsize]
    for backend in ["interpreter", "cpu", "gpu-emulated"]:
        got = run(text, [x], backend)[0]
        with np.errstate(invalid="ignore"):  # signalling NaNs of bf16 warn in isnan
            nan = np.isnan(x)
        if ty != "bf16":  # a bf16 NaN payload is re-quieted by the f32 round trip (XLA's too)
            nan = np.zeros_like(nan)
        np.testing.assert_array_equal(got.view(ut)[~nan], x.view(ut)[~nan], backend)
        with np.errstate(invalid="ignore"):
            assert np.isnan(got[nan]).all(), backend


@pytest.mark.parametrize("ty", ["f16", "f32", "f64"])
def test_nan_comes_back_unchanged(ty):
    """NaNs keep their bits, with and without mantissa bits left (rounding a NaN's mantissa with
    mantissa_bits=0 used to carry it to infinity, or to -0 after the exponent check)."""
    ut = UINT[np.dtype(FLOATS[ty]).itemsize]
    x = float_edges(FLOATS[ty])
    x = x[np.isnan(x)]
    pairs = [(8, 0), (1, 0), (5, 0), (11, 0), (5, 1), (8, 7), (4, 3)]
    text = module(ty, x.size, pairs)
    refs = [("interpreter", run(text, [x], "interpreter"))]
    if HAS_XLA:
        refs.append(("xla", run_on_xla(text, [x])))
    for backend in ["cpu", "gpu-emulated"]:
        got = run(text, [x], backend)
        for k, pair in enumerate(pairs):
            np.testing.assert_array_equal(got[k].view(ut), x.view(ut), f"{backend} {pair}")
            for name, want in refs:
                np.testing.assert_array_equal(want[k].view(ut), x.view(ut), f"{name} {pair}")


@needs_xla
def test_xla_cpu_flushes_subnormal_arithmetic_not_reduce_precision():
    """Pins why the cases above apply reduce-precision to parameters: XLA:CPU flushes f32
    subnormals in arithmetic (x + 0 is 0 there; IEEE and hlofuse keep x), while reduce-precision
    to f32's own format keeps them. A fuzzer graph with arithmetic before reduce-precision sees
    the flush; that is XLA:CPU's denormal mode, not reduce-precision's semantics."""
    x = np.array([1e-45, 1e-40, -1e-39, 1.0], np.float32)
    rp = ("HloModule m\nENTRY e {\n  a = f32[4] parameter(0)\n"
          "  ROOT r = f32[4] reduce-precision(a), exponent_bits=8, mantissa_bits=23\n}\n")
    assert bits_equal(run_on_xla(rp, [x])[0], x).all()
    add = ("HloModule m\nENTRY e {\n  a = f32[4] parameter(0)\n  b = f32[4] parameter(1)\n"
           "  ROOT r = f32[4] add(a, b)\n}\n")
    np.testing.assert_array_equal(run_on_xla(add, [x, np.zeros(4, np.float32)])[0], [0, 0, 0, 1])
    for backend in ["interpreter", "cpu", "gpu-emulated"]:
        assert bits_equal(run(rp, [x], backend)[0], x).all(), backend
