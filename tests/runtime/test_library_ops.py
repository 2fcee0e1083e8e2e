"""Library ops (runtime/library_ops.py: the numpy/BLAS rules compiled backends call for ops
with no kernel) against the interpreter on IEEE edge values."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo


def _conv_module(lhs: str, rhs: str, out: str, attrs: str) -> str:
    return (f"HloModule conv\nENTRY e {{\n  x = {lhs} parameter(0)\n  w = {rhs} parameter(1)\n"
            f"  ROOT c = {out} convolution(x, w), {attrs}\n}}\n")


# One input and one output feature: each kernel position's contraction is a matrix-vector
# product, where np.dot (BLAS) skips a zero weight, making inf * -0 count as 0 instead of NaN.
CASES = {
    "one_feature_nchw": ("f32[2,1,13,5]", "f32[1,1,3,2]", "f32[2,1,12,6]",
                         "window={size=3x2 pad=1_0x0_2}, dim_labels=bf01_oi01->bf01"),
    "one_feature_1x1": ("f32[1,1,40,40]", "f32[1,1,1,1]", "f32[1,1,40,40]",
                        "window={size=1x1}, dim_labels=bf01_oi01->bf01"),
    "grouped": ("f32[1,8,13,9]", "f32[8,1,1,2]", "f32[1,8,13,4]",
                "window={size=1x2 stride=1x2}, dim_labels=bf01_oi01->bf01, feature_group_count=8"),
    "complex": ("c64[1,1,9,9]", "c64[1,1,3,3]", "c64[1,1,7,7]", "window={size=3x3}, dim_labels=bf01_oi01->bf01"),
}


# Real convolutions run as conv kernels on the CPU (tests/codegen/test_conv.py); complex ones
# stay library calls there too.
TARGETS = [(name, "gpu-emulated") for name in sorted(CASES)] + [("complex", "cpu")]


@pytest.mark.parametrize("name,target", TARGETS)
@pytest.mark.parametrize("where", ["input", "weights"])
def test_library_convolution_zero_times_inf_is_nan(name, where, target):
    """0 * inf and 0 * NaN are NaN in the library convolution as in the interpreter (and XLA):
    with infs and NaNs among the inputs (or weights) and zeros among the weights (or inputs)."""
    text = _conv_module(*CASES[name])
    module = parse_hlo(text)
    rng = np.random.default_rng(len(name))
    args = []
    for p in module.entry.parameters:
        dt = p.shape.dtype.numpy
        a = rng.standard_normal(p.shape.dims)
        if np.dtype(dt).kind == "c":
            a = a + 1j * rng.standard_normal(p.shape.dims)
        args.append(a.astype(dt))
    special, zeros = (args[0], args[1]) if where == "input" else (args[1], args[0])
    flat_s, flat_z = special.reshape(-1), zeros.reshape(-1)
    flat_s[rng.integers(0, flat_s.size, max(1, flat_s.size // 6))] = np.inf
    flat_s[rng.integers(0, flat_s.size, max(1, flat_s.size // 12))] = np.nan
    flat_z[rng.integers(0, flat_z.size, max(1, flat_z.size // 3))] = -0.0
    exe = hlofuse.compile(module, target=target)
    (want,) = hlofuse.compile(module, target="interpreter")(*args)
    with np.errstate(all="ignore"):
        (got,) = exe(*args)
    got, want = np.asarray(got), np.asarray(want)
    assert np.isnan(want).any()  # the case exercises a NaN from 0 * inf
    assert (np.isnan(got) == np.isnan(want)).all(), f"{int((np.isnan(got) != np.isnan(want)).sum())} NaNs differ"
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-5)


def test_triangular_solve_unknown_transpose_is_a_clear_error():
    # The verifier does not check transpose_a's value; the library rule must refuse it as the
    # interpreter does (UnsupportedError naming the instruction), not raise a bare ValueError.
    from hlofuse.hlo.errors import UnsupportedError

    text = ("HloModule m\nENTRY e {\n  a = f32[4,4] parameter(0)\n  b = f32[4,3] parameter(1)\n"
            "  ROOT x = f32[4,3] triangular-solve(a, b), left_side=true, lower=true, transpose_a=BOGUS\n}\n")
    exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    with pytest.raises(UnsupportedError, match="triangular-solve x: unknown transpose_a BOGUS"):
        exe(np.eye(4, dtype=np.float32), np.ones((4, 3), np.float32))


CHOLESKY = """HloModule chol
ENTRY e {
  a = f32[3,4,4] parameter(0)
  ROOT c = f32[3,4,4] cholesky(a), lower=%s
}
"""


@pytest.mark.parametrize("lower", ["true", "false"])
@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
def test_cholesky_of_a_matrix_that_is_not_positive_definite_is_nan(lower, target):
    """XLA's operand a + a*b of a matrix product (its library rewriter's test) is no positive
    definite matrix: numpy raised, an internal error. That batch element is NaN, as in the
    interpreter and XLA:CPU; the others keep their factors."""
    rng = np.random.default_rng(8)
    m = rng.standard_normal((3, 4, 4)).astype(np.float32)
    a = m @ np.swapaxes(m, -1, -2) + 4 * np.eye(4, dtype=np.float32)  # positive definite
    a[1] = rng.standard_normal((4, 4)).astype(np.float32) - 3 * np.eye(4, dtype=np.float32)
    text = CHOLESKY % lower
    (got,) = hlofuse.compile(parse_hlo(text), target=target, cache=False)(a)
    (want,) = hlofuse.compile(parse_hlo(text), target="interpreter")(a)
    got = np.asarray(got)
    assert np.isnan(got[1]).all() and np.isnan(np.asarray(want)[1]).all()
    np.testing.assert_allclose(got[[0, 2]], np.asarray(want)[[0, 2]], rtol=1e-5, atol=1e-5)


# Windows mostly over padding (a weight gradient's shape), with strides, dilations, negative
# padding, reversal and groups: the library convolution (gpu-emulated) skips the outputs whose
# input is padding at each kernel position, unless a weight is inf or NaN.
PADDED_WINDOWS = {
    "large-padded": ("f32[2,3,5,4]", "f32[4,3,6,5]", "f32[2,4,10,8]",
                     "window={size=6x5 pad=5_5x4_4}, dim_labels=bf01_oi01->bf01"),
    "strided-dilated": ("f32[2,3,11,9]", "f32[2,3,3,2]", "f32[2,2,5,4]",
                        "window={size=3x2 stride=2x3 pad=1_2x3_0 rhs_dilate=2x1}, dim_labels=bf01_oi01->bf01"),
    "base-dilated-negative-pad": ("f32[1,2,7,6]", "f32[3,2,3,3]", "f32[1,3,12,14]",
                                  "window={size=3x3 pad=-1_2x2_-2 lhs_dilate=2x3 rhs_reversal=0x1}, "
                                  "dim_labels=bf01_oi01->bf01"),
    "feature-groups": ("f32[2,5,4,6]", "f32[3,3,2,6]", "f32[2,7,4,6]",
                       "window={size=3x3 pad=2_2x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=3"),
}


@pytest.mark.parametrize("inf_weight", [False, True])
@pytest.mark.parametrize("name", sorted(PADDED_WINDOWS))
def test_library_convolution_skips_padding_only_for_finite_weights(name, inf_weight):
    text = _conv_module(*PADDED_WINDOWS[name])
    module = parse_hlo(text)
    rng = np.random.default_rng(12)
    x, w = (rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters)
    if inf_weight:
        w.reshape(-1)[1] = np.inf
    (got,) = hlofuse.compile(parse_hlo(text), target="gpu-emulated", cache=False)(x, w)
    (want,) = hlofuse.compile(parse_hlo(text), target="interpreter")(x, w)
    got, want = np.asarray(got), np.asarray(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(want).any() == inf_weight
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
