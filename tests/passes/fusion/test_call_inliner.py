"""The call inliner (passes/fusion/call_inliner.py, XLA's CallInliner) run alone: every `call`
of the kernel computations is replaced by a copy of its callee (nested calls too), a callee
called twice gives two independent copies, a fusion inside a callee gets its own fused
computation per copy, and the module computes what it computed before (the interpreter on
both, bit for bit)."""
from __future__ import annotations

import numpy as np

from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.verifier import verify
from hlofuse.passes.fusion.call_inliner import CallInliner
from hlofuse.runtime.interpreter import evaluate

NESTED = """HloModule m

inner {
  a = f32[4] parameter(0)
  ROOT e = f32[4] exponential(a)
}

outer {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  c = f32[4] call(a), to_apply=inner
  ROOT s = f32[4] add(c, b)
}

ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  k1 = f32[4] call(x, y), to_apply=outer
  k2 = f32[4] call(y, x), to_apply=outer
  ROOT t = (f32[4], f32[4]) tuple(k1, k2)
}
"""

WITH_FUSION = """HloModule m

fneg {
  q = f32[4] parameter(0)
  ROOT n = f32[4] negate(q)
}

callee {
  a = f32[4] parameter(0)
  ROOT f = f32[4] fusion(a), kind=kLoop, calls=fneg
}

ENTRY main {
  x = f32[4] parameter(0)
  k1 = f32[4] call(x), to_apply=callee
  k2 = f32[4] call(k1), to_apply=callee
  ROOT t = (f32[4], f32[4]) tuple(k1, k2)
}
"""


def _inline(text: str):
    """(module after the inliner, changed), checked for validity and unchanged results."""
    before, after = parse_hlo(text), parse_hlo(text)
    changed = CallInliner().run(after)
    verify(after)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in before.entry.parameters]
    for w, g in zip(evaluate(before, args), evaluate(after, args), strict=True):
        np.testing.assert_array_equal(g, w)
    return after, changed


def _opcodes(comp) -> list[str]:
    return sorted(i.opcode for i in comp.instructions)


def test_nested_calls_are_inlined_at_every_call_site():
    after, changed = _inline(NESTED)
    assert changed
    # two call sites of outer, each with its own inner: two exponentials, two adds, no call
    assert _opcodes(after.entry) == sorted(["parameter", "parameter", "exponential", "exponential",
                                            "add", "add", "tuple"])
    # the callees are no longer reachable and are dropped
    assert sorted(c.name for c in after.computations) == ["main"]
    # each copy reads the operands of its own call site: k2 = exp(y) + x
    (a1, a2) = [i for i in after.entry.instructions if i.opcode == "add"]
    assert {tuple(o.opcode if o.opcode != "parameter" else o.name for o in a.operands) for a in (a1, a2)} == {
        ("exponential", "y"), ("exponential", "x")}


def test_a_fusion_in_a_callee_gets_its_own_fused_computation_per_copy():
    after, changed = _inline(WITH_FUSION)
    assert changed
    fusions = [i for i in after.entry.instructions if i.opcode == "fusion"]
    assert len(fusions) == 2
    comps = [f.fused_computation for f in fusions]
    assert comps[0] is not comps[1]  # a fused computation has exactly one owner
    assert all(c.fusion_instruction is f for c, f in zip(comps, fusions))


def test_a_module_without_calls_is_unchanged():
    after, changed = _inline("HloModule m\n\nENTRY main {\n  x = f32[4] parameter(0)\n  ROOT n = f32[4] negate(x)\n}\n")
    assert not changed
    assert _opcodes(after.entry) == ["negate", "parameter"]


def test_every_kernel_computation_is_inlined_not_only_the_entry():
    # `outer` holds a call although the entry calls nothing: the inliner walks every kernel
    # computation, so outer's call of inner is inlined too
    text = NESTED.split("ENTRY")[0] + "ENTRY main {\n  x = f32[4] parameter(0)\n  ROOT n = f32[4] negate(x)\n}\n"
    module = parse_hlo(text)
    assert CallInliner().run(module)
    verify(module)
    assert all(i.opcode != "call" for c in module.computations for i in c.instructions)


def test_inlined_instructions_trace_back_to_the_callee():
    # provenance: each inlined copy's origin is the callee instruction it copies
    module = parse_hlo(NESTED)
    inner_exp = module.computation("inner").instruction("e")
    CallInliner().run(module)
    exps = [i for i in module.entry.instructions if i.opcode == "exponential"]
    assert len(exps) == 2 and all(e.original is inner_exp for e in exps)
