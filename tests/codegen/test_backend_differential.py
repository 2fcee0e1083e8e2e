"""Compiled backends against the oracle on random graphs: every random module from the fusion
tests' hypothesis strategy, fused and compiled for the CPU and for the emulated GPU grid, gives
the interpreter's results on the unfused module (to the comparison's rounding tolerance: the
compiled reductions reassociate)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_outputs
from hlofuse.runtime.interpreter import evaluate

from random_graphs import random_module


def _inputs(module, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape.dims).astype(p.shape.dtype.numpy) for p in module.entry.parameters]


def _check(text: str, target: str) -> None:
    module = parse_hlo(text)
    args = _inputs(module, seed=len(text))
    expected = evaluate(module, args)
    actual = list(hlofuse.compile(module, target=target)(*args))
    results = compare_outputs(actual, expected)
    assert all(r.ok for r in results), "\n".join(r.line() for r in results) + "\n" + text


# Dimensions large enough that loops are vectorized, split across threads and tiled on the grid.
_LARGE = dict(max_a=70, max_b=300)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_module(**_LARGE))
def test_random_graphs_cpu_backend_matches_interpreter(text):
    _check(text, "cpu")


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_module(**_LARGE))
def test_random_graphs_emulated_gpu_matches_interpreter(text):
    _check(text, "gpu-emulated")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_module())
def test_small_random_graphs_cpu_backend_matches_interpreter(text):
    _check(text, "cpu")
