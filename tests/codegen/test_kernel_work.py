"""Each kernel's LLVM level from its work (codegen/kernel_work.py): a kernel of negligible work
that runs once per execution is compiled at llvm_pool.SMALL_KERNEL (a cheap pipeline, no
vector loop), a larger one and any kernel of a while loop at O3; both levels compute the
interpreter's values, and the level is part of a kernel's cache key."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import generic_kernels, kernel_work, llvm_pool
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, distinct_kernels, emit_kernel_module
from hlofuse.codegen.kernel_work import (elements_touched, kernel_level, kernel_work_ns, once_kernels,
                                         small_kernels, small_level_cost_ns)
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.runtime.cpu_executor import CpuProgram
from hlofuse.runtime.interpreter import evaluate

# A small elementwise kernel (f32[8,16], no transcendental op: cheap as scalar code, within the
# program's budget for small kernels), a large one (f32[256,1024]: 262,144 elements each way,
# about 52 us by the estimate) and a small row reduction (f32[8,32] -> f32[8]): three separate
# kernels (no operand in common).
TWO_SIZES = """HloModule two_sizes

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p0 = f32[8,16] parameter(0)
  p1 = f32[256,1024] parameter(1)
  p2 = f32[8,32] parameter(2)
  c0 = f32[8,16] add(p0, p0)
  small = f32[8,16] multiply(c0, p0)
  e1 = f32[256,1024] exponential(p1)
  large = f32[256,1024] multiply(e1, p1)
  zero = f32[] constant(0)
  rows = f32[8] reduce(p2, zero), dimensions={1}, to_apply=add_f32
  ROOT out = (f32[8,16], f32[256,1024], f32[8]) tuple(small, large, rows)
}
"""

# The same small elementwise work inside a while loop's body (run 5 times per call).
LOOPED = """HloModule looped

cond {
  s = (s32[], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[8,16] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  h = f32[] constant(0.5)
  hb = f32[8,16] broadcast(h), dimensions={}
  y = f32[8,16] multiply(x, hb)
  ROOT t = (s32[], f32[8,16]) tuple(j, y)
}

ENTRY main {
  p0 = f32[8,16] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[8,16]) tuple(z, p0)
  w = (s32[], f32[8,16]) while(init), condition=cond, body=body
  ROOT r = f32[8,16] get-tuple-element(w), index=1
}
"""


def _fused(text: str):
    return hlofuse.compiler.optimize(hlofuse.parse_hlo(text), "cpu", verify=False)[0]


def _args(module) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.uniform(-1, 1, p.shape.dims).astype(np.float32) for p in module.entry.parameters]


def _planned(text: str):
    fused = _fused(text)
    planner = CpuPlanner()
    planner.plan(fused.entry)
    return fused, planner


def test_small_and_large_kernels_of_one_module_get_different_levels_and_match_the_interpreter(monkeypatch):
    """The small kernels (elementwise and reduction) are compiled at SMALL_KERNEL, the large one
    at O3; every output matches the interpreter, and the same module with every kernel at O3
    (SMALL_KERNEL_NS 0) gives the same values within float tolerance."""
    # kernels told apart by their computations' shapes: kept (codegen/generic_kernels.py)
    monkeypatch.setattr(generic_kernels, "GENERIC_KERNELS", False)
    module = hlofuse.parse_hlo(TWO_SIZES)
    args = _args(module)
    prog = CpuProgram.compile(_fused(TWO_SIZES), cache=False)
    levels = {o.kernels[0].comp.root.shape.dims if o.kernels[0].comp.root.shape.is_array else None: o.speed_level
              for o in prog.code.objects}
    assert len(prog.code.objects) == 3
    assert levels[(8, 16)] == llvm_pool.SMALL_KERNEL
    assert levels[(8,)] == llvm_pool.SMALL_KERNEL
    assert levels[(256, 1024)] == 3
    want = evaluate(module, args)
    got = prog.run(args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)
    saved = kernel_work.SMALL_KERNEL_NS
    kernel_work.SMALL_KERNEL_NS = 0.0
    try:
        all_o3 = CpuProgram.compile(_fused(TWO_SIZES), cache=False)
    finally:
        kernel_work.SMALL_KERNEL_NS = saved
    assert {o.speed_level for o in all_o3.code.objects} == {3}
    for g, a in zip(got, all_o3.run(args)):
        np.testing.assert_allclose(g, a, rtol=2e-6, atol=1e-6)


def test_work_counts_the_elements_a_kernel_touches():
    """A kernel's work is at least its parameters' and outputs' elements at ELEMENT_NS: the
    small reduction reads 128 and writes 8 elements; the large kernel touches 2 x 262,144."""
    _, planner = _planned(TWO_SIZES)
    by_out = {k.comp.root.shape.dims: k for k in planner.kernels if k.comp.root.shape.is_array}
    assert elements_touched(by_out[(8,)].comp) == 8 * 32 + 1 + 8  # input, init value, output
    assert elements_touched(by_out[(256, 1024)].comp) == 2 * 256 * 1024
    assert kernel_work_ns(by_out[(256, 1024)]) >= 2 * 256 * 1024 * 0.1 - 1e-6
    assert kernel_work_ns(by_out[(8, 16)]) < kernel_work.SMALL_KERNEL_NS


def test_a_kernel_in_a_while_loop_stays_at_o3_and_matches_the_interpreter():
    """The loop body's kernel is as small as the one above, but runs once per iteration: it is
    not among the kernels that run once (once_kernels) and is compiled at O3."""
    module = hlofuse.parse_hlo(LOOPED)
    fused, planner = _planned(LOOPED)
    once = once_kernels(planner, fused.entry)
    assert planner.kernels and not any(id(k) in once for k in planner.kernels)
    assert not small_kernels(planner, fused.entry)
    prog = CpuProgram.compile(_fused(LOOPED), cache=False)
    assert prog.code.objects and {o.speed_level for o in prog.code.objects} == {3}
    args = _args(module)
    for g, w in zip(prog.run(args), evaluate(module, args)):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def test_the_cache_key_differs_by_level():
    """The same kernel planned once is two distinct kernels, two keys, at the two levels; the
    O3 key is the one it had before levels were chosen per kernel ('O3' in the key's text)."""
    fused, planner = _planned(TWO_SIZES)
    target = CpuTarget()
    small = [k for k in planner.kernels if k.comp.root.shape.is_array and k.comp.root.shape.dims == (8, 16)]
    assert id(small[0]) in small_kernels(planner, fused.entry)
    assert kernel_level(small=True) == llvm_pool.SMALL_KERNEL
    (as_small,) = distinct_kernels(small, target, small={id(small[0])})
    (as_o3,) = distinct_kernels(small, target)
    assert (as_small.speed_level, as_o3.speed_level) == (llvm_pool.SMALL_KERNEL, 3)
    assert as_small.key != as_o3.key
    assert llvm_pool.level_tag(3) == "O3" and llvm_pool.level_tag(llvm_pool.SMALL_KERNEL) != "O3"


def test_the_small_level_makes_no_vector_loop(monkeypatch):
    """The same loop kernel over f32[4096] (large enough that O3 vectorizes it) optimized at O3
    holds vector arithmetic; at SMALL_KERNEL it holds none, and its object is smaller."""
    text = TWO_SIZES.replace("f32[8,16]", "f32[64,64]")
    _, planner = _planned(text)
    (k,) = [k for k in planner.kernels if k.comp.root.shape.is_array and k.comp.root.shape.dims == (64, 64)]
    ir_text = str(emit_kernel_module(k, CpuTarget(), "k"))
    o3 = str(llvm_pool.optimized_kernel(ir_text, 3))
    small = str(llvm_pool.optimized_kernel(ir_text, llvm_pool.SMALL_KERNEL))
    assert "x float>" in o3 and "x float>" not in small
    assert len(llvm_pool.compile_timed(ir_text, llvm_pool.SMALL_KERNEL)[0]) < len(llvm_pool.compile_timed(ir_text, 3)[0])


@pytest.mark.parametrize("level", [llvm_pool.SMALL_KERNEL, 3])
def test_the_program_ir_and_assembly_show_each_kernel_at_its_level(level):
    """CpuCode.llvm_ir optimizes each kernel at the level it was compiled at."""
    code = CpuProgram.compile(_fused(TWO_SIZES), cache=False).code
    assert isinstance(code, CpuCode)
    names = [k.name for k in code.kernels if code.kernel_level(k) == level]
    assert names
    text = code.llvm_ir()
    assert all(f'@"{n}"' in text or f"@{n}(" in text for n in names)
    assert code.asm()


# Only small kernels, one with transcendental ops: its scalar cost (64 x 2 transcendentals) is
# far over the budget of a program whose whole work is a few hundred ns.
ALL_SMALL = """HloModule all_small

ENTRY main {
  p0 = f32[4,16] parameter(0)
  p1 = f32[8,8] parameter(1)
  e = f32[4,16] exponential(p0)
  t = f32[4,16] tanh(e)
  a = f32[8,8] add(p1, p1)
  ROOT out = (f32[4,16], f32[8,8]) tuple(t, a)
}
"""


def test_a_program_of_small_kernels_keeps_them_at_o3_past_its_budget():
    """The small kernels share a budget of SMALL_SHARE of the program's estimated call (its
    kernels' work and CALL_OVERHEAD_NS): in a program of small kernels only, the one with
    transcendental ops costs more than that as scalar code and stays at O3 (so a small jitted
    function is not slowed), the add of 64 floats fits within it; with the budget raised both
    are small, and with it lowered to the add's cost only the add."""
    fused, planner = _planned(ALL_SMALL)
    by_out = {k.comp.root.shape.dims: k for k in planner.kernels}
    call = kernel_work.CALL_OVERHEAD_NS + sum(kernel_work_ns(k) for k in planner.kernels)
    assert small_level_cost_ns(by_out[(4, 16)]) > kernel_work.SMALL_SHARE * call
    assert small_level_cost_ns(by_out[(8, 8)]) <= kernel_work.SMALL_SHARE * call
    assert small_kernels(planner, fused.entry) == {id(by_out[(8, 8)])}
    saved = kernel_work.SMALL_SHARE
    kernel_work.SMALL_SHARE = 1e6
    try:
        assert small_kernels(planner, fused.entry) == {id(k) for k in planner.kernels}
        kernel_work.SMALL_SHARE = small_level_cost_ns(by_out[(8, 8)]) * 0.99 / call
        assert not small_kernels(planner, fused.entry)
    finally:
        kernel_work.SMALL_SHARE = saved


def test_without_the_call_overhead_a_small_program_had_no_budget(monkeypatch):
    """The budget before CALL_OVERHEAD_NS: a share of nanoseconds of work, so even the add of
    64 floats was compiled at O3 (20-25 ms of LLVM on the Zen 1 host) to save part of a call it
    cannot measure."""
    monkeypatch.setattr(kernel_work, "CALL_OVERHEAD_NS", 0.0)
    fused, planner = _planned(ALL_SMALL)
    assert not small_kernels(planner, fused.entry)

# A batch-norm statistic of an NHWC batch: the mean of f32[64,32,32,64] over all but the
# channels, times a per-channel scale. A reduction of 64 channels over 65,536 rows is split across
# cores (codegen/planning.py): a partial stage of 16 slices, then a combine stage of the 16
# partial sums per channel with the epilogue (the divide and the scale).
SPLIT_STATISTICS = """HloModule split_statistics

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[64,32,32,64] parameter(0)
  scale = f32[64] parameter(1)
  zero = f32[] constant(0)
  sum = f32[64] reduce(x, zero), dimensions={0,1,2}, to_apply=add_f32
  n = f32[] constant(65536)
  nb = f32[64] broadcast(n), dimensions={}
  mean = f32[64] divide(sum, nb)
  ROOT scaled = f32[64] multiply(mean, scale)
}
"""


def test_a_split_reductions_combine_stage_counts_its_partial_sums_not_the_input():
    """The combine stage shares the fusion's computation with the partial stage but reads only
    the 16 partial sums per channel and the per-channel scale, and writes the output: its work is that (a few hundred ns), so it is compiled at the small level, while
    the partial stage, which reads the 4M-element input, stays at O3. Counted as the whole
    computation's elements (the input's), the combine was estimated at the partial stage's
    time and compiled at O3. Both stages' results match the interpreter."""
    fused, planner = _planned(SPLIT_STATISTICS)
    stages = {k.stage: k for k in planner.kernels if k.group is not None}
    assert set(stages) == {"partial", "combine"}, [k.stage for k in planner.kernels]
    partial, combine = stages["partial"], stages["combine"]
    assert combine.comp is partial.comp  # why the computation's elements misled the estimate
    assert elements_touched(combine.comp) >= 64 * 32 * 32 * 64
    # 16 partial sums per channel, the output and the scale (64 elements each)
    assert kernel_work.kernel_elements_touched(combine) == 16 * 64 + 64 + 64
    assert kernel_work_ns(combine) < kernel_work.SMALL_KERNEL_NS <= kernel_work_ns(partial)
    chosen = small_kernels(planner, fused.entry)
    assert id(combine) in chosen and id(partial) not in chosen
    module = hlofuse.parse_hlo(SPLIT_STATISTICS)
    args = _args(module)
    prog = CpuProgram.compile(_fused(SPLIT_STATISTICS), cache=False)
    assert sorted(o.speed_level for o in prog.code.objects) == sorted([3, llvm_pool.SMALL_KERNEL])
    for g, w in zip(prog.run(args), evaluate(module, args)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
