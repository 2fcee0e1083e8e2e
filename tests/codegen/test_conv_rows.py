"""Depthwise kernels that run each channel block over a row of positions (cpu_conv.row_in_blocks):
the rule's shape classes, and the same bits as the position-by-position order and the
interpreter's values, with a fused epilogue, strides and padding, one to three spatial
dimensions and inf weights (0 * inf on the padding taps)."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import cpu_conv
from hlofuse.hlo.parser import parse_hlo

from backend_oracle import bits_equal


def _geometry(channels: int, size: int = 10, window: str = "3x3", spatial: int = 2):
    sp = ",".join([str(size)] * spatial)
    win = ",".join(["3"] * spatial)
    labels = {1: "b0f_0io->b0f", 2: "b01f_01io->b01f", 3: "b012f_012io->b012f"}[spatial]
    text = f"""HloModule g
ENTRY e {{
  x = f32[1,{sp},{channels}] parameter(0)
  w = f32[{win},1,{channels}] parameter(1)
  ROOT c = f32[1,{sp},{channels}] convolution(x, w), window={{size={window} pad={'x'.join(['1_1'] * spatial)}}}, dim_labels={labels}, feature_group_count={channels}
}}
"""
    return cpu_conv.conv_geometry(parse_hlo(text).entry.root)


def test_rule_takes_wide_channel_blocks_whose_patch_exceeds_l1():
    # 3x3 taps x C channels x (4 + 4) bytes against 32 KiB: MobileNetV2's 576 and 960 (41 and
    # 69 KiB) run in rows, its 384 (27 KiB), 192 and 144 per position
    assert cpu_conv.row_in_blocks(_geometry(576)) and cpu_conv.row_in_blocks(_geometry(960, size=5))
    assert not any(cpu_conv.row_in_blocks(_geometry(c)) for c in (144, 192, 384))
    assert cpu_conv.channel_block(500) is None and not cpu_conv.row_in_blocks(_geometry(500))  # all at once
    # a row whose accumulators exceed ROW_ACC_BYTES keeps the position order
    assert not cpu_conv.row_in_blocks(_geometry(960, size=20))  # 20 x 960 x 4 = 75 KiB


DEPTHWISE = """HloModule d
fused {{
  p0 = f32[{xs}] parameter(0)
  p1 = f32[{ws}] parameter(1)
  p2 = f32[{c}] parameter(2)
  c = f32[{os}] convolution(p0, p1), window={{{window}}}, dim_labels={labels}, feature_group_count={c}
  b = f32[{os}] broadcast(p2), dimensions={{{fdim}}}
  a = f32[{os}] add(c, b)
  zero = f32[] constant(0)
  six = f32[] constant(6)
  lo = f32[{os}] broadcast(zero), dimensions={{}}
  hi = f32[{os}] broadcast(six), dimensions={{}}
  ROOT r = f32[{os}] clamp(lo, a, hi)
}}
ENTRY e {{
  x = f32[{xs}] parameter(0)
  w = f32[{ws}] parameter(1)
  bias = f32[{c}] parameter(2)
  ROOT f = f32[{os}] fusion(x, w, bias), kind=kOutput, calls=fused
}}
"""

CASES = {  # name: (batch, input spatial, stride, channels)
    "2d s1": (2, (7, 9), 1, 576),
    "2d s2": (2, (9, 8), 2, 960),
    "1d": (3, (9,), 1, 1536),  # 3 taps x 1536 x 8 bytes = 36 KiB
    "3d": (1, (4, 5, 6), 1, 192),  # 27 taps x 192 x 8 bytes = 41 KiB
}


def _module(batch: int, spatial: tuple[int, ...], stride: int, c: int) -> str:
    n = len(spatial)
    out = tuple((s + 2 - 3) // stride + 1 for s in spatial)
    digits = "".join(str(i) for i in range(n))
    return DEPTHWISE.format(
        xs=",".join(map(str, (batch, *spatial, c))), ws=",".join(["3"] * n + ["1", str(c)]),
        os=",".join(map(str, (batch, *out, c))), c=c, fdim=n + 1,
        window=f"size={'x'.join(['3'] * n)} stride={'x'.join([str(stride)] * n)} pad={'x'.join(['1_1'] * n)}",
        labels=f"b{digits}f_{digits}io->b{digits}f")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("nonfinite", [False, True], ids=["finite", "inf-weight"])
def test_rows_give_the_position_order_bits(case, nonfinite, monkeypatch):
    text = _module(*CASES[case])
    module = parse_hlo(text)
    rng = np.random.default_rng(11)
    args = [rng.standard_normal(tuple(p.shape.dims)).astype(np.float32) for p in module.entry.parameters]
    if nonfinite:
        args[1].reshape(-1, args[1].shape[-1])[0, 5] = np.inf  # NaN where its taps fall on padding
    conv = next(i for i in module.computations if i.name == "fused").root.operands[1].operands[0]
    assert cpu_conv.row_in_blocks(cpu_conv.conv_geometry(conv))
    exe = hlofuse.compile(parse_hlo(text), "cpu", cache=False)
    assert [k.custom for k in exe.program._planner.kernels] == ["conv"]
    (rows,) = exe(*args)
    (want,) = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(*args)
    assert bits_equal(rows, want).all()
    if nonfinite:
        assert np.isnan(np.asarray(rows)).any()
    monkeypatch.setattr(cpu_conv, "L1_BYTES", 1 << 40)  # every position on its own
    (positions,) = hlofuse.compile(parse_hlo(text), "cpu", cache=False)(*args)
    assert bits_equal(positions, rows).all()
