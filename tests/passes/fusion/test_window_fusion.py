"""The window-reduction fusion rules (passes/fusion/window_fusion.py): which reduce-windows fuse,
with which reasons, on both targets, and XLA:CPU's rule when `fuse_window_reductions` is off.

Expected outcomes come from XLA's rules as cited in window_fusion.py (XLA:GPU fuses reduce-window
like data movement; XLA:CPU's CanBeLoopFused leaves it out; an expensive producer is neither
duplicated nor fused into a consumer that re-reads it)."""
from __future__ import annotations

import dataclasses

import pytest

from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.fusion import fusion_passes, module_log
from hlofuse.passes.fusion.cost_model import CPU, GPU
from hlofuse.passes.fusion.report import build_report

XLA_CPU = dataclasses.replace(CPU, fuse_window_reductions=False)

HEADER = """HloModule m

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

"""

AVERAGE_POOL = HEADER + """ENTRY main {
  x = f32[2,8,8,4] parameter(0)
  zero = f32[] constant(0)
  zeros = f32[2,8,8,4] broadcast(zero), dimensions={}
  relu = f32[2,8,8,4] maximum(x, zeros)
  pool = f32[2,4,4,4] reduce-window(relu, zero), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=add
  four = f32[] constant(4)
  fours = f32[2,4,4,4] broadcast(four), dimensions={}
  ROOT avg = f32[2,4,4,4] divide(pool, fours)
}
"""

TWO_USERS = HEADER + """ENTRY main {
  x = f32[2,8,8,4] parameter(0)
  zero = f32[] constant(0)
  pool = f32[2,4,4,4] reduce-window(x, zero), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=add
  n = f32[2,4,4,4] negate(pool)
  a = f32[2,4,4,4] abs(pool)
  ROOT t = (f32[2,4,4,4], f32[2,4,4,4]) tuple(n, a)
}
"""


def _fuse(text: str, target):
    module = parse_hlo(text)
    for p in fusion_passes(target):
        p.run(module)
    return module, module_log(module)


def _entry_opcodes(module) -> list[str]:
    return [i.opcode for i in module.entry.instructions if i.opcode not in ("parameter", "constant")]


def _fused_opcodes(module) -> list[set[str]]:
    return [{m.opcode for m in i.fused_computation.instructions}
            for i in module.entry.instructions if i.opcode == "fusion"]


@pytest.mark.parametrize("target", [CPU, GPU], ids=["cpu", "gpu"])
def test_average_pool_is_one_loop_fusion(target):
    module, log = _fuse(AVERAGE_POOL, target)
    assert _entry_opcodes(module) == ["fusion"]
    (body,) = _fused_opcodes(module)
    assert {"maximum", "reduce-window", "divide"} <= body
    assert not log.refusals() or all(e.producer != "pool" for e in log.refusals())


def test_xla_cpu_rule_leaves_the_pool_unfused_and_says_why():
    module, log = _fuse(AVERAGE_POOL, XLA_CPU)
    # XLA:CPU: the relu and the divide are loops of their own around the pool kernel
    assert sorted(_entry_opcodes(module)) == ["fusion", "fusion", "reduce-window"]
    refused = {(e.producer, e.consumer): e for e in log.refusals()}
    into_divide = refused[("pool", "avg")]
    assert into_divide.rule == "window-reduction"
    assert "CanBeLoopFused" in into_divide.reason and "avg reads it from memory" in into_divide.reason
    from_relu = refused[("relu", "pool")]
    assert from_relu.rule == "window-reduction" and "reduce-window pool roots no fusion" in from_relu.reason


@pytest.mark.parametrize("target", [CPU, GPU], ids=["cpu", "gpu"])
def test_pool_with_two_users_is_not_duplicated(target):
    module, log = _fuse(TWO_USERS, target)
    # one reduce-window in the whole module: on the CPU a kernel of its own; on the GPU
    # multi-output fusion may compute it with one user and output it for the other
    windows = [i for c in module.computations for i in c.instructions if i.opcode == "reduce-window"]
    assert len(windows) == 1
    if target is CPU:
        assert "reduce-window" in _entry_opcodes(module)
    reasons = [e for e in log.refusals() if e.producer == "pool"]
    assert reasons, "the refusal is logged"
    window = [e for e in reasons if e.rule == "window-duplicate"]
    assert window, [str(e.to_text()) for e in reasons]
    for e in window:  # (priority fusion appends its model's estimate)
        other = {"n": "a", "a": "n"}[e.consumer]
        assert e.reason.startswith(f"reduce-window pool is also read by {other}; fusing it into {e.consumer} would "
                                   f"reduce every window again in each copy (a window reduction is never "
                                   f"duplicated)"), e.reason


def test_pool_into_overlapping_pool_is_refused_as_reused():
    text = HEADER + """max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

ENTRY main {
  x = f32[2,8,8,4] parameter(0)
  zero = f32[] constant(0)
  pool = f32[2,4,4,4] reduce-window(x, zero), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=add
  lowest = f32[] constant(-inf)
  ROOT top = f32[2,4,4,4] reduce-window(pool, lowest), window={size=1x3x3x1 pad=0_0x1_1x1_1x0_0}, to_apply=max
}
"""
    module, log = _fuse(text, CPU)
    assert _entry_opcodes(module) == ["reduce-window", "reduce-window"]
    (entry,) = [e for e in log.refusals() if e.producer == "pool"]
    assert entry.rule == "expensive-reused" and "reads each of its elements several times" in entry.reason


def test_variadic_reduce_window_stays_unfused():
    # two inputs, a tuple result: no loop fusion takes or roots it (fusibility._universally_loop_fusible)
    text = """HloModule m

argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  v = f32[] select(gt, v0, v1)
  i = s32[] select(gt, i0, i1)
  ROOT r = (f32[], s32[]) tuple(v, i)
}

ENTRY main {
  x = f32[8,8] parameter(0)
  y = f32[8,8] negate(x)
  idx = s32[8,8] iota(), iota_dimension=1
  lowest = f32[] constant(-inf)
  zero = s32[] constant(0)
  rw = (f32[4,4], s32[4,4]) reduce-window(y, idx, lowest, zero), window={size=2x2 stride=2x2}, to_apply=argmax
  v = f32[4,4] get-tuple-element(rw), index=0
  ROOT n = f32[4,4] negate(v)
}
"""
    module, _ = _fuse(text, CPU)
    assert "reduce-window" in _entry_opcodes(module)


def test_report_names_the_window_rule():
    before = parse_hlo(TWO_USERS)
    module, log = _fuse(TWO_USERS, CPU)
    text = build_report(before, module, log).to_text()
    assert "window-duplicate" in text and "reduce-window pool is also read by" in text
