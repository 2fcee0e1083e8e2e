"""The StableHLO conformance runner: its comparison rules (hand-derived cases), its output,
and the whole shared test folder on the reference interpreter."""
from __future__ import annotations

import io
import os
import warnings

import ml_dtypes
import numpy as np
import pytest

from hlofuse.frontends.conformance import (compare, dtypes_from_name, format_breakdown, main_conformance, op_family,
                                           run_file, summary_line, ulp_difference)
from repo_paths import SHARED_STABLEHLO

TESTDATA = str(SHARED_STABLEHLO)

# Files allowed to fail on the interpreter, and why: each is an order-of-operations or
# precision difference from the algorithm XLA used to compute the expected values, which the
# tight check (3 ULP, or 1e-3 absolute at large magnitudes) cannot absorb.
ALLOWLIST = {
    "fft_complex64_14_15_16_17.mlir": ("the interpreter's FFT is numpy's float64 pocketfft rounded to float32; XLA "
                                       "computed in float32: 24% of the elements are over 3 ULP off (the "
                                       "small-magnitude bins by up to 75k ULP)"),
    "triangular_solve_float32_2_8_8_float32_2_10_8.mlir": ("substitution order differs from XLA's solver and the "
                                                           "solution grows to 3e3, amplifying rounding to 40 ULP"),
}

CHUNKS = 8


# ---- comparison rules ---------------------------------------------------------------------
def test_ulp_difference_by_hand():
    one = np.float32(1.0)
    next_up = np.nextafter(one, np.float32(2))
    a = np.array([one, next_up, -0.0, np.nan, np.inf, 1.0], np.float32)
    e = np.array([one, one, 0.0, np.nan, np.inf, -1.0], np.float32)
    got = ulp_difference(a, e)
    assert got[:5].tolist() == [0, 1, 0, 0, 0]
    assert got[5] == 2 * 0x3F800000  # across zero: the two distances from zero add up
    assert ulp_difference(np.array([np.inf], np.float32), np.array([3.0], np.float32))[0] == np.iinfo(np.uint64).max
    b = np.array([1.0, 1.0078125], ml_dtypes.bfloat16)  # 1 + 2^-7 is one bf16 ULP above 1
    assert ulp_difference(b, np.array([1.0, 1.0], ml_dtypes.bfloat16)).tolist() == [0, 1]
    c = np.array([1 + 1j], np.complex64)
    d = np.array([1 + complex(0, float(np.nextafter(np.float32(1), np.float32(0))))], np.complex64)
    assert ulp_difference(c, d).tolist() == [1]


def test_compare_kinds():
    x = np.array([1.0, 2.0], np.float32)
    assert compare("expect_close", x, np.nextafter(x, np.float32(9), dtype=np.float32)) == ""
    assert "ULP" in compare("expect_close", x, x * np.float32(1.001))
    far = np.array([1.0], np.float32).view(np.uint32) + np.uint32(5)  # 5 ULP above 1.0
    assert compare("expect_close", far.view(np.float32), np.ones(1, np.float32), max_ulp_difference=5) == ""
    assert "0..4 ULP" in compare("expect_close", far.view(np.float32), np.ones(1, np.float32), max_ulp_difference=4)
    assert "ULP" in compare("expect_close", x, x, min_ulp_difference=1)
    assert compare("expect_eq", np.array([np.nan], np.float32), np.array([np.nan], np.float32)) == ""
    assert "differ" in compare("expect_eq", x, x + 1)
    assert compare("expect_eq", np.array([3, 4], np.int8), np.array([3, 4], np.int8)) == ""
    assert "differ" in compare("expect_close", np.array([3], np.int32), np.array([4], np.int32))  # ints exact
    assert compare("expect_almost_eq", x, x + np.float32(0.0009)) == ""
    assert "0.001" in compare("expect_almost_eq", x, x + np.float32(0.002))
    assert compare("expect_almost_eq", x, x + np.float32(0.002), tolerance=0.01) == ""
    assert "differ" in compare("expect_almost_eq", np.array([0.0001]), np.array([-0.0001]))  # sign must match
    assert "expected float32" in compare("expect_eq", x.astype(np.float64), x)


def test_op_family_names():
    assert op_family("scatter_add_float32_5_6_7_float32_5_2_2_7.mlir") == "scatter_add"
    assert op_family("acosh_complex64_20_20_chlo.mlir") == "acosh"
    assert op_family("add_any_uint8_2_uint8_2.mlir") == "add"
    assert op_family("iota_2x32_shape_.mlir") == "iota_2x32"
    assert op_family("random_uniform_.mlir") == "random_uniform"
    assert dtypes_from_name("sort_uint64_5_7.mlir") == ("u64",)
    assert dtypes_from_name("top_k_bool_5_3_chlo.mlir") == ("pred",)
    assert dtypes_from_name("add_any_bfloat16_2_bfloat16_2.mlir") == ("bf16",)
    assert dtypes_from_name("random_split_.mlir") == ()


# ---- the runner's output ------------------------------------------------------------------
PASSING = """
module @jit_main {
  func.func public @main() -> tensor<2xf32> {
    %0 = call @inputs() : () -> tensor<2xf32>
    %1 = call @expected() : () -> tensor<2xf32>
    %2 = stablehlo.abs %0 : tensor<2xf32>
    stablehlo.custom_call @check.expect_close(%2, %1) {has_side_effect = true} : (tensor<2xf32>, tensor<2xf32>) -> ()
    return %2 : tensor<2xf32>
  }
  func.func private @inputs() -> tensor<2xf32> {
    %c = stablehlo.constant dense<[-1.5, 2.0]> : tensor<2xf32>
    return %c : tensor<2xf32>
  }
  func.func private @expected() -> tensor<2xf32> {
    %c = stablehlo.constant dense<[EXPECTED]> : tensor<2xf32>
    return %c : tensor<2xf32>
  }
}"""


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_main_conformance_lines_summary_and_exit_code(tmp_path):
    good = _write(tmp_path, "abs_float32_2.mlir", PASSING.replace("EXPECTED", "1.5, 2.0"))
    bad = _write(tmp_path, "abs_float32_2_bad.mlir", PASSING.replace("EXPECTED", "1.5, 2.5"))
    skip = _write(tmp_path, "kernel_float32_2.mlir", PASSING.replace("EXPECTED", "1.5, 2.0").replace(
        "stablehlo.abs %0 : tensor<2xf32>",
        "stablehlo.custom_call @my_kernel(%0) : (tensor<2xf32>) -> tensor<2xf32>"))
    out = io.StringIO()
    assert main_conformance([good], stream=out) == 0
    assert out.getvalue().strip().splitlines()[-1] == "1 passed, 0 failed, 0 skipped"
    out = io.StringIO()
    code = main_conformance([str(tmp_path)], stream=out, verbose_breakdown=True)
    text = out.getvalue()
    assert code == 1
    assert text.strip().splitlines()[-1] == "1 passed, 1 failed, 1 skipped"
    assert "FAILED  abs_float32_2_bad.mlir" in text and "ULP" in text
    assert "SKIPPED kernel_float32_2.mlir" in text and "@my_kernel" in text
    assert "skipped 1:" in text and "by family:" in text and "by dtype:" in text
    assert main_conformance([str(tmp_path / "missing.mlir")], stream=io.StringIO()) == 2
    parallel = io.StringIO()
    assert main_conformance([str(tmp_path)], stream=parallel, jobs=2) == 1
    assert parallel.getvalue().splitlines() == [l for l in text.splitlines() if not l.startswith(("by ", "  "))]
    result = run_file(good)
    assert (result.status, result.family, result.dtypes) == ("passed", "abs", ("f32",))
    near = PASSING.replace("EXPECTED", "1.5, 2.0000005")  # 2 ULP above 2.0
    assert run_file(_write(tmp_path, "near.mlir", near)).status == "passed"
    strict = near.replace("{has_side_effect = true}", "{has_side_effect = true, max_ulp_difference = 0 : ui64}")
    result = run_file(_write(tmp_path, "strict.mlir", strict))
    assert result.status == "failed" and "0..0 ULP" in result.reason


# ---- the shared test folder ---------------------------------------------------------------
def _files() -> list[str]:
    if not os.path.isdir(TESTDATA):
        return []
    return sorted(n for n in os.listdir(TESTDATA) if n.endswith(".mlir"))


@pytest.mark.skipif(not os.path.isdir(TESTDATA), reason=f"shared StableHLO test data not found at {TESTDATA}")
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_shared_testdata_on_interpreter(chunk):
    files = _files()[chunk::CHUNKS]
    results = [run_file(os.path.join(TESTDATA, n)) for n in files]
    unexpected = [r.line() for r in results if r.status != "passed" and r.name not in ALLOWLIST]
    fixed = [r.name for r in results if r.status == "passed" and r.name in ALLOWLIST]
    if fixed:
        warnings.warn(f"allowlisted files now pass (remove them from ALLOWLIST): {fixed}")
    assert not unexpected, summary_line(results) + "\n" + "\n".join(unexpected) + "\n" + format_breakdown(results)
