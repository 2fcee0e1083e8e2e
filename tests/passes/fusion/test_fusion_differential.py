"""Fusion must not change results: every golden module, and random graphs from hypothesis,
evaluated by the interpreter before and after fusion give bit-identical outputs. The fused
module must also print as text that our parser and XLA's parser read back."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from hlofuse.hlo.errors import UnsupportedError
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.verifier import verify
from hlofuse.passes.fusion import fusion_passes, target_params
from hlofuse.runtime.interpreter import evaluate

from fusion_cases import load_cases, run_passes
from random_graphs import random_module
from repo_paths import JAX_CORPUS

CASES = load_cases()
# Not evaluable by the reference: side effects, random numbers, unknown custom calls.
_NOT_EVALUABLE = ("custom-call", "rng(")


def _inputs(module, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in module.entry.parameters:
        s = p.shape
        if s.dtype.is_float:
            out.append(rng.uniform(0.25, 2.0, s.dims).astype(s.dtype.numpy))
        elif s.dtype.is_integer:
            out.append(rng.integers(1, 9, s.dims).astype(s.dtype.numpy))
        else:
            out.append(rng.integers(0, 2, s.dims).astype(s.dtype.numpy))
    return out


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")
        for x, y in zip(a, b))


def _xla_parses(text: str) -> None:
    from jax._src.lib import xla_client

    xla_client.hlo.hlo_module_from_text(text)


def test_there_are_enough_golden_cases():
    assert len(CASES) >= 50


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden_case_keeps_results(case):
    fused = run_passes(case)
    verify(fused)
    text = fused.to_text()
    reparsed = parse_hlo(text)
    assert reparsed.to_text() == text
    _xla_parses(text)
    if any(k in case.module for k in _NOT_EVALUABLE):
        return
    original = parse_hlo(case.module)
    args = _inputs(original)
    assert _same(evaluate(original, args), evaluate(reparsed, args))


# ---- the JAX corpus (testdata/jax: HLO as JAX lowers it, and XLA's optimized HLO) ------------

JAX_FILES = sorted(JAX_CORPUS.glob("*.hlo"))


@pytest.mark.parametrize("target", ["gpu", "cpu"])
@pytest.mark.parametrize("path", JAX_FILES, ids=[p.name for p in JAX_FILES])
def test_jax_corpus_keeps_results(path, target):
    text = path.read_text()
    original = parse_hlo(text)
    args = _inputs(original)
    try:
        expected = evaluate(original, args)
    except UnsupportedError:  # e.g. a custom-call the reference cannot run: check the rest
        expected = None
    fused = parse_hlo(text)
    for p in fusion_passes(target):
        p.run(fused)
    verify(fused)
    printed = fused.to_text()
    _xla_parses(printed)
    if expected is not None:
        assert _same(expected, evaluate(parse_hlo(printed), args))


# ---- random graphs (support/random_graphs.py) ----------------------------------------------

def _check_invariants(original, fused, target: str) -> None:
    """No fused computation computes an instruction twice (merged fusions are deduplicated), and
    an expensive producer is never both materialized and recomputed by a copy (it is duplicated
    only into every one of its users)."""
    from hlofuse.passes.cse import instruction_key
    from hlofuse.passes.fusion.fusibility import is_expensive

    names = {i.name: i for i in original.entry.instructions}
    places: dict[str, list[bool]] = {}  # original name -> [materialized?] per copy
    for inst in fused.entry.instructions:
        if inst.opcode != "fusion":
            places.setdefault(inst.name, []).append(True)
            continue
        members = [m for m in inst.fused_computation.instructions if m.opcode not in ("parameter", "tuple")]
        keys = [instruction_key(m) for m in members]
        assert len(set(keys)) == len(keys), f"{inst.name} computes an instruction twice"
        for m in members:
            base = m.name
            while base not in names and "." in base:
                base = base.rsplit(".", 1)[0]
            places.setdefault(base, []).append(False)
    params = target_params(target)
    for name, where in places.items():
        inst = names.get(name)
        materialized_and_copied = len(where) > 1 and any(where)
        assert not (inst is not None and materialized_and_copied and is_expensive(inst, params)), \
            f"expensive {name} is materialized and also recomputed"


def _check_random(text: str, target: str) -> None:
    original = parse_hlo(text)
    args = _inputs(original, seed=len(text))
    expected = evaluate(original, args)
    fused = parse_hlo(text)
    for p in fusion_passes(target):
        p.run(fused)
    verify(fused)
    _check_invariants(original, fused, target)
    printed = fused.to_text()
    _xla_parses(printed)
    assert _same(expected, evaluate(parse_hlo(printed), args)), printed


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_module())
def test_random_graphs_gpu(text):
    _check_random(text, "gpu")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_module())
def test_random_graphs_cpu(text):
    _check_random(text, "cpu")


