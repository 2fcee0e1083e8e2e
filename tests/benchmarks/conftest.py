"""Fixtures shared by the benchmark scripts' tests."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse

# A 64x128x32 dot (2*64*32*128 flops) and an elementwise kernel after it: one contraction step
# beside one that is not.
DOT_TANH = """HloModule m
ENTRY e {
  a = f32[64,128] parameter(0)
  b = f32[128,32] parameter(1)
  d = f32[64,32] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[64,32] tanh(d)
}
"""


@pytest.fixture
def dot_tanh():
    """(compiled DOT_TANH, its arguments)."""
    exe = hlofuse.compile(hlofuse.parse_hlo(DOT_TANH), target="cpu")
    rng = np.random.default_rng(0)
    return exe, [rng.standard_normal((64, 128)).astype(np.float32), rng.standard_normal((128, 32)).astype(np.float32)]
