"""LLVM's size of direct convolution kernels (issue 15): the window and input-feature loops
around a long feature loop stay rolled (`llvm.loop.unroll.disable`, emitters/ir_helpers.py
for_range), which keeps LLVM from unrolling them fully and vectorizing every copy; around a
short one LLVM unrolls them as before. Claims tested by counts of LLVM instructions and loop
hints, not by time; the kernels' results are tests/codegen/test_conv.py's."""
from __future__ import annotations

import re

import pytest
from llvmlite import ir

import hlofuse
from hlofuse.codegen.cpu import emit_kernel_module
from hlofuse.codegen.kernels import cpu_conv
from hlofuse.emitters import ir_helpers
from hlofuse.emitters.cpu.target import CpuTarget, optimized_module
from llvm_loops import all_unrolled, instructions_after_o3


def _conv_ir(features: int, in_features: int = 4) -> str:
    text = f"""HloModule c
ENTRY main {{
  x = f32[1,6,6,{in_features}] parameter(0)
  w = f32[3,3,{in_features},{features}] parameter(1)
  ROOT c = f32[1,6,6,{features}] convolution(x, w), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f
}}
"""
    comp = hlofuse.parse_hlo(text).entry
    (plan,) = cpu_conv.plan_conv(comp, "k")
    return str(emit_kernel_module(plan, CpuTarget(), "k"))


def _rolled(ir_text: str) -> set[str]:
    """Names of the loops whose latch carries a loop ID with llvm.loop.unroll.disable."""
    disable = set(re.findall(r'^!(\d+) = !\{ !"llvm\.loop\.unroll\.disable" \}', ir_text, re.M))
    ids = {i for i, ops in re.findall(r"^!(\d+) = !\{ !\1, (.*) \}", ir_text, re.M)
           if {o.strip().lstrip("!") for o in ops.split(",")} & disable}
    return {re.sub(r"\.\d+$", "", name) for name, i in re.findall(r'br label %"([\w.]+)\.header", !llvm\.loop !(\d+)',
                                                                    ir_text) if i in ids}


def _all_unrolled(monkeypatch) -> None:
    from hlofuse.codegen.kernels import cpu_conv_cold

    all_unrolled(monkeypatch, cpu_conv)
    all_unrolled(monkeypatch, cpu_conv_cold)  # the cold path's loops, nested as before
    monkeypatch.setattr(cpu_conv_cold, "FLAT_COLD_TAPS", False)


def test_long_feature_loops_keep_window_and_input_loops_rolled(monkeypatch):
    rolled_ir = _conv_ir(512)
    assert {"k0", "k1", "j"} <= _rolled(rolled_ir)
    _all_unrolled(monkeypatch)
    unrolled_ir = _conv_ir(512)
    assert _rolled(unrolled_ir) == set()
    rolled, unrolled = instructions_after_o3(rolled_ir), instructions_after_o3(unrolled_ir)
    # unrolled: 3x3 taps x 4 input features, each a vectorized 512-long loop (8,673 against
    # 2,264 instructions with LLVM 20)
    assert rolled * 3 < unrolled, (rolled, unrolled)


@pytest.mark.parametrize("features", [32, 64])
def test_short_feature_loops_leave_unrolling_to_llvm(features, monkeypatch):
    """Only the cold loops of non-finite weights (f*, ftap, fo, fj) are kept rolled: the scalar
    feature loop's rule (feature-vector kernels, cpu_conv_features.py, roll their window loops:
    tests/codegen/test_conv_features.py)."""
    from hlofuse.codegen.kernels import cpu_conv_features

    monkeypatch.setattr(cpu_conv_features, "FEATURE_VECTORS", False)
    assert _rolled(_conv_ir(features)) <= {"f0", "f1", "ftap", "fo", "fj"}
    assert {"k0", "k1", "j"}.isdisjoint(_rolled(_conv_ir(features)))


def test_for_range_unroll_false_keeps_the_loop():
    """Without the hint O3 unrolls a 3 x 5 nest fully (no phi left); with it on both loops a
    loop stays (the inner one may still be vectorized away): a self-referencing loop ID per
    loop, as LLVM requires, that it reads."""
    def nest(unroll: bool) -> str:
        m = ir.Module("t")
        fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [ir.PointerType(ir.DoubleType())]), "f")
        b = ir.IRBuilder(fn.append_basic_block("e"))
        with ir_helpers.for_range(b, ir.Constant(ir_helpers.I64, 0), ir.Constant(ir_helpers.I64, 3), "a",
                                  unroll=unroll) as i:
            with ir_helpers.for_range(b, ir.Constant(ir_helpers.I64, 0), ir.Constant(ir_helpers.I64, 5), "c",
                                      unroll=unroll) as j:
                p = b.gep(fn.args[0], [b.add(b.mul(i, ir.Constant(ir_helpers.I64, 7)), j)])
                b.store(b.fadd(b.load(p), ir.Constant(ir.DoubleType(), 1.0)), p)
        b.ret_void()
        return str(m)

    assert _rolled(nest(False)) == {"a", "c"} and _rolled(nest(True)) == set()
    assert " phi " not in str(optimized_module(nest(True)))
    assert str(optimized_module(nest(False))).count(" phi ") >= 1


# ---- depthwise kernels in channel blocks ------------------------------------------------------

def _depthwise(channels: int, size: int = 6) -> str:
    return f"""HloModule d
ENTRY main {{
  x = f32[2,{size},{size},{channels}] parameter(0)
  w = f32[3,3,1,{channels}] parameter(1)
  ROOT c = f32[2,{size},{size},{channels}] convolution(x, w), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f, feature_group_count={channels}
}}
"""


def _depthwise_ir(channels: int) -> str:
    (plan,) = cpu_conv.plan_conv(hlofuse.parse_hlo(_depthwise(channels)).entry, "k")
    return str(emit_kernel_module(plan, CpuTarget(), "k"))


def test_channel_block_rule():
    assert cpu_conv.channel_block(96) is None and cpu_conv.channel_block(128) is None  # fit at once
    assert [cpu_conv.channel_block(g) for g in (144, 192, 384, 576, 960)] == [48, 96, 128, 96, 96]
    assert cpu_conv.channel_block(130) is None  # no divisor that fills vectors: all at once


def test_depthwise_kernel_in_channel_blocks_is_smaller(monkeypatch):
    """576 channels: blocks of 96 under a rolled block loop, and the cold non-finite-weight
    path rolled, against all 576 (36 vectors of accumulators) with both unrolled. With the
    channel loop emitted as vectors (cpu_conv_vector.py) 588 against 1,089 instructions after
    O3 (with LLVM vectorising the scalar loop: 632 against 4,424)."""
    blocked_ir = _depthwise_ir(576)
    # ftap: the cold path's taps (cpu_conv_cold._fill_flat); fo: its vectors of channels
    assert {"cb", "ftap", "fo"} <= _rolled(blocked_ir)
    monkeypatch.setattr(cpu_conv, "channel_block", lambda groups, lanes=16: None)
    whole_ir = _depthwise_ir(576)
    assert "cb" not in _rolled(whole_ir)
    blocked, whole = instructions_after_o3(blocked_ir), instructions_after_o3(whole_ir)
    if "+avx512f" in CpuTarget().cpu_features.split(","):
        assert blocked * 3 < whole * 2, (blocked, whole)
    # On a 16-register AVX2 host (Zen 1) LLVM leaves the whole kernel's 72 vectors of
    # accumulators unrolled nowhere (404 instructions after O3 against the blocked 652): there
    # the blocks are for run time and LLVM's time (docs/convolutions.md, "Kernels on an AVX2
    # host"), not size, and only their rolled loops above are the claim.


@pytest.mark.parametrize("channels", [144, 576])
@pytest.mark.parametrize("nonfinite", [False, True], ids=["finite", "inf-weight"])
def test_depthwise_channel_blocks_bit_exact(channels, nonfinite, monkeypatch):
    """The same terms in the same order per output element: the bits of the unblocked kernel,
    the interpreter's values (an inf weight makes the padded taps' 0 * inf NaN in both)."""
    import numpy as np

    from hlofuse.runtime.compare import compare_outputs

    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 6, 6, channels)).astype(np.float32)
    w = rng.standard_normal((3, 3, 1, channels)).astype(np.float32)
    if nonfinite:
        w[0, 0, 0, channels - 5] = np.inf
    blocked = hlofuse.compile(hlofuse.parse_hlo(_depthwise(channels)), "cpu", cache=False)(x, w)
    want = hlofuse.compile(hlofuse.parse_hlo(_depthwise(channels)), target="interpreter", fusion=False)(x, w)
    for r in compare_outputs(list(blocked), list(want)):
        assert r.ok, r
    monkeypatch.setattr(cpu_conv, "channel_block", lambda groups, lanes=16: None)
    whole = hlofuse.compile(hlofuse.parse_hlo(_depthwise(channels)), "cpu", cache=False)(x, w)
    for a, b in zip(blocked, whole):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
