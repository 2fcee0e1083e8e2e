"""Column reductions whose block of columns fills a vector register fold each column in order,
without reassociation (kernels/cpu_reduction.py `_reduction_target`), in windows of 32 rows
(kernels/cpu_reduction_windows.py; tests/support/windowed_sums.py writes the order again): LLVM
then vectorises across the columns. With reassociation it vectorised a fully unrolled 16- or 32-column block
along the reduced dimension instead (strided loads and a shuffle per column, 15-20x slower).
Narrower blocks keep reassociation, where packing reduced positions into a vector pays."""
from __future__ import annotations

import numpy as np
import pytest

from backend_cases import reduce_module
from windowed_sums import windowed_sum
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.cpu_executor import CpuProgram


def _program(dims, rdims) -> CpuProgram:
    prog = CpuProgram.compile(parse_hlo(reduce_module(dims, rdims)))
    assert [k.stage for k in prog._planner.kernels] == ["single"]  # one kernel, no split slices
    return prog


@pytest.mark.parametrize("columns", [16, 32, 96, 700])
def test_wide_column_blocks_fold_each_column_in_order(columns):
    """Bit for bit each column's float32 sum in windows of 32 rows (`windowed_sum`)."""
    rows = 100_000 // columns
    prog = _program((rows, columns), (0,))
    x = (np.random.default_rng(columns).standard_normal((rows, columns)) * 100).astype(np.float32)
    (got,) = prog.run([x])
    np.testing.assert_array_equal(got, windowed_sum(x))
    assert "fadd reassoc" not in prog.llvm_ir()


def test_leading_kept_dimensions_fold_in_order():
    """[a, r, c] reduced over r: each of the a x c columns in order, in windows."""
    dims = (3, 2000, 16)
    prog = _program(dims, (1,))
    x = (np.random.default_rng(5).standard_normal(dims) * 100).astype(np.float32)
    (got,) = prog.run([x])
    np.testing.assert_array_equal(got, np.stack([windowed_sum(x[a]) for a in range(dims[0])]))


def test_narrow_column_blocks_keep_reassociation():
    """Three columns (image channels): reassociated, summed to float32 rounding."""
    prog = _program((30_000, 3), (0,))
    assert "fadd reassoc" in prog.llvm_ir()
    x = np.random.default_rng(6).standard_normal((30_000, 3)).astype(np.float32)
    (got,) = prog.run([x])
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-3)
