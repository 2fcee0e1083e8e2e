"""Compiled scatter kernels (codegen/kernels/cpu_scatter.py): exact against the interpreter (and
XLA where usable) over dimension numbers, dtypes, duplicate and out-of-bounds indices, combiners
(add, max, assign, a general one), variadic scatter and the unique-indices parallel path."""
from __future__ import annotations

import numpy as np
import pytest
from backend_oracle import check_everywhere

import hlofuse
from hlofuse.hlo.parser import parse_hlo

COMBINERS = {
    "add": "ROOT r = {t}[] add(a, b)",
    "max": "ROOT r = {t}[] maximum(a, b)",
    "assign": "ROOT r = {t}[] add(b, z)",  # f(a, b) = b + 0, written so the library rule cannot special-case it
    "general": "m = {t}[] multiply(a, b)\n  ROOT r = {t}[] subtract(m, a)",
}


def _module(t, op, idx, upd, dnums, combiner, unique=False) -> str:
    comb = COMBINERS[combiner].format(t=t)
    return f"""HloModule m
comb {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  z = {t}[] constant(0)
  {comb}
}}
ENTRY e {{
  p0 = {t}[{op}] parameter(0)
  i = s32[{idx}] parameter(1)
  u = {t}[{upd}] parameter(2)
  ROOT s = {t}[{op}] scatter(p0, i, u), {dnums}, unique_indices={'true' if unique else 'false'}, to_apply=comb
}}
"""


# (operand dims, indices dims, update dims, dimension numbers, index values)
LAYOUTS = [
    ("8,6", "5,1", "5,6", "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
     "index_vector_dim=1", [[1], [3], [1], [9], [-1]]),
    ("8,6", "5", "5,6", "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
     "index_vector_dim=1", [7, 0, 7, 8, 2]),
    ("7,9", "2,4", "4,3,2", "update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={1,0}, "
     "index_vector_dim=0", [[0, 6, 7, 3], [0, 4, 2, 5]]),
    ("6,5,4", "3,2", "3,4", "update_window_dims={1}, inserted_window_dims={0,1}, "
     "scatter_dims_to_operand_dims={0,1}, index_vector_dim=1", [[1, 2], [5, 4], [1, 2]]),
    ("10", "", "", "update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
     "index_vector_dim=0", 4),
    ("4,6", "3,1", "6,3", "update_window_dims={0}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
     "index_vector_dim=1", [[3], [0], [3]]),
]


def _args(t, layout, rng):
    op, idx, upd, _d, values = layout
    dt = {"f32": np.float32, "s32": np.int32, "f64": np.float64}[t]
    shape = lambda s: tuple(int(x) for x in s.split(",")) if s else ()  # noqa: E731
    if dt == np.int32:
        return [rng.integers(-50, 50, shape(op)).astype(dt), np.asarray(values, np.int32).reshape(shape(idx)),
                rng.integers(-50, 50, shape(upd)).astype(dt)]
    return [rng.standard_normal(shape(op)).astype(dt), np.asarray(values, np.int32).reshape(shape(idx)),
            rng.standard_normal(shape(upd)).astype(dt)]


@pytest.mark.parametrize("t", ["f32", "s32", "f64"])
@pytest.mark.parametrize("combiner", sorted(COMBINERS))
@pytest.mark.parametrize("layout", range(len(LAYOUTS)))
def test_scatter_matches_interpreter(t, combiner, layout):
    rng = np.random.default_rng(layout)
    text = _module(t, *LAYOUTS[layout][:4], combiner)
    check_everywhere(text, _args(t, LAYOUTS[layout], rng), with_xla=(t == "f32" and combiner == "add"))


def test_scatter_units_sequential_by_window_or_by_position():
    # both window dimensions' starts are scattered: one unit
    seq = hlofuse.compile(parse_hlo(_module("f32", *LAYOUTS[2][:4], "add")), target="cpu")
    assert [(k.custom, k.units) for k in seq.program._planner.kernels] == [("scatter", 1)]
    # the window's dimension takes no scattered start: its 6 indices are the units, each in the
    # positions' order (duplicate index 1 twice: the same bits as the interpreter)
    text = _module("f32", *LAYOUTS[0][:4], "general")
    split = hlofuse.compile(parse_hlo(text), target="cpu")
    assert [(k.custom, k.units) for k in split.program._planner.kernels] == [("scatter", 6)]
    check_everywhere(text, _args("f32", LAYOUTS[0], np.random.default_rng(4)), with_xla=False)
    text = _module("f32", "64,32", "16,1", "16,32", LAYOUTS[0][3], "add", unique=True)
    par = hlofuse.compile(parse_hlo(text), target="cpu")
    assert [(k.custom, k.units) for k in par.program._planner.kernels] == [("scatter", 16)]
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((64, 32)).astype(np.float32), rng.permutation(64)[:16].reshape(16, 1).astype(np.int32),
            rng.standard_normal((16, 32)).astype(np.float32)]
    check_everywhere(text, args, with_xla=True)


VARIADIC = """HloModule m
comb {
  a0 = f32[] parameter(0)
  a1 = s32[] parameter(1)
  b0 = f32[] parameter(2)
  b1 = s32[] parameter(3)
  s0 = f32[] add(a0, b0)
  m1 = s32[] maximum(a1, b1)
  ROOT t = (f32[], s32[]) tuple(s0, m1)
}
ENTRY e {
  p0 = f32[9,4] parameter(0)
  p1 = s32[9,4] parameter(1)
  i = s32[6] parameter(2)
  u0 = f32[6,4] parameter(3)
  u1 = s32[6,4] parameter(4)
  ROOT s = (f32[9,4], s32[9,4]) scatter(p0, p1, i, u0, u1), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=comb
}
"""


def test_variadic_scatter():
    rng = np.random.default_rng(2)
    args = [rng.standard_normal((9, 4)).astype(np.float32), rng.integers(-9, 9, (9, 4)).astype(np.int32),
            np.array([2, 8, 2, 11, -1, 0], np.int32), rng.standard_normal((6, 4)).astype(np.float32),
            rng.integers(-9, 9, (6, 4)).astype(np.int32)]
    check_everywhere(VARIADIC, args, with_xla=False)
