"""Plane-mode loop kernels walked flat with pattern buffers (codegen/kernels/plane_patterns.py).

An image-like loop kernel (last dimension <= 4) whose only column-dependent reads are
broadcasts along the plane's dimensions (a per-channel mean and std) walks each plane as one
flat loop and reads those broadcasts from buffers filled once per call: no interleaved
accesses, so the vectorized loop has no shuffle. Claims: which kernels qualify (and why the
others do not), the same bits as the row walk and as the interpreter (with and without
streaming stores, for several element types and a broadcast of a 2-D operand), and on the
optimized IR: the flat loop's accesses are whole vectors, with no shufflevector."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import cpu_row, plane_patterns
from hlofuse.hlo.parser import parse_hlo

NORMALIZE = """HloModule m
ENTRY e {{
  img = u8[{n},{h},{w},{c}] parameter(0)
  mean = f32[{c}] parameter(1)
  std = f32[{c}] parameter(2)
  f = f32[{n},{h},{w},{c}] convert(img)
  k = f32[] constant(0.00392156886)
  kb = f32[{n},{h},{w},{c}] broadcast(k), dimensions={{}}
  x = f32[{n},{h},{w},{c}] multiply(f, kb)
  mb = f32[{n},{h},{w},{c}] broadcast(mean), dimensions={{3}}
  d = f32[{n},{h},{w},{c}] subtract(x, mb)
  sb = f32[{n},{h},{w},{c}] broadcast(std), dimensions={{3}}
  ROOT r = f32[{n},{h},{w},{c}] divide(d, sb)
}}
"""


def _normalize(n: int, h: int, w: int, c: int) -> str:
    return NORMALIZE.format(n=n, h=h, w=w, c=c)


def _normalize_inputs(n, h, w, c, seed=0):
    r = np.random.default_rng(seed)
    return [r.integers(0, 256, (n, h, w, c), dtype=np.uint8), r.uniform(0.3, 0.6, c).astype(np.float32),
            r.uniform(0.2, 0.3, c).astype(np.float32)]


def _fusion_root(text: str):
    exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    fusions = [i for i in exe.fused_module.entry.instructions if i.opcode == "fusion"]
    assert len(fusions) == 1
    comp = fusions[0].called_computations()[0]
    return comp, comp.root


def _pattern_names(text: str):
    comp, root = _fusion_root(text)
    found = plane_patterns.pattern_broadcasts(comp, [root], tuple(root.shape.dims))
    return None if found is None else sorted(p.opcode for p in found)


def test_per_channel_broadcasts_become_patterns():
    assert _pattern_names(_normalize(64, 4, 8, 3)) == ["broadcast", "broadcast"]


OTHER_READS = {
    "a transpose reads across planes": """HloModule m
ENTRY e {
  x = f32[64,8,3] parameter(0)
  t = f32[64,3,8] parameter(1)
  tt = f32[64,8,3] transpose(t), dimensions={0,2,1}
  c = f32[3] parameter(2)
  cb = f32[64,8,3] broadcast(c), dimensions={2}
  a = f32[64,8,3] add(x, tt)
  ROOT r = f32[64,8,3] multiply(a, cb)
}
""",
    "a broadcast over an outer and a plane dimension": """HloModule m
ENTRY e {
  x = f32[64,8,3] parameter(0)
  c = f32[64,3] parameter(1)
  cb = f32[64,8,3] broadcast(c), dimensions={0,2}
  ROOT r = f32[64,8,3] multiply(x, cb)
}
""",
    "no broadcast along the plane: nothing to save": """HloModule m
ENTRY e {
  x = f32[64,8,3] parameter(0)
  s = f32[64] parameter(1)
  sb = f32[64,8,3] broadcast(s), dimensions={0}
  ROOT r = f32[64,8,3] multiply(x, sb)
}
""",
    "patterns over L1's share (a plane of 3 x 2000 f32 is 24 KB)": """HloModule m
ENTRY e {
  x = f32[64,2000,3] parameter(0)
  c = f32[3] parameter(1)
  cb = f32[64,2000,3] broadcast(c), dimensions={2}
  ROOT r = f32[64,2000,3] multiply(x, cb)
}
""",
}


@pytest.mark.parametrize("why", sorted(OTHER_READS))
def test_kernels_that_keep_the_row_walk(why):
    assert _pattern_names(OTHER_READS[why]) is None, why


def _both_walks(text: str, args: list, monkeypatch) -> tuple:
    monkeypatch.setattr(plane_patterns, "FLAT_PLANES", True)
    flat = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    monkeypatch.setattr(plane_patterns, "FLAT_PLANES", False)
    rows = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    want = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(*args)
    return flat, rows, want


def _assert_same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    np.testing.assert_array_equal(got.view(width), want.view(width))


@pytest.mark.parametrize("dims", [(64, 4, 8, 3), (70, 9, 3), (64, 33, 4), (66, 5, 7, 2), (64, 1, 224, 3)])
def test_normalize_has_the_row_walks_and_the_interpreters_bits(dims, monkeypatch):
    dims4 = dims if len(dims) == 4 else (1, *dims)
    text = _normalize(*dims4)
    args = _normalize_inputs(*dims4, seed=sum(dims))
    flat, rows, want = _both_walks(text, args, monkeypatch)
    _assert_same_bits(flat(*args)[0], want[0])
    _assert_same_bits(rows(*args)[0], want[0])


def test_streamed_planes_have_the_interpreters_bits(monkeypatch):
    # an L3 of 64 KiB: the kernel moves more, so its planes go out with streaming stores
    monkeypatch.setattr(cpu_row, "l3_cache_bytes", lambda: 64 << 10)
    text = _normalize(64, 8, 16, 4)  # planes of 8 x 16 x 4 f32: whole 64-byte vectors
    args = _normalize_inputs(64, 8, 16, 4, seed=3)
    flat, rows, want = _both_walks(text, args, monkeypatch)
    assert "!nontemporal" in flat.program.llvm_ir()
    _assert_same_bits(flat(*args)[0], want[0])
    _assert_same_bits(rows(*args)[0], want[0])


TYPED = """HloModule m
ENTRY e {
  x = T[64,12,3] parameter(0)
  bias = T[12,3] parameter(1)
  keep = pred[3] parameter(2)
  y = T[64,12,3] parameter(3)
  bb = T[64,12,3] broadcast(bias), dimensions={1,2}
  kb = pred[64,12,3] broadcast(keep), dimensions={2}
  a = T[64,12,3] add(x, bb)
  ROOT r = T[64,12,3] select(kb, a, y)
}
"""


@pytest.mark.parametrize("t,dtype", [("f32", np.float32), ("f16", np.float16), ("bf16", ml_dtypes.bfloat16),
                                     ("s32", np.int32), ("f64", np.float64)])
def test_patterns_of_each_type_and_of_a_2d_operand(t, dtype, monkeypatch):
    text = TYPED.replace("T[", f"{t}[")
    assert _pattern_names(text) == ["broadcast", "broadcast"]
    r = np.random.default_rng(7)
    args = [(r.standard_normal((64, 12, 3)) * 50).astype(dtype), (r.standard_normal((12, 3)) * 50).astype(dtype),
            np.array([True, False, True]), (r.standard_normal((64, 12, 3)) * 50).astype(dtype)]
    flat, rows, want = _both_walks(text, args, monkeypatch)
    _assert_same_bits(flat(*args)[0], want[0])
    _assert_same_bits(rows(*args)[0], want[0])


def test_the_flat_walk_vectorizes_without_shuffles(monkeypatch):
    monkeypatch.setattr(plane_patterns, "FLAT_PLANES", True)
    exe = hlofuse.compile(parse_hlo(_normalize(96, 4, 224, 3)), target="cpu", cache=False)
    ir_text = exe.program.llvm_ir()
    loop = ir_text[ir_text.index("fdiv <"):]  # from the vectorized divide on
    assert re.search(r"fdiv <(8|16) x float>", ir_text)
    assert "shufflevector" not in loop[:loop.index("br ")]
    monkeypatch.setattr(plane_patterns, "FLAT_PLANES", False)
    rows = hlofuse.compile(parse_hlo(_normalize(96, 4, 224, 3)), target="cpu", cache=False).program.llvm_ir()
    assert "shufflevector" in rows  # the row walk's interleaved groups, which the flat walk saves
