"""Column reductions from memory read whole rows (ReductionGroup.block_columns, `in_l1`): an
input larger than L3, folded into one value per column, whose row of accumulators fits
L1_BLOCK_BYTES is one block of all its columns, the accumulators a row of partial sums in L1
(64-byte aligned), so each unit streams its rows as one contiguous run. In cache, with a
wider row or with several values a column, the blocks of registers stay. Each column is still
folded row after row within each slice of a split, and the slices in order: the results are
those of a sequential numpy reference, bit for bit, and those of the register-block kernel
(the same order)."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import reduction_groups
from test_column_blocks import _column_module, _group, avx512_host  # noqa: F401 (a fixture)
from test_column_rotation import _at_offset
from windowed_sums import sliced_windowed_sums

SMALL_L3 = 1 << 20  # so that a test-sized input "comes from memory"


@pytest.fixture
def small_l3(monkeypatch):
    monkeypatch.setattr(reduction_groups, "l3_cache_bytes", lambda: SMALL_L3)


@pytest.mark.parametrize("dims,values,whole", [
    ((2048, 1024), 1, True),  # 4 KiB of accumulators
    ((512, 2048), 1, True),  # 8 KiB: the budget
    ((2048, 1024), 2, False),  # two values a column (a sum and a sum of squares): registers
    ((256, 4096), 1, False),  # 16 KiB
    ((8192, 256), 1, False),  # a row the registers hold anyway
])
def test_rule(avx512_host, small_l3, dims, values, whole):
    """On an AVX-512 host's budgets (2 KiB of registers: 512 f32 columns of one value)."""
    g = _group(_column_module(dims, values))
    assert g.in_l1 == whole
    assert g.block_columns == (dims[-1] if whole else g.register_block)


@pytest.mark.parametrize("features,registers", [("+avx,+avx2,+fma", 128),  # AVX2: 512 bytes of registers
                                                ("+avx,+avx2,+avx512f", 512)])  # AVX-512: 2 KiB
def test_inputs_in_cache_keep_register_blocks(monkeypatch, features, registers):
    monkeypatch.setattr(reduction_groups, "host_cpu", lambda: ("cpu", features))
    reduction_groups.vector_registers.cache_clear()
    try:
        g = _group(_column_module((64, 1024), 1))  # 256 KiB, below any L3
        assert not g.in_l1 and g.block_columns == g.register_block == registers
    finally:
        reduction_groups.vector_registers.cache_clear()


def test_avx2_rows_wider_than_its_registers_are_read_whole(small_l3, monkeypatch):
    """On an AVX2 host 128 f32 columns fill the registers: a 256-column row from memory is one
    block in L1 (AVX-512's 32 registers hold it, test_rule)."""
    monkeypatch.setattr(reduction_groups, "host_cpu", lambda: ("cpu", "+avx,+avx2,+fma"))
    reduction_groups.vector_registers.cache_clear()
    try:
        g = _group(_column_module((8192, 256), 1))
        assert g.register_block == 128 and g.in_l1 and g.block_columns == 256
    finally:
        reduction_groups.vector_registers.cache_clear()


def _sequential_column_sums(x: np.ndarray, parts: int) -> np.ndarray:
    """Column sums of `x` (its last dimension kept, the others reduced) as the split kernel
    folds them: each of `parts` near-equal slices of the rows in order, in windows of 32 rows
    (`sliced_windowed_sums`), then the slices' sums in slice order."""
    x = x.reshape(-1, x.shape[-1])
    n = x.shape[0]
    return sliced_windowed_sums(x, [(p * n // parts, (p + 1) * n // parts) for p in range(parts)])


def _parts(exe) -> int:
    """Slices of the rows the column kernel of `exe` folds separately (1: not split)."""
    return next(k.parts for k in exe.program._planner.kernels if k.group is not None)


@pytest.mark.parametrize("offset", [0, 16, 36])
def test_bits_equal_a_sequential_reference(small_l3, offset):
    dims = (2048, 1024)
    x = np.random.default_rng(3).standard_normal(dims).astype(np.float32)
    exe = hlofuse.compile(hlofuse.parse_hlo(_column_module(dims, 1)), "cpu", cache=False)
    assert any(k.group is not None and k.group.in_l1 for k in exe.program._planner.kernels)
    parts = next(k.parts for k in exe.program._planner.kernels if k.group is not None)
    assert parts == 16  # one block: split over 16 slices of the rows
    got = np.asarray(exe(_at_offset(x, offset))[0])
    np.testing.assert_array_equal(got, _sequential_column_sums(x, parts))


@pytest.mark.parametrize("dims,values,dtype", [((1000, 1024), 1, "f32"),
                                              ((3, 700, 2048), 1, "f32"),
                                              ((2000, 600), 1, "f32"),  # rows not whole vectors: no rotation
                                              ((1000, 1000), 1, "f64")])
def test_bits_equal_the_register_blocks(small_l3, monkeypatch, dims, values, dtype):
    np_type = np.float64 if dtype == "f64" else np.float32
    x = np.random.default_rng(sum(dims)).standard_normal(dims).astype(np_type)
    text = _column_module(dims, values, dtype)
    in_l1 = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)
    assert any(k.group is not None and k.group.in_l1 for k in in_l1.program._planner.kernels)
    monkeypatch.setattr(reduction_groups, "L1_BLOCK_BYTES", 0)
    registers = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)
    assert not any(k.group is not None and k.group.in_l1 for k in registers.program._planner.kernels)
    # Each folds every column row after row within each slice of its split, the slices in
    # order. The split follows the units: on an AVX2 host the register blocks are 128 f32
    # columns, and [1000, 1024] in 8 blocks of 128,000 elements is below SPLIT_MIN_ELEMENTS
    # (not split) where AVX-512's 2 blocks of 512 columns and the block in L1 are split in 16.
    got, want = np.asarray(in_l1(_at_offset(x, 16))[0]), np.asarray(registers(x)[0])
    np.testing.assert_array_equal(got, _sequential_column_sums(x, _parts(in_l1)))
    np.testing.assert_array_equal(want, _sequential_column_sums(x, _parts(registers)))
    if _parts(in_l1) == _parts(registers):  # the same order: the same bits
        np.testing.assert_array_equal(got, want)


def test_kept_outer_dimension_uses_the_plain_loops(small_l3, monkeypatch):
    """Kept dimensions besides the last (sums over the middle dimension of [4, 600, 1024]):
    no rotation, the plain column loops over a block of all 1024 columns in L1."""
    text = """HloModule middle
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4,600,1024] parameter(0)
  zero = f32[] constant(0)
  ROOT s = f32[4,1024] reduce(x, zero), dimensions={1}, to_apply=add
}
"""
    x = np.random.default_rng(7).standard_normal((4, 600, 1024)).astype(np.float32)
    in_l1 = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)
    groups = [k.group for k in in_l1.program._planner.kernels if k.group is not None]
    assert groups and all(g.in_l1 and g.block_columns == 1024 for g in groups)
    monkeypatch.setattr(reduction_groups, "L1_BLOCK_BYTES", 0)
    registers = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)
    assert _parts(in_l1) == 16  # 4 units: split over slices of the reduced dimension
    # The register blocks' split follows the host: AVX-512's 2 blocks of 512 columns a row
    # (8 units) are split in 16 as well, AVX2's 8 blocks of 128 (32 units) are not.
    got, plain = np.asarray(in_l1(_at_offset(x, 16))[0]), np.asarray(registers(x)[0])
    for out, exe in ((got, in_l1), (plain, registers)):
        want = np.stack([_sequential_column_sums(x[i], _parts(exe)) for i in range(4)])
        np.testing.assert_array_equal(out, want)
    if _parts(in_l1) == _parts(registers):
        np.testing.assert_array_equal(got, plain)
