"""In-place dynamic-update-slice kernels (codegen/kernels/cpu_dus.py): exact against the
interpreter (and XLA where usable) on every backend, over shapes, dtypes and clamped starts;
the CPU plans an update-only kernel with Step.inplace exactly where running in place is safe."""
from __future__ import annotations

import numpy as np
import pytest
from backend_oracle import check_everywhere, check_everywhere_on

import hlofuse
from hlofuse.hlo.parser import parse_hlo

DTYPES = {"f32": np.float32, "s32": np.int32, "bf16": None, "f64": np.float64, "u8": np.uint8}


def _array(dtype: str, shape, rng) -> np.ndarray:
    if dtype == "bf16":
        import ml_dtypes
        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    dt = np.dtype(DTYPES[dtype])
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    return rng.integers(0, 100, shape).astype(dt)


def _dims(shape) -> str:
    return ",".join(str(d) for d in shape)


def _dus_module(dtype: str, op_shape, upd_shape, fused_update: bool) -> str:
    n = len(op_shape)
    starts = "\n".join(f"  i{d} = s32[] parameter({d + 2})" for d in range(n))
    names = ", ".join(f"i{d}" for d in range(n))
    upd = f"  u = {dtype}[{_dims(upd_shape)}] {'negate(p1)' if fused_update else 'copy(p1)'}\n"
    if dtype.startswith("u"):
        upd = f"  u = {dtype}[{_dims(upd_shape)}] {'not(p1)' if fused_update else 'copy(p1)'}\n"
    return (f"HloModule m\nENTRY e {{\n  p0 = {dtype}[{_dims(op_shape)}] parameter(0)\n"
            f"  p1 = {dtype}[{_dims(upd_shape)}] parameter(1)\n{starts}\n{upd}"
            f"  ROOT d = {dtype}[{_dims(op_shape)}] dynamic-update-slice(p0, u, {names})\n}}\n")


CASES = [((8, 6), (3, 4)), ((40, 33), (7, 33)), ((5,), (2,)), ((4, 5, 70), (2, 1, 64)), ((6, 6), (6, 6)),
         ((3, 4), (0, 2))]
STARTS = [lambda s, u: [0] * len(s), lambda s, u: [-5] * len(s), lambda s, u: [n + 3 for n in s],
          lambda s, u: [(n - m) // 2 for n, m in zip(s, u)]]


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("shapes", CASES, ids=str)
@pytest.mark.parametrize("fused_update", [True, False])
def test_dus_matches_interpreter(dtype, shapes, fused_update):
    """Each module (a fused or a copied update) compiled once per backend and run on two of the
    STARTS (the starts are arguments): in range, clamped below or above."""
    op_shape, upd_shape = shapes
    text = _dus_module(dtype, op_shape, upd_shape, fused_update=fused_update)
    arg_sets = []
    for starts in range(0 if fused_update else 1, len(STARTS), 2):
        rng = np.random.default_rng(7)
        args = [_array(dtype, op_shape, rng), _array(dtype, upd_shape, rng)]
        arg_sets.append(args + [np.int32(s) for s in STARTS[starts](op_shape, upd_shape)])
    check_everywhere_on(text, arg_sets, with_xla=(dtype == "f32" and not fused_update))


def _kernels(text: str):
    exe = hlofuse.compile(parse_hlo(text), target="cpu")
    return exe, exe.program._planner.kernels


def test_fused_dus_is_an_update_only_kernel_in_place():
    text = _dus_module("f32", (64, 32), (4, 32), fused_update=True)
    exe, kernels = _kernels(text)
    assert [k.custom for k in kernels] == ["dus"]
    assert kernels[0].units * kernels[0].unit_elements == 4 * 32  # the update's elements, not 64*32
    steps = [s for p in exe.program._planner.plans.values() for s in p.steps if s.kind == "kernel"]
    assert [s.inplace for s in steps] == [{0: 0}]


FALLBACK = """HloModule m
fused {
  p0 = f32[16] parameter(0)
  i = s32[] parameter(1)
  r = f32[16] reverse(p0), dimensions={0}
  s = f32[4] slice(r), slice={[0:4]}
  ROOT d = f32[16] dynamic-update-slice(p0, s, i)
}
ENTRY e {
  x = f32[16] parameter(0)
  i = s32[] parameter(1)
  ROOT f = f32[16] fusion(x, i), kind=kLoop, calls=fused
}
"""


@pytest.mark.parametrize("start", [-1, 2, 12, 30])
def test_fusion_reading_the_buffer_elsewhere_runs_as_a_whole_loop(start):
    # reverse(p0) reads elements the window overwrites: not in place, still exact
    _exe, kernels = _kernels(FALLBACK)
    assert all(k.custom != "dus" for k in kernels)
    x = np.arange(16, dtype=np.float32)
    check_everywhere(FALLBACK, [x, np.int32(start)], with_xla=False)


TUPLE = """HloModule m
fused {
  a = f32[10,8] parameter(0)
  b = s32[6] parameter(1)
  u = f32[2,8] parameter(2)
  i = s32[] parameter(3)
  z = s32[] constant(0)
  n = f32[2,8] negate(u)
  sl = f32[2,1] slice(u), slice={[0:2], [1:2]}
  sr = f32[2] reshape(sl)
  c = s32[2] convert(sr)
  d0 = f32[10,8] dynamic-update-slice(a, n, i, z)
  d1 = s32[6] dynamic-update-slice(b, c, i)
  ROOT t = (f32[10,8], s32[6]) tuple(d0, d1)
}
ENTRY e {
  a = f32[10,8] parameter(0)
  b = s32[6] parameter(1)
  u = f32[2,8] parameter(2)
  i = s32[] parameter(3)
  ROOT f = (f32[10,8], s32[6]) fusion(a, b, u, i), kind=kLoop, calls=fused
}
"""


@pytest.mark.parametrize("start", [-3, 0, 5, 9])
def test_multi_output_dus_roots(start):
    _exe, kernels = _kernels(TUPLE)
    assert [k.custom for k in kernels] == ["dus", "dus"]
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((10, 8)).astype(np.float32), np.arange(6, dtype=np.int32),
            rng.standard_normal((2, 8)).astype(np.float32) * 9, np.int32(start)]
    check_everywhere(TUPLE, args, with_xla=False)



# Two roots updating different parameters with one update (XLA's
# ShouldCorrectlyUpdateMultipleOutputFusedDynamicUpdateSlices): the two update-only kernels
# differ only in the output leaf they write, which must keep them two kernels.
TWIN = """HloModule m
fused {
  p0 = f32[4,3] parameter(0)
  p1 = f32[1,3] parameter(1)
  p2 = f32[2,3] parameter(2)
  i = s32[] parameter(3)
  z = s32[] constant(0)
  d0 = f32[4,3] dynamic-update-slice(p0, p1, i, z)
  d1 = f32[2,3] dynamic-update-slice(p2, p1, i, z)
  ROOT t = (f32[4,3], f32[2,3]) tuple(d0, d1)
}
ENTRY e {
  p0 = f32[4,3] parameter(0)
  p1 = f32[1,3] parameter(1)
  p2 = f32[2,3] parameter(2)
  i = s32[] parameter(3)
  ROOT f = (f32[4,3], f32[2,3]) fusion(p0, p1, p2, i), kind=kLoop, calls=fused
}
"""


@pytest.mark.parametrize("start", [0, 1, 7])
def test_multi_output_dus_roots_with_one_update(start):
    exe, kernels = _kernels(TWIN)
    assert [k.custom for k in kernels] == ["dus", "dus"]
    p0 = np.arange(12, dtype=np.float32).reshape(4, 3)
    p1 = np.full((1, 3), -1, np.float32)
    p2 = np.arange(100, 106, dtype=np.float32).reshape(2, 3)
    e0, e1 = p0.copy(), p2.copy()
    e0[min(start, 3)] = -1  # the start clamped into [0, dim - 1]
    e1[min(start, 1)] = -1
    out = exe(p0, p1, p2, np.int32(start))
    np.testing.assert_array_equal(np.asarray(out[0]), e0)
    np.testing.assert_array_equal(np.asarray(out[1]), e1)
    check_everywhere(TWIN, [p0, p1, p2, np.int32(start)], with_xla=False)

SCAN = """HloModule scan
body {
  s = (s32[], f32[20,33], f32[33]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  acc = f32[20,33] get-tuple-element(s), index=1
  h = f32[33] get-tuple-element(s), index=2
  c = f32[] constant(0.5)
  cb = f32[33] broadcast(c), dimensions={}
  h2 = f32[33] add(h, cb)
  row = f32[1,33] reshape(h2)
  z = s32[] constant(0)
  acc2 = f32[20,33] dynamic-update-slice(acc, row, i, z)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT t = (s32[], f32[20,33], f32[33]) tuple(i2, acc2, h2)
}
cond {
  s = (s32[], f32[20,33], f32[33]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(20)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY e {
  h0 = f32[33] parameter(0)
  z = s32[] constant(0)
  zero = f32[] constant(0)
  acc = f32[20,33] broadcast(zero), dimensions={}
  init = (s32[], f32[20,33], f32[33]) tuple(z, acc, h0)
  w = (s32[], f32[20,33], f32[33]) while(init), condition=cond, body=body
  ROOT out = f32[20,33] get-tuple-element(w), index=1
}
"""


def test_scan_like_while_loop_writes_rows_in_place():
    exe, kernels = _kernels(SCAN)
    assert "dus" in [k.custom for k in kernels]
    h0 = np.random.default_rng(3).standard_normal(33).astype(np.float32)
    check_everywhere(SCAN, [h0], with_xla=False)
