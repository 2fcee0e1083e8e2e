"""remainder's divisor under denormals-are-zero (the registry's `flush-divisor`,
docs/denormals.md): the kernel makes a denormal divisor a zero of its sign on its bits before
calling libm's fmodf/fmod, so the answer does not depend on how the host's libm reads it.
glibc 2.36 (this host) reads it with floating-point instructions under DAZ; a later glibc's
integer-only fmodf does not, and fmod(1e-40, 1e-40) came out 0 instead of NaN on a GPU
machine's host (the graph fuzzer, seed 62)."""
from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir

import hlofuse
from hlofuse.emitters.target import Target

TINY = [1e-40, -1e-40, 3e-39, 0.0, -0.0, 1.5, -2.0, np.inf, np.nan, 1e-38]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_the_divisor_is_flushed_on_its_bits_before_frem(dtype):
    """The frem's divisor is a select of the bits (denormal -> signed zero), the dividend the
    argument itself; a target that keeps denormals (the real GPU) passes the divisor as is."""
    ty = ir.FloatType() if dtype == "f32" else ir.DoubleType()

    def emitted(target):
        module = ir.Module(name="m")
        fn = ir.Function(module, ir.FunctionType(ty, [ty, ty]), "f")
        b = ir.IRBuilder(fn.append_basic_block())
        b.ret(target.float_remainder(b, *fn.args))
        return str(module)

    text = emitted(Target())
    frem = next(line for line in text.splitlines() if " frem " in line)
    assert frem.split(",")[0].endswith('%".1"')  # the dividend untouched
    assert '%".2"' not in frem and "select" in text and "bitcast" in text

    class Keeping(Target):
        flushes_denormals = False

    kept = next(line for line in emitted(Keeping()).splitlines() if " frem " in line)
    assert kept.rstrip().endswith('%".2"')


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("dtype, np_type", [("f32", np.float32), ("f64", np.float64)])
def test_remainder_of_denormals_as_the_interpreter(target, dtype, np_type):
    """Every pair of the values above, divisor from memory and as a literal: the same bits as the
    interpreter, and a denormal divisor gives NaN (fmod by zero) whatever the dividend."""
    tiny = np_type(1e-40 if dtype == "f32" else 1e-310)
    values = np.array(TINY, np_type)
    values[0], values[1] = tiny, -tiny
    x, y = np.meshgrid(values, values, indexing="ij")
    x, y = x.ravel().copy(), y.ravel().copy()
    n = x.size
    text = f"""HloModule m
ENTRY e {{
  x = {dtype}[{n}] parameter(0)
  y = {dtype}[{n}] parameter(1)
  r = {dtype}[{n}] remainder(x, y)
  t = {dtype}[] constant({'1e-40' if dtype == 'f32' else '1e-310'})
  tb = {dtype}[{n}] broadcast(t), dimensions={{}}
  s = {dtype}[{n}] remainder(x, tb)
  ROOT o = ({dtype}[{n}], {dtype}[{n}]) tuple(r, s)
}}
"""
    module = hlofuse.parse_hlo(text)
    want = hlofuse.compile(module, "interpreter")(x, y)
    got = hlofuse.compile(hlofuse.parse_hlo(text), target, cache=False)(x, y)
    bits = np.uint32 if dtype == "f32" else np.uint64
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert list(np.isnan(g)) == list(np.isnan(w))
        assert list(g[~np.isnan(g)].view(bits)) == list(w[~np.isnan(w)].view(bits))
    denormal_divisor = (y != 0) & (np.abs(y) < np.finfo(np_type).tiny)
    assert np.isnan(np.asarray(got[0])[denormal_divisor]).all()
    assert np.isnan(np.asarray(got[1])).all()
