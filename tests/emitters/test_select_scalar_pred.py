"""select with a scalar predicate choosing a whole branch (XLA's verifier and XLA:CPU take it;
XLA's tiled CPU emitter tests use it): the shape rule accepts it, every backend computes the
interpreter's answer for both values of the predicate, and a predicate of another rank is still
refused, as XLA refuses it."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.errors import HloError
from hlofuse.hlo.parser import parse_hlo

TEXT = """HloModule s
ENTRY e {
  p = pred[] parameter(0)
  a = f32[128,64] parameter(1)
  b = f32[128,64] parameter(2)
  e = f32[128,64] negate(a)
  ROOT s = f32[128,64] select(p, e, b)
}
"""


@pytest.mark.parametrize("target,fusion", [("cpu", True), ("cpu", False), ("gpu-emulated", True)])
@pytest.mark.parametrize("pred", [True, False])
def test_a_scalar_predicate_picks_a_whole_branch(target, fusion, pred):
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((128, 64)).astype(np.float32) for _ in range(2))
    (got,) = hlofuse.compile(parse_hlo(TEXT), target=target, fusion=fusion, cache=False)(np.array(pred), a, b)
    (want,) = hlofuse.compile(parse_hlo(TEXT), target="interpreter")(np.array(pred), a, b)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(want), -a if pred else b)


def test_a_predicate_of_another_rank_is_refused():
    with pytest.raises(HloError, match="must be a scalar or have the dimensions"):
        hlofuse.compile(parse_hlo(TEXT.replace("p = pred[]", "p = pred[128]")), target="cpu", cache=False)
