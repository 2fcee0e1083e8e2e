"""Column reductions of several register blocks from memory read their rows in tiles
(ReductionGroup.tiles_rows, cpu_reduction._emit_column_tiles): where every dimension but the
last is reduced and the input is larger than L3, a unit is every block of its columns, and the
blocks take turns over tiles of ROW_TILE_BYTES of rows, so the input is read in one contiguous
pass instead of one strided pass per block (batch-norm statistics of 96 channels: three blocks
of 32 columns on AVX2). Each column is folded over the same rows in the same order, the split's
slices the same: the bits of the block-at-a-time kernel, and of a reference folding each
column's rows in order in windows of 32 (tests/support/windowed_sums.py)."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import planning
from hlofuse.codegen.kernels import reduction_groups
from test_column_blocks import _column_module, _group
from test_column_rows_in_l1 import _parts
from windowed_sums import sliced_windowed_sums

SMALL_L3 = 1 << 20  # so that a test-sized input "comes from memory"


@pytest.fixture
def small_l3(monkeypatch):
    """A small L3, and an AVX2 host's register budget (16 registers of 32 bytes: blocks of 32
    f32 columns of two values) whatever host runs the test."""
    monkeypatch.setattr(reduction_groups, "l3_cache_bytes", lambda: SMALL_L3)
    monkeypatch.setattr(reduction_groups, "host_cpu", lambda: ("cpu", "+avx,+avx2,+fma"))
    reduction_groups.vector_registers.cache_clear()
    yield
    reduction_groups.vector_registers.cache_clear()


def _groups(exe) -> list:
    return [k.group for k in exe.program._planner.kernels if k.group is not None]


def test_rule(small_l3, monkeypatch):
    # two values a column: register blocks (never a row in L1), several of them
    g = _group(_column_module((2048, 1024), 2))
    assert g.blocks >= 2 and not g.in_l1 and g.tiles_rows
    assert g.units == 1 and g.unit_elements == 2048 * 1024
    assert g.tile_rows == reduction_groups.ROW_TILE_BYTES // (1024 * 4)
    # one block, a row in L1, inputs in cache, a kept dimension besides the last: not tiled
    assert not _group(_column_module((2048, 16), 2)).tiles_rows
    assert not _group(_column_module((2048, 1024), 1)).tiles_rows  # one value: a row in L1
    monkeypatch.setattr(reduction_groups, "l3_cache_bytes", lambda: 64 << 20)
    assert not _group(_column_module((2048, 1024), 2)).tiles_rows
    monkeypatch.setattr(reduction_groups, "l3_cache_bytes", lambda: SMALL_L3)
    monkeypatch.setattr(reduction_groups, "ROW_TILE_BYTES", 0)
    assert not _group(_column_module((2048, 1024), 2)).tiles_rows


@pytest.mark.parametrize("dims,values,dtype", [
    ((32, 14, 9, 96), 2, "f32"),  # batch-norm statistics: 3 blocks of 32 on AVX2, split in 16
    ((32, 32, 9, 96), 2, "f32"),  # the blocks split in 16 too: the same bits
    ((3000, 100), 2, "f32"),  # a last block of fewer columns; rows not a whole number of tiles
    ((5, 800, 72), 3, "f32"),  # sum, sum of squares and max; five slices
    ((1500, 200), 2, "f64"),
    ((1, 300, 40, 96), 2, "f32"),  # a batch of one: its rows sliced (the blocks were not split)
])
def test_bits_equal_the_block_at_a_time_kernel(small_l3, monkeypatch, dims, values, dtype):
    np_type = np.float64 if dtype == "f64" else np.float32
    x = np.random.default_rng(sum(dims)).standard_normal(dims).astype(np_type)
    text = _column_module(dims, values, dtype)
    tiled = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)
    assert all(g.tiles_rows for g in _groups(tiled)) and _groups(tiled)
    monkeypatch.setattr(reduction_groups, "ROW_TILE_BYTES", 0)
    blocks = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)
    assert not any(g.tiles_rows for g in _groups(blocks))
    got, want = [np.asarray(o) for o in tiled(x)], [np.asarray(o) for o in blocks(x)]
    # Each kernel folds every column row after row within each slice of its split, the
    # slices in order. The split follows the units: a tiled kernel's unit is all its columns,
    # so it may be split where the blocks, each below SPLIT_MIN_ELEMENTS, were not.
    for exe, out in ((tiled, got), (blocks, want)):
        np.testing.assert_array_equal(out[0], _sliced_sums(x, _parts(exe)))
        if values == 3:
            np.testing.assert_array_equal(out[2], x.reshape(-1, dims[-1]).max(axis=0))
    if dims == (32, 32, 9, 96):
        assert _parts(tiled) == _parts(blocks) == 16
    if _parts(tiled) == _parts(blocks):  # the same order: the same bits
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def _sliced_sums(x: np.ndarray, parts: int) -> np.ndarray:
    """Column sums as a kernel split in `parts` slices of the outermost dimension (of the rows
    where that dimension is 1) folds them: each slice's rows in order, in windows of 32 rows
    (`sliced_windowed_sums`), then the slices in order."""
    rows = x.reshape(-1, x.shape[-1])
    extent = x.shape[0] if x.shape[0] >= 2 else rows.shape[0]
    per = rows.shape[0] // extent  # rows per index of what is sliced
    return sliced_windowed_sums(rows, [(p * extent // parts * per, (p + 1) * extent // parts * per)
                                       for p in range(parts)])


@pytest.mark.parametrize("split", [True, False])
def test_tiles_with_an_elementwise_output(small_l3, monkeypatch, split):
    """An elementwise output of the input's dimensions written from the same loop (every
    element once), split in slices or kept whole (one unit: its epilogue written by the
    kernel itself)."""
    if not split:
        monkeypatch.setattr(planning, "SPLIT_MIN_ELEMENTS", 1 << 40)
    text = """HloModule extras
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4000,96] parameter(0)
  zero = f32[] constant(0)
  xx = f32[4000,96] multiply(x, x)
  s = f32[96] reduce(x, zero), dimensions={0}, to_apply=add
  ss = f32[96] reduce(xx, zero), dimensions={0}, to_apply=add
  e = f32[4000,96] add(x, xx)
  ROOT t = (f32[96], f32[96], f32[4000,96]) tuple(s, ss, e)
}
"""
    x = np.random.default_rng(5).standard_normal((4000, 96)).astype(np.float32)
    exe = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)
    assert any(g.tiles_rows for g in _groups(exe))
    assert _parts(exe) == (16 if split else 1)
    got = [np.asarray(o) for o in exe(x)]
    want = [np.asarray(o) for o in hlofuse.compile(hlofuse.parse_hlo(text), "interpreter")(x)]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_array_equal(got[0], _sliced_sums(x, _parts(exe)))


def test_the_kernel_key_tells_the_layouts_apart(small_l3, monkeypatch):
    """The structural key of a kernel (codegen/kernel_key.py) holds the column layout the
    emitter chose from the host's budgets: the tiled and the block-at-a-time kernels of one
    computation never share object code in a cache."""
    from hlofuse.codegen.kernel_key import kernel_text

    text = _column_module((2048, 1024), 2)

    def texts() -> set:
        exe = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)
        return {kernel_text(k) for k in exe.program._planner.kernels if k.group is not None}

    tiled = texts()
    monkeypatch.setattr(reduction_groups, "ROW_TILE_BYTES", 0)
    assert texts().isdisjoint(tiled)


def test_each_block_prefetches_its_lines_of_the_next_tile(small_l3, monkeypatch):
    """While a block folds a tile, it prefetches (into L2) its own columns of the row one tile
    ahead: two 64-byte lines a row for a block of 32 f32 columns, so the blocks together
    bring in the next tile's rows whole. The prefetches change no arithmetic: the same bits
    without them (batch-norm statistics of 96 channels ran 6-13% faster from memory, 13-18%
    in cache, on the Zen 1 host; docs/emitters.md)."""
    from hlofuse.codegen.cpu import emit_kernel_module
    from hlofuse.codegen.kernels import cpu_reduction
    from hlofuse.emitters.cpu.target import CpuTarget

    text = _column_module((4000, 96), 2)
    x = np.random.default_rng(9).standard_normal((4000, 96)).astype(np.float32)

    def compiled():
        exe = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)
        tiled = [k for k in exe.program._planner.kernels if k.group is not None and k.group.tiles_rows]
        assert tiled and all(k.group.block_columns == 32 for k in tiled)
        return exe, [str(emit_kernel_module(k, CpuTarget(), "k")) for k in tiled]

    exe, texts = compiled()
    calls = [line for t in texts for line in t.splitlines() if "call void @\"llvm.prefetch" in line]
    # The partial sums' kernel (the split's first stage) reads the input: one block loop body,
    # 2 lines of 32 columns; the combine kernel reads the partials, no array of the input's size.
    assert len(calls) == 2
    monkeypatch.setattr(cpu_reduction, "TILE_PREFETCH", False)
    plain, plain_texts = compiled()
    assert not any("llvm.prefetch" in t for t in plain_texts)
    for g, w in zip(exe(x), plain(x)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
