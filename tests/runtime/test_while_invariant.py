"""Loop-invariant while state (codegen/native_plan.py): a state leaf the body passes through
untouched is read where it lives when that memory is read-only for the loop (an entry
parameter, a constant), with no copy into the loop state, as XLA's copy insertion leaves a
scan's inputs and weights. Leaves that are not read-only (an arena value still read after the
loop, a while body's own state) are still copied. Every result against the interpreter and the
step interpreter."""
from __future__ import annotations

import numpy as np

import hlofuse
from hlofuse.codegen.native_plan import Loc
from hlofuse.runtime.interpreter import evaluate

# State: (i, acc, xs, ys, w, v). xs and ys are entry parameters, w a constant, v an arena value
# the entry reads again after the loop; all four pass through the body untouched. ys is also
# an entry result.
SCAN = """
HloModule invariant
body {
  p = (s32[], f32[16], f32[10,16], f32[10,16], f32[16], f32[16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  acc = f32[16] get-tuple-element(p), index=1
  xs = f32[10,16] get-tuple-element(p), index=2
  ys = f32[10,16] get-tuple-element(p), index=3
  w = f32[16] get-tuple-element(p), index=4
  v = f32[16] get-tuple-element(p), index=5
  zero = s32[] constant(0)
  x = f32[1,16] dynamic-slice(xs, i, zero), dynamic_slice_sizes={1,16}
  xr = f32[16] reshape(x)
  y = f32[1,16] dynamic-slice(ys, i, zero), dynamic_slice_sizes={1,16}
  yr = f32[16] reshape(y)
  xw = f32[16] multiply(xr, w)
  s = f32[16] add(xw, yr)
  t = f32[16] add(s, v)
  acc2 = f32[16] add(acc, t)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT r = (s32[], f32[16], f32[10,16], f32[10,16], f32[16], f32[16]) tuple(i2, acc2, xs, ys, w, v)
}
cond {
  p = (s32[], f32[16], f32[10,16], f32[10,16], f32[16], f32[16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] constant(10)
  ROOT lt = pred[] compare(i, k), direction=LT
}
ENTRY e {
  xs = f32[10,16] parameter(0)
  ys = f32[10,16] parameter(1)
  a = f32[16] parameter(2)
  v = f32[16] exponential(a)
  w = f32[16] constant({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
  zero = s32[] constant(0)
  z = f32[] constant(0)
  acc0 = f32[16] broadcast(z), dimensions={}
  init = (s32[], f32[16], f32[10,16], f32[10,16], f32[16], f32[16]) tuple(zero, acc0, xs, ys, w, v)
  loop = (s32[], f32[16], f32[10,16], f32[10,16], f32[16], f32[16]) while(init), condition=cond, body=body
  acc = f32[16] get-tuple-element(loop), index=1
  yso = f32[10,16] get-tuple-element(loop), index=3
  vo = f32[16] get-tuple-element(loop), index=5
  later = f32[16] multiply(v, acc)
  ROOT out = (f32[16], f32[10,16], f32[16], f32[16]) tuple(acc, yso, vo, later)
}
"""


def _check(text: str, *args):
    module = hlofuse.parse_hlo(text)
    exe = hlofuse.compile(module, target="cpu")
    got = list(exe(*args))
    for g, w in zip(got, evaluate(module, list(args))):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)
    for g, w in zip(exe.program.run_interpreted(list(args)), got):
        np.testing.assert_array_equal(g, w)
    return exe, got


def _inputs():
    rng = np.random.default_rng(3)
    return [rng.standard_normal(s).astype(np.float32) for s in ((10, 16), (10, 16), (16,))]


def test_read_only_invariant_state_is_not_copied():
    exe, got = _check(SCAN, *_inputs())
    native = exe.program.code.native
    body = next(p for p in native.plans if p.alias_results)
    assert body.passthrough == frozenset({2, 3, 4, 5})
    loop = next(ns for ns in native.entry.steps if ns.kind == "while")
    assert loop.outs[2] == Loc("param", 0)  # xs: the loop reads the caller's array
    assert loop.outs[4].kind == "table"  # w: the constant itself
    copied = {(c.src, c.dst) for c in loop.pre_copies}
    assert (Loc("param", 0), loop.outs[2]) not in copied
    # ys is an entry result: written there once, as before; v lives on after the loop: copied
    assert loop.outs[3] == Loc("result", 1)
    assert loop.outs[5] != loop.ins[5] and (loop.ins[5], loop.outs[5]) in copied


def test_invariant_parameters_stay_untouched_over_runs():
    xs, ys, a = _inputs()
    keep = [xs.copy(), ys.copy(), a.copy()]
    exe, first = _check(SCAN, xs, ys, a)
    for _ in range(3):
        again = exe(xs, ys, a)
        for g, w in zip(again, first):
            np.testing.assert_array_equal(g, w)
    for x, k in zip((xs, ys, a), keep):
        np.testing.assert_array_equal(x, k)
    assert not np.shares_memory(first[1], ys)


# An inner loop inside a while body, passing the outer state's leaf through: that leaf is the
# outer body's parameter *and* its result (updated in place after the inner loop), so the inner
# loop must still copy it.
NESTED = """
HloModule nested
inner_body {
  p = (s32[], f32[8], f32[8]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  s = f32[8] get-tuple-element(p), index=1
  c = f32[8] get-tuple-element(p), index=2
  s2 = f32[8] add(s, c)
  one = s32[] constant(1)
  j2 = s32[] add(j, one)
  ROOT r = (s32[], f32[8], f32[8]) tuple(j2, s2, c)
}
inner_cond {
  p = (s32[], f32[8], f32[8]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  k = s32[] constant(3)
  ROOT lt = pred[] compare(j, k), direction=LT
}
outer_body {
  p = (s32[], f32[8], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  acc = f32[8] get-tuple-element(p), index=1
  c = f32[8] get-tuple-element(p), index=2
  zero = s32[] constant(0)
  init = (s32[], f32[8], f32[8]) tuple(zero, acc, c)
  w = (s32[], f32[8], f32[8]) while(init), condition=inner_cond, body=inner_body
  acc2 = f32[8] get-tuple-element(w), index=1
  cw = f32[8] get-tuple-element(w), index=2
  half = f32[] constant(0.5)
  hb = f32[8] broadcast(half), dimensions={}
  c2 = f32[8] multiply(c, hb)
  acc3 = f32[8] add(acc2, cw)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT r = (s32[], f32[8], f32[8]) tuple(i2, acc3, c2)
}
outer_cond {
  p = (s32[], f32[8], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] constant(4)
  ROOT lt = pred[] compare(i, k), direction=LT
}
ENTRY e {
  c = f32[8] parameter(0)
  zero = s32[] constant(0)
  z = f32[] constant(0)
  acc0 = f32[8] broadcast(z), dimensions={}
  init = (s32[], f32[8], f32[8]) tuple(zero, acc0, c)
  w = (s32[], f32[8], f32[8]) while(init), condition=outer_cond, body=outer_body
  ROOT acc = f32[8] get-tuple-element(w), index=1
}
"""


def test_invariant_leaf_of_a_loop_inside_a_loop_body_is_copied():
    c = np.arange(8, dtype=np.float32) + 1
    exe, _ = _check(NESTED, c)
    outer_body = next(p for p in exe.program.code.native.plans if p.comp.name == "outer_body")
    inner = next(ns for ns in outer_body.steps if ns.kind == "while")
    assert 2 in inner.callees[1].passthrough
    assert inner.outs[2].kind == "arena"  # not the outer state's leaf, which the body rewrites
