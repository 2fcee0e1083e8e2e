"""A fusion nested in a fused computation (XLA's fusion constant sinking tests write them):
the compiled backends flatten it into the outer fusion (passes/nested_fusion_flattener.py)
and compute the interpreter's values; it was refused as a fusion emitted element by element."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.interpreter import evaluate

NESTED = """HloModule nested
inner {
  x = f32[6,8] parameter(0)
  i = s32[] parameter(1)
  z = s32[] constant(0)
  ROOT d = f32[1,8] dynamic-slice(x, i, z), dynamic_slice_sizes={1,8}
}
outer {
  x = f32[6,8] parameter(0)
  i = s32[] parameter(1)
  f = f32[1,8] fusion(x, i), kind=kLoop, calls=inner
  b = f32[8] bitcast(f)
  ROOT e = f32[8] exponential(b)
}
ENTRY e {
  p = f32[6,8] parameter(0)
  c = s32[] constant(4)
  ROOT out = f32[8] fusion(p, c), kind=kLoop, calls=outer
}
"""


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
def test_a_nested_fusion_computes_the_interpreters_values(target):
    x = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
    (want,) = evaluate(parse_hlo(NESTED), [x])
    np.testing.assert_allclose(want, np.exp(x[4]), rtol=1e-6)
    exe = hlofuse.compile(parse_hlo(NESTED), target=target, cache=False)
    fused = [c for c in exe.fused_module.computations if c.is_fusion_computation()]
    assert not any(i.opcode == "fusion" for c in fused for i in c.instructions)
    np.testing.assert_allclose(np.asarray(exe(x)[0]), want, rtol=1e-6)
