"""The direct convolution's cold non-finite-weight path keeps its window loops rolled where a
window dimension is long and the loops inside run around more than cpu_conv._COLD_UNROLLED
features x inputs (a weight gradient's 14 x 14 "window" around 64 x 128, as in the flax MNIST
CNN step): LLVM unrolled that window loop around loops it could not unroll, 23% of the kernel's
LLVM time for code that runs only when a weight is inf or NaN. A 3 x 3 window and a long window
around fewer features x inputs keep LLVM's choice. That rule is the scalar feature loop's (the
kernel of feature_lanes None: FEATURE_VECTORS off here); feature-vector kernels keep every cold
loop rolled (tests/codegen/test_conv_features.py). Results (finite weights, and a NaN weight
that takes the cold path) equal the interpreter's, with feature vectors and without."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_outputs
from llvm_loops import loop_hint_names


@pytest.fixture(autouse=True)
def _direct_kernel(monkeypatch):
    """These tests are the direct kernel's: weight gradients of 64+ features with a deep
    contraction run as GEMMs by the rule (cpu_conv_gemm.MIN_WEIGHT_GRAD_FEATURES)."""
    from hlofuse.codegen.kernels import cpu_conv_features, cpu_conv_gemm

    monkeypatch.setattr(cpu_conv_gemm, "prefers_gemm", lambda conv: False)
    monkeypatch.setattr(cpu_conv_features, "FEATURE_VECTORS", False)


def _weight_gradient(inputs: int, features: int, batch: int = 4, window: int = 14) -> str:
    """The MNIST CNN step's weight-gradient convolution (conv_general_dilated.7) at `inputs`
    (its 128 images) and `features` (its 64 output features)."""
    return f"""HloModule wg
ENTRY e {{
  a = f32[{inputs},{window},{window},{batch}] parameter(0)
  g = f32[{inputs},{window},{window},{features}] parameter(1)
  ROOT c = f32[3,3,{batch},{features}] convolution(a, g), window={{size={window}x{window} pad=1_1x1_1}}, dim_labels=f01b_i01o->01bf
}}
"""


def _conv_ir(text: str) -> str:
    fused = hlofuse.compiler.optimize(parse_hlo(text), "cpu")[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    (kernel,) = [k for k in code.kernels if k.custom == "conv"]
    return str(emit_kernel_module(kernel, CpuTarget(), "k"))


def _cold_loops_rolled(ir_text: str) -> bool:
    hints = loop_hint_names(ir_text)
    if '"ftap.header"' in ir_text:  # rolled: one loop over every tap (cpu_conv_cold._fill_flat)
        assert '"f0.header"' not in ir_text
        return "llvm.loop.unroll.disable" in hints["ftap"]
    assert '"f0.header"' in ir_text and '"f1.header"' in ir_text, "no cold-path window loops"
    rolled = ["llvm.loop.unroll.disable" in hints.get(name, set()) for name in ("f0", "f1")]
    assert rolled[0] == rolled[1]
    return rolled[0]


def test_long_window_around_many_features_keeps_the_cold_path_rolled():
    assert _cold_loops_rolled(_conv_ir(_weight_gradient(128, 64)))


@pytest.mark.parametrize("text", [_weight_gradient(32, 64), _weight_gradient(128, 64, window=3)],
                         ids=["few-features-x-inputs", "short-window"])
def test_other_convolutions_keep_llvms_choice(text):
    assert not _cold_loops_rolled(_conv_ir(text))


@pytest.mark.parametrize("vectors", [False, True], ids=["scalar", "feature-vectors"])
@pytest.mark.parametrize("nonfinite", [False, True])
def test_rolled_cold_path_results(nonfinite, vectors, monkeypatch):
    from hlofuse.codegen.kernels import cpu_conv_features

    monkeypatch.setattr(cpu_conv_features, "FEATURE_VECTORS", vectors)
    text = _weight_gradient(128, 64)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 14, 14, 4)).astype(np.float32)
    g = rng.standard_normal((128, 14, 14, 64)).astype(np.float32)
    if nonfinite:
        g[3, 5, 6, 7] = np.nan  # the cold path adds 0 x NaN for the taps on padding
        g[100, 0, 13, 60] = np.inf
    exe = hlofuse.compile(parse_hlo(text), "cpu", cache=False)
    assert "conv" in [k.custom for k in exe.program._planner.kernels]
    got = exe(a, g)
    want = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(a, g)
    for r in compare_outputs(list(got), list(want)):
        assert r.ok, r
