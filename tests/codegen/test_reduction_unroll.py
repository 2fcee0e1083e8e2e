"""LLVM's size of column reduction kernels (issue 15): the reduced loops around a block of at
least `cpu_conv.ROLLED_AROUND` columns stay rolled (`llvm.loop.unroll.disable`, besides the
`llvm.loop.vectorize.enable` false they always had), so LLVM does not copy the vectorised
column loop once per reduced element; around fewer columns, or accumulators of 4 KiB or more
(cpu_reduction.rolls_reduced_loops), LLVM unrolls them as before. Claims
tested by loop hints and counts of LLVM instructions, not by time; results bit for bit those of
the unrolled kernel and equal to the interpreter's. Sums of more than 32 rows a unit fold in
windows (kernels/cpu_reduction_windows.py), whose reduced loops always stay rolled
(test_column_windows.py): the rule is tested here on sums folded in one sequence (`plain_sums`)."""
from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir

import hlofuse
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
from hlofuse.codegen.kernels import (cpu_conv, cpu_reduction, cpu_reduction_rotated, cpu_reduction_windows, loop_hints,
                                     reduced_loops, reduction_groups)
from hlofuse.compiler import optimize
from hlofuse.emitters import ir_helpers
from hlofuse.emitters.cpu import target as target_module
from hlofuse.emitters.cpu.target import CpuTarget, optimized_module
from hlofuse.runtime.compare import compare_outputs
from llvm_loops import AVX2_CPU, all_unrolled, instructions_after_o3, loop_hint_names
from test_column_blocks import avx512_host  # noqa: F401 (a fixture)


@pytest.fixture(autouse=True)
def plain_sums(monkeypatch):
    """Sums folded in one sequence, the kernels the unrolling rule shapes (module docstring)."""
    monkeypatch.setattr(cpu_reduction_windows, "SUMS_IN_WINDOWS", False)


def _column_sums(dims: tuple[int, ...]) -> str:
    """Sum and sum of squares of x over every dimension but the last (batch-norm statistics)."""
    shape = ",".join(map(str, dims))
    reduced = ",".join(map(str, range(len(dims) - 1)))
    c = dims[-1]
    return f"""HloModule colsum
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY main {{
  x = f32[{shape}] parameter(0)
  zero = f32[] constant(0)
  sq = f32[{shape}] multiply(x, x)
  s = f32[{c}] reduce(x, zero), dimensions={{{reduced}}}, to_apply=add
  ss = f32[{c}] reduce(sq, zero), dimensions={{{reduced}}}, to_apply=add
  ROOT t = (f32[{c}], f32[{c}]) tuple(s, ss)
}}
"""


def _reduction_ir(dims: tuple[int, ...]) -> str:
    return _reduction_ir_of(_column_sums(dims))


def _reduction_ir_of(text: str) -> str:
    fused = optimize(hlofuse.parse_hlo(text), "cpu")[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    kernel = [k for k in code.kernels if k.group is not None][0]  # a partial sums' first stage
    return str(emit_kernel_module(kernel, CpuTarget(), "k"))


def _avx2_host(monkeypatch) -> None:
    """An AVX2 host's kernels, whatever host runs the test: its register budgets
    (reduction_groups' features) and its vector width (the target's: LLVM's default, 8 f32
    lanes, where an AVX-512 host's kernels prefer 16). The caller clears
    `vector_registers`' cache afterwards."""
    monkeypatch.setattr(reduction_groups, "host_cpu", lambda: ("cpu", "+avx,+avx2,+fma"))
    monkeypatch.setattr(target_module, "preferred_vector_width", lambda features: None)
    reduction_groups.vector_registers.cache_clear()


def _all_unrolled(monkeypatch) -> None:
    all_unrolled(monkeypatch, cpu_reduction)
    all_unrolled(monkeypatch, reduced_loops)  # the nest over the reduced dimensions


def test_reduced_loops_around_many_columns_stay_rolled(avx512_host, monkeypatch):
    """On an AVX-512 host's column budget (avx512_host), where the two sums of 256 columns are
    blocks of 128 columns (ROLLED_AROUND); on an AVX2 host they are blocks of 32, whose loops
    LLVM unrolls (test_avx2_blocks_of_two_sums_are_left_to_llvm)."""
    dims = (16, 4, 4, 256)
    rolled_ir = _reduction_ir(dims)
    hints = loop_hint_names(rolled_ir)
    for loop in ("r0", "r1", "r2"):  # both hints on one loop ID: a loop has one
        assert hints[loop] == {"llvm.loop.unroll.disable", "llvm.loop.vectorize.enable"}, (loop, hints)
    _all_unrolled(monkeypatch)
    unrolled_ir = _reduction_ir(dims)
    assert all("llvm.loop.unroll.disable" not in h for h in loop_hint_names(unrolled_ir).values())
    rolled, unrolled = instructions_after_o3(rolled_ir), instructions_after_o3(unrolled_ir)
    # unrolled: the 4-long r2 loop (and more) around 16 vectors of 16 columns, copied whole
    assert rolled * 2 < unrolled, (rolled, unrolled)


def test_avx2_blocks_of_two_sums_are_left_to_llvm(monkeypatch):
    """An AVX2 host's 16 registers of 32 bytes hold 32 columns of two f32 sums (half of 512
    bytes), below ROLLED_AROUND: the reduced loops around them are LLVM's to unroll."""
    _avx2_host(monkeypatch)
    try:
        hints = loop_hint_names(_reduction_ir((16, 4, 4, 256)))
    finally:
        reduction_groups.vector_registers.cache_clear()
    assert all("llvm.loop.unroll.disable" not in hints[loop] for loop in ("r0", "r1", "r2")), hints


def test_avx2_one_sum_of_eight_vectors_stays_rolled(monkeypatch):
    """One f32 sum of 64 columns on an AVX2 host is eight vectors: its reduced loops stay
    rolled (haiku's 64-channel weight gradients: the 16-long loop around them was unrolled
    whole, 1,316 lines after O3), and the kernel is several times smaller after O3."""
    _avx2_host(monkeypatch)
    monkeypatch.setattr(cpu_reduction_rotated, "ROTATES_COLUMNS", False)
    text = """HloModule colsum
add { a = f32[] parameter(0) b = f32[] parameter(1) ROOT s = f32[] add(a, b) }
ENTRY main {
  x = f32[16,16,16,64] parameter(0)
  zero = f32[] constant(0)
  ROOT s = f32[64] reduce(x, zero), dimensions={0,1,2}, to_apply=add
}
"""
    try:
        rolled_ir = _reduction_ir_of(text)
        hints = loop_hint_names(rolled_ir)
        assert all("llvm.loop.unroll.disable" in hints[loop] for loop in ("r0", "r1", "r2")), hints
        _all_unrolled(monkeypatch)
        unrolled_ir = _reduction_ir_of(text)
    finally:
        reduction_groups.vector_registers.cache_clear()
    # counted as an AVX2 host compiles them (on an AVX-512 one, LLVM's 512-bit vectors make
    # the unrolled kernel a quarter of the size)
    rolled, unrolled = instructions_after_o3(rolled_ir, AVX2_CPU), instructions_after_o3(unrolled_ir, AVX2_CPU)
    assert rolled * 3 < unrolled, (rolled, unrolled)


@pytest.mark.parametrize("columns", [16, cpu_conv.ROLLED_AROUND // 2])
def test_reduced_loops_around_few_columns_or_many_accumulators_left_to_llvm(columns, monkeypatch):
    """Around fewer than ROLLED_AROUND columns LLVM unrolls. (Blocks of 4 KiB of accumulators,
    512 columns of two f32 sums, which ran faster unrolled, are no longer made: such a block is
    split into blocks that fit the registers, ReductionGroup.block_columns, test_column_blocks.)
    The plain kernel's loops: rotated, one block of 16 or 64 columns is one loop over rows
    (test_column_rotation)."""
    monkeypatch.setattr(cpu_reduction_rotated, "ROTATES_COLUMNS", False)
    hints = loop_hint_names(_reduction_ir((8, 4, 4, columns)))
    assert all("llvm.loop.unroll.disable" not in hints[loop] for loop in ("r0", "r1", "r2"))


def test_rolling_rule():
    class Hero:
        def __init__(self, *types):
            self.types = [hlofuse.hlo.dtypes.element_type(t) for t in types]

    f32, f64 = Hero("f32"), Hero("f64")
    for lanes in (16, 8):  # AVX-512 and AVX2 f32 vectors
        assert cpu_reduction.rolls_reduced_loops(256, [f32, f32], lanes)
        assert cpu_reduction.rolls_reduced_loops(512, [f32], lanes)
        assert not cpu_reduction.rolls_reduced_loops(512, [f32, f32], lanes)
        assert not cpu_reduction.rolls_reduced_loops(512, [f64], lanes)
    assert not cpu_reduction.rolls_reduced_loops(cpu_conv.ROLLED_AROUND - 1, [f32], 16)
    # eight vectors where they are fewer columns than ROLLED_AROUND: 64 f32 on AVX2
    assert cpu_reduction.rolls_reduced_loops(64, [f32], 8)
    assert not cpu_reduction.rolls_reduced_loops(63, [f32], 8)
    assert not cpu_reduction.rolls_reduced_loops(64, [f32], 16)


@pytest.mark.parametrize("dims", [(16, 4, 4, 256), (8, 3, 3, 1000), (2, 5, 640)])
def test_rolled_column_reduction_is_bit_exact(avx512_host, dims, monkeypatch):
    """Rolling changes no operation's order: the same bits as the unrolled kernel, and the
    interpreter's values. On AVX-512's column budget (blocks of 128 columns, rolled; an AVX2
    host's blocks of 32 are not)."""
    x = np.random.default_rng(3).standard_normal(dims).astype(np.float32)
    module = hlofuse.parse_hlo(_column_sums(dims))
    rolled = hlofuse.compile(module, "cpu", cache=False)(x)
    want = hlofuse.compile(hlofuse.parse_hlo(_column_sums(dims)), target="interpreter", fusion=False)(x)
    for r in compare_outputs(list(rolled), list(want)):
        assert r.ok, r
    _all_unrolled(monkeypatch)
    unrolled = hlofuse.compile(hlofuse.parse_hlo(_column_sums(dims)), "cpu", cache=False)(x)
    for a, b in zip(rolled, unrolled):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_hints_add_to_a_rolled_loop():
    """forbid_vectorization and interleave keep the hints a loop has (for_range's unroll
    disable): one loop ID with all of them, which LLVM verifies."""
    m = ir.Module("t")
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [ir.PointerType(ir.FloatType())]), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with ir_helpers.for_range(b, ir_helpers.const_i64(0), ir_helpers.const_i64(8), "a", unroll=False) as i:
        b.store(ir.Constant(ir.FloatType(), 1.0), b.gep(fn.args[0], [i]))
    loop_hints.forbid_vectorization(i)
    with ir_helpers.for_range(b, ir_helpers.const_i64(0), ir_helpers.const_i64(8), "c", unroll=False) as j:
        b.store(ir.Constant(ir.FloatType(), 2.0), b.gep(fn.args[0], [j]))
    loop_hints.interleave(j, 4)
    b.ret_void()
    text = str(m)
    hints = loop_hint_names(text)
    assert hints["a"] == {"llvm.loop.unroll.disable", "llvm.loop.vectorize.enable"}
    assert hints["c"] == {"llvm.loop.unroll.disable", "llvm.loop.interleave.count"}
    optimized_module(text)  # parses and verifies


def _row_sums(rows: int, n: int) -> str:
    """Sums of x * x over the last dimension of f32[rows, n]."""
    return f"""HloModule rowsum
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY main {{
  x = f32[{rows},{n}] parameter(0)
  e = f32[{rows},{n}] multiply(x, x)
  zero = f32[] constant(0)
  ROOT s = f32[{rows}] reduce(e, zero), dimensions={{1}}, to_apply=add
}}
"""


def _row_sums_ir(rows: int, n: int) -> str:
    fused = optimize(hlofuse.parse_hlo(_row_sums(rows, n)), "cpu")[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    kernel = [k for k in code.kernels if k.group is not None][0]  # a partial sums' first stage
    return str(emit_kernel_module(kernel, CpuTarget(), "k"))


def test_outputs_around_a_long_row_stay_rolled(monkeypatch):
    """The loop over outputs around a reduced loop of at least ROLLED_AROUND elements
    (loop_hints.stays_rolled): LLVM unrolled it at run time, a prologue copy and a second copy
    of the vectorised row; rolled, fewer instructions after O3 and the same bits."""
    rolled_ir = _row_sums_ir(64, 512)
    assert "llvm.loop.unroll.disable" in loop_hint_names(rolled_ir)["out"]
    assert "llvm.loop.unroll.disable" not in loop_hint_names(_row_sums_ir(64, 64)).get("out", set())
    x = np.random.default_rng(3).standard_normal((64, 512)).astype(np.float32)
    rolled = hlofuse.compile(hlofuse.parse_hlo(_row_sums(64, 512)), "cpu", cache=False)(x)
    monkeypatch.setattr(loop_hints, "ROLL_LONG_LOOPS", False)
    unrolled_ir = _row_sums_ir(64, 512)
    assert "llvm.loop.unroll.disable" not in loop_hint_names(unrolled_ir).get("out", set())
    # On the Zen 1 AVX2 host LLVM keeps the row's 8-lane vector loop a loop (8 vectors
    # interleaved: 64 elements a step) and leaves the loop around it alone either way: 72
    # instructions after O3 both, rows of 128 to 1024. With AVX-512's 16 lanes it unrolled the
    # loop over outputs around the row (the figures above).
    rolled_n, unrolled_n = instructions_after_o3(rolled_ir), instructions_after_o3(unrolled_ir)
    if reduction_groups.vector_registers()[1] == 64:
        assert rolled_n < unrolled_n, (rolled_n, unrolled_n)
    else:
        assert rolled_n <= unrolled_n, (rolled_n, unrolled_n)
    unrolled = hlofuse.compile(hlofuse.parse_hlo(_row_sums(64, 512)), "cpu", cache=False)(x)
    for a, b in zip(rolled, unrolled):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
