"""The JAX corpus through the interpreter: every program's HLO (and XLA's optimized HLO, which
is full of fusions) evaluated on the example arguments and compared with JAX's own results."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from jax_programs import PROGRAMS, JaxProgram, assert_outputs_match, expected_outputs  # noqa: E402

from hlofuse.hlo.parser import parse_hlo  # noqa: E402
from hlofuse.runtime.interpreter import evaluate  # noqa: E402
from repo_paths import JAX_CORPUS  # noqa: E402

CORPUS = JAX_CORPUS

def test_corpus_is_large_and_files_exist():
    assert len(PROGRAMS) >= 30
    assert len({p.name for p in PROGRAMS}) == len(PROGRAMS)
    for p in PROGRAMS:
        assert (CORPUS / f"{p.name}.hlo").is_file(), f"run scripts/gen_corpus.py: {p.name}.hlo missing"
        assert (CORPUS / f"{p.name}.opt.hlo").is_file()


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p.name)
def test_corpus_hlo_matches_jax(p: JaxProgram):
    args = p.make_args()
    module = parse_hlo((CORPUS / f"{p.name}.hlo").read_text(), filename=f"{p.name}.hlo")
    assert_outputs_match(p, evaluate(module, list(args)), expected_outputs(p, args))


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p.name)
def test_corpus_optimized_hlo_matches_jax(p: JaxProgram):
    args = p.make_args()
    module = parse_hlo((CORPUS / f"{p.name}.opt.hlo").read_text(), filename=f"{p.name}.opt.hlo")
    targets = sorted({str(i.attrs.get("custom_call_target")) for i in module.all_instructions()
                      if i.opcode == "custom-call"})
    if targets:
        pytest.skip(f"XLA's optimized module calls library code the interpreter does not have: {targets}")
    assert_outputs_match(p, evaluate(module, list(args)), expected_outputs(p, args))


def test_corpus_files_are_current():
    """The .hlo files are what the program table lowers to (same JAX version only)."""
    recorded = (CORPUS / "JAX_VERSION").read_text().strip()
    if recorded != jax.__version__:
        pytest.skip(f"corpus generated with jax {recorded}, running {jax.__version__}")
    stale = [p.name for p in PROGRAMS
             if jax.jit(p.fn).lower(*p.make_args()).as_text(dialect="hlo") != (CORPUS / f"{p.name}.hlo").read_text()]
    assert not stale, f"stale corpus files (run scripts/gen_corpus.py): {stale}"
