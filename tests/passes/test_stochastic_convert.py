"""stochastic-convert by XLA's convention (its StochasticConvertDecomposer): the interpreter's
reference (runtime/interpreter/conversion.py) against values worked out by hand and, bit for
bit, against XLA:CPU on edge inputs; the compiled backends' decomposition
(passes/stochastic_convert_decomposer.py) against both; a conversion XLA does not define
(to a float type) refused by name everywhere."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xla_oracle import xla_available

import hlofuse
from hlofuse.hlo.errors import UnsupportedError
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.interpreter import evaluate


def _module(src: str, rnd: str, dst: str, n: int) -> str:
    return (f"HloModule m\nENTRY e {{\n  x = {src}[{n}] parameter(0)\n  r = {rnd}[{n}] parameter(1)\n"
            f"  ROOT s = {dst}[{n}] stochastic-convert(x, r)\n}}\n")


def test_hand_worked_values():
    """2.25 has the fraction 0.25, 2^30 as 32 random bits: it rounds up to 3 below that, down
    to 2 from it on; the sign is put back after rounding; NaN is 0, the range saturates."""
    x = np.array([2.25, 2.25, 2.25, -2.25, -2.25, 7.0, np.nan, np.inf, -np.inf, 3e9, -3e9, 0.5], np.float32)
    r = np.array([0, 2**30 - 1, 2**30, 0, 2**31, 2**32 - 1, 0, 0, 0, 0, 0, 2**31], np.uint32)
    want = np.array([3, 3, 2, -3, -2, 7, 0, 2**31 - 1, -2**31, 2**31 - 1, -2**31, 0], np.int32)
    (got,) = evaluate(parse_hlo(_module("f32", "u32", "s32", len(x))), [x, r])
    np.testing.assert_array_equal(got, want)


# (operand, random bits, result) signatures XLA:CPU compiles, with edge inputs: fractions near
# every random threshold, signed zeros, halves, the result type's bounds and beyond, inf, NaN.
SIGNATURES = [("f32", "u32", "s32"), ("f32", "u32", "s8"), ("bf16", "u16", "s8"), ("bf16", "u16", "s32"),
              ("f16", "u16", "s16"), ("f64", "u64", "s64"), ("f64", "u64", "s16")]
NUMPY = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
         "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}


def _edge_inputs(src: str, rnd: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    values = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.25, 126.75, 127.5, -128.5, 32767.5, -32768.25, 2.0**31 - 0.5,
              -2.0**31, 2.0**31, 3e9, -3e9, 1e19, -1e19, np.inf, -np.inf, np.nan, 1e-3, -7.9999]
    with np.errstate(over="ignore"):  # (f16 has no 3e9: inf)
        x = np.concatenate([np.array(values), rng.standard_normal(40) * 50]).astype(NUMPY[src])
    info = np.iinfo(NUMPY[rnd])
    edges = np.array([0, 1, int(info.max), int(info.max) - 1, 1 << (info.bits - 1), (1 << (info.bits - 1)) - 1,
                      1 << (info.bits - 2), 3 << (info.bits - 2)], np.uint64)
    r = np.concatenate([rng.integers(0, int(info.max), len(x) - 8, dtype=np.uint64, endpoint=True), edges])
    r = r.astype(NUMPY[rnd])
    return x, r


@pytest.mark.parametrize("signature", SIGNATURES, ids=lambda s: "_".join(s))
def test_compiled_backends_match_the_interpreter(signature):
    src, rnd, dst = signature
    x, r = _edge_inputs(src, rnd)
    text = _module(src, rnd, dst, len(x))
    (want,) = evaluate(parse_hlo(text), [x, r])
    for backend in ("cpu", "gpu-emulated"):
        exe = hlofuse.compile(parse_hlo(text), target=backend, cache=False)
        assert not any(i.opcode == "stochastic-convert" for i in exe.fused_module.entry.instructions)
        np.testing.assert_array_equal(np.asarray(exe(x, r)[0]), want, err_msg=f"{signature} on {backend}")


@pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA CPU client is not usable here")
@pytest.mark.parametrize("signature", SIGNATURES, ids=lambda s: "_".join(s))
def test_interpreter_matches_xla_bit_for_bit(signature):
    from hlofuse.runtime.xla_reference import compile_for_xla_cpu

    src, rnd, dst = signature
    x, r = _edge_inputs(src, rnd, seed=1)
    text = _module(src, rnd, dst, len(x))
    (theirs,) = compile_for_xla_cpu(text)(x, r)
    (ours,) = evaluate(parse_hlo(text), [x, r])
    np.testing.assert_array_equal(ours, theirs, err_msg=str(signature))


def test_a_float_result_is_refused_by_name():
    text = _module("f32", "u32", "f16", 4)
    x, r = np.ones(4, np.float32), np.zeros(4, np.uint32)
    with pytest.raises(UnsupportedError, match="stochastic-convert"):
        evaluate(parse_hlo(text), [x, r])
    with pytest.raises(UnsupportedError, match="stochastic-convert"):
        hlofuse.compile(parse_hlo(text), target="cpu", cache=False)(x, r)
