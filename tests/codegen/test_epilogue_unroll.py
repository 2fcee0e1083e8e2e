"""LLVM's size of GEMM kernels' epilogues (issue 15): the row loop around a column panel of at
least `cpu_conv.ROLLED_AROUND` columns stays rolled (`llvm.loop.unroll.disable`, beside the
`llvm.loop.vectorize.enable` false it has), so LLVM does not repeat the vectorised column loop
once per row in one straight-line block (haiku's ResNet-18 step: a 16 x 512 divide, 2,072
instructions after O3); around a short panel LLVM unrolls it as before. Claims tested by loop
hints and counts of LLVM instructions; results bit for bit the unrolled kernel's and equal to
the interpreter's."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
from hlofuse.codegen.kernels import cpu_gemm, loop_hints
from hlofuse.compiler import optimize
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.runtime.compare import compare_outputs
from llvm_loops import all_unrolled, instructions_after_o3, loop_hint_names


def _scaled_dot(rows: int, cols: int, k: int = 10) -> str:
    """A [rows, k] x [cols, k]^T dot divided by 4 (haiku's fusion_354 for 16, 512)."""
    return f"""HloModule g
ENTRY main {{
  a = f32[{rows},{k}] parameter(0)
  b = f32[{cols},{k}] parameter(1)
  d = f32[{rows},{cols}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
  c = f32[] constant(4)
  cb = f32[{rows},{cols}] broadcast(c), dimensions={{}}
  ROOT q = f32[{rows},{cols}] divide(d, cb)
}}
"""


def _gemm_ir(rows: int, cols: int, k: int = 10) -> str:
    fused = optimize(hlofuse.parse_hlo(_scaled_dot(rows, cols, k)), "cpu")[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    (kernel,) = [k for k in code.kernels if k.custom == "gemm"]
    return str(emit_kernel_module(kernel, CpuTarget(), "k"))


def _all_unrolled(monkeypatch) -> None:
    all_unrolled(monkeypatch, cpu_gemm)


def test_epilogue_rows_around_a_long_panel_stay_rolled(monkeypatch):
    rolled_ir = _gemm_ir(16, 512)
    assert loop_hint_names(rolled_ir)["erow"] == {"llvm.loop.unroll.disable", "llvm.loop.vectorize.enable"}
    _all_unrolled(monkeypatch)
    unrolled_ir = _gemm_ir(16, 512)
    assert "llvm.loop.unroll.disable" not in loop_hint_names(unrolled_ir)["erow"]
    rolled, unrolled = instructions_after_o3(rolled_ir), instructions_after_o3(unrolled_ir)
    assert rolled * 3 < unrolled, (rolled, unrolled)


def test_epilogue_rows_around_a_short_panel_left_to_llvm():
    assert "llvm.loop.unroll.disable" not in loop_hint_names(_gemm_ir(256, 64, 64))["erow"]


@pytest.mark.parametrize("rows,cols", [(16, 512), (5, 300)])
def test_rolled_epilogue_is_bit_exact(rows, cols, monkeypatch):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((rows, 10)).astype(np.float32)
    b = rng.standard_normal((cols, 10)).astype(np.float32)
    rolled = hlofuse.compile(hlofuse.parse_hlo(_scaled_dot(rows, cols)), "cpu", cache=False)(a, b)
    want = hlofuse.compile(hlofuse.parse_hlo(_scaled_dot(rows, cols)), target="interpreter", fusion=False)(a, b)
    for r in compare_outputs(list(rolled), list(want)):
        assert r.ok, r
    _all_unrolled(monkeypatch)
    unrolled = hlofuse.compile(hlofuse.parse_hlo(_scaled_dot(rows, cols)), "cpu", cache=False)(a, b)
    for x, y in zip(rolled, unrolled):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_long_column_loop_stays_rolled(monkeypatch):
    """The column loop of a panel of at least ROLLED_AROUND columns (loop_hints.stays_rolled):
    LLVM vectorized it, interleaved 4 vectors and unrolled the constant trip count fully (GPT-2's
    512-column epilogues); rolled, with ROLLED_INTERLEAVE vectors an iteration, it is a third
    of the instructions after O3, and computes the same bits."""
    rolled_ir = _gemm_ir(16, 512)
    assert loop_hint_names(rolled_ir)["ecol"] == {"llvm.loop.unroll.disable", "llvm.loop.interleave.count"}
    assert f'"llvm.loop.interleave.count", i32 {loop_hints.ROLLED_INTERLEAVE}' in rolled_ir
    rng = np.random.default_rng(7)
    a = rng.standard_normal((16, 10)).astype(np.float32)
    b = rng.standard_normal((512, 10)).astype(np.float32)
    rolled = hlofuse.compile(hlofuse.parse_hlo(_scaled_dot(16, 512)), "cpu", cache=False)(a, b)
    monkeypatch.setattr(loop_hints, "ROLL_LONG_LOOPS", False)
    unrolled_ir = _gemm_ir(16, 512)
    assert "ecol" not in loop_hint_names(unrolled_ir)
    assert instructions_after_o3(rolled_ir) * 2 < instructions_after_o3(unrolled_ir)
    unrolled = hlofuse.compile(hlofuse.parse_hlo(_scaled_dot(16, 512)), "cpu", cache=False)(a, b)
    for x, y in zip(rolled, unrolled):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_short_column_loop_left_to_llvm():
    assert "ecol" not in loop_hint_names(_gemm_ir(256, 64, 64))
