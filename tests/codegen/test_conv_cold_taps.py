"""The direct convolution kernel's cold non-finite-weight path made less work for LLVM
(codegen/kernels/cpu_conv_cold.py): no cold path and no weight scan where no tap can fall off
the input, no in-bounds test along a window dimension whose taps all lie on it, and the rolled
cold path's window loops as one loop over every tap. Each changes only what LLVM is given:
results equal the interpreter's (with inf and NaN weights, which take the cold path) and the
bits of the kernel with both rules off (`KNOWN_INSIDE`, `FLAT_COLD_TAPS`)."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.cpu import emit_kernel_module
from hlofuse.codegen.kernels import cpu_conv, cpu_conv_cold, cpu_conv_features
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.runtime.compare import compare_outputs
from llvm_loops import loop_hint_names


def _conv(x: str, w: str, out: str, window: str, labels: str = "b01f_01io->b01f", extra: str = "") -> str:
    return f"""HloModule m
ENTRY e {{
  x = f32[{x}] parameter(0)
  w = f32[{w}] parameter(1)
  ROOT c = f32[{out}] convolution(x, w), window={{{window}}}, dim_labels={labels}{extra}
}}
"""


# name: (HLO text, input shape, weight shape)
CASES = {
    # 1x1: no tap off the input, no cold path
    "1x1 dense": (_conv("2,6,6,24", "1,1,24,16", "2,6,6,16", "size=1x1"), (2, 6, 6, 24), (1, 1, 24, 16)),
    # VALID 3x3 depthwise: no tap off the input
    "valid depthwise": (_conv("2,7,7,32", "3,3,1,32", "2,5,5,32", "size=3x3", extra=", feature_group_count=32"),
                        (2, 7, 7, 32), (3, 3, 1, 32)),
    # padded depthwise, all channels at once and in channel blocks (576 -> 96)
    "same depthwise 32": (_conv("2,6,6,32", "3,3,1,32", "2,6,6,32", "size=3x3 pad=1_1x1_1",
                                extra=", feature_group_count=32"), (2, 6, 6, 32), (3, 3, 1, 32)),
    "same depthwise 576": (_conv("1,5,5,576", "3,3,1,576", "1,5,5,576", "size=3x3 pad=1_1x1_1",
                                 extra=", feature_group_count=576"), (1, 5, 5, 576), (3, 3, 1, 576)),
    "depthwise one-sided": (_conv("2,6,8,32", "3,3,1,32", "2,6,6,32", "size=3x3 pad=1_1x0_0",
                                  extra=", feature_group_count=32"), (2, 6, 8, 32), (3, 3, 1, 32)),
    # keras's stride-2 layer: padded on the high side only
    "stride-2 depthwise": (_conv("1,9,9,48", "3,3,1,48", "1,4,4,48", "size=3x3 stride=2x2 pad=0_1x0_1",
                                 extra=", feature_group_count=48"), (1, 9, 9, 48), (3, 3, 1, 48)),
    # dense 3x3 (MNIST's stem: feature vectors), padding along one dimension only
    "dense one-sided": (_conv("2,8,8,1", "3,3,1,32", "2,8,6,32", "size=3x3 pad=1_1x0_0"), (2, 8, 8, 1), (3, 3, 1, 32)),
    "dense same": (_conv("2,8,8,3", "3,3,3,32", "2,8,8,32", "size=3x3 pad=1_1x1_1"), (2, 8, 8, 3), (3, 3, 3, 32)),
    # one spatial dimension
    "1-D dense": (_conv("2,10,8", "3,8,16", "2,10,16", "size=3 pad=1_1", labels="b0f_0io->b0f"),
                  (2, 10, 8), (3, 8, 16)),
    # lhs dilation: holes between input elements are never "inside"
    "lhs-dilated": (_conv("1,4,4,8", "3,3,8,8", "1,7,7,8", "size=3x3 pad=1_1x1_1 lhs_dilate=2x2"),
                    (1, 4, 4, 8), (3, 3, 8, 8)),
}


def _kernel_ir(text: str) -> str:
    (plan,) = cpu_conv.plan_conv(hlofuse.parse_hlo(text).entry, "k")
    return str(emit_kernel_module(plan, CpuTarget(), "k"))


def _run(text: str, x: np.ndarray, w: np.ndarray) -> list[np.ndarray]:
    exe = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)
    assert "conv" in [k.custom for k in exe.program._planner.kernels]
    return [np.asarray(v) for v in exe(x, w)]


def _rules_off(monkeypatch) -> None:
    monkeypatch.setattr(cpu_conv_cold, "KNOWN_INSIDE", False)
    monkeypatch.setattr(cpu_conv_cold, "FLAT_COLD_TAPS", False)


@pytest.mark.parametrize("vectors", [True, False], ids=["vectors", "scalar"])
@pytest.mark.parametrize("weights", ["finite", "nan", "inf"])
@pytest.mark.parametrize("name", list(CASES))
def test_same_values_and_bits(name, weights, vectors, monkeypatch):
    """The interpreter's values, and the bits of the kernel with both rules off (feature and
    channel vectors on, and the scalar loops LLVM vectorises)."""
    if not vectors:
        monkeypatch.setattr(cpu_conv_features, "FEATURE_VECTORS", False)
        monkeypatch.setattr(cpu_conv, "channel_lanes", lambda geo, target: None)
    text, xs, ws = CASES[name]
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    if weights != "finite":  # a corner tap: off the input at the border, where only the cold path adds it
        w[(0,) * (w.ndim - 1) + (ws[-1] - 1,)] = np.nan if weights == "nan" else np.inf
        w[(-1,) * (w.ndim - 1) + (0,)] = -np.inf if weights == "inf" else np.nan
    got = _run(text, x, w)
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(x, w)
    for r in compare_outputs(got, list(want)):
        assert r.ok, r
    _rules_off(monkeypatch)
    before = _run(text, x, w)
    for a, b in zip(got, before):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", ["1x1 dense", "valid depthwise"])
def test_no_cold_path_where_no_tap_is_off_the_input(name, monkeypatch):
    ir_text = _kernel_ir(CASES[name][0])
    assert "wscan" not in ir_text and "nonfinite" not in ir_text and "ftap" not in ir_text
    assert ".if" not in ir_text  # no in-bounds branch either
    _rules_off(monkeypatch)
    ir_text = _kernel_ir(CASES[name][0])
    assert "wscan" in ir_text and "nonfinite" in ir_text


def test_dimension_inside_gets_no_test(monkeypatch):
    """Padded along the first window dimension only: its taps are tested (a branch in k0's
    body), the second's are not (none in k1's), in the hot loops and the cold path."""
    ir_text = _kernel_ir(CASES["depthwise one-sided"][0])
    assert '"k0.body.if"' in ir_text and '"k1.body.if"' not in ir_text
    _rules_off(monkeypatch)
    before = _kernel_ir(CASES["depthwise one-sided"][0])
    assert '"k0.body.if"' in before and '"k1.body.if"' in before
    assert ir_text.count("icmp s") < before.count("icmp s")


@pytest.mark.parametrize("name", ["same depthwise 576", "dense same", "lhs-dilated", "1-D dense"])
def test_rolled_cold_path_is_one_loop_over_taps(name, monkeypatch):
    """One loop over the taps, for every blocked position at once (the dense kernels block
    POSITION_BLOCK positions: four loops before)."""
    ir_text = _kernel_ir(CASES[name][0])
    hints = loop_hint_names(ir_text)
    assert "llvm.loop.unroll.disable" in hints["ftap"]
    assert "f0" not in hints and "f1" not in hints
    # one per loop over positions of the last dimension (blocks, the remainder's singles, or a
    # row's positions: `rs`), or one where a work unit is one position (a 1-D convolution)
    last = len(CASES[name][1]) - 3
    lines = ir_text.splitlines()
    sites = sum(line.startswith((f"p{last}.header:", f"p{last}r.header:", "rs.header:")) for line in lines)
    assert sum(line.startswith("ftap.header") for line in lines) == max(sites, 1)
    _rules_off(monkeypatch)
    hints = loop_hint_names(_kernel_ir(CASES[name][0]))
    assert "ftap" not in hints and "llvm.loop.unroll.disable" in hints["f0"]
