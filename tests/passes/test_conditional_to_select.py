"""conditional-to-select (passes/conditional_to_select.py, XLA's ConditionalToSelect): a
predicated conditional inside a map's function, a reducer or a sort comparator becomes a select
of its inlined branches on the compiled backends, which emit those computations element by
element; the interpreter keeps the conditional and is the oracle. What is rewritten runs on
cpu and gpu-emulated with the interpreter's values (branches that differ, so a swapped select
shows); what XLA leaves alone (side effects, an index selector, a tuple result) is left."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.conditional_to_select import ConditionalToSelect
from hlofuse.passes.pipeline import standard_pipeline
from hlofuse.runtime.interpreter import evaluate

# XLA's conditional_to_select test's shape of module (a map whose function branches on a compare
# into array-valued branches and reduces the result), with branches that differ.
MAP_ARRAY_BRANCHES = """HloModule m
if {
  t = (f32[]) parameter(0)
  a = f32[] get-tuple-element(t), index=0
  ROOT b = f32[2,2] broadcast(a), dimensions={}
}
else {
  t = (f32[]) parameter(0)
  a = f32[] get-tuple-element(t), index=0
  two = f32[] constant(-2)
  m = f32[] multiply(a, two)
  ROOT b = f32[2,2] broadcast(m), dimensions={}
}
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
mapped {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  lt = pred[] compare(a, b), direction=LT
  ta = (f32[]) tuple(a)
  tb = (f32[]) tuple(b)
  c = f32[2,2] conditional(lt, ta, tb), true_computation=if, false_computation=else
  zero = f32[] constant(0)
  ROOT r = f32[] reduce(c, zero), dimensions={0,1}, to_apply=add
}
ENTRY e {
  p = f32[64] parameter(0)
  q = f32[64] parameter(1)
  ROOT m = f32[64] map(p, q), dimensions={0}, to_apply=mapped
}
"""
# A scalar conditional in a reducer: max of |x| by branching on the sign.
REDUCER_SCALAR_BRANCHES = """HloModule m
pos {
  x = f32[] parameter(0)
  ROOT y = f32[] copy(x)
}
neg {
  x = f32[] parameter(0)
  ROOT y = f32[] negate(x)
}
absmax {
  acc = f32[] parameter(0)
  x = f32[] parameter(1)
  zero = f32[] constant(0)
  ge = pred[] compare(x, zero), direction=GE
  ax = f32[] conditional(ge, x, x), true_computation=pos, false_computation=neg
  ROOT m = f32[] maximum(acc, ax)
}
ENTRY e {
  p = f32[8,33] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[8] reduce(p, z), dimensions={1}, to_apply=absmax
}
"""


def _conditionals(module) -> int:
    return sum(i.opcode == "conditional" for c in module.computations for i in c.instructions)


@pytest.mark.parametrize("text", [MAP_ARRAY_BRANCHES, REDUCER_SCALAR_BRANCHES], ids=["map", "reducer"])
@pytest.mark.parametrize("backend", ["cpu", "gpu-emulated"])
def test_rewritten_conditionals_compute_the_interpreters_values(text, backend):
    module = parse_hlo(text)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    want = np.asarray(evaluate(module, args)[0])
    exe = hlofuse.compile(parse_hlo(text), target=backend, cache=False)
    assert _conditionals(exe.fused_module) == 0
    np.testing.assert_allclose(np.asarray(exe(*args)[0]), want, rtol=1e-6, atol=1e-6)


def test_the_interpreters_pipeline_keeps_the_conditional():
    module = parse_hlo(MAP_ARRAY_BRANCHES)
    standard_pipeline(target="cpu", expand_scans=False).run(module)
    assert _conditionals(module) == 1


def _kept(text: str) -> None:
    module = parse_hlo(text)
    assert not ConditionalToSelect().run(module)
    assert _conditionals(module) == 1


def test_a_branch_with_a_side_effect_is_left():
    _kept(MAP_ARRAY_BRANCHES.replace("ROOT b = f32[2,2] broadcast(a), dimensions={}",
                                     'ROOT b = f32[2,2] custom-call(a), custom_call_target="f", '
                                     "custom_call_has_side_effect=true"))


def test_an_index_selector_is_left():
    _kept(MAP_ARRAY_BRANCHES.replace("lt = pred[] compare(a, b), direction=LT",
                                     "lt = s32[] convert(a)")
          .replace("true_computation=if, false_computation=else", "branch_computations={if, else}"))


def test_a_tuple_result_is_left():
    text = REDUCER_SCALAR_BRANCHES.replace("ROOT y = f32[] copy(x)", "c = f32[] copy(x)\n  ROOT y = (f32[]) tuple(c)") \
        .replace("ROOT y = f32[] negate(x)", "n = f32[] negate(x)\n  ROOT y = (f32[]) tuple(n)") \
        .replace("ax = f32[] conditional(ge, x, x), true_computation=pos, false_computation=neg",
                 "axt = (f32[]) conditional(ge, x, x), true_computation=pos, false_computation=neg\n"
                 "  ax = f32[] get-tuple-element(axt), index=0")
    _kept(text)


def test_a_conditional_of_the_entry_is_left():
    """Only embedded computations: a conditional the entry runs is control flow."""
    _kept("""HloModule m
t {
  x = f32[4] parameter(0)
  ROOT y = f32[4] negate(x)
}
f {
  x = f32[4] parameter(0)
  ROOT y = f32[4] exponential(x)
}
ENTRY e {
  p = pred[] parameter(0)
  x = f32[4] parameter(1)
  ROOT c = f32[4] conditional(p, x, x), true_computation=t, false_computation=f
}
""")
