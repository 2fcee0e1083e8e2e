"""A reduce whose reduced dimensions all have size 1 is a reshape of its input, the init value
ignored: XLA's simplifier rewrites it so (it takes the init to be the reducer's identity), and
the interpreter evaluates it so. The kernels added the init (the HLO graph fuzzer, seed 38: a
bf16 sum of -0 over one element, then atan2 of it with itself: 0 on the CPU, -pi in XLA and
the interpreter). hlofuse's simplifier now rewrites the reduce as XLA's does (passes/simplifier.py
`_reduce_of_single_elements`), on every backend, fused or not."""
from __future__ import annotations

import numpy as np
import pytest
from xla_oracle import run_on_xla, xla_available

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.simplifier import AlgebraicSimplifier

SUM = """HloModule m
add {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[] add(a, b)
}}
ENTRY e {{
  x = {t}[4] parameter(0)
  r = {t}[4,1] reshape(x)
  z = {t}[] constant({init})
  s = {t}[4] reduce(r, z), dimensions={{1}}, to_apply=add
  ROOT a = {t}[4] atan2(s, s)
}}
"""
# (value, index) of the largest element of each row of one element
ARGMAX = """HloModule m
argmax {
  av = f32[] parameter(0)
  ai = s32[] parameter(1)
  bv = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(av, bv), direction=GT
  v = f32[] select(gt, av, bv)
  i = s32[] select(gt, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  x = f32[3,1] parameter(0)
  k = s32[3,1] parameter(1)
  ninf = f32[] constant(inf)
  zero = s32[] constant(7)
  ROOT r = (f32[3], s32[3]) reduce(x, k, ninf, zero), dimensions={1}, to_apply=argmax
}
"""
X = np.array([-0.0, -100.0, -0.0, 0.0], np.float32)
BACKENDS = ["interpreter", "cpu", "gpu-emulated"]


def _expected_sum() -> np.ndarray:
    """atan2(x, x) of the input itself: -pi at -0, -3pi/4 at -100, 0 at +0."""
    return np.arctan2(X, X)


def test_the_simplifier_makes_it_a_reshape():
    module = parse_hlo(SUM.format(t="f32", init=5))
    assert AlgebraicSimplifier().run(module)
    assert not any(i.opcode == "reduce" for i in module.entry.instructions)
    variadic = parse_hlo(ARGMAX)
    assert AlgebraicSimplifier().run(variadic)
    root = variadic.entry.root
    assert root.opcode == "tuple" and [o.opcode for o in root.operands] == ["reshape", "reshape"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fusion", [True, False])
def test_every_backend_ignores_the_init(backend, fusion):
    for init in (0, 5):  # +0: -0 keeps its sign; 5: not the sum's identity, ignored all the same
        exe = hlofuse.compile(parse_hlo(SUM.format(t="f32", init=init)), target=backend, fusion=fusion)
        got = np.asarray(exe(X)[0])
        np.testing.assert_array_equal(got, _expected_sum())
        assert np.signbit(got[0]) and np.signbit(got[2])  # -pi, not 0 (atan2(+0, +0))
    x = np.array([[1.5], [np.nan], [-2.0]], np.float32)
    k = np.array([[4], [5], [6]], np.int32)
    v, i = hlofuse.compile(parse_hlo(ARGMAX), target=backend, fusion=fusion)(x, k)
    np.testing.assert_array_equal(np.asarray(v), x.ravel())  # not inf, the init
    assert np.asarray(i).tolist() == [4, 5, 6]


@pytest.mark.skipif(not xla_available(), reason="needs jax (the xla extra)")
def test_the_expectation_is_xla_cpus():
    for init in (0, 5):
        np.testing.assert_array_equal(np.asarray(run_on_xla(SUM.format(t="f32", init=init), [X])[0]),
                                      _expected_sum())
    x = np.array([[1.5], [np.nan], [-2.0]], np.float32)
    k = np.array([[4], [5], [6]], np.int32)
    v, i = run_on_xla(ARGMAX, [x, k])
    np.testing.assert_array_equal(np.asarray(v), x.ravel())
    assert np.asarray(i).tolist() == [4, 5, 6]
