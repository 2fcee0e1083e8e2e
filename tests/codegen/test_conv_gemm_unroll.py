"""LLVM's size of tiled-GEMM convolution kernels (issue 15, cpu_conv_gemm_kernel.py): every
packing loop around another packing loop stays rolled (`llvm.loop.unroll.disable`), the
innermost is LLVM's; the epilogue's row loop stays rolled around at least `ROLLED_AROUND`
features, as in the GEMM kernel's epilogue. Claims tested by loop hints and counts of LLVM
instructions; results bit for bit the unrolled kernel's and equal to the interpreter's."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
from hlofuse.codegen.kernels import cpu_conv_gemm, cpu_conv_gemm_kernel
from hlofuse.compiler import optimize
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.runtime.compare import compare_outputs
from llvm_loops import all_unrolled, instructions_after_o3, loop_hint_names

ROLLED = "llvm.loop.unroll.disable"


@pytest.fixture(autouse=True)
def gemm_path(monkeypatch):
    """Every convolution here through the tiled-GEMM kernel (not oneDNN's, not the direct one)."""
    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)
    monkeypatch.setattr(cpu_conv_gemm, "prefers_gemm", lambda conv: True)


def _conv_relu(inputs: int, features: int, window: int) -> str:
    """relu of an NCHW x OIHW convolution written NHWC: the patch is packed input feature by
    input feature, then window rows, then window columns (the innermost loop), as in haiku's
    ResNet-18 gradients (16 inputs, a 2x2 window, 512 features)."""
    o = 10 - window
    return f"""HloModule c
ENTRY main {{
  x = f32[2,{inputs},9,9] parameter(0)
  w = f32[{features},{inputs},{window},{window}] parameter(1)
  c = f32[2,{o},{o},{features}] convolution(x, w), window={{size={window}x{window}}}, dim_labels=bf01_oi01->b01f
  z = f32[] constant(0)
  zb = f32[2,{o},{o},{features}] broadcast(z), dimensions={{}}
  ROOT y = f32[2,{o},{o},{features}] maximum(c, zb)
}}
"""


def _kernel_ir(text: str) -> str:
    fused = optimize(hlofuse.parse_hlo(text), "cpu")[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    (kernel,) = [k for k in code.kernels if k.custom == "conv_gemm"]
    return str(emit_kernel_module(kernel, CpuTarget(), "k"))


def test_packing_loops_around_others_stay_rolled(monkeypatch):
    rolled_ir = _kernel_ir(_conv_relu(16, 512, 2))
    hints = loop_hint_names(rolled_ir)
    assert all(ROLLED in hints[name] for name in ("prow", "pi", "pk0"))
    assert ROLLED not in hints.get("pk1", set())  # the innermost: LLVM's
    all_unrolled(monkeypatch, cpu_conv_gemm_kernel)
    unrolled_ir = _kernel_ir(_conv_relu(16, 512, 2))
    assert not any(ROLLED in h for h in loop_hint_names(unrolled_ir).values())
    rolled, unrolled = instructions_after_o3(rolled_ir), instructions_after_o3(unrolled_ir)
    if "+avx512f" in CpuTarget().cpu_features.split(","):
        assert rolled * 5 < unrolled * 3, (rolled, unrolled)  # 218 against 391 when written
    else:  # AVX2 (Zen 1): 345 against 518, LLVM unrolling less of the 8-lane packing anyway
        assert rolled * 4 < unrolled * 3, (rolled, unrolled)


@pytest.mark.parametrize("features, rolled", [(512, True), (32, False)])
def test_epilogue_rows_roll_around_long_feature_loops(features, rolled):
    hints = loop_hint_names(_kernel_ir(_conv_relu(16, features, 3)))
    assert (ROLLED in hints["erow"]) == rolled


@pytest.mark.parametrize("features", [512, 32])
def test_rolled_kernel_is_bit_exact(features, monkeypatch):
    text = _conv_relu(16, features, 2)
    module = hlofuse.parse_hlo(text)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    rolled = hlofuse.compile(module, "cpu", cache=False)
    assert "conv_gemm" in [k.custom for k in rolled.program._planner.kernels]
    got = rolled(*args)
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(*args)
    for r in compare_outputs(list(got), list(want)):
        assert r.ok, r
    all_unrolled(monkeypatch, cpu_conv_gemm_kernel)
    unrolled = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)(*args)
    for x, y in zip(got, unrolled):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
