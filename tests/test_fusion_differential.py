"""Fusion must not change results: every golden module, and random graphs from hypothesis,
evaluated by the interpreter before and after fusion give bit-identical outputs. The fused
module must also print as text that our parser and XLA's parser read back."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlofuse.hlo.errors import UnsupportedError
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.verifier import verify
from hlofuse.passes.fusion import fusion_passes, target_params
from hlofuse.runtime.interpreter import evaluate

from fusion_cases import load_cases, run_passes

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

JAX_FILES = sorted((Path(__file__).resolve().parent.parent / "testdata" / "jax").glob("*.hlo"))


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


# ---- random graphs ---------------------------------------------------------------------------

_UNARY = ("negate", "abs", "exponential", "tanh", "floor", "sine", "log", "sqrt", "logistic")
_BINARY = ("add", "multiply", "subtract", "maximum", "divide", "minimum")
_HEADER = """HloModule random

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

"""


def _shape(dims) -> str:
    return f"f32[{','.join(str(d) for d in dims)}]"


@st.composite
def random_module(draw, max_a: int = 3, max_b: int = 4) -> str:
    """A random DAG of elementwise, broadcast, reshape, transpose, slice, concatenate and reduce
    instructions over small shapes (dimensions up to `max_a` x `max_b`), with producers shared
    by several users."""
    a = draw(st.integers(1, max_a))
    b = draw(st.integers(2, max_b))
    nodes: list[tuple[str, tuple[int, ...]]] = []
    lines: list[str] = []
    nparams = draw(st.integers(1, 3))
    for i in range(nparams):
        dims = (a, b) if i < 2 else (b,)
        nodes.append((f"p{i}", dims))
        lines.append(f"  p{i} = {_shape(dims)} parameter({i})")
    lines.append("  zero = f32[] constant(0)")
    lines.append("  ninf = f32[] constant(-inf)")
    count = draw(st.integers(3, 14))
    for k in range(count):
        name = f"n{k}"
        # favour recent nodes but allow any: shared producers
        pick = lambda: nodes[draw(st.integers(0, len(nodes) - 1))]
        op = draw(st.sampled_from(("unary", "binary", "binary", "broadcast", "reduce", "reshape",
                                   "transpose", "slice", "concat")))
        src, dims = pick()
        if op == "unary":
            u = draw(st.sampled_from(_UNARY))
            lines.append(f"  {name} = {_shape(dims)} {u}({src})")
            nodes.append((name, dims))
        elif op == "binary":
            same = [n for n in nodes if n[1] == dims]
            other = same[draw(st.integers(0, len(same) - 1))][0]
            bop = draw(st.sampled_from(_BINARY))
            lines.append(f"  {name} = {_shape(dims)} {bop}({src}, {other})")
            nodes.append((name, dims))
        elif op == "broadcast" and len(dims) == 1:
            out = (a, dims[0]) if draw(st.booleans()) else (dims[0], a)
            dim = 1 if out[1] == dims[0] and out != (dims[0], a) else 0
            lines.append(f"  {name} = {_shape(out)} broadcast({src}), dimensions={{{dim}}}")
            nodes.append((name, out))
        elif op == "reduce" and len(dims) == 2:
            d = draw(st.integers(0, 1))
            reducer, init = draw(st.sampled_from((("add_f32", "zero"), ("max_f32", "ninf"))))
            out = (dims[1 - d],)
            lines.append(f"  {name} = {_shape(out)} reduce({src}, {init}), dimensions={{{d}}}, to_apply={reducer}")
            nodes.append((name, out))
        elif op == "reshape":
            n = int(np.prod(dims))
            out = (n,) if len(dims) == 2 else (1, dims[0])
            lines.append(f"  {name} = {_shape(out)} reshape({src})")
            nodes.append((name, out))
        elif op == "transpose" and len(dims) == 2:
            out = (dims[1], dims[0])
            lines.append(f"  {name} = {_shape(out)} transpose({src}), dimensions={{1,0}}")
            nodes.append((name, out))
        elif op == "slice" and dims[-1] > 1:
            out = dims[:-1] + (dims[-1] - 1,)
            sl = ", ".join([f"[0:{d}]" for d in dims[:-1]] + [f"[1:{dims[-1]}]"])
            lines.append(f"  {name} = {_shape(out)} slice({src}), slice={{{sl}}}")
            nodes.append((name, out))
        elif op == "concat":
            same = [n for n in nodes if n[1] == dims]
            other = same[draw(st.integers(0, len(same) - 1))][0]
            out = dims[:-1] + (2 * dims[-1],)
            lines.append(f"  {name} = {_shape(out)} concatenate({src}, {other}), dimensions={{{len(dims) - 1}}}")
            nodes.append((name, out))
    used = set()
    for line in lines:
        rhs = line.split("=", 1)[1]
        used.update(w for w in rhs.replace("(", " ").replace(")", " ").replace(",", " ").split())
    sinks = [n for n in nodes[nparams:] if n[0] not in used] or [nodes[-1]]
    extra = [n for n in nodes[nparams:] if n not in sinks and draw(st.booleans())]
    outs = sinks + extra
    lines.append(f"  ROOT out = ({', '.join(_shape(d) for _, d in outs)}) tuple({', '.join(n for n, _ in outs)})")
    return _HEADER + "ENTRY main {\n" + "\n".join(lines) + "\n}\n"


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


