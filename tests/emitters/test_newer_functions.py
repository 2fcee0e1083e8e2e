"""XLA's newer elementwise functions (sinh, cosh, asin, acos, atan, asinh, acosh, atanh): the
interpreter against Python's `math` module (an independent reference, f64), and the compiled
backends against the interpreter on the values where an implementation goes wrong: signed
zeros, denormals, the domain's edges and outside it, overflow, infinities and NaN, in f64, f32,
bf16 and f16; complex sinh and cosh against Python's `cmath`. (The generated row tests,
test_op_table_numeric.py, cover ordinary values of f32 and c64.)"""
from __future__ import annotations

import cmath
import math

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse.runtime.compare import compare_arrays
from hlofuse.runtime.interpreter import evaluate

FUNCTIONS = {"sinh": math.sinh, "cosh": math.cosh, "asin": math.asin, "acos": math.acos, "atan": math.atan,
             "asinh": math.asinh, "acosh": math.acosh, "atanh": math.atanh}
EDGES = [0.0, -0.0, 1e-310, -1e-310, 1e-8, 0.5, -0.9, 1.0, -1.0, 1.5, 3.0, 20.0, 700.0, 711.0, -800.0, 1e6,
         math.inf, -math.inf, math.nan]
TYPES = {"f64": np.float64, "f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}


def _module(op: str, t: str, n: int) -> str:
    return f"HloModule m\nENTRY e {{\n  p = {t}[{n}] parameter(0)\n  ROOT r = {t}[{n}] {op}(p)\n}}\n"


def _math(fn, v: float) -> float:
    """`fn(v)` with IEEE's answers where Python raises: NaN outside the domain, inf on overflow
    (of the sign of sinh's operand, or at atanh's poles)."""
    try:
        return fn(v)
    except OverflowError:
        return math.copysign(math.inf, v) if fn is math.sinh else math.inf
    except ValueError:
        if fn is math.atanh and abs(v) == 1.0:
            return math.copysign(math.inf, v)
        return math.nan


@pytest.mark.parametrize("op", sorted(FUNCTIONS))
def test_interpreter_matches_pythons_math_in_f64(op):
    x = np.array(EDGES, np.float64)
    with np.errstate(all="ignore"):
        got = np.asarray(evaluate(hlofuse.parse_hlo(_module(op, "f64", len(EDGES))), [x])[0])
    want = np.array([_math(FUNCTIONS[op], v) for v in EDGES])
    # (numpy's routines and Python's libm calls may differ in the last place)
    for v, g, w in zip(EDGES, got, want):
        assert (math.isnan(g) and math.isnan(w)) or g == w or abs(g - w) <= 2 * np.spacing(abs(w)), (op, v, g, w)


@pytest.mark.parametrize("backend", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("t", sorted(TYPES))
@pytest.mark.parametrize("op", sorted(FUNCTIONS))
def test_compiled_matches_the_interpreter_on_edge_values(op, t, backend):
    with np.errstate(over="ignore"):  # (1e6 is inf in f16)
        x = np.array(EDGES, np.float64).astype(TYPES[t])
    text = _module(op, t, len(EDGES))
    with np.errstate(all="ignore"):
        want = evaluate(hlofuse.parse_hlo(text), [x])[0]
        got = hlofuse.compile_text(text, target=backend, cache=False)(x)[0]
    result = compare_arrays(np.asarray(got), np.asarray(want))
    assert result.ok, f"{op} {t} on {backend}: {result}"


@pytest.mark.parametrize("backend", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("op", ["sinh", "cosh"])
def test_complex_sinh_and_cosh_match_cmath(op, backend):
    values = [0j, 1 + 2j, -3 + 0.5j, 50 + 1j, 1e-3 - 1e-3j, 80 - 3j, -2 - 700j]
    x = np.array(values, np.complex128)
    want = np.array([getattr(cmath, op)(v) for v in values])
    text = f"HloModule m\nENTRY e {{\n  p = c128[{len(values)}] parameter(0)\n  ROOT r = c128[{len(values)}] {op}(p)\n}}\n"
    for got in (evaluate(hlofuse.parse_hlo(text), [x])[0], hlofuse.compile_text(text, target=backend, cache=False)(x)[0]):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-13, atol=0)
