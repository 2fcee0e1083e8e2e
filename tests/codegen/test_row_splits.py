"""Rows split where a concatenate or a pad changes side (codegen/kernels/row_splits.py): the
pieces found, the values of every split kernel against the interpreter (plain and streamed
rows), and the claim the split is for: the rotary embedding of Llama-style attention (rotate
half by a concatenate of negated slices, cos and sin of a concatenated angle table) vectorizes
without gathers."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import cpu_loop, cpu_row, row_splits
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.interpreter import evaluate

# keras_hub's Llama rotary embedding (one of its four kernels, f32[2,16,4,64]): x * cos(t) +
# rotate_half(x) * sin(t), t the [16, 32] angle table concatenated with itself.
ROPE = """HloModule rope
ENTRY e {
  x = f32[B,16,4,64] parameter(0)
  a = f32[1,16,32] parameter(1)
  s24 = f32[1,16,1,32] reshape(a)
  s26 = f32[1,16,2,32] concatenate(s24, s24), dimensions={2}
  cos = f32[1,16,2,32] cosine(s26)
  c2 = f32[16,64] reshape(cos)
  cb = f32[B,16,4,64] broadcast(c2), dimensions={1,3}
  xc = f32[B,16,4,64] multiply(x, cb)
  hi = f32[B,16,4,32] slice(x), slice={[0:B], [0:16], [0:4], [32:64]}
  neg = f32[B,16,4,32] negate(hi)
  s27 = f32[B,16,4,1,32] reshape(neg)
  lo = f32[B,16,4,32] slice(x), slice={[0:B], [0:16], [0:4], [0:32]}
  s28 = f32[B,16,4,1,32] reshape(lo)
  s29 = f32[B,16,4,2,32] concatenate(s27, s28), dimensions={3}
  rot = f32[B,16,4,64] reshape(s29)
  sin = f32[1,16,2,32] sine(s26)
  s2 = f32[16,64] reshape(sin)
  sb = f32[B,16,4,64] broadcast(s2), dimensions={1,3}
  xs = f32[B,16,4,64] multiply(rot, sb)
  ROOT out = f32[B,16,4,64] add(xc, xs)
}
"""

# Gemma's rotary embedding's end: the rotated row's halves interleaved (jnp.stack([x1, x2], -1)
# reshaped to the row), so the side alternates at every column: a period of 2.
INTERLEAVED = """HloModule interleaved
ENTRY e {
  x = f32[8,16,128] parameter(0)
  t = f32[8,16,128] tanh(x)
  lo = f32[8,16,64] slice(t), slice={[0:8], [0:16], [0:64]}
  a = f32[8,16,64,1] reshape(lo)
  hi = f32[8,16,64] slice(t), slice={[0:8], [0:16], [64:128]}
  b = f32[8,16,64,1] reshape(hi)
  s = f32[8,16,64,2] concatenate(a, b), dimensions={3}
  ROOT r = f32[8,16,128] reshape(s)
}
"""

# A row of 96: the middle third of x, padded by 32 zeros on each side, times 2.
PADDED = """HloModule padded
ENTRY e {
  x = f32[64,96] parameter(0)
  mid = f32[64,32] slice(x), slice={[0:64], [32:64]}
  zero = f32[] constant(0)
  p = f32[64,96] pad(mid, zero), padding=0_0x32_32
  two = f32[] constant(2)
  tb = f32[64,96] broadcast(two), dimensions={}
  ROOT m = f32[64,96] multiply(p, tb)
}
"""

# Three parts along the row, the last only 8 long: too short a piece, so no split.
SHORT_PART = """HloModule short
ENTRY e {
  x = f32[64,40] parameter(0)
  y = f32[64,16] parameter(1)
  z = f32[64,8] parameter(2)
  c = f32[64,64] concatenate(x, y, z), dimensions={1}
  ROOT e = f32[64,64] exponential(c)
}
"""


def _rope(batch: int) -> str:
    return ROPE.replace("B", str(batch))


def _entry(text: str):
    """The module's entry computation and its root (what a loop kernel over it would write)."""
    comp = parse_hlo(text).entry
    return comp, comp.root


def test_rope_row_is_cut_where_both_concatenates_change_side():
    comp, root = _entry(_rope(2))
    assert row_splits.row_walk(comp, [root], tuple(root.shape.dims)) == row_splits.RowWalk(((0, 32), (32, 64)))


def test_pad_row_is_cut_at_both_edges_of_the_operand():
    comp, root = _entry(PADDED)
    assert row_splits.row_walk(comp, [root], (64, 96)) == row_splits.RowWalk(((0, 32), (32, 64), (64, 96)))


def test_interleaving_concatenate_is_walked_two_columns_an_iteration():
    comp, root = _entry(INTERLEAVED)
    assert row_splits.row_walk(comp, [root], (8, 16, 128)) == row_splits.RowWalk(((0, 128),), 2)


def test_no_split_without_a_change_or_with_a_short_piece():
    comp, root = _entry(SHORT_PART)
    assert row_splits.row_walk(comp, [root], (64, 64)) == row_splits.RowWalk(((0, 64),))
    plain = "HloModule p\nENTRY e {\n  x = f32[8,64] parameter(0)\n  ROOT e = f32[8,64] exponential(x)\n}\n"
    comp, root = _entry(plain)
    assert row_splits.row_walk(comp, [root], (8, 64)) == row_splits.RowWalk(((0, 64),))


def _inputs(text: str, seed: int) -> list[np.ndarray]:
    module = parse_hlo(text)
    rng = np.random.default_rng(seed)
    return [rng.uniform(-200, 200, p.shape.dims).astype(np.float32) for p in module.entry.parameters]


@pytest.mark.parametrize("text", [_rope(2), _rope(3), PADDED, SHORT_PART, INTERLEAVED],
                         ids=["rope2", "rope3", "pad", "short", "interleaved"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_split_rows_match_the_interpreter_and_the_unsplit_loop(text, stream, monkeypatch):
    if stream:  # every kernel here exceeds a 4 KiB L3: rows are written with streaming stores
        monkeypatch.setattr(cpu_row, "l3_cache_bytes", lambda: 4 << 10)
        monkeypatch.setattr(cpu_loop, "NARROW_LATENCY_BOUND_STREAMS", True)
    args = _inputs(text, 7)
    got = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)(*args)
    want = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(*args)
    monkeypatch.setattr(row_splits, "ROW_SPLITS", False)
    unsplit = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)(*args)
    for g, w, u in zip(got, want, unsplit):
        np.testing.assert_array_equal(g, u)  # a choice of loop bounds: the same bits
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)


def _functions(ir_text: str) -> list[str]:
    """The text of each function defined in LLVM IR `ir_text`."""
    return ["define" + part for part in ir_text.split("\ndefine")[1:]]


def _vectorized(function: str) -> bool:
    return "x float>" in function and "llvm.masked.gather" not in function


def test_rope_kernels_vectorize_without_gathers(monkeypatch):
    # (on the CPU the cosine and sine are a kernel of their own, op_conditions.expensive_trigonometry)
    def kernels(text):
        return _functions(hlofuse.compile(parse_hlo(text), target="cpu", cache=False).program.llvm_ir())

    split = kernels(_rope(2))
    monkeypatch.setattr(row_splits, "ROW_SPLITS", False)
    whole = kernels(_rope(2))
    assert len(split) == len(whole) == 2  # the angle table's cos and sin, and the embedding
    assert all(_vectorized(f) for f in split)
    assert not all(_vectorized(f) for f in whole)  # the embedding: gathers, or left scalar


def test_interleaved_rows_vectorize_without_gathers():
    ir_text = hlofuse.compile(parse_hlo(INTERLEAVED), target="cpu", cache=False).program.llvm_ir()
    assert all(_vectorized(f) for f in _functions(ir_text))


# A concatenate reached through a rank-0 reshape (a random key's word taken out of a vector, as
# a flax dropout step's mask generation does): the walk reached it with one-dimensional index
# arrays, and the side it recorded crashed the cut search (IndexError) while compiling the step.
SCALAR_FROM_CONCATENATE = """HloModule m
ENTRY e {
  p = f32[1] parameter(0)
  q = f32[1] parameter(1)
  cc = f32[2] concatenate(p, q), dimensions={0}
  s = f32[1] slice(cc), slice={[1:2]}
  r = f32[] reshape(s)
  x = f32[64,64] parameter(2)
  b = f32[64,64] broadcast(r), dimensions={}
  ROOT a = f32[64,64] add(x, b)
}
"""


def test_a_concatenate_read_through_a_rank_0_reshape_does_not_split_the_row():
    comp = parse_hlo(SCALAR_FROM_CONCATENATE).entry
    assert row_splits.row_walk(comp, [comp.root], (64, 64)).pieces == ((0, 64),)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in comp.parameters]
    want = evaluate(parse_hlo(SCALAR_FROM_CONCATENATE), args)[0]
    got = hlofuse.compile(parse_hlo(SCALAR_FROM_CONCATENATE), "cpu", cache=False)(*args)
    np.testing.assert_array_equal(np.asarray(got[0] if isinstance(got, (list, tuple)) else got), want)
