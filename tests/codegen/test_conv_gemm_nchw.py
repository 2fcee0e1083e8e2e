"""Channels-first (NCHW) convolutions on the tiled-GEMM kernel (codegen/kernels/cpu_conv_gemm.py):
the packed weights' K order follows the input's contiguous dimension, and weight gradients of a
few rows (equinox's, PyTorch's layouts: `fb01_io01->fb01`) take the GEMM kernel.

The fused epilogue loops along the output's contiguous dimension: an NCHW output's rows (its
positions), not its features, a whole plane apart (an equinox stem with bias and relu: 21.6 ->
3.0 ms, the convolution alone 2.9).

An NCHW input's feature dimension is not minor, so a patch row in the old window-major K order
(window..., IN) read one input element per input feature, a feature's stride apart (equinox's
CNN training step: its stem's weight gradient 117 of a 200 ms step); packed (IN, window..., O),
K is (IN, window...) and a patch row reads runs of the input's rows.
"""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
from hlofuse.codegen.kernels import cpu_conv_gemm, cpu_conv_gemm_kernel
from hlofuse.codegen.kernels.cpu_conv_gemm import IN, gemm_layout, prefers_gemm
from hlofuse.compiler import optimize
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_outputs
from llvm_loops import loop_hint_names

from test_conv import _module
from test_conv_gemm import check_gemm

WEIGHT_GRAD_NCHW = "dim_labels=fb01_io01->fb01"

# (lhs, rhs, window): NCHW weight gradients, the stem's (3 channels, 27 rows; 1 channel, 9 rows)
# and a deeper layer's (32 channels, 288 rows)
NCHW_WEIGHT_GRADIENTS = [
    ("f32[8,3,12,12]", "f32[8,16,12,12]", "window={size=12x12 pad=1_1x1_1}, "),
    ("f32[8,1,10,10]", "f32[8,32,10,10]", "window={size=10x10 pad=1_1x1_1}, "),
    ("f32[8,32,8,8]", "f32[8,16,8,8]", "window={size=8x8 pad=1_1x1_1}, "),
]


def _conv(lhs: str, rhs: str, attrs: str):
    return parse_hlo(_module(lhs, rhs, lhs.split("[")[0], attrs)).entry.root


@pytest.mark.parametrize("case", NCHW_WEIGHT_GRADIENTS)
def test_packed_weights_follow_the_input(monkeypatch, case):
    """io01 weights have no [K, O] matrix and are packed: for an input whose feature is not
    minor, as (I, window..., O), so K is input-feature-major; without the rule, window-major."""
    lhs, rhs, window = case
    conv = _conv(lhs, rhs, window + WEIGHT_GRAD_NCHW)
    assert gemm_layout(conv).k_order == (IN, 0, 1)
    monkeypatch.setattr(cpu_conv_gemm, "PACKED_K_FOLLOWS_INPUT", False)
    assert gemm_layout(conv).k_order == (0, 1, IN)


def test_nhwc_packed_weights_stay_window_major():
    """An NHWC input (feature minor) keeps window-major K for its packed weights (`0io1`)."""
    conv = _conv("f32[2,8,8,16]", "f32[3,16,32,3]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_0io1->b01f")
    assert gemm_layout(conv).k_order == (0, 1, IN)


@pytest.mark.parametrize("case", NCHW_WEIGHT_GRADIENTS)
def test_nchw_weight_gradients_through_gemm(monkeypatch, case):
    """Each runs through the packed-weights GEMM kernel (the rule's own choice, no patch): the
    interpreter's values, the same bits on 1, 2 and 3 threads."""
    lhs, rhs, window = case
    text = _module(lhs, rhs, "f32", window + WEIGHT_GRAD_NCHW)
    assert prefers_gemm(parse_hlo(text).entry.root)
    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)
    customs = check_gemm(text, threads=(1, 2, 3))
    assert customs == [None, "conv_gemm"]  # the packing loop kernel, then the GEMM


def test_rule_takes_few_rows_only_with_strided_weights():
    """Tiles of 8-31 rows take the GEMM kernel only where the direct kernel reads the weights'
    output features strided (`w_out != 1`): the NCHW stem's weight gradient (27 rows, 0.06x
    the direct kernel's time) and an input gradient over 16 positions (`01oi`, 0.58x); the NHWC
    stem's weight gradient (27 rows, output features contiguous) keeps the direct kernel, and
    fewer than 8 rows do too."""
    assert prefers_gemm(_conv("f32[64,3,32,32]", "f32[64,32,32,32]", "window={size=32x32 pad=1_1x1_1}, "
                              + WEIGHT_GRAD_NCHW))
    assert prefers_gemm(_conv("f32[1,4,4,64]", "f32[3,3,64,64]",
                              "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01oi->b01f"))
    assert not prefers_gemm(_conv("f32[64,32,32,3]", "f32[64,32,32,32]",
                                  "window={size=32x32 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf"))
    assert not prefers_gemm(_conv("f32[1,2,2,64]", "f32[3,3,64,64]",
                                  "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01oi->b01f"))


NCHW_STEMS = [
    # (lhs, rhs, attrs): a 3-channel 3x3 stem, a 7x7 stride-2 one, a 1-channel (MNIST) one
    ("f32[2,3,16,16]", "f32[16,3,3,3]", "window={size=3x3 pad=1_1x1_1}, "),
    ("f32[1,3,30,30]", "f32[8,3,7,7]", "window={size=7x7 stride=2x2 pad=3_3x3_3}, "),
    ("f32[4,1,12,12]", "f32[32,1,3,3]", "window={size=3x3 pad=1_1x1_1}, "),
]
NCHW_FORWARD = "dim_labels=bf01_oi01->bf01"


@pytest.mark.parametrize("case", NCHW_STEMS)
def test_nchw_stems_through_gemm(monkeypatch, case):
    """NCHW stems (1-3 input features, `oi01` weights whose output features are strided) take
    the GEMM kernel (0.24-0.76x the direct kernel's time): the interpreter's values, the same
    bits on 1 and 2 threads."""
    lhs, rhs, window = case
    text = _module(lhs, rhs, "f32", window + NCHW_FORWARD)
    assert prefers_gemm(parse_hlo(text).entry.root)
    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)
    assert check_gemm(text, threads=(1, 2)) == ["conv_gemm"]


def test_stem_rule_follows_the_weights_layout():
    """The same 3-channel stem keeps the direct kernel in NHWC (HWIO weights: output features
    contiguous, the direct kernel 1.3-1.6x faster than GEMM) and takes GEMM in NCHW; fewer
    than 8 output features keep the direct kernel either way."""
    nhwc = _conv("f32[4,32,32,3]", "f32[3,3,3,32]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f")
    nchw = _conv("f32[4,3,32,32]", "f32[32,3,3,3]", "window={size=3x3 pad=1_1x1_1}, " + NCHW_FORWARD)
    assert not prefers_gemm(nhwc) and prefers_gemm(nchw)
    assert not prefers_gemm(_conv("f32[4,3,32,32]", "f32[4,3,3,3]", "window={size=3x3 pad=1_1x1_1}, " + NCHW_FORWARD))


def _bias_relu(labels: str, x: str, w: str, out: str, bias_dim: int) -> str:
    return f"""HloModule c
ENTRY e {{
  x = {x} parameter(0)
  w = {w} parameter(1)
  bias = f32[32] parameter(2)
  c = {out} convolution(x, w), window={{size=3x3 pad=1_1x1_1}}, dim_labels={labels}
  bb = {out} broadcast(bias), dimensions={{{bias_dim}}}
  a = {out} add(c, bb)
  z = f32[] constant(0)
  zb = {out} broadcast(z), dimensions={{}}
  ROOT r = {out} maximum(a, zb)
}}
"""


NCHW_BIAS_RELU = _bias_relu("bf01_oi01->bf01", "f32[2,16,12,12]", "f32[32,16,3,3]", "f32[2,32,12,12]", 1)
NHWC_BIAS_RELU = _bias_relu("b01f_01io->b01f", "f32[2,12,12,16]", "f32[3,3,16,32]", "f32[2,12,12,32]", 3)


def _epilogue_loops(text: str) -> tuple[list[str], dict[str, set[str]]]:
    """The conv GEMM kernel's epilogue loops, outermost first, and every loop's hints."""
    fused = optimize(hlofuse.parse_hlo(text), "cpu")[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    (kernel,) = [k for k in code.kernels if k.custom == "conv_gemm"]
    ir_text = str(emit_kernel_module(kernel, CpuTarget(), "k"))
    order = [name for name in ("ecol", "erow") if f'"{name}.header"' in ir_text]
    order.sort(key=lambda name: ir_text.index(f'{name}.header:'))
    return order, loop_hint_names(ir_text)


@pytest.mark.parametrize("text, rows_inner", [(NCHW_BIAS_RELU, True), (NHWC_BIAS_RELU, False)])
def test_epilogue_loops_along_the_contiguous_dimension(monkeypatch, text, rows_inner):
    """An NCHW output's epilogue loops over features outside and rows inside (the rows are
    contiguous, the loop LLVM vectorizes; the feature loop is forbidden to), NHWC's the other
    way round; FEATURE_MAJOR_EPILOGUE off restores features inside for NCHW too. Both give the
    interpreter's values."""
    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)
    monkeypatch.setattr(cpu_conv_gemm, "prefers_gemm", lambda conv: True)
    order, hints = _epilogue_loops(text)
    assert order == (["ecol", "erow"] if rows_inner else ["erow", "ecol"])
    outer = order[0]
    assert "llvm.loop.vectorize.enable" in hints.get(outer, set())
    assert "llvm.loop.vectorize.enable" not in hints.get(order[1], set())
    module = parse_hlo(text)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    exe = hlofuse.compile(module, "cpu", cache=False)
    assert [k.custom for k in exe.program._planner.kernels] == ["conv_gemm"]  # the epilogue fused
    want = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(*args)
    assert all(r.ok for r in compare_outputs(list(exe(*args)), list(want)))
    monkeypatch.setattr(cpu_conv_gemm_kernel, "FEATURE_MAJOR_EPILOGUE", False)
    assert _epilogue_loops(text)[0] == ["erow", "ecol"]
