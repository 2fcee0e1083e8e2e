"""CPU multi-output fusion of a reduction with plain loops over its input dimensions
(passes/fusion/cpu_multi_output.py): the reduction kernel computes the loops' outputs at each
input index it folds (its extras), so the common operand is read once and what both compute
from it is computed once.

Expected values come from the interpreter (the oracle), and each output of the merged kernel
is compared bit for bit with a module computing that output alone (its own kernel): merging
must not change what a kernel computes."""
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

# t = exp(tanh(x) / 2) read by two loops (t * a, t + b) and a reduction over `dims` (the
# benchmark's shared_producer, any reduced dimensions).
SHARED = "HloModule shared\n" + ADD + """
ENTRY main {
  x = f32[%(shape)s] parameter(0)
  a = f32[%(shape)s] parameter(1)
  b = f32[%(shape)s] parameter(2)
  th = f32[%(shape)s] tanh(x)
  h = f32[] constant(0.5)
  hb = f32[%(shape)s] broadcast(h), dimensions={}
  m = f32[%(shape)s] multiply(th, hb)
  t = f32[%(shape)s] exponential(m)
  ta = f32[%(shape)s] multiply(t, a)
  tb = f32[%(shape)s] add(t, b)
  z = f32[] constant(0)
  s = f32[%(out)s] reduce(t, z), dimensions={%(dims)s}, to_apply=add
  ROOT o = (f32[%(shape)s], f32[%(shape)s], f32[%(out)s]) tuple(ta, tb, s)
}
"""

CASES = {
    # rows (one output per row), columns (blocks of columns), a column reduction with one
    # block split across cores (partial + combine kernels), and a full reduction (split too)
    "rows": ((64, 96), (1,)),
    "columns": ((96, 80), (0,)),
    "columns-split": ((40000, 8), (0,)),
    "full": ((300, 500), (0, 1)),
}


def _module(shape: tuple, dims: tuple) -> str:
    out = [n for d, n in enumerate(shape) if d not in dims]
    return SHARED % {"shape": ",".join(map(str, shape)), "out": ",".join(map(str, out)),
                     "dims": ",".join(map(str, dims))}


def _alone(text: str, index: int) -> str:
    """`text` with the root replaced by a copy of its output `index` (ta, tb, s) alone."""
    head, _, _ = text.rpartition("  ROOT o")
    name = ["ta", "tb", "s"][index]
    shape = next(line.split("=")[1].split()[0] for line in text.splitlines() if line.strip().startswith(f"{name} ="))
    return head + f"  ROOT o = {shape} copy({name})\n}}\n"


def _inputs(shape: tuple) -> list:
    rng = np.random.default_rng(11)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]


@pytest.mark.parametrize("case", list(CASES))
def test_loops_over_the_input_join_the_reduction(case):
    """One kernel computes t * a, t + b and the reduction of t, each output equal to the
    interpreter's and bit-identical to a kernel computing it alone."""
    shape, dims = CASES[case]
    text = _module(shape, dims)
    args = _inputs(shape)
    exe = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu")
    assert module_cost(exe.fused_module).kernels == 1
    (fusion,) = [i for i in exe.fused_module.entry.instructions if i.opcode == "fusion"]
    assert {i.opcode for i in fusion.fused_computation.instructions} >= {"tanh", "exponential", "reduce", "add"}
    got = [np.asarray(o) for o in exe(*args)]
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(*args)
    for r in compare_outputs(got, list(want)):
        assert r.ok, r
    for k in range(3):
        alone = hlofuse.compile(hlofuse.parse_hlo(_alone(text, k)), target="cpu")
        (only,) = alone(*args)  # a one-output module returns a one-element sequence
        np.testing.assert_array_equal(got[k], np.asarray(only))


def test_the_shared_producer_is_computed_in_the_merged_kernel():
    """tanh(x), read by both siblings, was left out of each (an expensive duplicate); once they
    are one kernel it is fused into it, with no output of its own."""
    shape, dims = CASES["rows"]
    exe = hlofuse.compile(hlofuse.parse_hlo(_module(shape, dims)), target="cpu")
    (fusion,) = [i for i in exe.fused_module.entry.instructions if i.opcode == "fusion"]
    assert len(fusion.shape.leaves()) == 3  # ta, tb, s: no output for tanh(x)
    rules = [e.rule for e in exe.fused_module.fusion_log.entries if e.action == "fused"]
    assert any("only user's kernel" in r for r in rules), rules


REREAD_BY_REDUCE_OUTPUT = "HloModule reread\n" + ADD + """
ENTRY main {
  x = f32[64,96] parameter(0)
  t = f32[64,96] exponential(x)
  z = f32[] constant(0)
  s = f32[64] reduce(t, z), dimensions={1}, to_apply=add
  e = f32[64] exponential(s)
  ROOT o = (f32[64,96], f32[64]) tuple(t, e)
}
"""


def test_reduction_and_loop_of_its_output_dimensions_stay_apart():
    """A loop over the reduce's output (not its input) dimensions is no extra of the reduction
    kernel: the sibling rule refuses the pair and says why."""
    from hlofuse.passes.fusion.cpu_multi_output import cpu_sibling_rule

    by_name = {i.name: i for i in hlofuse.parse_hlo(REREAD_BY_REDUCE_OUTPUT).entry.instructions}
    d = cpu_sibling_rule(by_name["s"], by_name["e"], by_name["x"])
    assert not d and d.rule == "cpu-loop-dims" and "input dimensions" in d.reason
