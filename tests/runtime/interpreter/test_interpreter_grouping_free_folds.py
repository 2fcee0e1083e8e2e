"""The interpreter's narrow-float reductions fold XLA:CPU's windows in order, one position at a
time; for max, min and the logical and bitwise and/or/xor the fold is computed pairwise instead
(reduction.grouping_free), which must give the same bits: the first NaN in order with its sign,
XLA's signed zeros, flushed denormals in the flushing mode, padding positions skipped. Each case
here is evaluated both ways (the pairwise path switched off by raising SEQUENTIAL_LIMIT)."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from backend_cases import reducer
from hlofuse.runtime.interpreter import evaluate, reduction

EDGES = [np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 1e-40, -1e-40, 6e-8, -6e-8, 1.5, -2.25, 65504.0, -3.0]


def _values(dtype, shape, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.97
    x = rng.standard_normal(shape).astype(np.float32)
    picks = rng.random(shape) < 0.3
    x[picks] = rng.choice(np.array(EDGES, np.float32), int(picks.sum()))
    x = x.astype(dtype)
    # NaNs of both signs, a few of them, at random places (the first one decides)
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, 3)] = np.array([np.nan], dtype)[0]
    flat[rng.integers(0, flat.size, 2)] = -np.array([np.nan], dtype)[0]
    return x


def _module(ty: str, shape: tuple, dims: tuple, op: str, init: str) -> str:
    dims_text = ",".join(map(str, shape))
    kept = [n for d, n in enumerate(shape) if d not in dims]
    return "HloModule m\n" + reducer("red", ty, op) + f"""ENTRY e {{
  x = {ty}[{dims_text}] parameter(0)
  i = {ty}[] constant({init})
  ROOT s = {ty}[{",".join(map(str, kept))}] reduce(x, i), dimensions={{{",".join(map(str, dims))}}}, to_apply=red
}}
"""


CASES = [
    # (type, numpy dtype, op, init)
    ("f16", np.float16, "maximum", "-inf"),
    ("f16", np.float16, "minimum", "inf"),
    ("bf16", ml_dtypes.bfloat16, "maximum", "-inf"),
    ("bf16", ml_dtypes.bfloat16, "minimum", "0"),
    ("pred", np.bool_, "and", "true"),
    ("pred", np.bool_, "or", "false"),
]
# every dimension within one window (one long sequence per output: seed 74's shape, smaller),
# windowed levels with padding, a long row, a long column
SHAPES = [((4, 31, 6, 16), (0, 1, 2, 3)), ((70, 45), (0, 1)), ((3, 200), (1,)), ((130, 5), (0,))]


@pytest.mark.parametrize("shape,dims", SHAPES)
@pytest.mark.parametrize("ty,dtype,op,init", CASES)
@pytest.mark.parametrize("denormals", ["flush", "keep"])
def test_pairwise_and_sequential_folds_give_the_same_bits(ty, dtype, op, init, shape, dims, denormals, monkeypatch):
    module = hlofuse.parse_hlo(_module(ty, shape, dims, op, init))
    x = _values(dtype, shape, seed=sum(shape) + len(op))
    calls = []
    real = reduction._pairwise
    monkeypatch.setattr(reduction, "_pairwise", lambda *a: (calls.append(1), real(*a))[1])
    pairwise = np.asarray(evaluate(module, [x], denormals=denormals)[0])
    if ty != "pred" and math.prod(shape) > 3000:  # windows of over 64 positions (a pred reduce
        assert calls  # is numpy's own): the pairwise path was taken
    monkeypatch.setattr(reduction, "SEQUENTIAL_LIMIT", 1 << 40)
    sequential = np.asarray(evaluate(module, [x], denormals=denormals)[0])
    assert pairwise.dtype == sequential.dtype and pairwise.shape == sequential.shape
    assert pairwise.tobytes() == sequential.tobytes()


def test_only_grouping_free_combiners_are_folded_pairwise():
    from hlofuse.runtime.interpreter.op_helpers import FlushingCombiner, maximum, minimum

    assert reduction.grouping_free(maximum) and reduction.grouping_free(FlushingCombiner(minimum))
    assert reduction.grouping_free(np.bitwise_xor) and reduction.grouping_free(np.logical_or)
    assert not reduction.grouping_free(np.add) and not reduction.grouping_free(FlushingCombiner(np.add))
    assert not reduction.grouping_free(np.multiply) and not reduction.grouping_free(None)
