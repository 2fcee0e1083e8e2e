"""The fusion merger (passes/fusion/fusion_merger.py, XLA's GPU FusionMerger) run alone on
hand-written fused modules: what it merges into every user, and what it refuses under which
rule. The expected decisions are worked out by hand from XLA's FusionMerger::ShouldMerge (the
byte counts from the shapes); every module must compute what it computed before the pass (the
interpreter on both, bit for bit) and stay valid."""
from __future__ import annotations

import numpy as np

from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.verifier import verify
from hlofuse.passes.fusion import module_log
from hlofuse.passes.fusion.cost_model import target_params
from hlofuse.passes.fusion.fusion_merger import FusionMerger, should_merge
from hlofuse.runtime.interpreter import evaluate


def _run_alone(text: str):
    """(module before, module after the merger, the merger's log entries, changed)."""
    before, after = parse_hlo(text), parse_hlo(text)
    changed = FusionMerger("gpu").run(after)
    verify(after)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) + 2.0 for p in before.entry.parameters]
    want, got = evaluate(before, args), evaluate(after, args)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)
    entries = [e for e in module_log(after) if e.pass_name == "fusion-merger"]
    return before, after, entries, changed


def _fusions(module) -> dict[str, list[str]]:
    """Entry fusion name -> the opcodes its fused computation computes (parameters left out)."""
    return {i.name: sorted(m.opcode for m in i.fused_computation.instructions if m.opcode != "parameter")
            for i in module.entry.instructions if i.opcode == "fusion"}


# A loop fusion p = x + y read by two loop fusions (negate, multiply by itself).
MERGEABLE = """HloModule m

fp {
  a = f32[16] parameter(0)
  b = f32[16] parameter(1)
  ROOT s = f32[16] add(a, b)
}

fu1 {
  q = f32[16] parameter(0)
  ROOT n = f32[16] negate(q)
}

fu2 {
  q = f32[16] parameter(0)
  ROOT m = f32[16] multiply(q, q)
}

ENTRY main {
  x = f32[16] parameter(0)
  y = f32[16] parameter(1)
  p = f32[16] fusion(x, y), kind=kLoop, calls=fp
  u1 = f32[16] fusion(p), kind=kLoop, calls=fu1
  u2 = f32[16] fusion(p), kind=kLoop, calls=fu2
  ROOT t = (f32[16], f32[16]) tuple(u1, u2)
}
"""


def test_a_cheap_loop_fusion_is_merged_into_every_user():
    # Bytes (ShouldMerge): unfused 64 (x) + 64 (y) + 64 (write p) + 2 * 64 (two reads of p) =
    # 320; merged each user reads x and y: 2 * 128 = 256 <= 1.1 * 320, so p is merged.
    _, after, entries, changed = _run_alone(MERGEABLE)
    assert changed
    assert [(e.action, e.producer, e.consumer) for e in entries] == [("fused", "p", "u1"), ("fused", "p", "u2")]
    # copied into the first user, moved into the last: only the first is a duplicate
    assert [e.duplicated for e in entries] == [True, False]
    assert [e.duplicated_elements for e in entries] == [16, 0]
    assert _fusions(after) == {"u1": ["add", "negate"], "u2": ["add", "multiply"]}
    for name in ("u1", "u2"):
        assert [o.name for o in after.entry.instruction(name).operands] == ["x", "y"]


def test_a_user_that_cannot_root_a_fusion_refuses_the_merge():
    # a bitcast is no kernel of its own: XLA's merger refuses ("not fusing bitcast ops")
    text = MERGEABLE.replace("u2 = f32[16] fusion(p), kind=kLoop, calls=fu2", "u2 = f32[16] bitcast(p)")
    before, after, entries, changed = _run_alone(text)
    assert not changed and after.to_text() == before.to_text()
    (e,) = entries
    assert (e.action, e.rule, e.producer, e.consumer) == ("refused", "user-not-fusion", "p", "u1, u2")
    assert "u2 is a bitcast, not a loop or input fusion" in e.reason


def test_an_unfused_user_that_can_root_a_fusion_takes_the_merge():
    # XLA's WillMergeIntoUnfusedConsumer: the negate becomes a loop fusion holding p's add
    text = MERGEABLE.replace("u2 = f32[16] fusion(p), kind=kLoop, calls=fu2", "u2 = f32[16] negate(p)")
    _, after, entries, changed = _run_alone(text)
    assert changed
    assert [(e.action, e.producer, e.consumer) for e in entries] == [("fused", "p", "u1"), ("fused", "p", "u2")]
    assert sorted(_fusions(after).values()) == [["add", "negate"], ["add", "negate"]]


def test_no_fusion_user_means_no_decision():
    # nothing to merge into: the merger says nothing (the report would only be noise)
    text = (MERGEABLE.replace("u1 = f32[16] fusion(p), kind=kLoop, calls=fu1", "u1 = f32[16] bitcast(p)")
            .replace("u2 = f32[16] fusion(p), kind=kLoop, calls=fu2", "u2 = f32[16] bitcast(p)"))
    _, _, entries, changed = _run_alone(text)
    assert not changed and entries == []


def test_more_bytes_refused_with_the_counts():
    # p slices 16 elements out of 1024: unfused 4096 (x) + 64 (write p) + 2 * 64 (reads) = 4288
    # bytes; merged, each of the 2 users reads x: 8192 > 1.1 * 4288.
    text = """HloModule m

fp {
  a = f32[1024] parameter(0)
  ROOT s = f32[16] slice(a), slice={[0:16]}
}

fu1 {
  q = f32[16] parameter(0)
  ROOT n = f32[16] negate(q)
}

fu2 {
  q = f32[16] parameter(0)
  ROOT m = f32[16] multiply(q, q)
}

ENTRY main {
  x = f32[1024] parameter(0)
  p = f32[16] fusion(x), kind=kLoop, calls=fp
  u1 = f32[16] fusion(p), kind=kLoop, calls=fu1
  u2 = f32[16] fusion(p), kind=kLoop, calls=fu2
  ROOT t = (f32[16], f32[16]) tuple(u1, u2)
}
"""
    _, after, entries, changed = _run_alone(text)
    assert not changed
    (e,) = entries
    assert e.rule == "more-bytes" and "would move 8192 bytes instead of 4288" in e.reason
    assert set(_fusions(after)) == {"p", "u1", "u2"}
    # with one user the same slice is merged: 4096 <= 1.1 * (4096 + 64 + 64)
    one = text.replace("  u2 = f32[16] fusion(p), kind=kLoop, calls=fu2\n", "").replace(
        "ROOT t = (f32[16], f32[16]) tuple(u1, u2)", "ROOT t = (f32[16]) tuple(u1)")
    _, after1, entries1, changed1 = _run_alone(one)
    assert changed1 and [(e.action, e.consumer) for e in entries1] == [("fused", "u1")]
    assert _fusions(after1) == {"u1": ["negate", "slice"]}


def test_expensive_producer_under_a_re_reading_user_is_refused():
    # log is expensive on the GPU (exp, divide, sqrt and rsqrt are not: XLA's
    # GpuInstructionFusion::IsExpensive); u2 broadcasts p, reading each element 4 times.
    text = """HloModule m

fp {
  a = f32[16] parameter(0)
  ROOT l = f32[16] log(a)
}

fu1 {
  q = f32[16] parameter(0)
  ROOT n = f32[16] negate(q)
}

fu2 {
  q = f32[16] parameter(0)
  ROOT b = f32[4,16] broadcast(q), dimensions={1}
}

ENTRY main {
  x = f32[16] parameter(0)
  p = f32[16] fusion(x), kind=kLoop, calls=fp
  u1 = f32[16] fusion(p), kind=kLoop, calls=fu1
  u2 = f32[4,16] fusion(p), kind=kLoop, calls=fu2
  ROOT t = (f32[16], f32[4,16]) tuple(u1, u2)
}
"""
    _, _, entries, changed = _run_alone(text)
    assert not changed
    (e,) = entries
    assert e.rule == "expensive-reused" and "u2 reads each of its elements several times" in e.reason
    # the same producer without the re-reading user is merged (duplicated, and counted as expensive)
    plain = text.replace("ROOT b = f32[4,16] broadcast(q), dimensions={1}", "ROOT b = f32[16] abs(q)").replace(
        "u2 = f32[4,16] fusion(p)", "u2 = f32[16] fusion(p)").replace("(f32[16], f32[4,16]) tuple", "(f32[16], f32[16]) tuple")
    _, _, entries2, changed2 = _run_alone(plain)
    assert changed2 and [e.duplicated_expensive for e in entries2] == [True, False]


def test_transposing_producer_is_not_merged_into_a_reduction():
    text = """HloModule m

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

fp {
  a = f32[8,16] parameter(0)
  ROOT t = f32[16,8] transpose(a), dimensions={1,0}
}

fr {
  q = f32[16,8] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[16] reduce(q, z), dimensions={1}, to_apply=add
}

ENTRY main {
  x = f32[8,16] parameter(0)
  p = f32[16,8] fusion(x), kind=kLoop, calls=fp
  ROOT u = f32[16] fusion(p), kind=kInput, calls=fr
}
"""
    _, _, entries, changed = _run_alone(text)
    assert not changed
    (e,) = entries
    assert e.rule == "transpose-into-reduce"


def test_should_merge_names_the_first_rule_that_refuses():
    # should_merge is the rule itself: the user check comes before the byte count
    m = parse_hlo(MERGEABLE.replace("u2 = f32[16] fusion(p), kind=kLoop, calls=fu2", "u2 = f32[16] bitcast(p)"))
    p = m.entry.instruction("p")
    d = should_merge(p, list(p.users), target_params("gpu"))
    assert not d and d.rule == "user-not-fusion"
    ok = parse_hlo(MERGEABLE).entry.instruction("p")
    assert should_merge(ok, list(ok.users), target_params("gpu"))


def test_only_loop_fusions_are_producers():
    # the merger merges kLoop fusions only; a producer of another kind is left alone, silently
    text = MERGEABLE.replace("p = f32[16] fusion(x, y), kind=kLoop", "p = f32[16] fusion(x, y), kind=kOutput")
    _, _, entries, changed = _run_alone(text)
    assert not changed and entries == []
