"""A reduction fusion's expensive input expression written once and read by a later fusion
(softmax's exp(x - max)): same results as recomputing it, and only where it applies."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import cpu as codegen_cpu
from hlofuse.codegen import row_fusion, shared_expressions
from repo_paths import EXAMPLES

SOFTMAX = """
HloModule softmax
max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[%(rows)d,%(cols)d] parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[%(rows)d] reduce(x, ninf), dimensions={1}, to_apply=max_f32
  mb = f32[%(rows)d,%(cols)d] broadcast(mx), dimensions={0}
  d = f32[%(rows)d,%(cols)d] subtract(x, mb)
  e = f32[%(rows)d,%(cols)d] %(op)s(d)
  zero = f32[] constant(0)
  s = f32[%(rows)d] reduce(e, zero), dimensions={1}, to_apply=add_f32
  sb = f32[%(rows)d,%(cols)d] broadcast(s), dimensions={0}
  ROOT r = f32[%(rows)d,%(cols)d] divide(e, sb)
}
"""


@pytest.fixture(autouse=True)
def _no_row_kernels(monkeypatch):
    """These softmax chains would otherwise run as one row kernel (codegen/row_fusion.py),
    which needs no shared expression: the tests here are about the multi-kernel plan."""
    monkeypatch.setattr(row_fusion, "row_budget_bytes", lambda: 0)


def _compile(op: str, rows: int = 37, cols: int = 300):
    return hlofuse.compile(hlofuse.parse_hlo(SOFTMAX % {"rows": rows, "cols": cols, "op": op}), target="cpu")


def _input(rows: int = 37, cols: int = 300) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32) * 4


def test_softmax_shares_exp_and_matches_numpy():
    exe = _compile("exponential")
    planner = exe.program._planner
    assert len(planner.shared) == 1 and tuple(planner.shared[0].dims) == (37, 300)
    x = _input()
    (out,) = exe(x)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=2e-6, atol=1e-9)


@pytest.mark.usefixtures("kernels_at_o3")  # both plans' reductions at one level (summation order)
def test_shared_values_are_bit_identical_to_recomputing(monkeypatch):
    x = _input()
    (shared,) = _compile("exponential")(x)
    monkeypatch.setattr(codegen_cpu, "share_candidate", lambda *a: None)
    # Same module text, other kernels: the compile cache must not hand back the sharing object.
    exe = _compile("exponential")
    assert not exe.program._planner.shared
    (recomputed,) = exe(x)
    np.testing.assert_array_equal(shared, recomputed)


def test_cheap_expression_is_recomputed():
    # negate is cheap: writing and reading it back would cost more than recomputing it.
    exe = _compile("negate")
    assert not exe.program._planner.shared
    x = _input()
    (out,) = exe(x)
    e = -(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 1), (64, 4096)])
def test_softmax_shapes(rows, cols):
    exe = _compile("exponential", rows, cols)
    x = _input(rows, cols)
    for _ in range(2):  # the shared buffer is reused by the second run
        (out,) = exe(x)
        e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
        np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=2e-6, atol=1e-9)


def test_structural_keys_tell_parameters_apart():
    module = hlofuse.parse_hlo(SOFTMAX % {"rows": 2, "cols": 3, "op": "exponential"})
    entry = module.entry
    x, mx = entry.instruction("x"), entry.instruction("mx")
    keys = shared_expressions._structural_keys(entry, [None])
    # Two different parameters of a fused computation read different outer operands.
    comp = hlofuse.parse_hlo("""
HloModule m
ENTRY f {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  ea = f32[4] exponential(a)
  eb = f32[4] exponential(b)
  ROOT t = (f32[4], f32[4]) tuple(ea, eb)
}
""").entry
    same = shared_expressions._structural_keys(comp, [x, x])
    diff = shared_expressions._structural_keys(comp, [x, mx])
    ea, eb = comp.instruction("ea"), comp.instruction("eb")
    assert same[ea] == same[eb]
    assert diff[ea] != diff[eb]
    assert keys[entry.instruction("d")] != keys[entry.instruction("e")]


def test_fresh_arrays_each_run_are_read_from_their_own_memory():
    # The executor remembers array addresses by id; a new array may reuse a dead one's id.
    exe = _compile("exponential", 5, 40)
    for seed in range(20):
        x = np.random.default_rng(seed).standard_normal((5, 40)).astype(np.float32)
        (out,) = exe(x.copy())
        e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
        np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=2e-6, atol=1e-9)
        del out


def test_kernel_step_takes_strided_and_scalar_operands():
    # Library rules may hand a kernel step views or numpy scalars; the executor copies them
    # into contiguous arrays that stay alive while the kernels run.
    exe = hlofuse.compile(hlofuse.parse_hlo("""
HloModule m
ENTRY f {
  x = f32[64,48] parameter(0)
  s = f32[] parameter(1)
  b = f32[64,48] broadcast(s), dimensions={}
  e = f32[64,48] exponential(x)
  ROOT r = f32[64,48] multiply(e, b)
}
"""), target="cpu")
    base = np.random.default_rng(1).standard_normal((48, 64)).astype(np.float32)
    for _ in range(3):
        out = exe.program.call(exe.fused_module.entry, [base.T, np.float32(3.0)])
        np.testing.assert_allclose(out, np.exp(base.T) * 3.0, rtol=1e-6)


def test_structural_keys_compare_whole_constants():
    # Large constants differ in an element numpy's repr would elide ("...").
    a = np.zeros(2000, np.float32)
    b = a.copy()
    b[1000] = 1
    comp = hlofuse.parse_hlo("""
HloModule m
ENTRY f {
  p = f32[2000] parameter(0)
  ROOT c = f32[2000] constant({...})
}
""").entry
    c = comp.root
    c.literal = a
    k1 = shared_expressions._structural_keys(comp, [None])[c]
    c.literal = b
    k2 = shared_expressions._structural_keys(comp, [None])[c]
    assert k1 != k2


# ---- the decision in the fusion report --------------------------------------------------------

def _softmax_example():
    return hlofuse.load(str(EXAMPLES / "softmax.hlo"))


def _fusion_reading(module, opcode: str):
    """The entry fusion of `module` whose fused computation's root is an `opcode`."""
    (fusion,) = [i for i in module.entry.instructions
                 if i.opcode == "fusion" and i.fused_computation.root.opcode == opcode]
    return fusion


def test_softmax_example_report_shows_the_shared_expression():
    exe = hlofuse.compile(_softmax_example(), target="cpu")
    writer = _fusion_reading(exe.fused_module, "reduce")  # exp(x - max) summed per row
    reader = _fusion_reading(exe.fused_module, "divide")  # exp(x - max) / sum
    report = exe.fusion_report()
    (entry,) = report.planned
    assert (entry.pass_name, entry.rule, entry.producer, entry.consumer) == (
        "kernel-planner", "shared-expression", writer.name, reader.name)
    assert "exponential" in entry.reason
    text = report.to_text()
    assert "Kernel planner decisions (1):" in text
    assert f"  {writer.name} -> {reader.name} [kernel-planner/shared-expression]: " in text
    data = exe.report()
    assert [(d["producer"], d["consumer"], d["pass"]) for d in data["planned"]] == [
        (writer.name, reader.name, "kernel-planner")]
    # The decision is the one the planner took: one shared buffer of the exp's shape.
    (shape,) = exe.program._planner.shared
    assert tuple(shape.dims) == tuple(_softmax_example().entry.instruction("exp.1").shape.dims)


def test_report_has_no_planner_decision_when_nothing_is_shared(monkeypatch):
    # Cheap expression (recomputed), the GPU (no sharing), and a CPU planner told not to share.
    assert not _compile("negate").fusion_report().planned
    assert not hlofuse.compile(_softmax_example(), target="gpu-emulated").fusion_report().planned
    monkeypatch.setattr(codegen_cpu, "share_candidate", lambda *a: None)
    exe = hlofuse.compile(_softmax_example(), target="cpu")
    assert not exe.program._planner.shared and not exe.fusion_report().planned
    assert "Kernel planner decisions" not in exe.fusion_report().to_text()


def test_planner_decision_is_recorded_once_per_fused_module():
    from hlofuse.passes.fusion.decisions import module_log
    from hlofuse.runtime.cpu_executor import CpuProgram

    exe = hlofuse.compile(_softmax_example(), target="cpu")
    CpuProgram.compile(exe.fused_module)  # planned again (cache hit): the same decision
    assert len(module_log(exe.fused_module).planner_decisions()) == 1
    assert len(exe.fusion_report().planned) == 1
