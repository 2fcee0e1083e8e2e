"""Loop and reduction kernels of the CPU backend on hand-written fused modules, checked
against numpy (float reductions are reassociated, so sums are compared with a tolerance)."""
from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

from backend_cases import ADD_MAX_F32, argmax_module, reduce_module
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.cpu_executor import CpuProgram

ADD = ADD_MAX_F32  # reducers "add" and "max"


def compile_text(text: str) -> CpuProgram:
    return CpuProgram.compile(parse_hlo(text))


def vectorized(ir_text: str) -> bool:
    return any(f"<{w} x float>" in ir_text for w in (4, 8, 16))


def test_loop_fusion_multi_output_vectorizes_and_is_exact():
    text = """HloModule m
fused {
  p0 = f32[300,257] parameter(0)
  p1 = f32[257] parameter(1)
  b = f32[300,257] broadcast(p1), dimensions={1}
  a = f32[300,257] add(p0, b)
  m = f32[300,257] multiply(a, a)
  ROOT t = (f32[300,257], f32[300,257]) tuple(a, m)
}
ENTRY e {
  x = f32[300,257] parameter(0)
  y = f32[257] parameter(1)
  ROOT f = (f32[300,257], f32[300,257]) fusion(x, y), kind=kLoop, calls=fused
}
"""
    prog = compile_text(text)
    assert len(prog._planner.kernels) == 1  # both outputs from one loop
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 257)).astype(np.float32)
    y = rng.standard_normal(257).astype(np.float32)
    a, m = prog.run([x, y])
    np.testing.assert_array_equal(a, x + y)
    np.testing.assert_array_equal(m, (x + y) * (x + y))
    ir_text = prog.llvm_ir()
    assert vectorized(ir_text)
    llvm.parse_assembly(ir_text).verify()


@pytest.mark.parametrize("dims,rdims", [
    ((64, 1000), (1,)),            # row
    ((1000, 64), (0,)),            # column
    ((33, 17, 9), (0, 1, 2)),      # full
    ((8, 50, 6), (1,)),            # middle dimension (column-like: minor kept)
    ((8, 50, 6), (0, 2)),          # non-adjacent set, minor reduced
    ((5, 7, 11, 13), (1, 3)),      # interleaved kept/reduced
    ((4, 3, 130), (0, 1)),         # leading dims: column with a block-split minor dim
])
def test_reductions_of_every_kind(dims, rdims):
    prog = compile_text(reduce_module(dims, rdims))
    x = np.random.default_rng(1).standard_normal(dims).astype(np.float32)
    (got,) = prog.run([x])
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=rdims), rtol=1e-5, atol=1e-4)


def test_max_reduction_propagates_nan():
    prog = compile_text(reduce_module((4, 100), (1,), "max", "-inf"))
    x = np.random.default_rng(2).standard_normal((4, 100)).astype(np.float32)
    x[2, 57] = np.nan
    (got,) = prog.run([x])
    np.testing.assert_array_equal(got, np.max(x, axis=1))


def test_row_reduction_vectorizes():
    ir_text = compile_text(reduce_module((64, 1024), (1,))).llvm_ir()
    assert vectorized(ir_text)
    assert "reassoc" in ir_text


def test_variadic_argmax_reduction():
    text = argmax_module((16, 300), 1)
    x = np.random.default_rng(3).standard_normal((16, 300)).astype(np.float32)
    x[5, 10] = x[5, 200] = 50.0  # tie: the lower index wins
    values, index = compile_text(text).run([x])
    np.testing.assert_array_equal(values, x.max(axis=1))
    np.testing.assert_array_equal(index, x.argmax(axis=1))


@pytest.mark.parametrize("rdim", [0, 1])
def test_multi_output_reduction_with_elementwise_output(rdim):
    """Two reductions of the same input plus an elementwise output, in one kernel."""
    out = "f32[40]" if rdim == 1 else "f32[70]"
    text = f"""HloModule mo
{ADD}
fused {{
  p0 = f32[40,70] parameter(0)
  e = f32[40,70] exponential(p0)
  sq = f32[40,70] multiply(p0, p0)
  c = f32[] constant(0)
  r1 = {out} reduce(e, c), dimensions={{{rdim}}}, to_apply=add
  r2 = {out} reduce(sq, c), dimensions={{{rdim}}}, to_apply=add
  ROOT t = ({out}, {out}, f32[40,70]) tuple(r1, r2, e)
}}
ENTRY e {{
  x = f32[40,70] parameter(0)
  ROOT f = ({out}, {out}, f32[40,70]) fusion(x), kind=kInput, calls=fused
}}
"""
    prog = compile_text(text)
    assert len(prog._planner.kernels) == 1
    x = np.random.default_rng(4).standard_normal((40, 70)).astype(np.float32)
    r1, r2, e = prog.run([x])
    np.testing.assert_allclose(e, np.exp(x), rtol=3e-7)
    np.testing.assert_allclose(r1, np.exp(x.astype(np.float64)).sum(rdim), rtol=1e-5)
    np.testing.assert_allclose(r2, (x.astype(np.float64) ** 2).sum(rdim), rtol=1e-5)


def test_reduce_feeding_elementwise_in_a_loop_fusion():
    """A reduce that is not the root is computed per element by its element generator."""
    text = f"""HloModule sm
{ADD}
fused {{
  p0 = f32[12,50] parameter(0)
  c = f32[] constant(0)
  s = f32[12] reduce(p0, c), dimensions={{1}}, to_apply=add
  b = f32[12,50] broadcast(s), dimensions={{0}}
  ROOT d = f32[12,50] divide(p0, b)
}}
ENTRY e {{
  x = f32[12,50] parameter(0)
  ROOT f = f32[12,50] fusion(x), kind=kLoop, calls=fused
}}
"""
    x = np.random.default_rng(5).random((12, 50)).astype(np.float32) + 0.5
    (got,) = compile_text(text).run([x])
    np.testing.assert_allclose(got, x / x.sum(1, keepdims=True), rtol=1e-5)


def test_horizontal_fusion_with_different_output_shapes():
    text = """HloModule h
fused {
  p0 = f32[100] parameter(0)
  p1 = f32[7,9] parameter(1)
  a = f32[100] negate(p0)
  b = f32[7,9] abs(p1)
  ROOT t = (f32[100], f32[7,9]) tuple(a, b)
}
ENTRY e {
  x = f32[100] parameter(0)
  y = f32[7,9] parameter(1)
  ROOT f = (f32[100], f32[7,9]) fusion(x, y), kind=kLoop, calls=fused
}
"""
    x = np.random.default_rng(6).standard_normal(100).astype(np.float32)
    y = np.random.default_rng(7).standard_normal((7, 9)).astype(np.float32)
    a, b = compile_text(text).run([x, y])
    np.testing.assert_array_equal(a, -x)
    np.testing.assert_array_equal(b, np.abs(y))


def test_reduce_window_and_map_as_kernels():
    text = f"""HloModule rw
{ADD}
sq {{
  a = f32[] parameter(0)
  ROOT m = f32[] multiply(a, a)
}}
ENTRY e {{
  x = f32[6,8] parameter(0)
  c = f32[] constant(0)
  m = f32[6,8] map(x), dimensions={{0,1}}, to_apply=sq
  ROOT r = f32[3,4] reduce-window(m, c), window={{size=2x2 stride=2x2}}, to_apply=add
}}
"""
    x = np.arange(48, dtype=np.float32).reshape(6, 8)
    (got,) = compile_text(text).run([x])
    np.testing.assert_allclose(got, (x * x).reshape(3, 2, 4, 2).sum(axis=(1, 3)))


@pytest.mark.parametrize("rdim", [0, 1])
def test_reduction_epilogue_in_one_kernel(rdim):
    """reduce followed by elementwise ops on its result (XLA's reduction epilogue fusion)."""
    n = 60 if rdim == 0 else 45
    text = f"""HloModule ep
{ADD}
fused {{
  p0 = f32[60,45] parameter(0)
  p1 = f32[{n if rdim else 45}] parameter(1)
  c = f32[] constant(0)
  s = f32[{45 if rdim == 0 else 60}] reduce(p0, c), dimensions={{{rdim}}}, to_apply=add
  k = f32[] constant(0.5)
  kb = f32[{45 if rdim == 0 else 60}] broadcast(k), dimensions={{}}
  m = f32[{45 if rdim == 0 else 60}] multiply(s, kb)
  ROOT r = f32[{45 if rdim == 0 else 60}] subtract(m, p1)
}}
ENTRY e {{
  x = f32[60,45] parameter(0)
  y = f32[{45 if rdim == 0 else 60}] parameter(1)
  ROOT f = f32[{45 if rdim == 0 else 60}] fusion(x, y), kind=kLoop, calls=fused
}}
""".replace(f"f32[{n if rdim else 45}] parameter(1)", f"f32[{45 if rdim == 0 else 60}] parameter(1)")
    prog = compile_text(text)
    assert len(prog._planner.kernels) == 1 and prog._planner.kernels[0].group is not None
    rng = np.random.default_rng(8)
    x = rng.standard_normal((60, 45)).astype(np.float32)
    y = rng.standard_normal(45 if rdim == 0 else 60).astype(np.float32)
    (got,) = prog.run([x, y])
    np.testing.assert_allclose(got, x.astype(np.float64).sum(rdim) * 0.5 - y, rtol=1e-5, atol=1e-5)


def test_softmax_fusion_materializes_its_reductions(monkeypatch):
    """A reduce broadcast back into the loop is computed once by its own kernel, not per element
    (when rows do not fit the row-kernel rule: codegen/row_fusion.py, tests/codegen/test_row_kernels.py)."""
    from hlofuse.codegen import row_fusion

    monkeypatch.setattr(row_fusion, "row_budget_bytes", lambda: 0)
    text = f"""HloModule smx
{ADD}
fused {{
  p0 = f32[32,300] parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[32] reduce(p0, ninf), dimensions={{1}}, to_apply=max
  mb = f32[32,300] broadcast(mx), dimensions={{0}}
  d = f32[32,300] subtract(p0, mb)
  e = f32[32,300] exponential(d)
  z = f32[] constant(0)
  s = f32[32] reduce(e, z), dimensions={{1}}, to_apply=add
  sb = f32[32,300] broadcast(s), dimensions={{0}}
  ROOT r = f32[32,300] divide(e, sb)
}}
ENTRY e {{
  x = f32[32,300] parameter(0)
  ROOT f = f32[32,300] fusion(x), kind=kLoop, calls=fused
}}
"""
    prog = compile_text(text)
    kinds = [k.group is not None for k in prog._planner.kernels]
    assert kinds == [True, True, False]  # max, then sum (reading max), then the loop
    x = (np.random.default_rng(9).standard_normal((32, 300)) * 5).astype(np.float32)
    (got,) = prog.run([x])
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-9)


def test_large_full_reduction_is_split_across_cores_then_combined():
    text = f"""HloModule full
{ADD}
fused {{
  x = f32[2048,300] parameter(0)
  c = f32[] constant(0)
  r = f32[] reduce(x, c), dimensions={{0,1}}, to_apply=add
  n = f32[] constant(614400)
  ROOT d = f32[] divide(r, n)
}}
ENTRY e {{
  x = f32[2048,300] parameter(0)
  ROOT f = f32[] fusion(x), kind=kInput, calls=fused
}}
"""
    prog = compile_text(text)
    assert [k.stage for k in prog._planner.kernels] == ["partial", "combine"]
    x = np.random.default_rng(10).random((2048, 300)).astype(np.float32)
    (got,) = prog.run([x])
    np.testing.assert_allclose(got, x.astype(np.float64).mean(), rtol=1e-6)
