"""XLA's ReduceWindowRewriter, scan half (passes/reduce_window_rewriter.py): cumulative
reduce-windows become trees of windows of at most BASE_LENGTH, with the interpreter's values
(exactly for integers, max and min; within float rounding for float sums), and nothing else is
touched."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.reduce_window_rewriter import BASE_LENGTH, ReduceWindowRewriter, scan_dimension
from hlofuse.runtime.interpreter import evaluate

REDUCERS = {"add": "add", "max": "maximum", "min": "minimum", "mul": "multiply", "or": "or"}


def _scan(dims: tuple, axis: int, dtype: str = "s32", reducer: str = "add", init: str = "0",
          reverse: bool = False, exclusive: bool = False) -> str:
    """A reduce-window scanning `axis` of `dims` as JAX writes cumsum and friends."""
    n = dims[axis]
    pad = n if exclusive else n - 1
    size = "x".join(str(n) if k == axis else "1" for k in range(len(dims)))
    pads = "x".join(((f"0_{pad}" if reverse else f"{pad}_0") if k == axis else "0_0") for k in range(len(dims)))
    out = [d + (1 if exclusive and k == axis else 0) for k, d in enumerate(dims)]
    return f"""HloModule scan
r {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT c = {dtype}[] {REDUCERS[reducer]}(a, b)
}}
ENTRY e {{
  x = {dtype}[{','.join(map(str, dims))}] parameter(0)
  z = {dtype}[] constant({init})
  ROOT s = {dtype}[{','.join(map(str, out))}] reduce-window(x, z), window={{size={size} pad={pads}}}, to_apply=r
}}
"""


def _input(dims, dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "s32":
        return rng.integers(-9, 9, dims).astype(np.int32)
    if dtype == "pred":
        return rng.random(dims) < 0.1
    return rng.standard_normal(dims).astype(np.float32)


def _windows(module) -> list[int]:
    return [max(w.size for w in i.attrs["window"].dimensions) for c in module.computations for i in c.instructions
            if i.opcode == "reduce-window"]


CASES = [
    ((4096, 8), 0, "s32", "add", "0", False, False),  # the mixture of experts' slot positions
    ((1000,), 0, "s32", "add", "0", False, False),  # not a multiple of 16: padded
    ((3, 257), 1, "s32", "add", "0", True, False),  # reverse
    ((5, 100), 1, "s32", "add", "0", False, True),  # exclusive
    ((2, 70, 3), 1, "s32", "add", "0", True, True),  # both, a middle axis
    ((300, 2), 0, "f32", "max", "-inf", False, False),  # cummax
    ((300,), 0, "s32", "min", "7", False, False),  # min: any init may be folded twice
    ((64, 3), 0, "f32", "mul", "1", False, False),  # cumprod
    ((200,), 0, "pred", "or", "false", False, False),
]


@pytest.mark.parametrize("dims,axis,dtype,reducer,init,reverse,exclusive", CASES)
def test_scans_become_short_windows_with_the_interpreters_values(dims, axis, dtype, reducer, init, reverse, exclusive):
    text = _scan(dims, axis, dtype, reducer, init, reverse, exclusive)
    module = parse_hlo(text)
    assert scan_dimension(module.entry.root) is not None
    assert ReduceWindowRewriter().run(module)
    assert max(_windows(module)) <= BASE_LENGTH
    x = _input(dims, dtype)
    if dtype == "f32" and reducer == "mul":
        x = (1 + 0.01 * x).astype(np.float32)
    want = evaluate(parse_hlo(text), [x])[0]
    got = evaluate(module, [x])[0]
    compiled = hlofuse.compile(parse_hlo(text), "cpu", cache=False)(x)
    compiled = compiled[0] if isinstance(compiled, (list, tuple)) else compiled
    for out in (got, np.asarray(compiled)):
        if dtype == "f32" and reducer in ("add", "mul"):
            np.testing.assert_allclose(out, want, rtol=1e-4)
        else:
            np.testing.assert_array_equal(out, want)


def test_float_sums_within_rounding_on_the_emulated_gpu():
    text = _scan((4, 600), 1, "f32")
    x = _input((4, 600), "f32")
    want = evaluate(parse_hlo(text), [x])[0]
    got = hlofuse.compile(parse_hlo(text), "gpu-emulated")(x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("text", [
    _scan((1000,), 0, "s32", "add", "5"),  # an init that is no identity would be counted twice
    _scan((1000,), 0, "f32", "mul", "2"),
    _scan((16, 4), 0),  # short enough already
], ids=["add-init-5", "mul-init-2", "short"])
def test_scans_it_may_not_split_are_left(text):
    assert not ReduceWindowRewriter().run(parse_hlo(text))


def test_windows_that_are_not_scans_are_left():
    text = """HloModule pool
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  x = f32[100,100] parameter(0)
  z = f32[] constant(0)
  ROOT s = f32[98,98] reduce-window(x, z), window={size=3x3}, to_apply=add
}
"""
    assert not ReduceWindowRewriter().run(parse_hlo(text))
