"""Depthwise kernels' channel blocks counted in vectors of the host's f32 lanes (cpu_conv
`channel_block`, `block_lanes`; issue 15): at most 8 vectors, 128 channels with AVX-512 as
before and 64 with AVX2, where blocks of 96-128 channels were 12-16 vectors that LLVM unrolled
around the unrolled taps (MobileNetV2's 96-channel stride-2 kernel: 1,228 instructions after
O3, 0.24 s of LLVM on a Zen 1). The weight scan's loop stays rolled. Results equal the
16-lane blocks' bits and the interpreter's, on any host (8-lane vectors are asked of the
target by patching its vector width)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import cpu_conv
from hlofuse.emitters.cpu import target as cpu_target
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_outputs
from llvm_loops import instructions_after_o3, loop_hint_names


def _depthwise(channels: int, size: int, stride: int, pad: str) -> str:
    out = (size - 3 + sum(int(p) for p in pad.split("_"))) // stride + 1
    window = f"window={{size=3x3 stride={stride}x{stride} pad={pad}x{pad}}}"
    groups = f"feature_group_count={channels}"
    return f"""HloModule d
ENTRY main {{
  x = f32[2,{size},{size},{channels}] parameter(0)
  w = f32[3,3,1,{channels}] parameter(1)
  ROOT c = f32[2,{out},{out},{channels}] convolution(x, w), {window}, dim_labels=b01f_01io->b01f, {groups}
}}
"""


def test_channel_blocks_are_at_most_eight_vectors():
    assert cpu_conv.block_lanes(SimpleNamespace(vector_width=512)) == 16
    assert cpu_conv.block_lanes(SimpleNamespace(vector_width=None)) == 8
    # AVX2: MobileNetV2's 96-960 channels in blocks of 48 or 64, 64 channels at once
    assert [cpu_conv.channel_block(g, 8) for g in (96, 144, 192, 384, 576, 960)] == [48, 48, 64, 64, 64, 64]
    assert cpu_conv.channel_block(64, 8) is None and cpu_conv.channel_block(32, 8) is None
    # AVX-512: as before (16 lanes, at most 128 channels)
    assert [cpu_conv.channel_block(g, 16) for g in (96, 144, 192, 384, 576, 960)] == [None, 48, 96, 128, 96, 96]


def _avx2_ir(text: str) -> str:
    from hlofuse.codegen.cpu import emit_kernel_module

    t = cpu_target.CpuTarget()
    t.cpu_features, t.vector_width = "+avx2,+fma,-avx512f", None
    (plan,) = cpu_conv.plan_conv(parse_hlo(text).entry, "k")
    return str(emit_kernel_module(plan, t, "k"))


def test_avx2_depthwise_kernel_in_eight_vector_blocks_is_small():
    """96 channels, stride 2 with keras's padding (as MobileNetV2's 80x80 -> 40x40): two blocks
    of 6 vectors under a rolled block loop and the weight scan rolled: 477 instructions after
    O3 where all 96 at once (a 12-vector loop that LLVM unrolled) and the scan unrolled made
    1,016 (MobileNetV2's kernel: 694 against 1,228)."""
    text = _depthwise(96, 16, 2, "0_1")
    ir_text = _avx2_ir(text)
    hints = loop_hint_names(ir_text)
    assert "llvm.loop.unroll.disable" in hints["cb"] and "llvm.loop.unroll.disable" in hints["wscan"]
    assert "fadd <8 x float>" in ir_text
    assert instructions_after_o3(ir_text) < 700


@pytest.mark.parametrize("nonfinite", [False, True], ids=["finite", "inf-nan-weights"])
@pytest.mark.parametrize("channels,size,stride,pad", [(96, 9, 2, "0_1"), (192, 6, 1, "1_1"), (40, 5, 1, "1_1")])
def test_eight_lane_blocks_give_the_sixteen_lane_bits_and_the_interpreters_results(
        channels, size, stride, pad, nonfinite, monkeypatch):
    from hlofuse.codegen.kernels import cpu_conv_gemm

    monkeypatch.setattr(cpu_target, "preferred_vector_width", lambda features: 256)
    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)
    text = _depthwise(channels, size, stride, pad)
    rng = np.random.default_rng(7)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in parse_hlo(text).entry.parameters]
    if nonfinite:  # the padded taps' 0 * inf and 0 * NaN: NaN sums
        w = args[1].reshape(-1)
        w[1], w[-2] = np.inf, np.nan

    def run(lanes: int) -> np.ndarray:
        monkeypatch.setattr(cpu_conv, "block_lanes", lambda target: lanes)
        exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
        assert [k.custom for k in exe.program._planner.kernels] == ["conv"]
        return np.asarray(exe(*args)[0])

    eight, sixteen = run(8), run(16)
    assert eight.tobytes() == sixteen.tobytes() or (nonfinite and np.array_equal(eight, sixteen, equal_nan=True))
    if nonfinite:
        assert np.isnan(eight).any()
    want = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(*args)
    for r in compare_outputs([eight], list(want)):
        assert r.ok, r
