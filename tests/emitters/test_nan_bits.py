"""NaN bits of ln: x < 0 gives the negative default NaN and a NaN comes back as it is, as the
interpreter gives them. The sign of a NaN is visible to a TOTALORDER compare and to
bitcast-convert (the graph fuzzer, seed 41, found log's NaN through a TOTALORDER compare). XLA:CPU
gives a negative NaN for x < 0 too, but not one pattern: 0xffc00000 in some lanes, 0xffffffff
in others (jax 0.10, f32[5] against f32[10]), so its bits are not a reference."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse

INPUTS = [-1.5, -np.inf, -1e-3, -2.0, np.nan, -np.nan, np.inf, 0.5, 0.0, -0.0]


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_log_nan_bits_as_the_interpreter(dtype, target):
    numpy_type, bits = (np.float32, np.uint32) if dtype == "f32" else (np.float64, np.uint64)
    x = np.array(INPUTS, numpy_type)
    text = f"HloModule t\n\nENTRY e {{\n  p = {dtype}[10] parameter(0)\n  ROOT r = {dtype}[10] log(p)\n}}\n"
    got = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target=target, cache=False)(x)[0]).view(bits)
    want = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(x)[0]).view(bits)
    assert [hex(v) for v in got] == [hex(v) for v in want]
    sign = bits(1) << bits(np.dtype(bits).itemsize * 8 - 1)
    assert got[0] & sign and got[4] == x.view(bits)[4] and got[5] == x.view(bits)[5]



@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("op", ["sine", "cosine", "tan", "atan2", "power"])
def test_invalid_and_nan_operands_as_the_interpreter(op, target):
    """sin/cos/tan of an infinity and a negative base to a fractional power are invalid (the
    negative default NaN); a NaN operand of atan2 or power comes back as it is, which one as
    the interpreter (x86's libm) picks."""
    nan = np.float32(np.nan)
    x = np.array([nan, -nan, 1, -nan, nan, -1.5, 0.0, np.inf, -np.inf, 2.0], np.float32)
    y = np.array([-nan, 1, nan, nan, 2.0, 0.5, -nan, -nan, 3.0, 0.5], np.float32)
    binary = op in ("atan2", "power")
    root = f"{op}(p, q)" if binary else f"{op}(p)"
    text = (f"HloModule t\n\nENTRY e {{\n  p = f32[10] parameter(0)\n  q = f32[10] parameter(1)\n"
            f"  ROOT r = f32[10] {root}\n}}\n")
    got = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target=target, cache=False)(x, y)[0]).view(np.uint32)
    want = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(x, y)[0]).view(np.uint32)
    assert [hex(v) for v in got] == [hex(v) for v in want]
