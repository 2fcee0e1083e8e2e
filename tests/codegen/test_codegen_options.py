"""LLVM code-generator switches (emitters/cpu/target.py apply_codegen_options): loop strength
reduction (on by default) changes a kernel loop's object code when toggled, toggling in one
process is deterministic (the same switch gives the same bytes), and a module compiled either
way computes the same bits, which agree with the interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import llvm_pool
from hlofuse.emitters.cpu import target
from hlofuse.runtime.interpreter import evaluate

# c[i] = max(a[i] + b[i], 0) over an unknown count: a vectorized loop with three address streams.
LOOP_IR = """
target triple = "{triple}"
target datalayout = "{layout}"

define void @k(ptr noalias %a, ptr noalias %b, ptr noalias %c, i64 %n) "prefer-vector-width"="512" {{
entry:
  br label %head
head:
  %i = phi i64 [0, %entry], [%j, %body]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %pa = getelementptr inbounds float, ptr %a, i64 %i
  %pb = getelementptr inbounds float, ptr %b, i64 %i
  %x = load float, ptr %pa
  %y = load float, ptr %pb
  %s = fadd float %x, %y
  %r = call float @llvm.maxnum.f32(float %s, float 0.0)
  %pc = getelementptr inbounds float, ptr %c, i64 %i
  store float %r, ptr %pc
  %j = add nsw i64 %i, 1
  br label %head
done:
  ret void
}}

declare float @llvm.maxnum.f32(float, float)
"""

MODULE = """HloModule rows

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

ENTRY main {
  p0 = f32[37,100] parameter(0)
  p1 = f32[100] parameter(1)
  b = f32[37,100] broadcast(p1), dimensions={1}
  a = f32[37,100] add(p0, b)
  t = f32[37,100] tanh(a)
  z = f32[] constant(0)
  r = f32[37] reduce(t, z), dimensions={1}, to_apply=sum
  ROOT out = (f32[37,100], f32[37]) tuple(t, r)
}
"""


def _loop_ir() -> str:
    tm = target.host_target_machine()
    import llvmlite.binding as llvm

    return LOOP_IR.format(triple=llvm.get_process_triple(), layout=str(tm.target_data))


def test_default_keeps_loop_strength_reduction():
    """Off, streaming kernels and convolutions ran up to 6% slower (target.py)."""
    assert target.LOOP_STRENGTH_REDUCTION is True


def test_switch_changes_the_loop_object_and_toggles_deterministically(monkeypatch):
    text = _loop_ir()
    objects = {}
    for value in (True, False, True, False):
        monkeypatch.setattr(target, "LOOP_STRENGTH_REDUCTION", value)
        obj = llvm_pool.compile_timed(text, 3)[0]
        assert len(obj) > 100
        assert objects.setdefault(value, obj) == obj  # the same switch, the same bytes
    assert objects[True] != objects[False]  # the option reached LLVM's code generator


def test_results_are_the_same_bits_either_way(monkeypatch):
    monkeypatch.setenv("HLOFUSE_MODULE_CACHE", "0")
    module = hlofuse.parse_hlo(MODULE)
    rng = np.random.default_rng(5)
    args = [rng.uniform(-2, 2, p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    outs = {}
    for value in (True, False):
        monkeypatch.setattr(target, "LOOP_STRENGTH_REDUCTION", value)
        exe = hlofuse.compile(hlofuse.parse_hlo(MODULE), "cpu", cache=False)
        outs[value] = [np.asarray(o) for o in exe(*args)]
    for on, off, want in zip(outs[True], outs[False], evaluate(module, args)):
        assert np.array_equal(on, off)
        np.testing.assert_allclose(off, want, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("value", [True, False])
def test_optimize_applies_the_switch(monkeypatch, value):
    """optimized_module (every path to kernel object code: compile_timed, dump, tests) sets the
    switch before the code generator runs."""
    monkeypatch.setattr(target, "LOOP_STRENGTH_REDUCTION", value)
    target.optimized_module(_loop_ir())
    assert target._applied["disable-lsr"] == ("0" if value else "1")
