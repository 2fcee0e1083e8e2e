"""Work units of the compiled select-and-scatter (codegen/kernels/cpu_select_scatter.py): where
windows of different source rows (the outermost dimension: a pooled batch) cannot overlap, the
rows are units that threads share, even when windows overlap inside a row (a 3x3 max pool of
stride 2); each row walks its windows in row-major order, so every result element combines its
picks in the interpreter's order: the same bits, ties and all."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse


def _pool_gradient(n: int, size: tuple, stride: tuple, pad: tuple, dtype: str = "f32") -> str:
    h = w = 9
    out = [(h + 2 * pad[1] - size[1]) // stride[1] + 1, (w + 2 * pad[2] - size[2]) // stride[2] + 1]
    src_n = (n + 2 * pad[0] - size[0]) // stride[0] + 1
    window = (f"size={size[0]}x{size[1]}x{size[2]}x1 stride={stride[0]}x{stride[1]}x{stride[2]}x1 "
              f"pad={pad[0]}_{pad[0]}x{pad[1]}_{pad[1]}x{pad[2]}_{pad[2]}x0_0")
    return f"""HloModule pool_gradient
ge {{ a = {dtype}[] parameter(0) b = {dtype}[] parameter(1) ROOT c = pred[] compare(a, b), direction=GE }}
add {{ a = {dtype}[] parameter(0) b = {dtype}[] parameter(1) ROOT c = {dtype}[] add(a, b) }}
ENTRY main {{
  x = {dtype}[{n},{h},{w},8] parameter(0)
  s = {dtype}[{src_n},{out[0]},{out[1]},8] parameter(1)
  zero = {dtype}[] constant(0)
  ROOT r = {dtype}[{n},{h},{w},8] select-and-scatter(x, s, zero), window={{{window}}}, select=ge, scatter=add
}}
"""


def _scatter_units(exe) -> int:
    (plan,) = [k for k in exe.program._planner.kernels if k.name.endswith("_sas")]
    return plan.units


@pytest.mark.parametrize("case,units", [
    (dict(n=6, size=(1, 3, 3), stride=(1, 2, 2), pad=(0, 1, 1)), 6),  # overlapping in the image
    (dict(n=6, size=(1, 2, 2), stride=(1, 2, 2), pad=(0, 0, 0)), 6),  # no overlap at all
    (dict(n=6, size=(2, 3, 3), stride=(1, 2, 2), pad=(0, 1, 1)), 1),  # rows overlap: one unit
])
def test_rows_are_units_where_their_windows_cannot_meet(case, units):
    text = _pool_gradient(**case)
    module = hlofuse.parse_hlo(text)
    rng = np.random.default_rng(4)
    # few distinct values: ties decide the picks, and overlapping windows pick the same element
    x = rng.integers(0, 3, [p.shape.dims for p in module.entry.parameters][0]).astype(np.float32)
    s = rng.standard_normal([p.shape.dims for p in module.entry.parameters][1]).astype(np.float32)
    exe = hlofuse.compile(module, "cpu", cache=False)
    assert _scatter_units(exe) == units
    got = np.asarray(exe(x, s)[0])
    want = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), "interpreter")(x, s)[0])
    np.testing.assert_array_equal(got, want)
