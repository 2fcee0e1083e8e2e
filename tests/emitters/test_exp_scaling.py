"""exp_f32's scaling by 2**n (emitters/math_approx.py `scales_with_ldexp`): one llvm.ldexp
(vscalefps) on a CPU target that flushes denormals and has AVX-512, two multiplies elsewhere;
the same bits either way, on a sample of every f32 bit pattern and the edges of the range
(the whole 2**32 were compared when it was introduced: no difference)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import hlofuse
from hlofuse.emitters import math_approx
from hlofuse.emitters.cpu.target import CpuTarget

EXP = """HloModule e
ENTRY main {
  x = f32[COUNT] parameter(0)
  ROOT y = f32[COUNT] exponential(x)
}
"""


def test_which_targets_scale_in_one_step():
    assert math_approx.scales_with_ldexp(SimpleNamespace(flushes_denormals=True, cpu_features="+sse2,+avx512f,+avx2"))
    assert not math_approx.scales_with_ldexp(SimpleNamespace(flushes_denormals=True, cpu_features="+sse2,+avx2"))
    assert not math_approx.scales_with_ldexp(SimpleNamespace(flushes_denormals=False, cpu_features="+avx512f"))
    assert not math_approx.scales_with_ldexp(SimpleNamespace())  # a target that does not say (a GPU's)


def _inputs() -> np.ndarray:
    every = np.arange(0, 1 << 32, 1009, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.array([88.72283935546875, 88.72283172607422, np.nextafter(np.float32(88.72283935546875), np.float32(99)), 88.0, 88.5,
                      -87.33654, -87.5, -88.0, -103.97208404541016, -104.0, -150.0, 0.0, -0.0, 1e-45, -1e-45,
                      np.inf, -np.inf, np.nan], np.float32)
    return np.concatenate([every, edges, -edges])


@pytest.mark.skipif(not math_approx.scales_with_ldexp(CpuTarget()), reason="host without AVX-512")
def test_one_step_gives_the_two_steps_bits(monkeypatch):
    x = _inputs()
    text = EXP.replace("COUNT", str(x.size))
    one = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)
    assert "llvm.ldexp" in one.program.llvm_ir()
    got = np.asarray(one(x)[0])
    monkeypatch.setattr(math_approx, "scales_with_ldexp", lambda target: False)
    two = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)
    want = np.asarray(two(x)[0])  # compiled (and its code emitted) with the two steps
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    at = {float(v): got[k] for k, v in enumerate(x) if not np.isnan(v)}
    assert at[np.inf] == np.inf and at[-np.inf] == 0 and at[-104.0] == 0 and at[0.0] == 1
    assert np.isinf(at[float(np.nextafter(np.float32(88.72283935546875), np.float32(99)))])
    assert np.isinf(at[88.72283935546875])  # above ln(FLT_MAX) = 88.7228391
    assert at[88.72283172607422] > 3.4e38 and np.isfinite(at[88.72283172607422]) and np.isnan(got[np.isnan(x)]).all()
