"""Depthwise kernels whose channel loop is emitted as vectors (cpu_conv_vector.py): which
convolutions take them (`channel_lanes`), the same bits as the scalar loop that LLVM
vectorises and as the interpreter (MobileNetV2's channel counts, channel blocks and rows, a
scalar remainder, stride 2, f64, a fused bias + relu6, inf weights on the padded taps), and
no loop left for LLVM's vectorizer in the accumulation."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.cpu import emit_kernel_module
from hlofuse.codegen.kernels import cpu_conv
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.hlo.parser import parse_hlo

from backend_oracle import bits_equal

MODULE = """HloModule d
fused {{
  p0 = {t}[{xs}] parameter(0)
  p1 = {t}[{ws}] parameter(1)
  p2 = {t}[{c}] parameter(2)
  c = {t}[{os}] convolution(p0, p1), window={{size=3x3 stride={s}x{s} pad={pad}x{pad}}}, dim_labels=b01f_01io->b01f, feature_group_count={c}
  b = {t}[{os}] broadcast(p2), dimensions={{3}}
  a = {t}[{os}] add(c, b)
  zero = {t}[] constant(0)
  six = {t}[] constant(6)
  lo = {t}[{os}] broadcast(zero), dimensions={{}}
  hi = {t}[{os}] broadcast(six), dimensions={{}}
  ROOT r = {t}[{os}] clamp(lo, a, hi)
}}
ENTRY e {{
  x = {t}[{xs}] parameter(0)
  w = {t}[{ws}] parameter(1)
  bias = {t}[{c}] parameter(2)
  ROOT f = {t}[{os}] fusion(x, w, bias), kind=kOutput, calls=fused
}}
"""


def _module(channels: int, size: int = 7, stride: int = 1, dtype: str = "f32", batch: int = 2) -> str:
    pad = "1_1" if stride == 1 else "0_1"  # keras's ZeroPadding2D before a stride-2 layer
    out = size if stride == 1 else size // 2
    return MODULE.format(t=dtype, c=channels, s=stride, pad=pad, xs=f"{batch},{size},{size},{channels}",
                         ws=f"3,3,1,{channels}", os=f"{batch},{out},{out},{channels}")


def _geometry(text: str):
    module = parse_hlo(text)
    conv = next(c for c in module.computations if c.name == "fused").root.operands[1].operands[0]
    return cpu_conv.conv_geometry(conv)


def test_which_convolutions_take_vectors():
    target = CpuTarget()
    lanes = (target.vector_width or 256) // 32
    assert cpu_conv.channel_lanes(_geometry(_module(144)), target) == lanes
    assert cpu_conv.channel_lanes(_geometry(_module(144, dtype="f64")), target) == lanes // 2
    assert cpu_conv.channel_lanes(_geometry(_module(lanes - 1)), target) is None  # not one vector
    assert cpu_conv.channel_lanes(_geometry(_module(96, dtype="bf16")), target) is None  # widened on load
    dense = parse_hlo("""HloModule c
ENTRY e {
  x = f32[1,6,6,32] parameter(0)
  w = f32[3,3,32,32] parameter(1)
  ROOT c = f32[1,6,6,32] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}
""").entry.root
    assert cpu_conv.channel_lanes(cpu_conv.conv_geometry(dense), target) is None


CASES = {  # name: (channels, size, stride, dtype)
    "32": (32, 9, 1, "f32"),  # all channels at once (MobileNetV2's first depthwise layer)
    "96 s2": (96, 8, 2, "f32"),
    "144 blocks": (144, 7, 1, "f32"),  # channel blocks of 48
    "576 rows": (576, 7, 1, "f32"),  # blocks of 96 over a row of positions
    "960 rows s2": (960, 6, 2, "f32"),
    "20 remainder": (20, 7, 1, "f32"),  # a vector and 4 scalar channels
    "17 remainder": (17, 6, 2, "f32"),  # a vector and one scalar channel
    "f64 144": (144, 5, 1, "f64"),
    "f64 200": (200, 5, 1, "f64"),  # no channel block divides 200: all at once, 8 scalar
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("nonfinite", [False, True], ids=["finite", "inf-weight"])
def test_vectors_give_the_scalar_loops_bits(case, nonfinite, monkeypatch):
    channels, size, stride, dtype = CASES[case]
    text = _module(channels, size, stride, dtype)
    assert cpu_conv.channel_lanes(_geometry(text), CpuTarget())
    rng = np.random.default_rng(5)
    np_type = np.float64 if dtype == "f64" else np.float32
    args = [rng.standard_normal(tuple(p.shape.dims)).astype(np_type) for p in parse_hlo(text).entry.parameters]
    if nonfinite:
        args[1][2, 2, 0, channels - 3] = np.inf  # NaN where that tap falls on the high padding
    exe = hlofuse.compile(parse_hlo(text), "cpu", cache=False)
    assert [k.custom for k in exe.program._planner.kernels] == ["conv"]
    (got,) = exe(*args)
    (want,) = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(*args)
    assert bits_equal(got, want).all()
    if nonfinite:
        assert np.isnan(np.asarray(got)).any()
    monkeypatch.setattr(cpu_conv, "channel_lanes", lambda geo, target: None)  # the scalar loops
    (scalar,) = hlofuse.compile(parse_hlo(text), "cpu", cache=False)(*args)
    assert bits_equal(got, scalar).all()


def test_accumulation_leaves_the_vectorizer_nothing():
    """Every loop the vectorised channel loop emits carries llvm.loop.vectorize.enable false,
    and after O3 the kernel has no loop that LLVM vectorised (no 'vector.body' block)."""
    from hlofuse.emitters.cpu.target import optimized_module

    text = _module(144)
    (plan,) = cpu_conv.plan_conv(next(c for c in parse_hlo(text).computations if c.name == "fused"), "k")
    ir_text = str(emit_kernel_module(plan, CpuTarget(), "k"))
    lanes = cpu_conv.channel_lanes(_geometry(text), CpuTarget())
    assert "llvm.loop.vectorize.enable" in ir_text and f"<{lanes} x float>" in ir_text
    assert "vector.body" not in str(optimized_module(ir_text))
