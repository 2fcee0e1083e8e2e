"""The verifier on parsed HLO text: a module with fusion, reduce and while, its mutations
(each error names the instruction), every JAX module of testdata/jax, and every module the
StableHLO importer builds from the conformance files."""
from __future__ import annotations

from pathlib import Path

import pytest

from hlofuse.hlo.errors import VerifierError
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.verifier import verify
from repo_paths import JAX_CORPUS, SHARED_STABLEHLO


def expect_error(module, *fragments: str) -> None:
    with pytest.raises(VerifierError) as err:
        verify(module)
    for f in fragments:
        assert f in str(err.value), f"{f!r} not in {str(err.value)!r}"


TESTDATA = JAX_CORPUS

GOOD_TEXT = """
HloModule good

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  t = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  t = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  v = f32[4] get-tuple-element(t), index=1
  w = f32[4] exponential(v)
  ROOT r = (s32[], f32[4]) tuple(j, w)
}

fused_mul {
  p0 = f32[4,8]{1,0} parameter(0)
  p1 = f32[8]{0} parameter(1)
  b = f32[4,8]{1,0} broadcast(p1), dimensions={1}
  ROOT m = f32[4,8]{1,0} multiply(p0, b)
}

ENTRY main {
  x = f32[4,8]{1,0} parameter(0)
  y = f32[8]{0} parameter(1)
  f = f32[4,8]{1,0} fusion(x, y), kind=kLoop, calls=fused_mul
  zero = f32[] constant(0)
  red = f32[4]{0} reduce(f, zero), dimensions={1}, to_apply=sum
  i0 = s32[] constant(0)
  init = (s32[], f32[4]) tuple(i0, red)
  loop = (s32[], f32[4]) while(init), condition=cond, body=body
  ROOT out = f32[4] get-tuple-element(loop), index=1
}
"""


def test_parsed_module_with_fusion_reduce_and_while_verifies():
    verify(parse_hlo(GOOD_TEXT))


@pytest.mark.parametrize("line,replacement,fragments", [
    ("red = f32[4]{0} reduce(f, zero)", "red = f32[8]{0} reduce(f, zero)",
     ["instruction red in computation main", "declared shape f32[8]", "inferred shape f32[4]"]),
    ("dimensions={1}, to_apply=sum", "dimensions={2}, to_apply=sum",
     ["instruction red", "reduce dimension 2 is out of range for rank 2"]),
    ("ROOT lt = pred[] compare(i, n), direction=LT", "ROOT lt = s32[] add(i, n)",
     ["instruction loop", "condition computation cond must return pred[]"]),
    ("p1 = f32[8]{0} parameter(1)", "p1 = f32[4]{0} parameter(1)",
     ["instruction b.1 in computation fused_mul", "broadcast"]),
    ("w = f32[4] exponential(v)", "w = s32[4] convert(v)",
     ["instruction r in computation body"]),
])
def test_parsed_module_errors_name_the_instruction(line, replacement, fragments):
    assert line in GOOD_TEXT
    expect_error(parse_hlo(GOOD_TEXT.replace(line, replacement, 1)), *fragments)


def test_parsed_elementwise_type_errors():
    text = """
HloModule m

ENTRY main {
  x = f32[2] parameter(0)
  y = f32[2] parameter(1)
  ROOT a = f32[2] and(x, y)
}
"""
    expect_error(parse_hlo(text), "instruction a in computation main", "and", "integral or pred")


def _jax_files() -> list[Path]:
    return sorted(TESTDATA.glob("*.hlo")) if TESTDATA.is_dir() else []


@pytest.mark.skipif(not _jax_files(), reason="testdata/jax has no .hlo files")
@pytest.mark.parametrize("path", _jax_files(), ids=lambda p: p.name)
def test_jax_modules_verify(path):
    """Every module JAX produced (before and after XLA's optimizations) is well formed."""
    verify(parse_hlo(path.read_text(), filename=str(path)))


STABLEHLO = SHARED_STABLEHLO


@pytest.mark.skipif(not STABLEHLO.is_dir(), reason="../shared/stablehlo_testdata is absent")
def test_imported_stablehlo_conformance_modules_verify():
    """Every module the StableHLO importer builds from the conformance files is valid HLO."""
    from hlofuse.frontends.conformance import ConformanceSkip, prepare
    from hlofuse.hlo.errors import UnsupportedError

    failures = []
    for path in sorted(STABLEHLO.glob("*.mlir")):
        try:
            module = prepare(path.read_text(), str(path)).module
        except (ConformanceSkip, UnsupportedError):
            continue
        try:
            verify(module)
        except VerifierError as e:
            failures.append(f"{path.name}: {e}")
    assert not failures, f"{len(failures)} imported modules fail to verify:\n" + "\n".join(failures[:20])
