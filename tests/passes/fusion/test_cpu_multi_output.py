"""Multi-output fusion on the CPU (passes/fusion/multi_output_fusion.py): reductions of a common
operand become one kernel (sum and sum of squares; batch-norm statistics, where the variance
reads the mean in its epilogue); loop siblings stay apart; results equal the interpreter's."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.runtime.compare import compare_outputs

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""

SUM_SUMSQ = "HloModule ss\n" + ADD + """
ENTRY main {
  x = f32[%(r)d,%(c)d] parameter(0)
  zero = f32[] constant(0)
  s = f32[%(r)d] reduce(x, zero), dimensions={1}, to_apply=add
  sq = f32[%(r)d,%(c)d] multiply(x, x)
  ss = f32[%(r)d] reduce(sq, zero), dimensions={1}, to_apply=add
  ROOT t = (f32[%(r)d], f32[%(r)d]) tuple(s, ss)
}
"""

BN_STATS = "HloModule bn\n" + ADD + """
ENTRY main {
  x = f32[%(n)d,5,5,%(c)d] parameter(0)
  zero = f32[] constant(0)
  s = f32[%(c)d] reduce(x, zero), dimensions={0,1,2}, to_apply=add
  cnt = f32[] constant(%(count)d)
  cb = f32[%(c)d] broadcast(cnt), dimensions={}
  mean = f32[%(c)d] divide(s, cb)
  sq = f32[%(n)d,5,5,%(c)d] multiply(x, x)
  ss = f32[%(c)d] reduce(sq, zero), dimensions={0,1,2}, to_apply=add
  msq = f32[%(c)d] divide(ss, cb)
  m2 = f32[%(c)d] multiply(mean, mean)
  var = f32[%(c)d] subtract(msq, m2)
  ROOT t = (f32[%(c)d], f32[%(c)d]) tuple(mean, var)
}
"""

TWO_LOOPS = """HloModule loops
ENTRY main {
  x = f32[64,64] parameter(0)
  a1 = f32[64,64] exponential(x)
  a = f32[64,64] multiply(a1, a1)
  b1 = f32[64,64] negate(x)
  b = f32[64,64] add(b1, b1)
  ROOT t = (f32[64,64], f32[64,64]) tuple(a, b)
}
"""


def _run(text: str, args):
    exe = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu")
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(*args)
    for r in compare_outputs(list(exe(*args)), list(want)):
        assert r.ok, r
    return exe


def _fusions(exe) -> list:
    return [i for i in exe.fused_module.entry.instructions if i.opcode == "fusion"]


@pytest.mark.parametrize("r,c", [(3, 7), (16, 100), (5, 1)])
def test_sum_and_sum_of_squares_share_one_kernel(r, c):
    x = np.random.default_rng(1).standard_normal((r, c)).astype(np.float32)
    exe = _run(SUM_SUMSQ % {"r": r, "c": c}, [x])
    (fusion,) = _fusions(exe)
    assert fusion.shape.is_tuple and len(fusion.shape.elements) == 2
    assert len(exe.program._planner.kernels) == 1
    assert any(e.action == "fused" and e.pass_name == "sibling-fusion" for e in exe.fused_module.fusion_log.entries)


@pytest.mark.parametrize("n,c", [(2, 8), (3, 33)])
def test_batch_norm_statistics_in_one_pass(n, c):
    x = np.random.default_rng(2).standard_normal((n, 5, 5, c)).astype(np.float32)
    exe = _run(BN_STATS % {"n": n, "c": c, "count": n * 25}, [x])
    assert len(_fusions(exe)) == 1
    assert len(exe.program._planner.kernels) == 1
    assert any("epilogue" in (e.rule or "") for e in exe.fused_module.fusion_log.entries if e.action == "fused")


def test_loop_siblings_stay_apart_on_the_cpu():
    x = np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32)
    exe = _run(TWO_LOOPS, [x])
    assert len(_fusions(exe)) == 2 and all(not f.shape.is_tuple for f in _fusions(exe))
