"""The oracle returns a NaN operand of a unary float op as it is, on every host.

x86 arithmetic, the CPU kernels and XLA:CPU propagate a NaN operand with its sign and payload.
numpy's routines do not all do so, and which routine runs follows the host: on the Zen 1 AVX2
host its f32 and f64 tanh of -NaN (any payload) is the positive default NaN, so the interpreter
disagreed with both the kernels and XLA there. Each case feeds NaNs with a payload and either
sign and compares bits with the CPU kernel and, where JAX is installed, with XLA:CPU. Two
exceptions, both XLA's: logistic is 1/(1+exp(-x)), so its NaN is the operand's with the sign
flipped; a bf16 op computes in f32 and rounds back, and that rounding (XLA's, as ml_dtypes')
gives the quiet NaN without payload, sign kept."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import hlofuse

UNARY = ["tanh", "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "sqrt",
         "rsqrt", "cbrt", "sine", "cosine", "tan", "erf"]
DTYPE = {"f32": (np.float32, np.uint32, 0x7FC01234), "f64": (np.float64, np.uint64, 0x7FF8000000001234),
         "f16": (np.float16, np.uint16, 0x7E12), "bf16": (ml_dtypes.bfloat16, np.uint16, 0x7FD2)}


def _module(op: str, t: str) -> str:
    return f"HloModule m\nENTRY e {{\n  x = {t}[4] parameter(0)\n  ROOT y = {t}[4] {op}(x)\n}}\n"


def _nans(t: str) -> np.ndarray:
    dtype, uint, payload = DTYPE[t]
    sign = 1 << (8 * np.dtype(uint).itemsize - 1)
    return np.array([payload, payload | sign, payload, payload | sign], uint).view(dtype)


def _expected(op: str, t: str, x: np.ndarray) -> list[int]:
    """The operand's bits, the sign flipped for logistic, the payload dropped for bf16."""
    uint = DTYPE[t][1]
    sign = 1 << (8 * np.dtype(uint).itemsize - 1)
    bits = [b ^ sign if op == "logistic" else b for b in _bits(t, x)]
    return [(b & sign) | 0x7FC0 for b in bits] if t == "bf16" else bits


def _bits(t: str, a) -> list[int]:
    return [int(b) for b in np.asarray(a).view(DTYPE[t][1])]


@pytest.mark.parametrize("t", sorted(DTYPE))
@pytest.mark.parametrize("op", UNARY)
def test_nan_operands_pass_through_the_interpreter_and_the_cpu_kernel(op, t):
    x = _nans(t)
    (want,) = hlofuse.compile(hlofuse.parse_hlo(_module(op, t)), target="interpreter", fusion=False)(x)
    assert _bits(t, want) == _expected(op, t, x)
    (got,) = hlofuse.compile(hlofuse.parse_hlo(_module(op, t)), target="cpu", cache=False)(x)
    assert _bits(t, got) == _bits(t, want)


@pytest.mark.parametrize("t", sorted(DTYPE))
@pytest.mark.parametrize("op", ["tanh", "logistic", "exponential", "sine", "sqrt"])
def test_the_interpreter_gives_xla_cpus_nan(op, t):
    pytest.importorskip("jax")
    from hlofuse.runtime.xla_reference import compile_for_xla_cpu

    x = _nans(t)
    (xla,) = compile_for_xla_cpu(_module(op, t))(x)
    (want,) = hlofuse.compile(hlofuse.parse_hlo(_module(op, t)), target="interpreter", fusion=False)(x)
    assert _bits(t, want) == _bits(t, xla)
