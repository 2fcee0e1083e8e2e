"""The GPU tree reduction rewriter (passes/tree_reduction_rewriter.py): reductions over more
elements than the GPU kernels fold well become reductions over about their square root each.
Expected values come from the interpreter (or, for the sum of ones, from counting)."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.tree_reduction_rewriter import COLUMN_BOUND, ROW_BOUND, TreeReductionRewriter
from hlofuse.runtime.compare import compare_outputs

ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"


def _reduce(dims: str, reduced: str, out: str, reducer: str = "add", dtype: str = "f32") -> str:
    body = ADD.replace("f32", dtype).replace("add(", f"{reducer}(")
    return (f"HloModule r\n{body}ENTRY e {{\n  x = {dtype}[{dims}] parameter(0)\n  z = {dtype}[] constant(0)\n"
            f"  ROOT r = {dtype}[{out}] reduce(x, z), dimensions={{{reduced}}}, to_apply=add\n}}\n")


def _reduces(module) -> list:
    return [i for i in module.entry.instructions if i.opcode == "reduce"]


def test_a_sum_of_more_ones_than_atomics_can_count_is_exact_on_the_gpu():
    """XLA's constant folding test module: 654,704,640 ones. Each thread's partial of 8 ones
    added into one f32 total stalled at 2^27 (1.34e8, 79% low); split three ways it is exact."""
    text = (f"HloModule ones\n{ADD}ENTRY e {{\n  c = f32[] constant(1)\n"
            "  x = f32[32,999,40,512] broadcast(c), dimensions={}\n  z = f32[] constant(0)\n"
            "  ROOT r = f32[] reduce(x, z), dimensions={0,1,2,3}, to_apply=add\n}\n")
    got = float(np.asarray(hlofuse.compile(parse_hlo(text), target="gpu-emulated", cache=False)()[0]))
    assert got == 32 * 999 * 40 * 512


@pytest.mark.parametrize("dims,reduced,out", [
    ("4,100003", "1", "4"),          # a row of a prime length: padded with the init
    ("3,20,2000", "1,2", "3"),       # two reduced dimensions collapsed into one run
    ("30000,5", "0", "5"),           # a column reduction (kept dimensions after the run)
    ("70000000", "0", ""),           # over the bound squared: the outer reduce is split again
])
def test_split_reductions_stay_within_the_bound_and_agree(dims, reduced, out):
    module = parse_hlo(_reduce(dims, reduced, out))
    assert TreeReductionRewriter().run(module)
    shapes = {tuple(i.operands[0].shape.dims): [int(d) for d in i.attrs["dimensions"]] for i in _reduces(module)}
    assert len(shapes) >= 2
    for in_dims, rdims in shapes.items():
        bound = COLUMN_BOUND if rdims[-1] < len(in_dims) - 1 else ROW_BOUND
        assert np.prod([in_dims[d] for d in rdims]) <= bound, (in_dims, rdims)
    if np.prod([int(d) for d in dims.split(",")]) > 10**7:
        return  # the rewrite's shape is the claim for the largest; running it is the next test's
    x = np.random.default_rng(3).standard_normal([int(d) for d in dims.split(",")]).astype(np.float32)
    text = _reduce(dims, reduced, out)
    got = hlofuse.compile(parse_hlo(text), target="gpu-emulated", cache=False)(x)
    want = hlofuse.compile(parse_hlo(text), target="interpreter")(x)
    for r in compare_outputs([np.asarray(g) for g in got], list(want)):
        assert r.ok, r


ARGMAX = """HloModule argmax
pick {
  a = f32[] parameter(0)
  ia = s32[] parameter(1)
  b = f32[] parameter(2)
  ib = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  nan = pred[] compare(a, a), direction=NE
  eq = pred[] compare(a, b), direction=EQ
  lower = pred[] compare(ia, ib), direction=LT
  tie = pred[] and(eq, lower)
  keep1 = pred[] or(gt, nan)
  keep = pred[] or(keep1, tie)
  v = f32[] select(keep, a, b)
  i = s32[] select(keep, ia, ib)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  x = f32[2,50000] parameter(0)
  i = s32[2,50000] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[2], s32[2]) reduce(x, i, ninf, zero), dimensions={1}, to_apply=pick
}
"""


def test_a_variadic_argmax_keeps_the_interpreters_answer():
    """Both reduces fold contiguous runs in order: jax's argmax (first NaN, lowest index among
    ties) gives the interpreter's bits on the emulated GPU after the split."""
    module = parse_hlo(ARGMAX)
    assert TreeReductionRewriter().run(module)
    x = np.round(np.random.default_rng(4).standard_normal((2, 50000)) * 2).astype(np.float32)  # many ties
    x[1, 31000] = np.nan
    x[1, 40000] = np.nan
    got = hlofuse.compile(parse_hlo(ARGMAX), target="gpu-emulated", cache=False)(x)
    want = hlofuse.compile(parse_hlo(ARGMAX), target="interpreter")(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g).view(np.uint8), np.asarray(w).view(np.uint8))


@pytest.mark.parametrize("text", [
    _reduce("4,100000", "1", "4", reducer="maximum"),    # order-free: XLA leaves max and min alone
    _reduce("4,100000", "1", "4", dtype="bf16"),          # narrow floats keep XLA:CPU's tree of 32s
    _reduce("100,3,100", "0,2", "3"),                     # reduced dimensions that are not one run
    _reduce("4,8192", "1", "4"),                          # at the bound
], ids=["max", "bf16", "not-a-run", "at-bound"])
def test_what_stays_one_reduce(text):
    module = parse_hlo(text)
    assert not TreeReductionRewriter().run(module)
    assert len(_reduces(module)) == 1


def test_the_gpu_pipeline_runs_it_and_the_cpu_pipeline_does_not():
    text = _reduce("4,100003", "1", "4")
    gpu = hlofuse.compile(parse_hlo(text), target="gpu-emulated", cache=False)
    cpu = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    count = lambda m: sum(i.opcode == "reduce" for c in m.computations for i in c.instructions)  # noqa: E731
    assert count(gpu.fused_module) == 2 and count(cpu.fused_module) == 1
