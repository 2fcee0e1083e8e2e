"""passes/legacy_indices.py: dynamic-slice and dynamic-update-slice with their start indices as
one vector (the legacy form of XLA's parser test DynamicSlice) run on every backend (they
crashed the compiled ones: IndexError / AttributeError in the element generators), with XLA's
clamping of each start, checked against numpy slicing by hand."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.passes.legacy_indices import LegacyIndexVectors

_DS = """HloModule ds
ENTRY e {
  x = s32[4,5,6] parameter(0)
  v = s32[3] parameter(1)
  ROOT d = s32[2,3,4] dynamic-slice(x, v), dynamic_slice_sizes={2,3,4}
}
"""

_DUS = """HloModule dus
ENTRY e {
  x = s32[4,5,6] parameter(0)
  u = s32[2,3,4] parameter(1)
  v = s64[3] parameter(2)
  ROOT d = s32[4,5,6] dynamic-update-slice(x, u, v)
}
"""

_STARTS = [[0, 0, 0], [1, 2, 1], [3, -7, 9], [100, 100, 100]]


def _clamped(starts, op_dims, sizes):
    return [min(max(s, 0), n - w) for s, n, w in zip(starts, op_dims, sizes)]


@pytest.mark.parametrize("fusion", [True, False])
@pytest.mark.parametrize("target", ["cpu", "gpu-emulated", "interpreter"])
@pytest.mark.parametrize("starts", _STARTS)
def test_dynamic_slice_with_an_index_vector(target, fusion, starts):
    x = np.arange(120, dtype=np.int32).reshape(4, 5, 6)
    (out,) = hlofuse.compile(hlofuse.parse_hlo(_DS), target=target, fusion=fusion)(x, np.array(starts, np.int32))
    a, b, c = _clamped(starts, x.shape, (2, 3, 4))
    np.testing.assert_array_equal(out, x[a:a + 2, b:b + 3, c:c + 4])


@pytest.mark.parametrize("fusion", [True, False])
@pytest.mark.parametrize("target", ["cpu", "gpu-emulated", "interpreter"])
@pytest.mark.parametrize("starts", _STARTS)
def test_dynamic_update_slice_with_an_index_vector(target, fusion, starts):
    x = np.arange(120, dtype=np.int32).reshape(4, 5, 6)
    u = -np.arange(1, 25, dtype=np.int32).reshape(2, 3, 4)
    (out,) = hlofuse.compile(hlofuse.parse_hlo(_DUS), target=target, fusion=fusion)(x, u, np.array(starts, np.int64))
    a, b, c = _clamped(starts, x.shape, u.shape)
    expected = x.copy()
    expected[a:a + 2, b:b + 3, c:c + 4] = u
    np.testing.assert_array_equal(out, expected)


def test_the_pass_leaves_one_scalar_start_per_dimension():
    module = hlofuse.parse_hlo(_DS)
    assert LegacyIndexVectors().run(module)
    ds = module.entry.root
    assert ds.opcode == "dynamic-slice" and len(ds.operands) == 4
    assert all(op.shape.rank == 0 for op in ds.operands[1:])
    assert not LegacyIndexVectors().run(module)  # nothing left to rewrite
    # a rank-1 operand's single start is the scalar-free form already: left alone
    one = hlofuse.parse_hlo("HloModule m\nENTRY e {\n  x = f32[8] parameter(0)\n  i = s32[] parameter(1)\n"
                            "  ROOT d = f32[2] dynamic-slice(x, i), dynamic_slice_sizes={2}\n}\n")
    assert not LegacyIndexVectors().run(one)


# XLA's test_utils_test: a rank-1 operand sliced at a one-element index vector (the legacy form
# for a rank-1 operand too; the verifier refused it as a non-scalar start).
_DS_RANK1 = """HloModule ds1
ENTRY e {
  x = f32[20] parameter(0)
  v = s32[1] parameter(1)
  ROOT d = f32[3] dynamic-slice(x, v), dynamic_slice_sizes={3}
}
"""


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated", "interpreter"])
@pytest.mark.parametrize("start", [0, 5, -4, 18, 100])
def test_a_rank_one_operand_with_a_one_element_index_vector(target, start):
    x = np.arange(20, dtype=np.float32) * 0.5
    (out,) = hlofuse.compile(hlofuse.parse_hlo(_DS_RANK1), target=target)(x, np.array([start], np.int32))
    (a,) = _clamped([start], x.shape, (3,))
    np.testing.assert_array_equal(out, x[a:a + 3])
