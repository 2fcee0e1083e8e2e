"""Compiled backends against the oracle on random graphs: every random module from the fusion
tests' hypothesis strategy, fused and compiled for the CPU and for the emulated GPU grid, gives
the interpreter's results on the unfused module (to the comparison's rounding tolerance: the
compiled reductions reassociate; an f32 output beyond it must be as close to the module's
f64 value as f32 rounding allows, measured by the interpreter's own distance from it, or differ
only where the interpreter's own reversed reduction order moves as far)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_outputs, tolerance_for
from hlofuse.runtime.interpreter import evaluate

from random_graphs import random_module
from tests.fuzz.reassociation import only_order_sensitive, other_order_references


def _inputs(module, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape.dims).astype(p.shape.dtype.numpy) for p in module.entry.parameters]


def _within_the_modules_rounding(text: str, args: list, index: int, actual, expected) -> bool:
    """Whether output `index`, off the interpreter by more than the comparison's tolerance, is
    still as close to the exact value as f32 arithmetic can be asked to be: a sum that cancels
    (sum(concat(x, -x)) is exactly 0) leaves two f32 summation orders each a few 1e-7 from it,
    on opposite sides, while the tolerance's absolute floor is 1e-6. The exact value is the
    module evaluated in f64; the interpreter's own distance from it measures how far f32
    rounding carries this output, and the backend may be up to 4 times as far (plus the
    tolerance). A module whose f64 twin does not verify or run is judged as before."""
    try:
        wide_args = [a.astype(np.float64) if a.dtype == np.float32 else a for a in args]
        wide = evaluate(parse_hlo(text.replace("f32", "f64")), wide_args)[index]
    except Exception:  # noqa: BLE001 - e.g. a bitcast-convert whose widths no longer match
        return False
    a, e, w = (np.asarray(v, np.float64) for v in (actual, expected, wide))
    if not (np.isfinite(a).all() and np.isfinite(e).all() and np.isfinite(w).all()):
        return False
    rtol, atol = tolerance_for(np.float32)
    allowed = atol + rtol * np.abs(w) + 4 * float(np.max(np.abs(e - w), initial=0.0))
    return bool(np.all(np.abs(a - w) <= allowed))


def _order_sensitive(module, args: list, index: int, actual, expected) -> bool:
    """Whether output `index` differs only where the interpreter itself, reducing in another
    order (reversed, sequential, the CPU column kernels' windows of 32 rows, precise: the
    fuzzer's, tests/fuzz/reassociation.py), moves as far: a sum that nearly cancels, then a
    function that magnifies its relative error, such as log(tanh(sum)) of a sum near 0, or
    exp(exp(sum)) of a column sum near 4.2 (its relative error times 67: a hypothesis example
    whose reversed order happened to land as close as the interpreter's)."""
    try:
        others = [outputs[index] for outputs in other_order_references(module, args)]
    except Exception:  # noqa: BLE001 - no second order: the mismatch stands
        return False
    return only_order_sensitive([actual], [expected], *[[o] for o in others])


def _check(text: str, target: str) -> None:
    module = parse_hlo(text)
    args = _inputs(module, seed=len(text))
    expected = evaluate(module, args)
    actual = list(hlofuse.compile(module, target=target)(*args))
    results = compare_outputs(actual, expected)
    bad = [r for r in results if not r.ok and not (
        np.asarray(expected[r.index]).dtype == np.float32
        and _within_the_modules_rounding(text, args, r.index, actual[r.index], expected[r.index]))
        and not _order_sensitive(module, args, r.index, actual[r.index], expected[r.index])]
    assert not bad, "\n".join(r.line() for r in results) + "\n" + text


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
