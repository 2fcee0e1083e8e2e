"""Output (epilogue) fusion of dots on the CPU (passes/fusion/dot_fusion.py) and the kernels
that run it (codegen/kernels/cpu_gemm.py): a dot and its elementwise consumers become one
kOutput fusion with a recorded reason, run as one GEMM kernel (BLAS on a row panel, then the
epilogue on that panel), or for a small dot as one in-order reduction kernel; results checked
against the reference interpreter; what is refused, under which rule."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_arrays


def _compile_and_check(text: str, args: list, target: str = "cpu"):
    exe = hlofuse.compile(parse_hlo(text), target=target)
    got = exe(*args)
    want = hlofuse.compile(parse_hlo(text), target="interpreter")(*args)
    for k, (g, w) in enumerate(zip(got, want)):
        c = compare_arrays(g, w, k)
        assert c.ok, c.line()
    return exe


def _fusions(exe) -> list:
    return [i for i in exe.fused_module.entry.instructions if i.opcode == "fusion"]


def _mlp(m: int, k: int, n: int, dtype: str = "f32", out: str = "f32") -> str:
    return f"""HloModule mlp
ENTRY e {{
  x = {dtype}[{m},{k}] parameter(0)
  w = {dtype}[{k},{n}] parameter(1)
  bias = {out}[{n}] parameter(2)
  r = {out}[{m},{n}] parameter(3)
  d = {out}[{m},{n}] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  bb = {out}[{m},{n}] broadcast(bias), dimensions={{1}}
  a = {out}[{m},{n}] add(d, bb)
  z = {out}[] constant(0)
  zb = {out}[{m},{n}] broadcast(z), dimensions={{}}
  relu = {out}[{m},{n}] maximum(a, zb)
  ROOT s = {out}[{m},{n}] add(relu, r)
}}
"""


NP = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16, "f16": np.float16}


def _args(rng, m, k, n, dtype="f32", out="f32"):
    return [rng.standard_normal(s).astype(NP[t]) for s, t in
            [((m, k), dtype), ((k, n), dtype), ((n,), out), ((m, n), out)]]


@pytest.mark.parametrize("m,k,n", [(256, 128, 192), (1000, 64, 72), (70, 300, 33)])
@pytest.mark.parametrize("dtype,out", [("f32", "f32"), ("f64", "f64"), ("bf16", "bf16"), ("bf16", "f32")])
def test_bias_relu_residual_is_one_output_fusion(m, k, n, dtype, out):
    """dot + bias + relu + residual: one kOutput fusion, its reason recorded, one GEMM kernel."""
    rng = np.random.default_rng(m + k + n)
    exe = _compile_and_check(_mlp(m, k, n, dtype, out), _args(rng, m, k, n, dtype, out))
    (fusion,) = _fusions(exe)
    assert fusion.attrs["kind"] == "kOutput"
    assert {i.opcode for i in fusion.fused_computation.instructions} >= {"dot", "add", "maximum", "broadcast"}
    entries = [e for e in exe.fused_module.fusion_log.entries if e.action == "fused" and e.producer == "d"]
    assert entries and "output fusion" in entries[0].rule
    (step,) = [s for s in exe.program._entry.steps if s.kind == "kernel"]
    assert step.kernels[-1].custom == "gemm"


def test_in_place_epilogue_vectorizes_without_an_overlap_check():
    """The epilogue reads the dot's value from the output and writes the result over it: it
    must store through the pointer it loaded from, so LLVM vectorizes the column loop outright.
    With the store's address computed another way, LLVM added a run-time overlap check that
    the in-place loop always fails (distance 0), and every row ran the scalar loop."""
    import llvmlite.binding as llvm

    from hlofuse.codegen.cpu import emit_kernel_module
    from hlofuse.emitters.cpu.target import CpuTarget, optimized_module

    exe = _compile_and_check(_mlp(64, 96, 1000), _args(np.random.default_rng(8), 64, 96, 1000))
    (step,) = [s for s in exe.program._entry.steps if s.kind == "kernel"]
    kernel = step.kernels[-1]
    assert kernel.custom == "gemm" and not kernel.scratch
    text = str(emit_kernel_module(kernel, CpuTarget(), "epilogue_test"))
    llvm.parse_assembly(text).verify()
    opt = str(optimized_module(text))
    assert "vector.body" in opt and "x float>" in opt
    assert "diff.check" not in opt and "vector.memcheck" not in opt


@pytest.mark.parametrize("n", [10, 16, 32, 48])
def test_short_column_panels_keep_the_epilogue_off_gathers(n):
    """With a column panel of 10-48 columns LLVM fully unrolled the epilogue's column loop and
    vectorized its row loop instead, every vector gathered and scattered across rows (N = 32
    + bias + relu: the epilogue 7x slower). The row loop carries llvm.loop.vectorize.enable
    false when a panel has more than SHORT_EPILOGUE_ROW columns."""
    import llvmlite.binding as llvm

    from hlofuse.codegen.cpu import emit_kernel_module
    from hlofuse.emitters.cpu.target import CpuTarget, optimized_module

    exe = _compile_and_check(_mlp(2048, 64, n), _args(np.random.default_rng(n), 2048, 64, n))
    (step,) = [s for s in exe.program._entry.steps if s.kind == "kernel"]
    kernel = step.kernels[-1]
    assert kernel.custom == "gemm"
    text = str(emit_kernel_module(kernel, CpuTarget(), "short_panel_test"))
    llvm.parse_assembly(text).verify()
    assert re.search(r'"llvm\.loop\.vectorize\.enable", i1 (0|false)', text)
    opt = str(optimized_module(text))
    assert "masked.gather" not in opt and "masked.scatter" not in opt
    assert n < 16 or "x float>" in opt


@pytest.mark.parametrize("n", [1, 4])
def test_panels_of_a_few_columns_may_vectorize_across_rows(n):
    """Up to SHORT_EPILOGUE_ROW columns the rows are the epilogue's vectors (one column: the
    only ones); no hint, results as the interpreter's."""
    from hlofuse.codegen.cpu import emit_kernel_module
    from hlofuse.emitters.cpu.target import CpuTarget

    exe = _compile_and_check(_mlp(2048, 64, n), _args(np.random.default_rng(n), 2048, 64, n))
    kernel = [s for s in exe.program._entry.steps if s.kind == "kernel"][0].kernels[-1]
    assert kernel.custom == "gemm"
    text = str(emit_kernel_module(kernel, CpuTarget(), "few_columns_test"))
    assert not re.search(r'"llvm\.loop\.vectorize\.enable", i1 (0|false)', text)


def test_small_dot_epilogue_runs_as_one_reduction():
    """A small matrix-vector dot with a cheap producer (a square) on its vector operand and an
    add after it: one fusion, run as one reduction kernel with the epilogue fused. An expensive producer (exp) is not fused: the dot reads each vector
    element once per row (XLA:CPU's rule too)."""
    text = """HloModule mv
ENTRY e {
  x = f32[32,16] parameter(0)
  v = f32[16] parameter(1)
  b = f32[32] parameter(2)
  ev = f32[16] exponential(v)
  sq = f32[16] multiply(ev, ev)
  d = f32[32] dot(x, sq), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT a = f32[32] add(d, b)
}
"""
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(32, 16), (16,), (32,)]]
    exe = hlofuse.compile(parse_hlo(text), target="cpu")
    (fusion,) = [f for f in _fusions(exe) if f.attrs["kind"] == "kOutput"]
    assert {"multiply", "dot", "add"} <= {i.opcode for i in fusion.fused_computation.instructions}
    assert "exponential" not in {i.opcode for i in fusion.fused_computation.instructions}
    assert "expensive-reused" in _refusals(exe, "ev")
    (step,) = [s for s in exe.program._entry.steps if s.kind == "kernel" and s.inst is fusion]
    assert len(step.kernels) == 1 and step.kernels[0].group is not None  # one reduction kernel
    want = hlofuse.compile(parse_hlo(text), target="interpreter")(*args)
    c = compare_arrays(exe(*args)[0], want[0])  # a row reduction: the kernel may vectorize the sum
    assert c.ok, c.line()


def test_producer_fused_into_a_gemm_operand_is_packed():
    """A cheap producer (x*x) fused into a large dot's operand: the GEMM kernel's packing
    kernel computes it; an expensive one (tanh) is refused, the dot re-reads its elements."""
    text = """HloModule p
ENTRY e {
  x = f32[200,96] parameter(0)
  w = f32[96,150] parameter(1)
  t = f32[200,96] tanh(x)
  q = f32[200,96] multiply(t, t)
  d = f32[200,150] dot(q, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT s = f32[200,150] multiply(d, d)
}
"""
    rng = np.random.default_rng(2)
    exe = _compile_and_check(text, [rng.standard_normal((200, 96)).astype(np.float32),
                                    rng.standard_normal((96, 150)).astype(np.float32)])
    (fusion,) = [f for f in _fusions(exe) if f.attrs["kind"] == "kOutput"]
    ops = [i.opcode for i in fusion.fused_computation.instructions]
    assert ops.count("multiply") == 2 and "dot" in ops and "tanh" not in ops
    assert "expensive-reused" in _refusals(exe, "t")
    (step,) = [s for s in exe.program._entry.steps if s.kind == "kernel" and s.inst is fusion]
    assert [k.custom for k in step.kernels] == [None, "gemm"]  # the packing kernel, then the GEMM


def _refusals(exe, producer: str) -> set[str]:
    return {e.rule for e in exe.fused_module.fusion_log.entries if e.action == "refused" and e.producer == producer}


def test_dot_read_by_a_reduction_is_not_output_fused():
    """softmax(dot): the row max and sum read the dot at many indices; the dot stays its own."""
    text = """HloModule s
ENTRY e {
  x = f32[128,64] parameter(0)
  w = f32[64,96] parameter(1)
  d = f32[128,96] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  init = f32[] constant(-inf)
  mx = f32[128] reduce(d, init), dimensions={1}, to_apply=max
  mb = f32[128,96] broadcast(mx), dimensions={0}
  ROOT sub = f32[128,96] subtract(d, mb)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
"""
    rng = np.random.default_rng(3)
    exe = _compile_and_check(text, [rng.standard_normal((128, 64)).astype(np.float32),
                                    rng.standard_normal((64, 96)).astype(np.float32)])
    assert all(f.attrs["kind"] != "kOutput" for f in _fusions(exe))
    assert _refusals(exe, "d") & {"dot-output-shape", "dot-output-epilogue", "dot-output-elementwise",
                                  "expensive-duplicate"}


def test_integer_dot_is_not_output_fused():
    text = """HloModule i
ENTRY e {
  x = s32[64,300] parameter(0)
  w = s32[300,40] parameter(1)
  d = s32[64,40] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT n = s32[64,40] negate(d)
}
"""
    exe = _compile_and_check(text, [np.ones((64, 300), np.int32), np.arange(300 * 40, dtype=np.int32).reshape(300, 40)])
    assert "dot-output-type" in _refusals(exe, "d")


def test_dot_with_two_users_is_not_duplicated():
    text = """HloModule two
ENTRY e {
  x = f32[128,64] parameter(0)
  w = f32[64,96] parameter(1)
  d = f32[128,96] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a = f32[128,96] exponential(d)
  b = f32[128,96] negate(d)
  ROOT t = (f32[128,96], f32[128,96]) tuple(a, b)
}
"""
    rng = np.random.default_rng(4)
    exe = _compile_and_check(text, [rng.standard_normal((128, 64)).astype(np.float32),
                                    rng.standard_normal((64, 96)).astype(np.float32)])
    dots = [i for i in exe.fused_module.entry.instructions if i.opcode == "dot"]
    assert len(dots) == 1  # computed once, read by both users


def test_gpu_keeps_dots_unfused():
    """The rule is the CPU's: the GPU pipeline leaves the dot alone (and stays correct)."""
    rng = np.random.default_rng(5)
    exe = _compile_and_check(_mlp(64, 32, 48), _args(rng, 64, 32, 48), target="gpu-emulated")
    assert all(f.attrs["kind"] != "kOutput" for f in _fusions(exe))
    assert any(i.opcode == "dot" for i in exe.fused_module.entry.instructions)
