"""LLVM's size of GEMM packing kernels (issue 15): a loop kernel writing a transpose that moves
its last dimension (each output row a strided copy, cpu_gemm.plan_gemm's packing of a dot
operand) keeps its loop over rows rolled (`llvm.loop.unroll.disable`, besides the
`llvm.loop.vectorize.enable` false it always had; loop_hints.rolls_transposed_rows): LLVM
unrolled each row fully and then runtime-unrolled the loop over rows around it. Claims tested
by loop hints and counts of LLVM instructions, not by time; results bit for bit those of the
kernel with the switch off, and equal to the interpreter's."""
from __future__ import annotations

import numpy as np

import hlofuse
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
from hlofuse.codegen.kernels import loop_hints
from hlofuse.compiler import optimize
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.runtime.compare import compare_outputs
from llvm_loops import instructions_after_o3, loop_hint_names

# Attention's probabilities times values as GPT-2's reach the output projection: x laid out
# [batch, heads, head size, sequence] contracted over (heads, head size) with w; BLAS needs x
# as [batch, sequence, heads x head size], so a packing kernel transposes it first (rows of 64
# read `sequence` elements apart).
_DOT = """HloModule packed_dot
ENTRY main {
  x = f32[2,4,64,32] parameter(0)
  w = f32[4,64,96] parameter(1)
  ROOT d = f32[2,32,96] dot(x, w), lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}
}
"""


def _packing_ir() -> str:
    fused = optimize(hlofuse.parse_hlo(_DOT), "cpu")[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    (kernel,) = [k for k in code.kernels if "pack" in k.name]
    assert kernel.custom is None and kernel.group is None  # a loop kernel
    return str(emit_kernel_module(kernel, CpuTarget(), "k"))


def test_packing_row_loop_stays_rolled(monkeypatch):
    rolled_ir = _packing_ir()
    assert loop_hint_names(rolled_ir)["row"] == {"llvm.loop.unroll.disable", "llvm.loop.vectorize.enable"}
    monkeypatch.setattr(loop_hints, "ROLL_TRANSPOSED_ROWS", False)
    unrolled_ir = _packing_ir()
    assert loop_hint_names(unrolled_ir)["row"] == {"llvm.loop.vectorize.enable"}
    rolled, unrolled = instructions_after_o3(rolled_ir), instructions_after_o3(unrolled_ir)
    if CpuTarget().vector_width == 512:
        assert rolled < unrolled, (rolled, unrolled)  # no runtime-unrolled copies of the row
    else:
        # On the Zen 1 AVX2 host LLVM makes no runtime-unrolled copies here either way: 232
        # against 232 instructions after O3 (rows of 8-64, sequences of 8-64: equal too).
        assert rolled <= unrolled, (rolled, unrolled)


def test_rolling_rule():
    def module(root: str) -> hlofuse.hlo.ir.HloInstruction:
        text = f"HloModule m\nENTRY main {{\n  x = f32[4,8,16] parameter(0)\n  {root}\n}}\n"
        return hlofuse.parse_hlo(text).entry.root

    assert loop_hints.rolls_transposed_rows(module("ROOT t = f32[16,4,8] transpose(x), dimensions={2,0,1}"))
    assert loop_hints.rolls_transposed_rows(module(
        "t = f32[4,16,8] transpose(x), dimensions={0,2,1}\n  ROOT c = f16[4,16,8] convert(t)"))
    # the last dimension stays: each row is a contiguous copy, LLVM vectorizes it
    assert not loop_hints.rolls_transposed_rows(module("ROOT t = f32[8,4,16] transpose(x), dimensions={1,0,2}"))
    assert not loop_hints.rolls_transposed_rows(module("ROOT n = f32[4,8,16] negate(x)"))


def test_rolled_packing_is_bit_exact(monkeypatch):
    """Rolling changes no operation: the same bits as with the switch off, and the
    interpreter's values."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 64, 32)).astype(np.float32)
    w = rng.standard_normal((4, 64, 96)).astype(np.float32)
    rolled = hlofuse.compile(hlofuse.parse_hlo(_DOT), "cpu", cache=False)(x, w)
    want = hlofuse.compile(hlofuse.parse_hlo(_DOT), target="interpreter", fusion=False)(x, w)
    for r in compare_outputs([rolled], [want]):
        assert r.ok, r
    monkeypatch.setattr(loop_hints, "ROLL_TRANSPOSED_ROWS", False)
    unrolled = hlofuse.compile(hlofuse.parse_hlo(_DOT), "cpu", cache=False)(x, w)
    np.testing.assert_array_equal(np.asarray(rolled), np.asarray(unrolled))
