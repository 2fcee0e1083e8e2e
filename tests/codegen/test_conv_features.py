"""Dense direct convolution kernels whose feature loop is emitted as vectors with accumulators
in registers (codegen/kernels/cpu_conv_features.py, issue 15): which convolutions take them
(`feature_lanes`), the pieces a row of features is cut into, the same bits as the scalar
feature loop LLVM vectorises (the summation order is unchanged) and results equal to the
interpreter's (padding read as +0 by select, inf and NaN weights on padded taps, lhs and window
dilation, groups, a channels-first layout, fused epilogues, f64), and the loops LLVM is left:
window loops rolled, no vectorizer copies."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import cpu_conv, cpu_conv_features
from hlofuse.codegen.kernels.cpu_conv_features import feature_lanes, feature_pieces
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_outputs
from llvm_loops import loop_hint_names

AVX512 = SimpleNamespace(vector_width=512, cpu_features="+avx2,+avx512f")
AVX2 = SimpleNamespace(vector_width=None, cpu_features="+avx2,-avx512f")


def _conv(x: str, w: str, out: str, window: str, labels: str = "b01f_01io->b01f", extra: str = "",
          dtype: str = "f32") -> str:
    return f"""HloModule c
ENTRY e {{
  x = {dtype}[{x}] parameter(0)
  w = {dtype}[{w}] parameter(1)
  ROOT c = {dtype}[{out}] convolution(x, w), window={{{window}}}, dim_labels={labels}{extra}
}}
"""


MNIST = _conv("2,28,28,1", "3,3,1,32", "2,28,28,32", "size=3x3 pad=1_1x1_1")
STEM = _conv("2,32,32,3", "7,7,3,64", "2,16,16,64", "size=7x7 stride=2x2 pad=3_3x3_3")


def _geometry(text: str):
    return cpu_conv.conv_geometry(parse_hlo(text).entry.root)


def test_pieces_cover_the_features_in_shrinking_powers_of_two():
    for count in range(1, 100):
        pieces = feature_pieces(count, 16)
        assert sum(w for _, w in pieces) == count
        assert [off for off, _ in pieces] == [sum(w for _, w in pieces[:i]) for i in range(len(pieces))]
        widths = [w for _, w in pieces]
        assert all(w & (w - 1) == 0 and w <= 16 for w in widths)
        assert all(a >= b for a, b in zip(widths, widths[1:]))
        assert all(w == 16 for w in widths[:count // 16])
    assert feature_pieces(24, 16) == [(0, 16), (16, 8)]
    assert feature_pieces(19, 16) == [(0, 16), (16, 2), (18, 1)]


def test_which_convolutions_take_feature_vectors():
    assert feature_lanes(_geometry(MNIST), AVX512) == 16
    assert feature_lanes(_geometry(STEM), AVX512) == 16
    # 96 features: 4 positions x 6 vectors = 24 registers of accumulators, 8 to spare of 32
    assert feature_lanes(_geometry(_conv("1,4,4,8", "1,1,8,96", "1,4,4,96", "size=1x1")), AVX512) == 16
    assert feature_lanes(_geometry(_conv("1,4,4,8", "1,1,8,112", "1,4,4,112", "size=1x1")), AVX512) is None
    assert feature_lanes(_geometry(MNIST), AVX2) is None  # 4 x 4 vectors of 8: more than 16 - 8
    assert feature_lanes(_geometry(_conv("1,8,8,2", "3,3,2,4", "1,8,8,4", "size=3x3 pad=1_1x1_1")), AVX2) == 8
    f64 = _conv("1,8,8,2", "3,3,2,16", "1,8,8,16", "size=3x3 pad=1_1x1_1", dtype="f64")
    assert feature_lanes(_geometry(f64), AVX512) == 8
    depthwise = _conv("1,8,8,32", "3,3,1,32", "1,8,8,32", "size=3x3 pad=1_1x1_1", extra=", feature_group_count=32")
    assert feature_lanes(_geometry(depthwise), AVX512) is None
    # output features not contiguous in the weights (jax's input gradients: 01oi)
    oi = _conv("1,8,8,4", "3,3,32,4", "1,8,8,32", "size=3x3 pad=1_1x1_1", labels="b01f_01oi->b01f")
    assert feature_lanes(_geometry(oi), AVX512) is None
    bf16 = _conv("1,8,8,4", "3,3,4,32", "1,8,8,32", "size=3x3 pad=1_1x1_1", dtype="bf16")
    assert feature_lanes(_geometry(bf16), AVX512) is None  # weights widened on load


EPILOGUE = """HloModule c
ENTRY e {{
  x = f32[{x}] parameter(0)
  w = f32[{w}] parameter(1)
  bias = f32[{o}] parameter(2)
  c = f32[{out}] convolution(x, w), window={{{window}}}, dim_labels=b01f_01io->b01f
  b = f32[{out}] broadcast(bias), dimensions={{3}}
  a = f32[{out}] add(c, b)
  zero = f32[] constant(0)
  six = f32[] constant(6)
  lo = f32[{out}] broadcast(zero), dimensions={{}}
  hi = f32[{out}] broadcast(six), dimensions={{}}
  ROOT r = f32[{out}] clamp(lo, a, hi)
}}
"""

CASES = {
    "mnist-3x3-1-32": MNIST,
    "stem-7x7s2-3-64": STEM,
    "keras-pad-s2-3-32": _conv("2,17,17,3", "3,3,3,32", "2,8,8,32", "size=3x3 stride=2x2 pad=0_1x0_1"),
    "inputs-loop-5-19": _conv("1,9,9,5", "3,3,5,19", "1,11,11,19", "size=3x3 pad=2_2x2_2"),
    "1x1-144-24": _conv("2,6,6,144", "1,1,144,24", "2,6,6,24", "size=1x1"),
    "1x1-7-96": _conv("1,5,7,7", "1,1,7,96", "1,5,7,96", "size=1x1"),
    "groups-2x24": _conv("1,7,7,6", "3,3,3,48", "1,7,7,48", "size=3x3 pad=1_1x1_1", extra=", feature_group_count=2"),
    "lhs-dilated": _conv("1,5,5,3", "3,3,3,16", "1,11,11,16", "size=3x3 pad=2_2x2_2 lhs_dilate=2x2"),
    "window-dilated": _conv("1,9,9,2", "3,3,2,16", "1,9,9,16", "size=3x3 pad=2_2x2_2 rhs_dilate=2x2"),
    "reversed": _conv("1,6,6,2", "3,3,2,16", "1,6,6,16", "size=3x3 pad=1_1x1_1 rhs_reversal=1x1"),
    "1d": _conv("2,13,3", "5,3,20", "2,13,20", "size=5 pad=2_2", labels="b0f_0io->b0f"),
    "nchw": _conv("2,3,9,9", "3,3,3,32", "2,32,9,9", "size=3x3 pad=1_1x1_1", labels="bf01_01io->bf01"),
    "negative-pad": _conv("1,9,9,2", "3,3,2,16", "1,5,5,16", "size=3x3 pad=-1_-1x-1_-1"),
    "f64": _conv("1,8,8,2", "3,3,2,16", "1,8,8,16", "size=3x3 pad=1_1x1_1", dtype="f64"),
    "epilogue": EPILOGUE.format(x="2,10,10,3", w="3,3,3,24", o=24, out="2,10,10,24", window="size=3x3 pad=1_1x1_1"),
}


def _inputs(text: str, nonfinite: bool) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    params = parse_hlo(text).entry.parameters
    args = [rng.standard_normal(p.shape.dims).astype(np.float64 if p.shape.dtype.name == "f64" else np.float32)
            for p in params]
    if nonfinite:  # weights on the padded taps: the sums they reach are NaN
        w = args[1].reshape(-1)
        w[0], w[w.size // 2], w[-1] = np.inf, np.nan, -np.inf
    return args


def _compile(text: str, vectors: bool, monkeypatch):
    monkeypatch.setattr(cpu_conv_features, "FEATURE_VECTORS", vectors)
    exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    assert [k.custom for k in exe.program._planner.kernels] == ["conv"]
    return exe


@pytest.fixture(autouse=True)
def _direct_kernel(monkeypatch):
    """The direct kernel for every case (the rules would give some to the GEMM kernel)."""
    from hlofuse.codegen.kernels import cpu_conv_gemm

    monkeypatch.setattr(cpu_conv_gemm, "prefers_gemm", lambda conv: False)


@pytest.mark.parametrize("nonfinite", [False, True], ids=["finite", "inf-nan-weights"])
@pytest.mark.parametrize("name", list(CASES))
def test_same_bits_as_the_scalar_loop_and_the_interpreters_results(name, nonfinite, monkeypatch):
    text = CASES[name]
    if name != "epilogue" and name != "groups-2x24":  # these run the scalar kernel's feature loop
        assert feature_lanes(_geometry(text), AVX512), name
    args = _inputs(text, nonfinite)
    vec = [np.asarray(r) for r in _compile(text, True, monkeypatch)(*args)]
    scalar = [np.asarray(r) for r in _compile(text, False, monkeypatch)(*args)]
    for v, s in zip(vec, scalar):
        assert v.tobytes() == s.tobytes() or (nonfinite and np.array_equal(v, s, equal_nan=True)), name
    if nonfinite:
        assert np.isnan(vec[0]).any()
    want = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(*args)
    for r in compare_outputs(vec, list(want)):
        assert r.ok, r


def _kernel_ir(text: str) -> str:
    from hlofuse.codegen.cpu import emit_kernel_module
    from hlofuse.emitters.cpu.target import CpuTarget

    (plan,) = cpu_conv.plan_conv(parse_hlo(text).entry, "k")
    return str(emit_kernel_module(plan, CpuTarget(), "k"))


def _vectors_here() -> bool:
    from hlofuse.emitters.cpu.target import CpuTarget

    return feature_lanes(_geometry(MNIST), CpuTarget()) is not None


@pytest.mark.skipif(not _vectors_here(), reason="needs a host where 32 features take feature vectors")
def test_llvm_gets_rolled_window_loops_and_nothing_to_vectorize():
    """The flax MNIST CNN's 3x3 1 -> 32: window rows rolled (unroll.disable), a row of 3 taps
    unrolled by count, the accumulation emitted in 16-lane vectors; after O3 no loop that LLVM's
    vectorizer built. (Its instructions after O3 are about the scalar kernel's, 557 against 538:
    what the vectors save is LLVM's work on the way there, docs/compile_time.md.)"""
    vec_ir = _kernel_ir(MNIST)
    hints = loop_hint_names(vec_ir)
    assert "llvm.loop.unroll.disable" in hints["k0"]
    assert "llvm.loop.unroll.count" in hints["k1"]
    assert "fadd <16 x float>" in vec_ir
    from hlofuse.emitters.cpu.target import optimized_module

    assert "llvm.loop.isvectorized" not in str(optimized_module(vec_ir, 3))


@pytest.mark.skipif(not _vectors_here(), reason="needs a host where 32 features take feature vectors")
def test_a_long_row_of_taps_stays_rolled():
    """A 7x7 stem's row: 4 positions x 4 vectors x 3 inputs x 7 taps = 336 vector
    multiply-adds, over UNROLLED_ROW_TERMS: no unroll count (ResNet-50's stem ran 1.12-1.16x
    slower with its rows unrolled)."""
    hints = loop_hint_names(_kernel_ir(STEM))
    assert "llvm.loop.unroll.disable" in hints["k0"] and "llvm.loop.unroll.disable" in hints["k1"]
    assert "llvm.loop.unroll.count" not in hints["k1"]
