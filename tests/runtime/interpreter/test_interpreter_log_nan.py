"""The oracle's NaN for the log of a negative number does not depend on the host.

numpy's log dispatches to other routines on other CPUs: on the Zen 1 AVX2 host its f64 log of
-1 is +NaN (0x7ff8...), on the znver5 AVX-512 host -NaN. The interpreter computes f32 log in
f64, so its bits followed the host, and the CPU kernels (x86's default NaN, sign set, as
glibc's logf) disagreed with it on one host or the other. It now gives the sign-set default NaN
for every x < 0 and returns a NaN operand as it is."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse

TEXT = """HloModule m
ENTRY e {{
  x = {t}[8] parameter(0)
  ROOT y = {t}[8] log(x)
}}
"""
DEFAULT_NAN = {"f32": 0xFFC00000, "f64": 0xFFF8000000000000}
UINT = {"f32": np.uint32, "f64": np.uint64}


@pytest.mark.parametrize("t", ["f32", "f64"])
def test_log_of_negative_numbers_is_the_default_nan_on_every_host(t):
    dtype = np.float32 if t == "f32" else np.float64
    x = np.array([-1.0, -2.5e-3, -np.inf, -1e30, 1.0, 0.0, np.nan, -np.nan], dtype)
    (got,) = hlofuse.compile(hlofuse.parse_hlo(TEXT.format(t=t)), target="interpreter", fusion=False)(x)
    bits = np.asarray(got).view(UINT[t])
    assert [int(b) for b in bits[:4]] == [DEFAULT_NAN[t]] * 4
    assert got[4] == 0.0 and got[5] == -np.inf
    assert np.isnan(got[6]) and not np.signbit(got[6]) and np.isnan(got[7]) and np.signbit(got[7])


@pytest.mark.parametrize("t", ["f32", "f64"])
def test_the_cpu_kernel_gives_the_oracles_bits(t):
    dtype = np.float32 if t == "f32" else np.float64
    x = np.array([-1.0, -7.0, -np.inf, -1e-30, 2.0, 0.5, np.nan, -np.nan], dtype)
    (want,) = hlofuse.compile(hlofuse.parse_hlo(TEXT.format(t=t)), target="interpreter", fusion=False)(x)
    (got,) = hlofuse.compile(hlofuse.parse_hlo(TEXT.format(t=t)), target="cpu", cache=False)(x)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(np.asarray(got).view(UINT[t])[nan], np.asarray(want).view(UINT[t])[nan])
