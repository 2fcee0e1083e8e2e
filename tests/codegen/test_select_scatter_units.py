"""The compiled select-and-scatter (codegen/kernels/cpu_select_scatter.py). Work units: where
windows of different source rows (the outermost dimension: a pooled batch) cannot overlap, the
rows are units that threads share, even when windows overlap inside a row (a 3x3 max pool of
stride 2); each row walks its windows in row-major order, so every result element combines its
picks in the interpreter's order. Channels: where the window takes one element of the last
dimension, a row of it is selected at once (compares and selects LLVM vectorises) and combined
in the same order. Either way the interpreter's bits, ties and all."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse


def _pool_gradient(n: int, size: tuple, stride: tuple, pad: tuple, dtype: str = "f32", channels: int = 8,
                   direction: str = "GE", scatter: str = "add", last: tuple = (1, 1)) -> str:
    h = w = 9
    out = [(h + 2 * pad[1] - size[1]) // stride[1] + 1, (w + 2 * pad[2] - size[2]) // stride[2] + 1]
    src_n = (n + 2 * pad[0] - size[0]) // stride[0] + 1
    src_c = (channels - last[0]) // last[1] + 1
    window = (f"size={size[0]}x{size[1]}x{size[2]}x{last[0]} stride={stride[0]}x{stride[1]}x{stride[2]}x{last[1]} "
              f"pad={pad[0]}_{pad[0]}x{pad[1]}_{pad[1]}x{pad[2]}_{pad[2]}x0_0")
    return f"""HloModule pool_gradient
ge {{ a = {dtype}[] parameter(0) b = {dtype}[] parameter(1) ROOT c = pred[] compare(a, b), direction={direction} }}
add {{ a = {dtype}[] parameter(0) b = {dtype}[] parameter(1) ROOT c = {dtype}[] {scatter}(a, b) }}
ENTRY main {{
  x = {dtype}[{n},{h},{w},{channels}] parameter(0)
  s = {dtype}[{src_n},{out[0]},{out[1]},{src_c}] parameter(1)
  zero = {dtype}[] constant(0)
  ROOT r = {dtype}[{n},{h},{w},{channels}] select-and-scatter(x, s, zero), window={{{window}}}, select=ge, scatter=add
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


@pytest.mark.parametrize("dtype,channels,direction,scatter,last", [
    ("f32", 20, "GE", "add", (1, 1)),  # channels not a whole number of vectors
    ("f32", 64, "GT", "add", (1, 1)),  # a strict compare: ties keep the first pick
    ("s32", 16, "LE", "maximum", (1, 1)),  # a min-pool's select, another scatter
    ("bf16", 24, "GE", "add", (1, 1)),
    ("f32", 9, "GE", "add", (2, 1)),  # two channels a window: the element-at-a-time kernel
])
def test_channel_rows_give_the_interpreters_bits(dtype, channels, direction, scatter, last):
    import ml_dtypes

    text = _pool_gradient(4, (1, 3, 3), (1, 2, 2), (0, 1, 1), dtype, channels, direction, scatter, last)
    module = hlofuse.parse_hlo(text)
    x_dims, s_dims = [p.shape.dims for p in module.entry.parameters][:2]
    rng = np.random.default_rng(channels)
    np_type = {"f32": np.float32, "s32": np.int32, "bf16": ml_dtypes.bfloat16}[dtype]
    x = rng.integers(-2, 3, x_dims).astype(np_type)  # ties everywhere
    s = (rng.standard_normal(s_dims) * 4).astype(np_type) if dtype != "s32" else rng.integers(-9, 9, s_dims).astype(np.int32)
    exe = hlofuse.compile(module, "cpu", cache=False)
    from hlofuse.codegen.kernels import cpu_select_scatter
    (kernel,) = [k for k in exe.program._planner.kernels if k.name.endswith("_sas")]
    inst = cpu_select_scatter.find_select_scatter(kernel.comp)
    assert cpu_select_scatter._channels_in_vectors(inst) == (last == (1, 1))
    got = np.asarray(exe(x, s)[0])
    want = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), "interpreter")(x, s)[0])
    np.testing.assert_array_equal(got.view(np.uint16) if dtype == "bf16" else got,
                                  want.view(np.uint16) if dtype == "bf16" else want)
