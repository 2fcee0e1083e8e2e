"""Independent accumulators of row reductions (reduction_groups.row_accumulators): a
reassociating row reduction's innermost loop asks LLVM for `ROW_ACCUMULATORS` interleaved
vectors (fewer where the registers or the row do not hold them) and stays rolled, so after O3
it keeps that many vector accumulators per reduced value; an in-order reduction (bf16) gets no
hint. Results stay within the reduction tolerances of the interpreter (the oracle) and of
float64 numpy, for rows that fill the interleaved vectors and rows with a remainder."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
from hlofuse.codegen.kernels import reduction_groups
from hlofuse.codegen.kernels.reduction_groups import ROW_ACCUMULATORS, row_accumulators
from hlofuse.compiler import optimize
from hlofuse.emitters.cpu.target import CpuTarget, optimized_module
from hlofuse.runtime.compare import compare_outputs
from llvm_loops import loop_hint_names
from test_column_blocks import avx512_host  # noqa: F401 (a fixture)


def _row_sums(rows: int, cols: int, dtype: str = "f32", squares: bool = False) -> str:
    """Row sums of |x| (and, with `squares`, row sums of x*x from the same fusion)."""
    extra = (f"  xx = {dtype}[{rows},{cols}] multiply(x, x)\n"
             f"  ss = {dtype}[{rows}] reduce(xx, zero), dimensions={{1}}, to_apply=add\n") if squares else ""
    root = (f"  ROOT t = ({dtype}[{rows}], {dtype}[{rows}]) tuple(s, ss)\n" if squares
            else f"  ROOT t = {dtype}[{rows}] reduce(ax, zero), dimensions={{1}}, to_apply=add\n")
    first = f"  s = {dtype}[{rows}] reduce(ax, zero), dimensions={{1}}, to_apply=add\n" if squares else ""
    return f"""HloModule rowsum
add {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT s = {dtype}[] add(a, b)
}}
ENTRY main {{
  x = {dtype}[{rows},{cols}] parameter(0)
  zero = {dtype}[] constant(0)
  ax = {dtype}[{rows},{cols}] abs(x)
{first}{extra}{root}}}
"""


def _kernel_ir(text: str) -> str:
    fused = optimize(hlofuse.parse_hlo(text), "cpu")[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    (kernel,) = [k for k in code.kernels if k.group is not None]
    return str(emit_kernel_module(kernel, CpuTarget(), "k"))


def _lanes() -> int:
    return reduction_groups.lanes_of(CpuTarget().vector_width, 32)


def _vector_accumulators(ir_text: str) -> int:
    """Vector phis of the optimized kernel: the accumulators its vectorised loops carry."""
    text = str(optimized_module(ir_text))
    return len(re.findall(r"= phi (?:reassoc )?(?:\w+ )*<\d+ x float>", text))


def test_the_rule(avx512_host):
    """On an AVX-512 host: 16 of its 32 registers for accumulators."""
    assert row_accumulators(16, 1, 1024) == ROW_ACCUMULATORS == 8
    assert row_accumulators(16, 2, 1024) == 8  # sum and sum of squares: 16 registers
    assert row_accumulators(16, 3, 1024) == 4  # three reduced values: 12
    assert row_accumulators(16, 1, 64) == 4  # a row holds 4 vectors
    assert row_accumulators(8, 1, 64) == 8
    assert row_accumulators(16, 1, 32) == 2
    assert row_accumulators(16, 1, 31) == 1  # fewer than 2 vectors: LLVM's choice
    assert row_accumulators(16, 17, 1024) == 1


def test_the_rule_on_avx2(monkeypatch):
    """On an AVX2 host: 8 of its 16 registers, so two reduced values get 4 each."""
    monkeypatch.setattr(reduction_groups, "host_cpu", lambda: ("cpu", "+avx,+avx2,+fma"))
    reduction_groups.vector_registers.cache_clear()
    try:
        assert reduction_groups.row_accumulator_registers() == 8
        assert row_accumulators(8, 1, 1024) == ROW_ACCUMULATORS == 8
        assert row_accumulators(8, 2, 1024) == 4  # sum and sum of squares: 8 registers
        assert row_accumulators(8, 3, 1024) == 2  # three reduced values: 6
        assert row_accumulators(8, 1, 32) == 4  # a row holds 4 vectors
        assert row_accumulators(8, 5, 1024) == 1
    finally:
        reduction_groups.vector_registers.cache_clear()


@pytest.mark.parametrize("squares", [False, True])
def test_innermost_reduced_loop_is_interleaved_and_rolled(squares):
    values = 2 if squares else 1
    count = row_accumulators(_lanes(), values, 1024)  # this host's: 8, or 4 each of two on AVX2
    assert count == (8 if reduction_groups.vector_registers()[0] == 32 or not squares else 4)
    text = _kernel_ir(_row_sums(64, 1024, squares=squares))
    hints = loop_hint_names(text)
    assert {"llvm.loop.interleave.count", "llvm.loop.unroll.disable"} <= hints["r0"], hints
    assert re.search(rf'!"llvm.loop.interleave.count", i32 {count}\b', text)
    # After O3: `count` vector accumulators per reduced value (LLVM's own choice was 4, then
    # the row fully unrolled and its adds rebuilt into trees of LLVM's Reassociate pass).
    assert _vector_accumulators(text) == count * values


@pytest.mark.parametrize("squares", [False, True])
def test_without_the_hint_llvm_keeps_fewer_accumulators(monkeypatch, squares):
    """The check above can fail: with the rule switched off the kernel carries fewer (LLVM's
    own choice: 4 vectors a value). On the Zen 1 AVX2 host the rule's 4 each of two values is
    LLVM's count as well (8 against 8; the rule's gain there is the rolled loop): only the
    single sum (8 against 4) shows the difference."""
    values = 2 if squares else 1
    with_rule = values * row_accumulators(_lanes(), values, 1024)  # 8 or 16; 8 for both on AVX2
    monkeypatch.setattr(reduction_groups, "ROW_ACCUMULATORS", 1)
    text = _kernel_ir(_row_sums(64, 1024, squares=squares))
    assert "llvm.loop.interleave.count" not in text
    if squares and reduction_groups.vector_registers()[0] == 16:
        assert _vector_accumulators(text) <= with_rule
    else:
        assert _vector_accumulators(text) < with_rule


def test_in_order_reduction_gets_no_hint():
    """A bf16 sum rounds after every step in XLA's order: its loop is left alone."""
    text = _kernel_ir(_row_sums(8, 1024, dtype="bf16"))
    assert "llvm.loop.interleave.count" not in text


def test_expensive_elements_keep_llvms_choice():
    """A row of exp(x) is bound by the exp, not by memory: no hint (8 vectors of tanh and exp
    in flight ran slower)."""
    text = _row_sums(64, 1024).replace("abs(x)", "exponential(x)")
    assert "exponential" in text
    assert "llvm.loop.interleave.count" not in _kernel_ir(text)


def test_short_rows_ask_for_what_they_hold():
    lanes = _lanes()
    text = _kernel_ir(_row_sums(64, 4 * lanes))
    assert re.search(r'!"llvm.loop.interleave.count", i32 4', text)
    assert "llvm.loop.interleave.count" not in _kernel_ir(_row_sums(64, lanes))


@pytest.mark.parametrize("rows,cols", [(37, 1024), (16, 1000), (9, 1030), (33, 64), (5, 17), (3, 4096)])
@pytest.mark.parametrize("squares", [False, True])
def test_results_within_reduction_tolerance(rows, cols, squares):
    x = (np.random.default_rng(rows * cols).standard_normal((rows, cols)) * 3).astype(np.float32)
    text = _row_sums(rows, cols, squares=squares)
    got = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)(x)
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(x)
    for r in compare_outputs(list(got), list(want)):
        assert r.ok, r
    x64 = x.astype(np.float64)
    exact = [np.abs(x64).sum(1)] + ([(x64 * x64).sum(1)] if squares else [])
    for g, e in zip(got, exact):
        np.testing.assert_allclose(np.asarray(g, np.float64), e, rtol=2e-6 * np.sqrt(cols), atol=0)


def test_a_reduce_over_no_dimensions_compiles_and_agrees():
    """A reduce of a rank-0 operand over no dimensions (dimensions={}) has no row to interleave:
    the rule's row length read a reduced dimension that is not there (IndexError at compile)."""
    import hlofuse.compiler
    from hlofuse.hlo.parser import parse_hlo
    from hlofuse.runtime.interpreter import evaluate

    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[] parameter(0)
  z = f32[] constant(0)
  r = f32[] reduce(x, z), dimensions={}, to_apply=add
  ROOT m = f32[] multiply(r, x)
}
"""
    x = np.float32(1.5)
    got = hlofuse.compiler.compile(parse_hlo(text))(x)[0]
    assert float(got) == float(evaluate(parse_hlo(text), [x])[0]) == 2.25
