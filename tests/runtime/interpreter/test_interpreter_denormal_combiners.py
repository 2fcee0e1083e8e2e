"""Reductions, windows and scatters of denormals: XLA:CPU's FTZ/DAZ applies to their combiner's
arithmetic, so a row of denormals sums to zero and its max is a zero of its sign.

The interpreter runs recognised combiners (add, multiply, max, min) as one numpy reduction or
`ufunc.at`, outside the per-instruction flushing of runtime/interpreter/denormals.py; before
op_helpers.FlushingCombiner it returned the denormal itself (a row max of 1e-40 was 1e-40,
XLA:CPU's 0, as found by a row-kernel test). Each case is checked bit for bit against XLA:CPU
itself and the compiled CPU backend, and in the "keep" mode (the real GPU's) the denormals stay.
"""
from __future__ import annotations

import numpy as np
import pytest

from xla_oracle import run_on_xla, xla_available  # noqa: E402

import hlofuse  # noqa: E402
from hlofuse.runtime.interpreter import evaluate  # noqa: E402

needs_xla = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA CPU client is not usable here")

COMBINERS = """
add {{ a = {t}[] parameter(0)  b = {t}[] parameter(1)  ROOT r = {t}[] add(a, b) }}
mul {{ a = {t}[] parameter(0)  b = {t}[] parameter(1)  ROOT r = {t}[] multiply(a, b) }}
max {{ a = {t}[] parameter(0)  b = {t}[] parameter(1)  ROOT r = {t}[] maximum(a, b) }}
min {{ a = {t}[] parameter(0)  b = {t}[] parameter(1)  ROOT r = {t}[] minimum(a, b) }}
"""
REDUCE = "HloModule m\n" + COMBINERS + """
ENTRY e {{
  x = {t}[6,16] parameter(0)
  zero = {t}[] constant(0)
  one = {t}[] constant(1)
  ninf = {t}[] constant(-inf)
  pinf = {t}[] constant(inf)
  s = {t}[6] reduce(x, zero), dimensions={{1}}, to_apply=add
  p = {t}[6] reduce(x, one), dimensions={{1}}, to_apply=mul
  hi = {t}[6] reduce(x, ninf), dimensions={{1}}, to_apply=max
  lo = {t}[6] reduce(x, pinf), dimensions={{1}}, to_apply=min
  w = {t}[6,8] reduce-window(x, ninf), window={{size=1x2 stride=1x2}}, to_apply=max
  ws = {t}[6,8] reduce-window(x, zero), window={{size=1x2 stride=1x2}}, to_apply=add
  ROOT t = ({t}[6], {t}[6], {t}[6], {t}[6], {t}[6,8], {t}[6,8]) tuple(s, p, hi, lo, w, ws)
}}
"""
SCATTER = "HloModule m\n" + COMBINERS + """
ENTRY e {{
  x = {t}[8] parameter(0)
  i = s32[5,1] parameter(1)
  u = {t}[5] parameter(2)
  ROOT s = {t}[8] scatter(x, i, u), update_window_dims={{}}, inserted_window_dims={{0}},
      scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add
}}
"""


def _rows(dtype, tiny: float) -> np.ndarray:
    """Rows of: one positive denormal among -1s; all positive denormals; one negative denormal
    among -1s; all negative denormals; a denormal beside +0/-0; normal numbers with denormals."""
    x = np.full((6, 16), -1.0, np.float64)
    x[0, 5] = tiny
    x[1, :] = tiny
    x[2, 9] = -tiny
    x[3, :] = -tiny
    x[4, :] = 0.0
    x[4, ::2] = -0.0
    x[4, 3] = tiny
    x[5, :] = np.arange(1, 17) * 0.25  # sums exact in any order
    x[5, ::3] = -tiny
    return x.astype(dtype)


def _bits(arrays):
    return [np.asarray(a).view(f"u{np.asarray(a).dtype.itemsize}").tolist() for a in arrays]


@needs_xla
@pytest.mark.parametrize("t,dtype,tiny", [("f32", np.float32, 1e-40), ("f64", np.float64, 1e-310)])
def test_reductions_and_windows_of_denormals_flush_as_xla(t, dtype, tiny):
    text = REDUCE.format(t=t)
    x = _rows(dtype, tiny)
    module = hlofuse.parse_hlo(text)
    want = run_on_xla(text, [x])
    got = evaluate(module, [x])
    assert _bits(got) == _bits(want)
    assert _bits(hlofuse.compile(module, target="cpu")(x)) == _bits(want)
    # XLA:CPU flushed them: the row max of denormals is a zero, not the denormal
    assert got[2][1] == 0 and got[0][1] == 0


@needs_xla
def test_scatter_add_of_denormals_flushes_only_what_it_combines():
    text = SCATTER.format(t="f32")
    x = np.array([1e-40, 2.0, -1e-40, 3.0, 1e-40, 0.0, 5.0, 1e-40], np.float32)
    idx = np.array([[1], [2], [2], [5], [3]], np.int32)
    upd = np.array([1e-40, 1e-40, 4.0, -1e-40, 1.0], np.float32)
    module = hlofuse.parse_hlo(text)
    want = run_on_xla(text, [x, idx, upd])
    got = evaluate(module, [x, idx, upd])
    assert _bits(got) == _bits(want)
    # untargeted elements are moved, not computed on: their denormals stay, as in XLA
    assert got[0][0] == np.float32(1e-40) and got[0][7] == np.float32(1e-40)
    assert _bits(hlofuse.compile(module, target="cpu")(x, idx, upd)) == _bits(want)


def test_keep_mode_keeps_the_denormals():
    x = _rows(np.float32, 1e-40)
    got = evaluate(hlofuse.parse_hlo(REDUCE.format(t="f32")), [x], denormals="keep")
    assert got[2][1] == np.float32(1e-40)  # max of a row of denormals
    assert got[0][1] == np.float32(1e-40) * 16  # their sum (exact: denormals add exactly)
