"""Reductions with few work units split across cores (codegen/planning.py `_kernels_of`,
kernels/cpu_reduction.py): a partial kernel folds slices of the outermost reduced dimension,
a combine kernel folds the slices in order and runs the epilogue. Column reductions (the minor
dimension kept: batch-norm statistics of an NHWC batch, one block of 96 channels) split as row
reductions do. Results are checked against numpy (float64 for float sums, which the split
reassociates) and against the interpreter bit for bit where the reducer is exact (max with NaN
and signed zeros, argmax ties, integer sums)."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from backend_cases import ADD_MAX_F32, argmax_module, reduce_module, reducer
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.cpu_executor import CpuProgram


def _stages(prog: CpuProgram) -> list[str]:
    return [k.stage for k in prog._planner.kernels]


def _interpreted(text: str, args: list) -> list:
    return hlofuse.compile(parse_hlo(text), target="interpreter")(*args)


# Column statistics of an NHWC-like batch, as batch norm computes them: the mean (a reduce with
# a divide epilogue) and, in the same fusion, the sum of squares and the scaled input (an
# elementwise output of the input's dimensions, written by the partial kernels).
_STATS = """HloModule stats
""" + ADD_MAX_F32 + """
fused {
  x = f32[16,40,96] parameter(0)
  c = f32[] constant(0)
  s = f32[96] reduce(x, c), dimensions={0,1}, to_apply=add
  n = f32[] constant(640)
  nb = f32[96] broadcast(n), dimensions={}
  mean = f32[96] divide(s, nb)
  xx = f32[16,40,96] multiply(x, x)
  ss = f32[96] reduce(xx, c), dimensions={0,1}, to_apply=add
  two = f32[] constant(2)
  tb = f32[16,40,96] broadcast(two), dimensions={}
  y = f32[16,40,96] multiply(x, tb)
  ROOT t = (f32[96], f32[96], f32[16,40,96]) tuple(mean, ss, y)
}
ENTRY e {
  x = f32[16,40,96] parameter(0)
  ROOT f = (f32[96], f32[96], f32[16,40,96]) fusion(x), kind=kInput, calls=fused
}
"""


def test_column_statistics_split_across_cores():
    prog = CpuProgram.compile(parse_hlo(_STATS.replace("[16,40,96]", "[64,64,96]").replace("640", "4096")))
    assert _stages(prog) == ["partial", "combine"]
    x = np.random.default_rng(20).standard_normal((64, 64, 96)).astype(np.float32) + 3
    mean, ss, y = prog.run([x])
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mean, x64.mean(axis=(0, 1)), rtol=2e-6)
    np.testing.assert_allclose(ss, (x64 * x64).sum(axis=(0, 1)), rtol=2e-6)
    np.testing.assert_array_equal(y, x * np.float32(2))


def test_small_column_statistics_stay_one_kernel():
    """Below the split's size (elements per unit), one column kernel folds every row in order."""
    prog = CpuProgram.compile(parse_hlo(_STATS))
    assert _stages(prog) == ["single"]
    x = np.random.default_rng(21).standard_normal((16, 40, 96)).astype(np.float32)
    mean, ss, y = prog.run([x])
    np.testing.assert_allclose(mean, x.astype(np.float64).mean(axis=(0, 1)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dims, rdims", [
    ((4, 3000, 700), (1,)),     # kept leading dimension, two column blocks: 8 units
    ((2048, 300), (0,)),        # one block of 300 columns
    ((5, 7, 4096, 33), (0, 2)),  # the outermost reduced dimension (5) gives only 5 slices
])
def test_split_integer_column_sums_are_exact(dims, rdims):
    text = reduce_module(dims, rdims, ty="s32", computations=reducer("add", "s32", "add"))
    prog = CpuProgram.compile(parse_hlo(text))
    assert _stages(prog) == ["partial", "combine"]
    x = np.random.default_rng(22).integers(-1000, 1000, dims, dtype=np.int32)
    (got,) = prog.run([x])
    np.testing.assert_array_equal(got, x.sum(axis=rdims, dtype=np.int64).astype(np.int32))


def test_many_column_blocks_are_not_split():
    """Enough column blocks to share among the cores: no partial sums."""
    prog = CpuProgram.compile(parse_hlo(reduce_module((64, 4096, 64), (1,))))
    assert _stages(prog) == ["single"]


def test_split_column_max_keeps_nan_and_signed_zeros():
    """The combine kernel folds the slices with the reducer, so a NaN in any slice and
    maximum(-0, +0) = +0 across slices come out as the interpreter gives them."""
    dims = (2048, 300)
    text = reduce_module(dims, (0,), "max", "-inf")
    prog = CpuProgram.compile(parse_hlo(text))
    assert _stages(prog) == ["partial", "combine"]
    x = -np.abs(np.random.default_rng(23).standard_normal(dims)).astype(np.float32) - 1
    x[1500, 7] = np.nan        # a late slice
    x[3, 8] = np.nan           # the first slice
    x[:, 9] = -1.0
    x[100, 9], x[1900, 9] = -0.0, 0.0  # zeros of both signs in different slices
    x[1900, 10], x[100, 10] = -0.0, 0.0
    (got,) = prog.run([x])
    (want,) = _interpreted(text, [x])
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.isnan(got[7]) and np.isnan(got[8]) and got[9] == 0 and not np.signbit(got[9])


def test_split_column_argmax_takes_the_first_index():
    dims = (4096, 40)
    text = argmax_module(dims, 0)
    prog = CpuProgram.compile(parse_hlo(text))
    assert _stages(prog) == ["partial", "combine"]
    x = np.random.default_rng(24).standard_normal(dims).astype(np.float32)
    x[200, 3] = x[3000, 3] = 50.0   # a tie across slices: the lower index wins
    x[3100, 4] = x[3101, 4] = 60.0  # a tie within a slice
    values, index = prog.run([x])
    np.testing.assert_array_equal(values, x.max(axis=0))
    np.testing.assert_array_equal(index, x.argmax(axis=0))
    want = _interpreted(text, [x])
    np.testing.assert_array_equal(index, want[1])
