"""Loop kernels whose last dimension is 5..31 long (flat mode) walk short rows where flat mode
would gather (codegen/kernels/cpu_loop.short_rows): some read is not at the linear index, every
parameter is read along the rows contiguously or as a splat, and the rows are a multiple of 4 or
the element is cheap. The values are the interpreter's either way."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import cpu_loop
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.interpreter import evaluate


def _text(rows: int, n: int, element: str) -> str:
    """x * w[col] + c[row] over f32[rows, n], then `element` of it (identity if empty)."""
    tail = f"\n  ROOT t = f32[{rows},{n}] {element}(a)" if element else ""
    root = "" if element else "ROOT "
    return f"""HloModule m
ENTRY e {{
  x = f32[{rows},{n}] parameter(0)
  w = f32[{n}] parameter(1)
  c = f32[{rows}] parameter(2)
  bw = f32[{rows},{n}] broadcast(w), dimensions={{1}}
  bc = f32[{rows},{n}] broadcast(c), dimensions={{0}}
  m = f32[{rows},{n}] multiply(x, bw)
  {root}a = f32[{rows},{n}] add(m, bc){tail}
}}
"""


TRANSPOSED = """HloModule m
ENTRY e {
  x = f32[16,64] parameter(0)
  t = f32[64,16] transpose(x), dimensions={1,0}
  ROOT n = f32[64,16] negate(t)
}
"""

ELEMENTWISE = """HloModule m
ENTRY e {
  x = f32[64,16] parameter(0)
  y = f32[64,16] parameter(1)
  ROOT a = f32[64,16] add(x, y)
}
"""


def _short_rows(text: str) -> bool:
    comp = parse_hlo(text).entry
    return cpu_loop.short_rows(comp, [comp.root], tuple(comp.root.shape.dims))


@pytest.mark.parametrize("text,rows", [
    (_text(64, 16, ""), True),  # broadcasts along rows and columns: splats and whole vectors
    (_text(64, 7, ""), True),  # a cheap element: rows of any length
    (_text(64, 12, "tanh"), True),  # a math function over rows of whole 4-lane groups
    (_text(64, 7, "tanh"), False),  # ... but not over odd rows: flat mode interleaves it
    (_text(64, 32, ""), False),  # rows mode already
    (ELEMENTWISE, False),  # every read at the linear index: flat mode vectorizes it whole
    (TRANSPOSED, False),  # a transposed read gathers either way
], ids=["bcast-16", "bcast-7", "tanh-12", "tanh-7", "long-rows", "elementwise", "transposed"])
def test_which_kernels_walk_short_rows(text, rows):
    assert _short_rows(text) == rows


@pytest.mark.parametrize("n,element", [(16, ""), (7, ""), (12, "tanh"), (24, "exponential")])
def test_short_rows_compute_the_interpreters_values(n, element, monkeypatch):
    text = _text(300, n, element)
    rng = np.random.default_rng(n)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in parse_hlo(text).entry.parameters]
    want = evaluate(parse_hlo(text), args)[0]
    outs = []
    for on in (True, False):
        monkeypatch.setattr(cpu_loop, "SHORT_ROWS", on)
        got = hlofuse.compile(parse_hlo(text), "cpu", cache=False)(*args)
        outs.append(np.asarray(got[0] if isinstance(got, (list, tuple)) else got))
    np.testing.assert_array_equal(outs[0], outs[1])  # the same element code in another loop
    np.testing.assert_allclose(outs[0], want, rtol=2e-6, atol=1e-6)
