"""Dense direct convolutions on a target of 16 vector registers (AVX2; issue 15): how many
output positions a kernel blocks (`position_block`), that a 32- or 64-feature
kernel then takes feature vectors instead of the scalar feature loop LLVM unrolled and
vectorised (the MNIST CNN's 3x3 1 -> 32: 0.5 CPU-s of LLVM on a Zen 1), and results equal to
the scalar loop's bits and the interpreter's for blocks of 1 and 2 positions of 8-lane vectors,
on any host (the AVX2 view is made by patching the register count and vector width)."""
from __future__ import annotations

from types import SimpleNamespace

import llvmlite.binding as llvm
import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import cpu_conv, cpu_conv_features
from hlofuse.codegen.kernels.cpu_conv_features import feature_lanes, position_block
from hlofuse.emitters.cpu import target as cpu_target
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_outputs

AVX512 = SimpleNamespace(vector_width=512, cpu_features="+avx2,+avx512f")
AVX2 = SimpleNamespace(vector_width=None, cpu_features="+avx2,+fma,-avx512f")


def _conv(x: str, w: str, out: str, window: str, extra: str = "", epilogue: bool = False) -> str:
    o = out.split(",")[-1]
    if not epilogue:
        return f"""HloModule c
ENTRY e {{
  x = f32[{x}] parameter(0)
  w = f32[{w}] parameter(1)
  ROOT c = f32[{out}] convolution(x, w), window={{{window}}}, dim_labels=b01f_01io->b01f{extra}
}}
"""
    return f"""HloModule c
ENTRY e {{
  x = f32[{x}] parameter(0)
  w = f32[{w}] parameter(1)
  bias = f32[{o}] parameter(2)
  c = f32[{out}] convolution(x, w), window={{{window}}}, dim_labels=b01f_01io->b01f{extra}
  b = f32[{out}] broadcast(bias), dimensions={{3}}
  a = f32[{out}] add(c, b)
  zero = f32[] constant(0)
  lo = f32[{out}] broadcast(zero), dimensions={{}}
  ROOT r = f32[{out}] maximum(a, lo)
}}
"""


MNIST = _conv("2,28,28,1", "3,3,1,32", "2,28,28,32", "size=3x3 pad=1_1x1_1")


def _geometry(text: str):
    return cpu_conv.conv_geometry(parse_hlo(text).entry.root)


def _features(o: int) -> str:
    return _conv("1,4,4,8", f"1,1,8,{o}", f"1,4,4,{o}", "size=1x1")


WGRAD = """HloModule c
ENTRY e {
  x = f32[128,28,28,1] parameter(0)
  w = f32[128,28,28,32] parameter(1)
  ROOT c = f32[3,3,1,32] convolution(x, w), window={size=28x28 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf
}
"""


def test_position_block_follows_the_register_file_and_the_weights():
    assert position_block(_geometry(MNIST), AVX512) == cpu_conv_features.POSITION_BLOCK == 4
    assert position_block(_geometry(MNIST), AVX2) == cpu_conv_features.NARROW_POSITION_BLOCK == 1
    # 1x1 384 -> 64: 96 KiB of weights, in L2
    assert position_block(_geometry(_conv("1,4,4,384", "1,1,384,64", "1,4,4,64", "size=1x1")), AVX2) == 1
    # the MNIST CNN step's weight gradient: 12.8 MB of "weights" read again for every position
    assert position_block(_geometry(WGRAD), AVX2) == 4
    assert position_block(_geometry(WGRAD), AVX512) == 4


def test_one_avx2_position_takes_feature_vectors_up_to_112_features():
    # its pieces of 8 lanes and 2 spare registers within 16
    for o, lanes in ((32, 8), (64, 8), (96, 8), (112, 8), (120, None)):
        assert feature_lanes(_geometry(_features(o)), AVX2, 1) == lanes, o
    assert feature_lanes(_geometry(_features(32)), AVX2, 2) == 8  # 2 x (4 + 2) = 12
    assert feature_lanes(_geometry(_features(64)), AVX2, 2) is None  # 2 x (8 + 2) = 20
    assert feature_lanes(_geometry(MNIST), AVX2, 4) is None  # 4 x (4 + 2) > 16: the scalar loop before
    assert feature_lanes(_geometry(_features(96)), AVX512, 4) == 16  # 4 x (6 + 2) = 32, as before


def _instructions(mod: llvm.ModuleRef) -> int:
    return sum(1 for f in mod.functions for blk in f.blocks for _ in blk.instructions)


def test_the_mnist_stem_for_avx2_is_small_vector_code():
    """The flax MNIST CNN's 3x3 1 -> 32 emitted for a 16-register, 8-lane target: one position
    of 4 feature vectors. Before, its 4 positions' 16 accumulator vectors did not fit and the
    scalar loop was emitted: 619 instructions, 969 after O3 (LLVM 0.52 CPU-s on a Zen 1);
    now 258 and 358 (0.07 s)."""
    from hlofuse.codegen.cpu import emit_kernel_module

    t = cpu_target.CpuTarget()
    t.cpu_features, t.vector_width = AVX2.cpu_features, None
    (plan,) = cpu_conv.plan_conv(parse_hlo(MNIST).entry, "k")
    ir_text = str(emit_kernel_module(plan, t, "k"))
    assert "fadd <8 x float>" in ir_text
    assert _instructions(llvm.parse_assembly(ir_text)) < 400
    optimized = cpu_target.optimized_module(ir_text, 3)
    assert "llvm.loop.isvectorized" not in str(optimized)
    assert _instructions(optimized) < 600


CASES = {
    "mnist-3x3-1-32": MNIST,
    "keras-pad-s2-3-32": _conv("2,17,17,3", "3,3,3,32", "2,8,8,32", "size=3x3 stride=2x2 pad=0_1x0_1",
                               epilogue=True),
    "stem-7x7s2-3-64": _conv("1,20,20,3", "7,7,3,64", "1,10,10,64", "size=7x7 stride=2x2 pad=3_3x3_3"),
    "1x1-16-96": _conv("2,5,7,16", "1,1,16,96", "2,5,7,96", "size=1x1", epilogue=True),
    "3x3-5-24": _conv("1,9,9,5", "3,3,5,24", "1,11,11,24", "size=3x3 pad=2_2x2_2"),
    "groups-2x48": _conv("1,7,7,6", "3,3,3,96", "1,7,7,96", "size=3x3 pad=1_1x1_1", extra=", feature_group_count=2"),
    "width-3": _conv("1,5,3,4", "3,3,4,40", "1,5,3,40", "size=3x3 pad=1_1x1_1"),
}


@pytest.fixture
def avx2_view(monkeypatch):
    """Kernels compiled as for a 16-register host with 256-bit vectors, whatever this host is."""
    monkeypatch.setattr(cpu_target, "preferred_vector_width", lambda features: 256)
    monkeypatch.setattr(cpu_conv_features, "vector_registers", lambda target: 16)
    from hlofuse.codegen.kernels import cpu_conv_gemm

    monkeypatch.setattr(cpu_conv_gemm, "prefers_gemm", lambda conv: False)
    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)


def _run(text: str, args: list, vectors: bool, monkeypatch) -> list[np.ndarray]:
    monkeypatch.setattr(cpu_conv_features, "FEATURE_VECTORS", vectors)
    exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    assert [k.custom for k in exe.program._planner.kernels] == ["conv"]
    return [np.asarray(r) for r in exe(*args)]


# Two positions take feature vectors up to 48 features a group (2 x (6 + 2) = 16 registers):
# the 64- and 96-feature cases would run the scalar loop on both sides there.
BLOCKS = [(name, 1) for name in CASES] + [(name, 2) for name in CASES if name not in ("stem-7x7s2-3-64", "1x1-16-96")]


@pytest.mark.parametrize("name,most", BLOCKS, ids=[f"{n}-{m}-positions" for n, m in BLOCKS])
def test_avx2_blocks_give_the_scalar_loops_bits_and_the_interpreters_results(name, most, avx2_view, monkeypatch):
    """`most` positions a block, 8-lane vectors; inf and NaN weights at two positions (the cold
    path's taps on padding)."""
    monkeypatch.setattr(cpu_conv_features, "NARROW_POSITION_BLOCK", most)
    text = CASES[name]
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in parse_hlo(text).entry.parameters]
    nonfinite = most == 2
    if nonfinite:
        w = args[1].reshape(-1)
        w[0], w[-1] = np.inf, np.nan
    geo = cpu_conv.conv_geometry(cpu_conv.find_convolution(parse_hlo(text).entry))
    assert feature_lanes(geo, AVX2, most) == 8, name  # feature vectors against the scalar loop
    vec = _run(text, args, True, monkeypatch)
    scalar = _run(text, args, False, monkeypatch)
    for v, s in zip(vec, scalar):
        assert v.tobytes() == s.tobytes() or (nonfinite and np.array_equal(v, s, equal_nan=True)), name
    want = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(*args)
    for r in compare_outputs(vec, list(want)):
        assert r.ok, r
