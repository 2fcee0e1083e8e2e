"""What the interpreter evaluates and how: only what the result or a side effect depends on
(a dead loop that never ends, a dead op it lacks), and a reducer calling a fusion of scalars
batched like any elementwise reducer."""
from __future__ import annotations

import numpy as np

from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.interpreter import evaluate

# A dead while loop that never ends beside a live one (XLA's while loop unroller test module
# SimpleLoop has one: its counter is multiplied by 1), and a dead instruction of an op the
# interpreter refuses: neither may decide the oracle's answer, as neither survives the dead-code
# elimination of any compiled pipeline.
DEAD_CODE = """HloModule dead
forever {
  s = (s64[], s32[3]) parameter(0)
  i = s64[] get-tuple-element(s), index=0
  one = s64[] constant(1)
  j = s64[] multiply(i, one)
  v = s32[3] get-tuple-element(s), index=1
  ROOT t = (s64[], s32[3]) tuple(j, v)
}
counted {
  s = (s64[], s32[3]) parameter(0)
  i = s64[] get-tuple-element(s), index=0
  one = s64[] constant(1)
  j = s64[] add(i, one)
  v = s32[3] get-tuple-element(s), index=1
  w = s32[3] add(v, v)
  ROOT t = (s64[], s32[3]) tuple(j, w)
}
below {
  s = (s64[], s32[3]) parameter(0)
  i = s64[] get-tuple-element(s), index=0
  ten = s64[] constant(10)
  ROOT lt = pred[] compare(i, ten), direction=LT
}
ENTRY e {
  x = s32[3] parameter(0)
  r = u32[3] parameter(1)
  zero = s64[] constant(0)
  init = (s64[], s32[3]) tuple(zero, x)
  dead_loop = (s64[], s32[3]) while(init), condition=below, body=forever
  f = f32[3] convert(x)
  dead_unsupported = bf16[3] stochastic-convert(f, r)
  live = (s64[], s32[3]) while(init), condition=below, body=counted
  ROOT out = s32[3] get-tuple-element(live), index=1
}
"""


def test_dead_instructions_are_not_evaluated():
    from hlofuse.runtime.interpreter.core import live_order

    module = parse_hlo(DEAD_CODE)
    names = [i.name for i in live_order(module.entry)]
    assert "dead_loop" not in names and "dead_unsupported" not in names and "f" not in names
    assert {"x", "r", "live", "out"} <= set(names)  # parameters always, the root's operands
    x = np.array([0, 1, 2], np.int32)
    (out,) = evaluate(module, [x, np.zeros(3, np.uint32)])
    np.testing.assert_array_equal(out, x * 1024)


# XLA's instruction fusion test module: an argmax whose reducer is a kLoop fusion of scalars.
FUSED_REDUCER = """HloModule m
f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ge = pred[] compare(a, b), direction=GE
  m = f32[] select(ge, a, b)
  eq = pred[] compare(a, b), direction=EQ
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  lo = s32[] minimum(i, j)
  k = s32[] select(ge, i, j)
  s = s32[] select(eq, lo, k)
  ROOT t = (f32[], s32[]) tuple(m, s)
}
minmax {
  a = f32[] parameter(0)
  b = f32[] parameter(2)
  i = s32[] parameter(1)
  j = s32[] parameter(3)
  ROOT r = (f32[], s32[]) fusion(a, b, i, j), kind=kLoop, calls=f
}
ENTRY e {
  x = f32[4000,10] parameter(0)
  idx = s32[4000,10] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[4000], s32[4000]) reduce(x, idx, ninf, zero), dimensions={1}, to_apply=minmax
}
"""


def test_a_reducer_calling_a_fusion_of_scalars_runs_batched():
    """The reducer's fusion of scalars is elementwise, so the reduce combines whole columns at
    once instead of calling the reducer once per element (554,112 x 10 took minutes)."""
    from hlofuse.runtime.interpreter.core import is_elementwise_computation

    module = parse_hlo(FUSED_REDUCER)
    assert is_elementwise_computation(module.computation("minmax"))
    x = np.random.default_rng(0).integers(0, 4, (4000, 10)).astype(np.float32)  # ties: the lowest index wins
    values, index = evaluate(module, [x])
    np.testing.assert_array_equal(values, x.max(axis=1))
    np.testing.assert_array_equal(index, x.argmax(axis=1))
