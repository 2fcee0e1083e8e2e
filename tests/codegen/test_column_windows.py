"""Column sums in windows of 32 rows (kernels/cpu_reduction_windows.py): every f32 and f64 sum a
column kernel folds over more than 32 rows a unit goes in windows, levels of windows above them,
as XLA:CPU's tree does, and is that much closer to the exact sum; the init joins once; a max
beside the sums keeps its own fold; windowed kernels keep their reduced loops rolled and their
plain (unrotated) loops. The order itself is checked bit for bit against tests/support/
windowed_sums.py by test_column_order.py, test_column_rows_in_l1.py and test_column_row_tiles.py."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
from hlofuse.codegen.kernels import cpu_reduction_windows
from hlofuse.compiler import optimize
from hlofuse.emitters.cpu.target import CpuTarget
from backend_cases import plain_reduce_module
from llvm_loops import loop_hint_names
from windowed_sums import windowed_sum


def _sum_module(dims: tuple[int, ...], rdims: tuple[int, ...], dtype: str = "f32", init: str = "0") -> str:
    return plain_reduce_module(dims, rdims, "add", init, dtype)


def _mean_ulps(got: np.ndarray, x: np.ndarray, axes) -> float:
    exact = x.astype(np.float64).sum(axis=axes)
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    return float(np.mean(np.abs(got.astype(np.float64) - exact) / ulp))


@pytest.mark.parametrize("dims, axes", [((64, 32, 32, 16), (0, 1, 2)), ((16384, 64), (0,))])
def test_windows_bring_the_sum_closer(monkeypatch, dims, axes):
    """Batch-norm statistics over 65,536 rows and a 16,384-row column sum (inputs around 1):
    the windowed kernel's mean error against the exact sum is under half the one-sequence
    fold's (measured 0.47 against 2.82 and 0.60 against 1.25 ulps; XLA:CPU 0.19 and 0.42)."""
    x = (np.random.default_rng(0).standard_normal(dims) + 1).astype(np.float32)
    text = _sum_module(dims, axes)
    windowed = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)(x)[0])
    monkeypatch.setattr(cpu_reduction_windows, "SUMS_IN_WINDOWS", False)
    sequence = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)(x)[0])
    assert 2 * _mean_ulps(windowed, x, axes) < _mean_ulps(sequence, x, axes)


@pytest.mark.parametrize("init, x_value, want", [
    ("5", 0.0, 5.0),  # the init joins once, not once per window (nor per slice: test_split_init.py)
    ("0", -0.0, 0.0),  # +0 + -0 ... = +0
    ("-0", -0.0, -0.0),  # -0 throughout: -0
    ("nan", 1.0, np.nan),
])
def test_init_joins_once(init, x_value, want):
    x = np.full((3000, 64), x_value, np.float32)
    (got,) = hlofuse.compile(hlofuse.parse_hlo(_sum_module((3000, 64), (0,), init=init)), "cpu", cache=False)(x)
    got = np.asarray(got)
    if np.isnan(want):
        assert np.isnan(got).all()
    else:
        np.testing.assert_array_equal(got, np.full(64, want, np.float32))
        assert (np.signbit(got) == np.signbit(np.float32(want))).all()


def test_f64_windowed_and_narrow_floats_not():
    """f64 sums are windowed like f32 ones (bit for bit the reference); an f16 sum is not (narrow
    floats follow XLA's tree of reduce-windows, which planning writes out)."""
    x = np.random.default_rng(2).standard_normal((2500, 40))
    (got,) = hlofuse.compile(hlofuse.parse_hlo(_sum_module((2500, 40), (0,), "f64")), "cpu", cache=False)(x)
    np.testing.assert_array_equal(np.asarray(got), windowed_sum(x))
    assert any("wlup.header" in ir for ir in _kernel_irs(_sum_module((2500, 40), (0,), "f64")))
    assert not any("wlup.header" in ir for ir in _kernel_irs(_sum_module((2500, 40), (0,), "f16")))


def _kernel_irs(text: str) -> list[str]:
    fused = optimize(hlofuse.parse_hlo(text), "cpu")[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    return [str(emit_kernel_module(k, CpuTarget(), k.name)) for k in code.kernels if k.group is not None]


def test_windowed_kernels_roll_their_reduced_loops_and_do_not_rotate(monkeypatch):
    """A sum over f32[64,8,8,64] (batch-norm statistics of 64 channels: one block, rows a whole
    number of vectors, which the rotation takes when the sums are not windowed) keeps its
    reduced loops rolled and the plain loops; with the windows off it rotates."""
    text = _sum_module((64, 8, 8, 64), (0, 1, 2))
    irs = _kernel_irs(text)
    assert irs and not any("rotate.header" in ir for ir in irs)
    assert any("wlup.header" in ir for ir in irs)
    for ir in irs:
        hints = loop_hint_names(ir)
        for loop in ("r0", "r1", "r2"):
            if loop in hints:
                assert "llvm.loop.unroll.disable" in hints[loop], (loop, hints)
    monkeypatch.setattr(cpu_reduction_windows, "SUMS_IN_WINDOWS", False)
    assert any("rotate.header" in ir for ir in _kernel_irs(text))
