"""The JAX corpus through the StableHLO importer: every program lowered to StableHLO by JAX,
imported, verified and evaluated by the interpreter must give JAX's own results."""
from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")

from jax_programs import PROGRAMS, JaxProgram, assert_outputs_match, expected_outputs  # noqa: E402

from hlofuse.frontends.stablehlo import from_stablehlo  # noqa: E402
from hlofuse.hlo.verifier import verify  # noqa: E402
from hlofuse.runtime.interpreter import evaluate  # noqa: E402


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_corpus_program_through_stablehlo(program: JaxProgram):
    args = program.make_args()
    module = from_stablehlo(jax.jit(program.fn).lower(*args).as_text(), filename=f"{program.name}.mlir")
    verify(module)
    assert_outputs_match(program, evaluate(module, list(args)), expected_outputs(program, args))
