"""Multi-output fusion (passes/fusion/multi_output_fusion.py, XLA's GpuMultiOutputFusion) run
alone on hand-written fused modules: siblings reading one operand become one kernel with a tuple
root, a producer used elsewhere becomes an extra output of its consumer, and the refusals (a
cycle, incompatible reductions) name their rule. Expected decisions are worked out by hand
from XLA's rules; every module must compute what it computed before (the interpreter on both,
bit for bit) and stay valid."""
from __future__ import annotations

import numpy as np

from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.verifier import verify
from hlofuse.passes.fusion import module_log
from hlofuse.passes.fusion.multi_output_fusion import MultiOutputFusion, SiblingFusion
from hlofuse.runtime.interpreter import evaluate

HEADER = """HloModule m

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

rows {
  q = f32[8,16] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[8] reduce(q, z), dimensions={1}, to_apply=add
}

square_rows {
  q = f32[8,16] parameter(0)
  sq = f32[8,16] multiply(q, q)
  z = f32[] constant(0)
  ROOT r = f32[8] reduce(sq, z), dimensions={1}, to_apply=add
}

columns {
  q = f32[8,16] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[16] reduce(q, z), dimensions={0}, to_apply=add
}

scaled_rows {
  q = f32[8,16] parameter(0)
  s = f32[8] parameter(1)
  sb = f32[8,16] broadcast(s), dimensions={0}
  m = f32[8,16] multiply(q, sb)
  z = f32[] constant(0)
  ROOT r = f32[8] reduce(m, z), dimensions={1}, to_apply=add
}

exp {
  q = f32[8,16] parameter(0)
  ROOT e = f32[8,16] exponential(q)
}
"""


def _run_alone(entry: str, pass_cls=MultiOutputFusion):
    """(module after the pass, its log entries, changed) for HEADER + `entry`."""
    text = HEADER + entry
    before, after = parse_hlo(text), parse_hlo(text)
    changed = pass_cls("gpu").run(after)
    verify(after)
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in before.entry.parameters]
    for w, g in zip(evaluate(before, args), evaluate(after, args), strict=True):
        np.testing.assert_array_equal(g, w)
    return after, [e for e in module_log(after) if e.pass_name == pass_cls.name], changed


def _kernels(module) -> list[str]:
    """The entry's instructions that are kernels (fusions), by name."""
    return [i.name for i in module.entry.instructions if i.opcode == "fusion"]


def test_sibling_reductions_of_one_operand_share_a_kernel():
    # sum(x) and sum(x*x) over the same rows (a layer norm's statistics): one kernel reads x once
    after, entries, changed = _run_alone("""
ENTRY main {
  x = f32[8,16] parameter(0)
  a = f32[8] fusion(x), kind=kInput, calls=rows
  b = f32[8] fusion(x), kind=kInput, calls=square_rows
  ROOT t = (f32[8], f32[8]) tuple(a, b)
}
""")
    assert changed
    assert [(e.action, e.producer, e.consumer) for e in entries] == [("fused", "b", "a")]
    (k,) = _kernels(after)
    fusion = after.entry.instruction(k)
    assert fusion.attrs["kind"] == "kInput" and fusion.shape.is_tuple and len(fusion.shape.leaves()) == 2
    assert [o.name for o in fusion.operands] == ["x"]
    assert sorted(m.opcode for m in fusion.fused_computation.instructions).count("reduce") == 2
    assert all(u.opcode == "get-tuple-element" for u in fusion.users)


def test_siblings_where_one_reads_the_other_would_make_a_cycle():
    # b reads x and a: one kernel computing both would have to read its own output
    after, entries, changed = _run_alone("""
ENTRY main {
  x = f32[8,16] parameter(0)
  a = f32[8] fusion(x), kind=kInput, calls=rows
  b = f32[8] fusion(x, a), kind=kInput, calls=scaled_rows
  ROOT t = (f32[8], f32[8]) tuple(a, b)
}
""")
    assert not changed and sorted(_kernels(after)) == ["a", "b"]
    rules = {e.rule for e in entries if e.action == "refused"}
    assert "cycle" in rules


def test_row_and_column_reductions_are_not_siblings():
    # a row reduction and a column reduction of x have different loops (XLA's
    # ShapesCompatibleForMultiOutputFusion): refused, both kernels stay
    after, entries, changed = _run_alone("""
ENTRY main {
  x = f32[8,16] parameter(0)
  a = f32[8] fusion(x), kind=kInput, calls=rows
  c = f32[16] fusion(x), kind=kInput, calls=columns
  ROOT t = (f32[8], f32[16]) tuple(a, c)
}
""")
    assert not changed and sorted(_kernels(after)) == ["a", "c"]
    assert [e.rule for e in entries if e.action == "refused"] == ["incompatible-reductions"]


def test_a_producer_used_elsewhere_becomes_an_extra_output():
    # e = exp(x) is read by the row sum and is also an output: fused into the reduction's
    # kernel and written from there, so it is computed once and x is read once
    after, entries, changed = _run_alone("""
ENTRY main {
  x = f32[8,16] parameter(0)
  e = f32[8,16] fusion(x), kind=kLoop, calls=exp
  r = f32[8] fusion(e), kind=kInput, calls=rows
  ROOT t = (f32[8,16], f32[8]) tuple(e, r)
}
""")
    assert changed
    assert [(e.action, e.producer, e.consumer) for e in entries] == [("fused", "e", "r")]
    (k,) = _kernels(after)
    fusion = after.entry.instruction(k)
    assert [o.name for o in fusion.operands] == ["x"]
    assert sorted(str(s.dims) for s in fusion.shape.leaves()) == sorted(["(8, 16)", "(8,)"])


def test_sibling_fusion_alone_leaves_producer_consumer_pairs():
    # SiblingFusion is the sibling half only: the producer/consumer pair above stays two kernels
    after, entries, changed = _run_alone("""
ENTRY main {
  x = f32[8,16] parameter(0)
  e = f32[8,16] fusion(x), kind=kLoop, calls=exp
  r = f32[8] fusion(e), kind=kInput, calls=rows
  ROOT t = (f32[8,16], f32[8]) tuple(e, r)
}
""", SiblingFusion)
    assert not changed and sorted(_kernels(after)) == ["e", "r"]
    assert not [e for e in entries if e.action == "fused"]
