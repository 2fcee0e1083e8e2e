"""Column blocks of column reductions (ReductionGroup.block_columns): a unit's block of columns
is as wide as its accumulators fit the vector registers (column_accumulator_bytes(), half of it
for folds of several values per column), so two f32 sums of 512 columns run as four rolled
blocks of 128 instead of one block of 4 KiB of spilled, unrolled accumulators. Each column is
still folded in order, so the results are those of the interpreter, bit for bit where no split
reassociates, and within the reduction tolerance where one does."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import reduction_groups
from hlofuse.codegen.kernels.reduction_groups import COLUMN_BLOCK, column_accumulator_bytes, reduction_groups as groups_of
from hlofuse.runtime.compare import compare_outputs


def _column_module(dims: tuple[int, ...], values: int, dtype: str = "f32") -> str:
    """`values` (1-3) column reductions of x over every dimension but the last: sum, sum of
    squares, max."""
    shape = ",".join(map(str, dims))
    red = ",".join(map(str, range(len(dims) - 1)))
    c = dims[-1]
    lines = [f"  s0 = {dtype}[{c}] reduce(x, zero), dimensions={{{red}}}, to_apply=add"]
    if values >= 2:
        lines += [f"  xx = {dtype}[{shape}] multiply(x, x)",
                  f"  s1 = {dtype}[{c}] reduce(xx, zero), dimensions={{{red}}}, to_apply=add"]
    if values >= 3:
        lines += [f"  s2 = {dtype}[{c}] reduce(x, low), dimensions={{{red}}}, to_apply=max"]
    outs = ", ".join(f"s{k}" for k in range(values))
    types = ", ".join(f"{dtype}[{c}]" for _ in range(values))
    body = "\n".join(lines)
    return f"""HloModule columns
add {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT s = {dtype}[] add(a, b)
}}
max {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT s = {dtype}[] maximum(a, b)
}}
ENTRY main {{
  x = {dtype}[{shape}] parameter(0)
  zero = {dtype}[] constant(0)
  low = {dtype}[] constant(-inf)
{body}
  ROOT t = ({types}) tuple({outs})
}}
"""


def _group(text: str):
    fused = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False).fused_module
    found = [g for c in fused.computations for g in groups_of(c)[0]]
    assert len(found) == 1, found
    return found[0]


@pytest.fixture
def avx512_host(monkeypatch):
    """The budgets of an AVX-512 host (32 registers of 64 bytes), whatever host runs the test."""
    monkeypatch.setattr(reduction_groups, "host_cpu", lambda: ("cpu", "+avx,+avx2,+avx512f"))
    reduction_groups.vector_registers.cache_clear()
    yield
    reduction_groups.vector_registers.cache_clear()  # the real host's, asked again


@pytest.mark.parametrize("values,dtype,want", [
    (1, "f32", COLUMN_BLOCK),  # 512 f32: 2 KiB, the whole budget
    (1, "f64", 256),
    (2, "f32", 128),  # two values: half the budget, 1 KiB over 8 bytes a column
    (3, "f32", 64),
    (2, "f64", 64),
])
def test_block_width_rule(avx512_host, values, dtype, want):
    g = _group(_column_module((64, 1024), values, dtype))
    assert g.block_columns == want
    assert g.blocks == 1024 // want
    per_column = values * (8 if dtype == "f64" else 4)
    budget = column_accumulator_bytes() if values == 1 else column_accumulator_bytes() // 2
    assert want * per_column <= budget < 2 * want * per_column


@pytest.mark.parametrize("features,file_bytes,row_registers,two_f32_columns", [
    ("+avx,+avx2,+fma", 16 * 32, 8, 32),  # AVX2: 16 ymm registers of 32 bytes
    ("+avx,+avx2,+avx512f", 32 * 64, 16, 128),  # AVX-512: 32 zmm registers of 64 bytes
])
def test_budgets_follow_the_hosts_register_file(monkeypatch, features, file_bytes, row_registers, two_f32_columns):
    """The column and row budgets are the host's vector register file (all of it, half of it):
    an AVX2 host's accumulators must not be sized for AVX-512's 32 registers of 64 bytes."""
    g = _group(_column_module((64, 1024), 2))
    monkeypatch.setattr(reduction_groups, "host_cpu", lambda: ("cpu", features))
    reduction_groups.vector_registers.cache_clear()
    try:
        assert reduction_groups.column_accumulator_bytes() == file_bytes
        assert reduction_groups.row_accumulator_registers() == row_registers
        assert g.block_columns == two_f32_columns  # half the file over two f32 accumulators a column
    finally:
        reduction_groups.vector_registers.cache_clear()  # the real host's, asked again


def test_the_rule_can_fail(monkeypatch):
    """With a budget of 4 KiB (the kernels before the rule made 512-column blocks of any fold)."""
    monkeypatch.setattr(reduction_groups, "column_accumulator_bytes", lambda: 8192)
    assert _group(_column_module((64, 1024), 2)).block_columns == COLUMN_BLOCK


@pytest.mark.parametrize("dims", [(300, 300), (7, 9, 530), (2, 3, 1000), (40, 16)])
@pytest.mark.parametrize("values", [1, 2, 3])
def test_results_equal_the_interpreter(dims, values):
    """Columns spanning several blocks, a last block cut short, narrower than a block; small
    enough that no split reassociates: each column is folded in order, bit for bit."""
    x = np.random.default_rng(sum(dims) + values).standard_normal(dims).astype(np.float32)
    text = _column_module(dims, values)
    got = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)(x)
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(x)
    for r in compare_outputs(list(got), list(want)):
        assert r.ok, r


def test_split_wide_columns_within_tolerance():
    """Large enough to be split over slices of rows (planning's SPLIT_*): reassociated at the
    seams, within the reduction tolerance of the interpreter and of float64 numpy."""
    dims = (4096, 384)
    x = np.random.default_rng(5).standard_normal(dims).astype(np.float32)
    text = _column_module(dims, 2)
    got = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)(x)
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(x)
    for r in compare_outputs(list(got), list(want)):
        assert r.ok, r
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(np.asarray(got[0], np.float64), x64.sum(0), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(np.asarray(got[1], np.float64), (x64 * x64).sum(0), rtol=1e-5)
