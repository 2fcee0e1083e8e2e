"""Column reductions whose vectors start on the input's cache lines
(kernels/cpu_reduction_rotated.py): where a unit's rows are one contiguous run of whole vectors
(one block of all K kept columns, K * size a multiple of 64 bytes), the kernel peels to the
first line boundary and folds a rotated block of accumulators. Every column is folded in the
same order as by the plain kernel: the outputs are bit for bit the plain kernel's, whatever the
input's offset from a line, split over slices or not; where the rule does not apply the kernel
is the plain one.

Column sums of more than 32 rows a unit fold in windows (kernels/cpu_reduction_windows.py),
which the rotated loop does not count: they keep the plain loops
(test_column_windows.py), and the rotation serves the reductions that are not windowed (a max
or a min, f16 sums). These tests, which check the rotation's bits against the plain kernel's
with sums, therefore run with the windows off (`plain_sums`)."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.cpu import emit_kernel_module
from hlofuse.codegen.kernels import cpu_reduction_rotated, cpu_reduction_windows, reduction_groups
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.runtime.compare import compare_outputs
from hlofuse.runtime.output_pool import aligned_empty
from llvm_loops import loop_hint_names
from test_column_blocks import _column_module, _group, avx512_host  # noqa: F401 (a fixture)


@pytest.fixture(autouse=True)
def plain_sums(monkeypatch):
    """Sums folded in one sequence, the order the rotation reproduces (module docstring)."""
    monkeypatch.setattr(cpu_reduction_windows, "SUMS_IN_WINDOWS", False)


def _at_offset(x: np.ndarray, offset: int) -> np.ndarray:
    """A copy of `x` starting `offset` bytes past a 64-byte boundary."""
    raw = aligned_empty((x.nbytes + 64,), np.uint8)
    y = raw[offset:offset + x.nbytes].view(x.dtype).reshape(x.shape)
    y[...] = x
    return y


def _compile(text: str):
    return hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)


def _rotates(exe) -> bool:
    return any("rotate.header" in str(emit_kernel_module(k, CpuTarget(), k.name))
               for k in exe.program._planner.kernels if k.group is not None)


@pytest.mark.parametrize("dims,dtype", [((8, 9, 10, 64), "f32"), ((300, 64), "f32"), ((5, 7, 48), "f32"),
                                        ((4096, 64), "f32"), ((37, 16), "f64"), ((2048, 24), "f64")])
@pytest.mark.parametrize("values", [1, 2, 3])
def test_bits_equal_the_plain_kernel_at_every_offset(avx512_host, dims, dtype, values, monkeypatch):
    """On an AVX-512 host's column budgets (avx512_host: there two and three f32 values a
    column of up to 64 columns are one block, the rotation's precondition), whatever host runs
    the test. On an AVX2 host the same reduces are blocks of 32 (two values) or 16 (three)
    columns and keep the plain loops (test_rotates_exactly_the_single_blocks_of_this_host)."""
    np_type = np.float32 if dtype == "f32" else np.float64
    x = np.random.default_rng(sum(dims) + values).standard_normal(dims).astype(np_type)
    text = _column_module(dims, values, dtype)
    rotated = _compile(text)
    assert _rotates(rotated)
    monkeypatch.setattr(cpu_reduction_rotated, "ROTATES_COLUMNS", False)
    plain = _compile(text)
    assert not _rotates(plain)
    want = [np.asarray(o) for o in plain(x)]
    for offset in (0, 4, 16, 48, 8 if dtype == "f64" else 60):
        got = rotated(_at_offset(x, offset))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), w)
    interpreted = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(x)
    if math_prod(dims) < (1 << 17):  # below the split: each column in order, as the interpreter folds
        for r in compare_outputs(list(rotated(x)), list(interpreted)):
            assert r.ok, r


@pytest.mark.parametrize("dims,dtype,values", [((8, 9, 10, 64), "f32", 1), ((8, 9, 10, 64), "f32", 2),
                                               ((5, 7, 48), "f32", 3), ((16, 20, 96), "f32", 2),
                                               ((2048, 24), "f64", 2), ((37, 16), "f64", 2)])
def test_rotates_exactly_the_single_blocks_of_this_host(dims, dtype, values):
    """On the host running the test, the kernel rotates exactly where its column group is one
    block of all the columns. On an AVX2 host (16 registers of 32 bytes: 512 bytes of column
    accumulators, half of it for two or more values) two f32 values of 64 columns are blocks
    of 32 and stay plain; one value of 64 columns (256 bytes) is one block and rotates."""
    text = _column_module(dims, values, dtype)
    group = _group(text)
    assert _rotates(_compile(text)) == (group.blocks == 1)
    count, size = reduction_groups.vector_registers()
    if (count, size) == (16, 32):  # AVX2
        per_column = values * (8 if dtype == "f64" else 4)
        assert (group.blocks == 1) == (dims[-1] * per_column <= (512 if values == 1 else 256)), group.block_columns


def math_prod(dims) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def test_rows_loop_steps_two_rows():
    """LLVM leaves a loop of runtime trip count at one row a step, which ran 1.3x slower:
    the loop over rows asks for two (llvm.loop.unroll.count)."""
    exe = _compile(_column_module((16, 20, 96), 1))
    (k,) = [k for k in exe.program._planner.kernels if k.group is not None]
    text = str(emit_kernel_module(k, CpuTarget(), k.name))
    hints = loop_hint_names(text)
    assert {"llvm.loop.unroll.count", "llvm.loop.vectorize.enable"} <= hints["rows"], hints
    assert f'!"llvm.loop.unroll.count", i32 {cpu_reduction_rotated.ROWS_UNROLL}' in text


def test_batch_norm_channels(avx512_host, monkeypatch):
    """96 channels (384-byte rows), sum and sum of squares: one block, rotated."""
    test_bits_equal_the_plain_kernel_at_every_offset(None, (16, 20, 96), "f32", 2, monkeypatch)


@pytest.mark.parametrize("dims,values", [((64, 1024), 2),  # several blocks of columns
                                         ((300, 96), 3),  # three values: blocks of 64 columns
                                         ((300, 96), 3),  # three values: blocks of 64 columns
                                         ((64, 100), 1),  # a row not a whole number of vectors
                                         ((64, 20), 1)])
def test_plain_where_the_rule_does_not_apply(dims, values):
    assert not _rotates(_compile(_column_module(dims, values)))


def test_more_kept_dimensions_than_the_last_stay_plain():
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[32,4,64] parameter(0)
  zero = f32[] constant(0)
  ROOT s = f32[4,64] reduce(x, zero), dimensions={0}, to_apply=add
}
"""
    exe = _compile(text)
    assert not _rotates(exe)
    x = np.random.default_rng(0).standard_normal((32, 4, 64)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(exe(_at_offset(x, 16))[0]), x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)
