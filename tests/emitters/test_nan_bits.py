"""NaN bits of ln, atan2, power and sin/cos/tan. The sign of a NaN is visible to a TOTALORDER
compare and to bitcast-convert (the graph fuzzer, seed 41, found log's NaN through a TOTALORDER
compare), so the kernels give fixed, host-independent NaN bits: glibc's (x86 libm's), which
XLA:CPU's atan2 and power give too (jax 0.10 on the Zen 1 host, checked lane by lane).

The interpreter's NaN bits are not host-independent: it computes these in f64 with numpy, whose
loops follow the CPU. On an AVX-512 host numpy's SVML loops give the negative default NaN for
log(x < 0), keep -NaN for power(-NaN, 1) and take the numerator's NaN for atan2(NaN, NaN); on
the Zen 1 (AVX2) host numpy's log gives the positive NaN for x < 0 and its atan2 and power are
glibc's. So the NaN lanes are compared, bit for bit, with glibc's scalar functions (ctypes), and
every other lane with the interpreter. XLA:CPU's log is no reference either: f32 gives 0xffffffff
for x < 0 and for a NaN x (jax 0.10, Zen 1), f64 the positive NaN."""
from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest

import hlofuse

INPUTS = [-1.5, -np.inf, -1e-3, -2.0, np.nan, -np.nan, np.inf, 0.5, 0.0, -0.0]
LIBM = ctypes.CDLL(ctypes.util.find_library("m"))


def libm(name: str, dtype: type, *args: np.ndarray) -> np.ndarray:
    """glibc's scalar `name` (logf, log, atan2f, powf, ...) applied lane by lane in `dtype`."""
    fn = getattr(LIBM, name)
    c_type = ctypes.c_float if dtype is np.float32 else ctypes.c_double
    fn.restype, fn.argtypes = c_type, [c_type] * len(args)
    return np.array([fn(*(float(a) for a in lane)) for lane in zip(*args)], dtype)


def assert_bits(got: np.ndarray, want_nan: np.ndarray, interp: np.ndarray) -> None:
    """NaN lanes bit-exact against glibc's, the others bit-exact against the interpreter's."""
    bits = np.uint32 if got.dtype == np.float32 else np.uint64
    assert list(np.isnan(got)) == list(np.isnan(interp)) == list(np.isnan(want_nan))
    want = np.where(np.isnan(want_nan), want_nan, interp)
    assert [hex(v) for v in got.view(bits)] == [hex(v) for v in want.view(bits)]


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_log_nan_bits_as_glibc(dtype, target):
    """x < 0 gives the negative default NaN, a NaN comes back as it is (sign and payload)."""
    numpy_type, bits = (np.float32, np.uint32) if dtype == "f32" else (np.float64, np.uint64)
    x = np.array(INPUTS, numpy_type)
    text = f"HloModule t\n\nENTRY e {{\n  p = {dtype}[10] parameter(0)\n  ROOT r = {dtype}[10] log(p)\n}}\n"
    got = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target=target, cache=False)(x)[0])
    interp = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(x)[0])
    assert_bits(got, libm("logf" if dtype == "f32" else "log", numpy_type, x), interp)
    got = got.view(bits)
    sign = bits(1) << bits(np.dtype(bits).itemsize * 8 - 1)
    assert got[0] & sign and got[4] == x.view(bits)[4] and got[5] == x.view(bits)[5]


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("op", ["sine", "cosine", "tan", "atan2", "power"])
def test_invalid_and_nan_operands_as_glibc(op, target):
    """sin/cos/tan of an infinity and a negative base to a fractional power are invalid (the
    negative default NaN); a NaN operand comes back as it is: power's x before y's, but x's
    sign cleared for an odd integer y (pow(-NaN, 1) is +NaN); atan2's denominator before the
    numerator's."""
    nan = np.float32(np.nan)
    x = np.array([nan, -nan, 1, -nan, nan, -1.5, 0.0, np.inf, -np.inf, 2.0, -nan, -nan], np.float32)
    y = np.array([-nan, 1, nan, nan, 2.0, 0.5, -nan, -nan, 3.0, 0.5, -3.0, 2.0], np.float32)
    binary = op in ("atan2", "power")
    root = f"{op}(p, q)" if binary else f"{op}(p)"
    text = (f"HloModule t\n\nENTRY e {{\n  p = f32[12] parameter(0)\n  q = f32[12] parameter(1)\n"
            f"  ROOT r = f32[12] {root}\n}}\n")
    got = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target=target, cache=False)(x, y)[0])
    interp = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(x, y)[0])
    name = {"sine": "sinf", "cosine": "cosf", "tan": "tanf", "atan2": "atan2f", "power": "powf"}[op]
    assert_bits(got, libm(name, np.float32, *((x, y) if binary else (x,))), interp)


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f64"])
@pytest.mark.parametrize("op", ["maximum(a, b)", "minimum(a, b)", "clamp(a, b, b)", "clamp(b, a, a)"])
def test_max_min_clamp_take_the_first_nan(op, dtype):
    """Of two NaNs, maximum, minimum and clamp return the first operand's (its lower bound's, for
    a clamp), as the interpreter (numpy) and XLA:CPU do (jax 0.10: clamp(+NaN, -NaN, -NaN) is
    +NaN); llvm.maximum leaves the choice to the target, and x86 gave the second's (a clamp's
    sign through a TOTALORDER compare: the large-graph fuzzer, seed 50). One NaN propagates."""
    import ml_dtypes

    np_type = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16}[dtype]
    a = np.array([np.nan, -np.nan, np.nan, 1.0, -np.nan, 2.0], np_type)
    b = np.array([-np.nan, np.nan, 1.0, -np.nan, -np.nan, 3.0], np_type)
    text = f"""HloModule m
ENTRY e {{
  a = {dtype}[6] parameter(0)
  b = {dtype}[6] parameter(1)
  ROOT r = {dtype}[6] {op}
}}
"""
    bits = np.uint16 if dtype == "bf16" else np.uint32 if dtype == "f32" else np.uint64
    (want,) = hlofuse.compile(hlofuse.parse_hlo(text), "interpreter")(a, b)
    for fusion in (True, False):
        (got,) = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", fusion=fusion, cache=False)(a, b)
        np.testing.assert_array_equal(np.asarray(got).view(bits), np.asarray(want).view(bits))


@pytest.mark.parametrize("reducer", ["maximum", "minimum"])
@pytest.mark.parametrize("target", ["interpreter", "cpu", "gpu-emulated"])
def test_reduced_extremum_keeps_the_nan_it_met(reducer, target):
    """A max/min reduction over a row holding one -NaN returns that -NaN, sign and payload:
    folding `maximum(acc, x)`, which keeps its first operand's NaN, carries it to the end. The
    interpreter used numpy's vectorised reduce, which gave the canonical +NaN from some
    positions (found checking the GPU target's min.NaN, docs/gpu_device.md). XLA:CPU (jax
    0.10, Zen 1) returns this -NaN for min; for max it returns it from column 0 only and
    0x7fc00001 (the payload, sign cleared) from the other columns: its sign there is not
    XLA's contract, so the order-defined answer is the reference."""
    neg_nan = np.array(0xFFC00001, np.uint32).view(np.float32)
    x = np.random.default_rng(5).standard_normal((6, 517)).astype(np.float32)
    for row, col in enumerate((0, 7, 64, 255, 516)):
        x[row, col] = neg_nan  # row 5 keeps no NaN
    text = f"""HloModule m
r {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] {reducer}(a, b)
}}
ENTRY e {{
  x = f32[6,517] parameter(0)
  i = f32[] constant({'-inf' if reducer == 'maximum' else 'inf'})
  ROOT s = f32[6] reduce(x, i), dimensions={{1}}, to_apply=r
}}
"""
    (got,) = hlofuse.compile(hlofuse.parse_hlo(text), target, cache=False)(x)
    got = np.asarray(got)
    assert [hex(v) for v in got[:5].view(np.uint32)] == [hex(0xFFC00001)] * 5
    assert got[5] == (x[5].max() if reducer == "maximum" else x[5].min())
