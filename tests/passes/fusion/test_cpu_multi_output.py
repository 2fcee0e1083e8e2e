"""Multi-output fusion on the CPU (passes/fusion/multi_output_fusion.py, cpu_multi_output.py):
reductions of a common operand become one kernel (sum and sum of squares; batch-norm
statistics, where the variance reads the mean in its epilogue); plain loops over the same
dimensions reading a common operand become one loop kernel, and loops that would not be one CPU
loop stay apart with the reason logged; results equal the interpreter's."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.passes.fusion import module_cost
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


@pytest.mark.parametrize("r,c", [(3, 7), (16, 100), (5, 2)])
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


def _entries(exe, action: str) -> list:
    return [e for e in exe.fused_module.fusion_log.entries if e.action == action]


@pytest.mark.parametrize("n", [64, 1000, 7])
def test_loop_siblings_share_one_loop_kernel(n):
    """exp(x)^2 and -2x read x: one multi-output loop fusion, one kernel, x read once."""
    x = np.random.default_rng(3).standard_normal((n, n)).astype(np.float32)
    exe = _run(TWO_LOOPS.replace("64,64", f"{n},{n}"), [x])
    (fusion,) = _fusions(exe)
    assert fusion.shape.is_tuple and len(fusion.shape.elements) == 2
    assert len(exe.program._planner.kernels) == 1
    assert any(e.pass_name == "sibling-fusion" and "common operand x" in (e.rule or "") for e in _entries(exe, "fused"))


def test_loop_siblings_option_off_keeps_them_apart():
    """sibling-fusion{loop_siblings=false} is the reductions-only rule: two loop kernels."""
    from hlofuse.compiler import optimize

    fused, _ = optimize(hlofuse.parse_hlo(TWO_LOOPS), "cpu",
                        passes="call-inliner,fusion,sibling-fusion{loop_siblings=false}")
    fusions = [i for i in fused.entry.instructions if i.opcode == "fusion"]
    assert len(fusions) == 2 and not any(f.shape.is_tuple for f in fusions)


DIFFERENT_DIMS = """HloModule dims
ENTRY main {
  x = f32[64,64] parameter(0)
  a1 = f32[64,64] exponential(x)
  a = f32[64,64] multiply(a1, a1)
  b1 = f32[4096] reshape(x)
  b = f32[4096] negate(b1)
  ROOT t = (f32[64,64], f32[4096]) tuple(a, b)
}
"""

# The loop writes [32,64], not the reduce's input dimensions [64,64]: the reduction kernel
# cannot compute it (a loop over the reduce's input dimensions can: test_cpu_reduction_extras.py).
LOOP_AND_REDUCTION = "HloModule lr\n" + ADD + """
ENTRY main {
  x = f32[64,64] parameter(0)
  a1 = f32[32,64] slice(x), slice={[0:32], [0:64]}
  a = f32[32,64] multiply(a1, a1)
  zero = f32[] constant(0)
  s = f32[64] reduce(x, zero), dimensions={1}, to_apply=add
  ROOT t = (f32[32,64], f32[64]) tuple(a, s)
}
"""

IN_PLACE = """HloModule dus
ENTRY main {
  x = f32[64,64] parameter(0)
  u = f32[8,64] parameter(1)
  i = s32[] parameter(2)
  zero = s32[] constant(0)
  e = f32[64,64] exponential(x)
  d = f32[64,64] dynamic-update-slice(e, u, i, zero)
  n = f32[64,64] negate(x)
  ROOT t = (f32[64,64], f32[64,64]) tuple(d, n)
}
"""


def test_loops_of_different_dimensions_stay_apart():
    """Equal element counts are one loop on the GPU, but two CPU loop kernels: not merged, and
    the refusal says why."""
    x = np.random.default_rng(4).standard_normal((64, 64)).astype(np.float32)
    exe = _run(DIFFERENT_DIMS, [x])
    assert len(_fusions(exe)) == 2 and not any(f.shape.is_tuple for f in _fusions(exe))
    assert any(e.rule == "cpu-loop-dims" and "different dimensions" in e.reason for e in _entries(exe, "refused"))


@pytest.mark.parametrize("text,args", [
    (LOOP_AND_REDUCTION, lambda r: [r.standard_normal((64, 64)).astype(np.float32)]),
    (IN_PLACE, lambda r: [r.standard_normal((64, 64)).astype(np.float32),
                          r.standard_normal((8, 64)).astype(np.float32), np.int32(5)]),
], ids=["loop-and-reduction", "dynamic-update-slice"])
def test_loops_that_are_not_one_cpu_loop_stay_apart(text, args):
    """A reduction and a loop over other dimensions than its input's, or an in-place update and
    a loop, are different CPU kernels."""
    exe = _run(text, args(np.random.default_rng(5)))
    assert not any(f.shape.is_tuple for f in _fusions(exe))


MANY_OUTPUTS = """HloModule many
ENTRY main {
  x = f32[%(dims)s] parameter(0)
  y = f32[%(dims)s] parameter(1)
  e = f32[%(dims)s] exponential(x)
  c = pred[%(dims)s] compare(x, y), direction=LT
  s = f32[%(dims)s] select(c, x, y)
  i = s32[%(dims)s] convert(y)
  n = f32[%(dims)s] negate(x)
  t = f32[%(dims)s] tanh(y)
  ROOT r = (f32[%(dims)s], pred[%(dims)s], f32[%(dims)s], s32[%(dims)s], f32[%(dims)s], f32[%(dims)s]) tuple(e, c, s, i, n, t)
}
"""


@pytest.mark.parametrize("dims", ["300,130", "5000", "64,3", "40,17"])
def test_many_outputs_of_mixed_types_in_one_loop(dims):
    """Six loops over x and y (f32, pred and s32 outputs) become one kernel; its loop (rows,
    unrolled short rows or flat elements, split across threads) writes every output as the
    interpreter computes it."""
    shape = tuple(int(d) for d in dims.split(","))
    rng = np.random.default_rng(6)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    y = (rng.standard_normal(shape) * 3).astype(np.float32)
    exe = _run(MANY_OUTPUTS % {"dims": dims}, [x, y])
    (fusion,) = _fusions(exe)
    assert len(fusion.shape.elements) == 6
    assert len(exe.program._planner.kernels) == 1


SHARED_PRODUCER = "HloModule sp\n" + ADD + """
ENTRY main {
  x = f32[%(r)d,%(c)d] parameter(0)
  y = f32[%(r)d,%(c)d] parameter(1)
  th = f32[%(r)d,%(c)d] tanh(x)
  t = f32[%(r)d,%(c)d] exponential(th)
  m = f32[%(r)d,%(c)d] multiply(t, y)
  z = f32[] constant(0)
  s = f32[%(r)d] reduce(t, z), dimensions={1}, to_apply=add
  ROOT o = (f32[%(r)d,%(c)d], f32[%(r)d], f32[%(r)d,%(c)d]) tuple(m, s, t)
}
"""


@pytest.mark.parametrize("r,c", [(8, 64), (100, 33)])
def test_producer_computed_in_its_loop_user_as_an_output(r, c):
    """t, read by a loop, a reduction and the root: the loop (over the reduce's input
    dimensions) joins the reduction, and t is computed in that kernel as an extra output: one
    kernel, results equal the interpreter's."""
    rng = np.random.default_rng(7)
    x, y = (rng.standard_normal((r, c)).astype(np.float32) for _ in range(2))
    exe = _run(SHARED_PRODUCER % {"r": r, "c": c}, [x, y])
    assert module_cost(exe.fused_module).kernels == 1
    (fusion,) = [f for f in _fusions(exe) if f.shape.is_tuple]
    assert {i.opcode for i in fusion.fused_computation.instructions} >= {"tanh", "exponential", "multiply", "reduce"}
    assert any(e.rule.startswith("producer-consumer multi-output") for e in _entries(exe, "fused"))


REREAD = """HloModule reread
ENTRY main {
  x = f32[64,64] parameter(0)
  y = f32[64,64] parameter(1)
  t = f32[64,64] exponential(x)
  b = f32[64,64] exponential(t)
  tt = f32[64,64] transpose(b), dimensions={1,0}
  m = f32[64,64] multiply(tt, y)
  ROOT o = (f32[64,64], f32[64,64]) tuple(m, b)
}
"""


def test_producer_read_through_a_transpose_stays_in_memory():
    x, y = (np.random.default_rng(8).standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    exe = _run(REREAD, [x, y])
    assert len(_fusions(exe)) == 2 and not any(f.shape.is_tuple for f in _fusions(exe))
    assert any(e.rule == "cpu-reread" for e in _entries(exe, "refused"))


def test_merged_loops_keep_to_the_operand_budget():
    """60 loops reading x and one parameter each: merging all would make one kernel of 61
    operands and 60 outputs, past XLA's 96 operands and outputs; the merges stop at the budget
    (refusals logged with rule budget) and every kernel stays within it."""
    from hlofuse.passes.fusion.cpu_multi_output import CPU_MAX_OPERANDS_AND_OUTPUTS

    n = 60
    lines = ["HloModule budget", "ENTRY main {", "  x = f32[32] parameter(0)"]
    lines += [f"  p{i} = f32[32] parameter({i + 1})" for i in range(n)]
    lines += [f"  a{i} = f32[32] add(x, p{i})" for i in range(n)]
    lines += [f"  ROOT t = ({', '.join(['f32[32]'] * n)}) tuple({', '.join(f'a{i}' for i in range(n))})", "}"]
    rng = np.random.default_rng(9)
    args = [rng.standard_normal(32).astype(np.float32) for _ in range(n + 1)]
    exe = _run("\n".join(lines), args)
    fusions = _fusions(exe)
    assert len(fusions) >= 2
    for f in fusions:
        assert len(f.operands) + len(f.shape.leaves()) <= CPU_MAX_OPERANDS_AND_OUTPUTS
    assert any(e.rule == "budget" for e in _entries(exe, "refused"))


def _slices_of_one_operand(n: int) -> str:
    """`n` loops of different dimensions (exp of a slice of x each) reading one operand: every
    sibling pair is refused (cpu-loop-dims), none merged."""
    body = [f"  s{k} = f32[{k + 1},32] slice(x), slice={{[0:{k + 1}], [0:32]}}\n"
            f"  e{k} = f32[{k + 1},32] exponential(s{k})" for k in range(n)]
    outs = ", ".join(f"e{k}" for k in range(n))
    types = ", ".join(f"f32[{k + 1},32]" for k in range(n))
    return ("HloModule slices\nENTRY main {\n  x = f32[64,32] parameter(0)\n" + "\n".join(body) +
            f"\n  ROOT t = ({types}) tuple({outs})\n}}\n")


def test_plain_loop_asked_once_per_sibling_between_changes(monkeypatch):
    """Sibling fusion asks whether each sibling is a plain loop once (FusionContext.plain_loop),
    not again for every pair it is in: n siblings that no pair merges cost n walks of their
    members, not n*(n-1)."""
    import hlofuse.passes.fusion.context as context

    calls = []
    real = context.is_plain_loop

    def counted(inst):
        calls.append(inst)
        return real(inst)

    monkeypatch.setattr(context, "is_plain_loop", counted)
    n = 12
    from hlofuse.compiler import optimize

    fused, _ = optimize(hlofuse.parse_hlo(_slices_of_one_operand(n)), "cpu")
    assert len([i for i in fused.entry.instructions if i.opcode == "fusion"]) == n  # none merged
    assert len(calls) == len(set(calls)) and len(calls) <= n + 1


def test_plain_loop_memo_forgets_on_graph_change():
    """A changed graph is asked again: `graph_changed` empties the memo."""
    from hlofuse.passes.fusion.context import FusionContext
    from hlofuse.passes.fusion.cost_model import target_params
    from hlofuse.passes.fusion.decisions import FusionLog

    module = hlofuse.parse_hlo(TWO_LOOPS)
    ctx = FusionContext.for_computation(module.entry, target_params("cpu"), FusionLog(), "test")
    a1 = next(i for i in module.entry.instructions if i.name == "a1")
    assert ctx.plain_loop(a1) and a1 in ctx.plain_loops
    ctx.graph_changed()
    assert not ctx.plain_loops
