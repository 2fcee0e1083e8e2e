"""The interpreter's two denormal semantics: XLA:CPU's FTZ/DAZ ("flush", the default: the CPU
and emulated-GPU backends' oracle) and IEEE's ("keep": the real GPU's, as XLA:GPU's default
xla_gpu_ftz=false). A real H200 kept them where the flushing oracle said otherwise (fuzz graph,
seed 7: sign of a bf16 denormal)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hlofuse.compiler import reference_denormals
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.interpreter import evaluate

SIGN_AND_SQRT = """HloModule m
ENTRY e {
  x = {t}[4] parameter(0)
  s = {t}[4] sign(x)
  a = {t}[4] abs(x)
  q = {t}[4] sqrt(a)
  ROOT r = ({t}[4], {t}[4]) tuple(s, q)
}
"""


@pytest.mark.parametrize("t,dtype,tiny", [("f32", np.float32, 1e-40), ("bf16", ml_dtypes.bfloat16, 1e-40)])
def test_sign_and_sqrt_of_a_denormal_in_each_mode(t, dtype, tiny):
    module = parse_hlo(SIGN_AND_SQRT.replace("{t}", t))
    x = np.array([-tiny, tiny, -1.0, 0.0], np.float32).astype(dtype)
    assert np.isfinite(np.float32(x[0])) and np.float32(x[0]) != 0  # a denormal, not flushed by the cast
    flushed_sign, flushed_sqrt = evaluate(module, [x])
    kept_sign, kept_sqrt = evaluate(module, [x], denormals="keep")
    # XLA:CPU reads a denormal as a zero of its sign: sign -0/+0, sqrt 0
    assert [float(v) for v in flushed_sign] == [0.0, 0.0, -1.0, 0.0]
    assert np.signbit(np.float32(flushed_sign[0]))
    assert float(flushed_sqrt[0]) == 0.0
    # IEEE: the denormal is a number: sign -1/+1, sqrt of 1e-40 is about 1e-20
    assert [float(v) for v in kept_sign] == [-1.0, 1.0, -1.0, 0.0]
    np.testing.assert_allclose(np.float32(kept_sqrt[0]), np.sqrt(np.float32(np.float32(x[1]))), rtol=1e-2)


def test_unknown_mode_is_refused():
    module = parse_hlo(SIGN_AND_SQRT.replace("{t}", "f32"))
    with pytest.raises(ValueError, match="denormals must be one of"):
        evaluate(module, [np.zeros(4, np.float32)], denormals="ftz")


def test_each_target_has_its_oracle_mode():
    assert reference_denormals("gpu") == "keep"
    assert [reference_denormals(t) for t in ("cpu", "gpu-emulated", "interpreter")] == ["flush"] * 3
