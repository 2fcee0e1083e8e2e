"""Horizontal loop fusion (passes/fusion/horizontal_fusion.py, XLA's GpuHorizontalLoopFusion)
run alone: independent small loop kernels feeding the root become one launch, a kLoop fusion
with a tuple root when their shapes agree, a sliced kInput fusion (concatenate, then slices)
when they do not; candidates sharing an entry parameter are refused by rule. Expected
decisions come from XLA's rules; every module must compute what it computed before (the
interpreter on both, bit for bit) and stay valid."""
from __future__ import annotations

import numpy as np

from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.verifier import verify
from hlofuse.passes.fusion import module_log
from hlofuse.passes.fusion.horizontal_fusion import HorizontalLoopFusion
from hlofuse.runtime.interpreter import evaluate


def _module(n1: int, n2: int, second_reads: str = "y") -> str:
    return f"""HloModule m

f1 {{
  q = f32[{n1}] parameter(0)
  ROOT e = f32[{n1}] exponential(q)
}}

f2 {{
  q = f32[{n2}] parameter(0)
  ROOT n = f32[{n2}] negate(q)
}}

ENTRY main {{
  x = f32[{n1}] parameter(0)
  y = f32[{n2}] parameter(1)
  a = f32[{n1}] fusion(x), kind=kLoop, calls=f1
  b = f32[{n2}] fusion({second_reads}), kind=kLoop, calls=f2
  ROOT t = (f32[{n1}], f32[{n2}]) tuple(a, b)
}}
"""


def _run_alone(text: str):
    """(module after the pass, its log entries, changed)."""
    before, after = parse_hlo(text), parse_hlo(text)
    changed = HorizontalLoopFusion("gpu").run(after)
    verify(after)
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in before.entry.parameters]
    for w, g in zip(evaluate(before, args), evaluate(after, args), strict=True):
        np.testing.assert_array_equal(g, w)
    return after, [e for e in module_log(after) if e.pass_name == "horizontal-fusion"], changed


def _kernels(module):
    return [i for i in module.entry.instructions if i.opcode == "fusion"]


def test_same_shape_loops_become_one_loop_with_a_tuple_root():
    after, entries, changed = _run_alone(_module(64, 64))
    assert changed
    (k,) = _kernels(after)
    assert k.attrs["kind"] == "kLoop"
    assert k.fused_computation.root.opcode == "tuple" and len(k.shape.leaves()) == 2
    assert sorted(o.name for o in k.operands) == ["x", "y"]
    fused = [e for e in entries if e.action == "fused"]
    assert fused and all("2 kernels -> 1" in e.rule for e in fused)


def test_different_shapes_become_a_sliced_input_fusion():
    after, entries, changed = _run_alone(_module(64, 32))
    assert changed
    (k,) = _kernels(after)
    assert k.attrs["kind"] == "kInput"
    ops = [m.opcode for m in k.fused_computation.instructions]
    # the flattened outputs are concatenated (64 + 32 elements) and sliced apart again
    (cat,) = [m for m in k.fused_computation.instructions if m.opcode == "concatenate"]
    assert cat.shape.dims == (96,)
    assert ops.count("slice") == 2 and k.fused_computation.root.opcode == "tuple"


def test_same_shape_candidates_may_share_a_parameter():
    # rule 9 (XLA's AllowSharedParametersWhenNotUsingConcatenation): both kernels read x; one
    # kLoop tuple of same-shaped outputs may read it, since nothing is concatenated
    after, entries, changed = _run_alone(_module(64, 64, second_reads="x"))
    assert changed and len(_kernels(after)) == 1
    assert "shared-parameter" not in {e.rule for e in entries if e.action == "refused"}


def test_sliced_candidates_sharing_a_parameter_are_refused():
    # different shapes need the concatenate/slice form, whose outputs may not alias a shared input
    text = _module(64, 32).replace("  y = f32[32] parameter(1)\n", "").replace("fusion(y)", "fusion(x)")
    text = text.replace("  q = f32[32] parameter(0)\n  ROOT n = f32[32] negate(q)",
                        "  q = f32[64] parameter(0)\n  s = f32[32] slice(q), slice={[0:32]}\n"
                        "  ROOT n = f32[32] negate(s)")
    after, entries, changed = _run_alone(text)
    assert not changed and len(_kernels(after)) == 2
    assert "shared-parameter" in {e.rule for e in entries if e.action == "refused"}


def test_an_elementwise_instruction_is_a_candidate_too():
    text = _module(64, 64).replace("  b = f32[64] fusion(y), kind=kLoop, calls=f2\n", "  b = f32[64] negate(y)\n")
    text = text.replace("f2 {\n  q = f32[64] parameter(0)\n  ROOT n = f32[64] negate(q)\n}\n\n", "")
    after, entries, changed = _run_alone(text)
    # a negate is elementwise and a candidate too (XLA takes elementwise instructions): two
    # candidates of one shape, one loop
    assert changed and len(_kernels(after)) == 1


def test_a_lone_candidate_is_left_alone():
    # nothing to launch together with: no change, no decision
    text = _module(64, 64).replace("ROOT t = (f32[64], f32[64]) tuple(a, b)", "ROOT t = (f32[64], f32[64]) tuple(a, y)")
    text = text.replace("  b = f32[64] fusion(y), kind=kLoop, calls=f2\n", "")
    text = text.replace("f2 {\n  q = f32[64] parameter(0)\n  ROOT n = f32[64] negate(q)\n}\n\n", "")
    after, entries, changed = _run_alone(text)
    assert not changed and [k.name for k in _kernels(after)] == ["a"]
    assert not [e for e in entries if e.action == "fused"]
