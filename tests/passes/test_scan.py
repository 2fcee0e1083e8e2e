"""XLA's `scan` (found missing by running XLA's own test modules: "unknown opcode 'scan'"):
its shape rule, the interpreter's reference (against numpy and against XLA:CPU running the
same text), and the scan expander that turns it into a while loop for the compiled backends
(against the interpreter, fused and unfused)."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.errors import VerifierError
from hlofuse.hlo.printer import module_to_text
from hlofuse.hlo.verifier import verify
from hlofuse.passes.scan_expander import ScanExpander
from hlofuse.runtime.interpreter import evaluate

# A running sum over the rows of a (the carry), with a second output (b converted): outputs
# are stacked along dimension 0, the carry comes back last.
ROWS = """HloModule rows
body {
  x = f32[3] parameter(0)
  y = s32[] parameter(1)
  c = f32[3] parameter(2)
  s = f32[3] add(x, c)
  yc = f32[] convert(y)
  ROOT t = (f32[3], f32[], f32[3]) tuple(s, yc, s)
}
ENTRY e {
  a = f32[4,3] parameter(0)
  b = s32[4] parameter(1)
  i = f32[3] parameter(2)
  ROOT r = (f32[4,3], f32[4], f32[3]) scan(a, b, i), dimensions={0}, num_carries=1, REVERSEto_apply=body
}
"""

# Along dimension 1, two carries (a running maximum and a count), no stacked input other than x,
# an output of rank 1 stacked in the middle of its result.
COLUMNS = """HloModule columns
add {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT s = f32[] add(p, q)
}
body {
  x = f32[5,2] parameter(0)
  m = f32[5,2] parameter(1)
  n = s32[] parameter(2)
  mx = f32[5,2] maximum(x, m)
  one = s32[] constant(1)
  n1 = s32[] add(n, one)
  z = f32[] constant(0)
  col = f32[5] reduce(mx, z), dimensions={1}, to_apply=add
  ROOT t = (f32[5], f32[5,2], s32[]) tuple(col, mx, n1)
}
ENTRY e {
  x = f32[5,6,2] parameter(0)
  m0 = f32[5,2] parameter(1)
  n0 = s32[] parameter(2)
  ROOT r = (f32[5,6], f32[5,2], s32[]) scan(x, m0, n0), dimensions={1}, num_carries=2, to_apply=body
}
"""


def _rows(reverse: bool) -> str:
    return ROWS.replace("REVERSE", "is_reverse=true, " if reverse else "")


def _rows_args():
    rng = np.random.default_rng(7)
    return [rng.standard_normal((4, 3)).astype(np.float32), rng.integers(-9, 9, 4).astype(np.int32),
            rng.standard_normal(3).astype(np.float32)]


def _columns_args():
    rng = np.random.default_rng(8)
    return [rng.standard_normal((5, 6, 2)).astype(np.float32), rng.standard_normal((5, 2)).astype(np.float32),
            np.int32(3)]


def _numpy_rows(a, b, i, reverse: bool):
    order = range(3, -1, -1) if reverse else range(4)
    out, carry = np.zeros_like(a), i.copy()
    for k in order:
        carry = (a[k] + carry).astype(np.float32)
        out[k] = carry
    return [out, b.astype(np.float32), carry]


def _numpy_columns(x, m0, n0):
    cols, m = np.zeros((5, 6), np.float32), m0
    for k in range(6):
        m = np.maximum(x[:, k, :], m)
        cols[:, k] = m.sum(axis=1)
    return [cols, m, np.int32(n0 + 6)]


def test_shape_rule_and_printing():
    """The result: each output stacked along the scan dimension, then the carries; the
    attributes print in XLA's order."""
    m = hlofuse.parse_hlo(_rows(True))
    assert str(m.entry.root.shape) == "(f32[4,3]{1,0}, f32[4]{0}, f32[3]{0})"
    assert "dimensions={0}, num_carries=1, is_reverse=true, to_apply=%body" in module_to_text(m)
    assert str(hlofuse.parse_hlo(COLUMNS).entry.root.shape) == "(f32[5,6]{1,0}, f32[5,2]{1,0}, s32[])"


@pytest.mark.parametrize("edit,message", [
    (("f32[3]) scan(a", "f32[5]) scan(a"), "differs from the inferred"),  # declared carry shape
    (("  y = s32[] parameter(1)", "  y = s64[] parameter(1)"), "must take"),  # to_apply's slice parameter
    (("b = s32[4] parameter(1)", "b = s32[5] parameter(1)"), "input 1"),  # inputs of different lengths
    (("num_carries=1", "num_carries=4"), "num_carries=4"),
    (("dimensions={0}", "dimensions={2}"), "out of range"),
    (("ROOT t = (f32[3], f32[], f32[3]) tuple(s, yc, s)", "ROOT t = (f32[3], f32[], f32[]) tuple(s, yc, yc)"),
     "carry 0"),
])
def test_shape_rule_refusals(edit, message):
    text = _rows(False).replace(*edit)
    with pytest.raises(VerifierError, match=message):
        verify(hlofuse.parse_hlo(text))


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_interpreter_against_numpy(reverse):
    args = _rows_args()
    got = evaluate(hlofuse.parse_hlo(_rows(reverse)), args)
    for g, w in zip(got, _numpy_rows(*args, reverse)):
        np.testing.assert_array_equal(g, w)
    x = _columns_args()
    for g, w in zip(evaluate(hlofuse.parse_hlo(COLUMNS), x), _numpy_columns(*x)):
        np.testing.assert_allclose(g, w, rtol=1e-6)


@pytest.mark.parametrize("case", ["forward", "reverse", "columns"])
def test_interpreter_against_xla(case):
    """XLA:CPU (jaxlib) runs the same text: the interpreter's scan is XLA's."""
    xla_reference = pytest.importorskip("hlofuse.runtime.xla_reference")
    pytest.importorskip("jax")
    text, args = (COLUMNS, _columns_args()) if case == "columns" else (_rows(case == "reverse"), _rows_args())
    theirs = xla_reference.compile_for_xla_cpu(text)(*args)
    ours = evaluate(hlofuse.parse_hlo(text), args)
    for g, w in zip(ours, theirs):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-6)


def test_the_expander_leaves_a_while_loop():
    m = hlofuse.parse_hlo(COLUMNS)
    assert ScanExpander().run(m)
    ops = {i.opcode for c in m.computations for i in c.instructions}
    assert "scan" not in ops and "while" in ops
    assert not ScanExpander().run(m)


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("case", ["forward", "reverse", "columns"])
def test_compiled_backends_against_the_interpreter(case, target, fusion):
    text, args = (COLUMNS, _columns_args()) if case == "columns" else (_rows(case == "reverse"), _rows_args())
    module = hlofuse.parse_hlo(text)
    want = hlofuse.compile(module, target="interpreter", fusion=False)(*args)
    got = hlofuse.compile(module, target=target, fusion=fusion)(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def test_the_interpreter_target_runs_scan_itself():
    """The oracle does not run the expander's while loop: its optimized module keeps the scan."""
    fused, _ = hlofuse.compiler.optimize(hlofuse.parse_hlo(COLUMNS), "interpreter", fusion=False)
    assert any(i.opcode == "scan" for i in fused.entry.instructions)
