"""The GEMM convolution kernel's packing of `batch_minor` patch tiles (jax's weight gradients)
in blocks of a vector's worth of rows (cpu_conv_gemm_kernel._pack_runs): the interpreter's
values, and the same bits as the row-by-row packing (BATCH_MINOR_RUNS False), which fills the
same patch tile element by element; blocks and tails of rows, tiles starting inside a position,
padding, dilations, innermost K factors of 1-16 elements, f32 and f64."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import cpu_conv_gemm, cpu_conv_gemm_kernel
from hlofuse.codegen.kernels.cpu_conv_gemm import gemm_layout
from hlofuse.hlo.parser import parse_hlo

from test_conv import _inputs, _module
from test_conv_gemm import check_gemm

WEIGHT_GRAD = "dim_labels=f01b_i01o->01bf"

CASES = {
    # (lhs, rhs, dtype, attrs): the forward's batch first (the contraction), its input features last
    # 40 batch elements: two blocks of 16 and a tail of 8; the innermost factor 4 taps (a width of 4)
    "4x4_pad": ("f32[16,4,4,40]", "f32[16,4,4,24]", "f32", "window={size=4x4 pad=1_1x1_1}, " + WEIGHT_GRAD),
    # a 16-tap innermost factor: one whole-vector transpose per block
    "16x16_pad": ("f32[4,16,16,32]", "f32[4,16,16,16]", "f32", "window={size=16x16 pad=1_1x1_1}, " + WEIGHT_GRAD),
    # 3 taps (width 1) with the forward's stride 2 (rhs dilation) and uneven padding
    "stride2_3x3": ("f32[8,6,6,17]", "f32[8,3,3,16]", "f32",
                    "window={size=3x3 pad=0_1x0_1 rhs_dilate=2x2}, " + WEIGHT_GRAD),
    # 6 taps (width 2), lhs dilation (holes between inputs)
    "lhs_dilated": ("f32[4,5,6,48]", "f32[4,6,6,8]", "f32",
                    "window={size=6x6 pad=1_1x1_1 lhs_dilate=1x2}, " + WEIGHT_GRAD),
    # f64: blocks of 8 rows
    "f64": ("f64[8,4,4,20]", "f64[8,4,4,16]", "f64", "window={size=4x4 pad=1_1x1_1}, " + WEIGHT_GRAD),
    # the input feature innermost (x as [h, w, f, b]): the block's factor is the input features
    "features_inner": ("f32[5,5,6,40]", "f32[3,3,6,16]", "f32",
                       "window={size=3x3 pad=1_1x1_1}, dim_labels=01fb_01io->01bf"),
}


@pytest.fixture
def gemm(monkeypatch):
    """The GEMM path for every convolution it can run (not oneDNN's, not the direct kernel)."""
    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)
    monkeypatch.setattr(cpu_conv_gemm, "prefers_gemm", lambda conv: True)


def _bits(text: str, runs: bool, monkeypatch) -> np.ndarray:
    monkeypatch.setattr(cpu_conv_gemm_kernel, "BATCH_MINOR_RUNS", runs)
    exe = hlofuse.compile(parse_hlo(text), target="cpu", fusion=False, cache=False)
    (got,) = exe(*_inputs(parse_hlo(text), 3))
    return np.asarray(got)


@pytest.mark.parametrize("tile", [None, 8, 24], ids=["rules", "tile8", "tile24"])
@pytest.mark.parametrize("name", list(CASES))
def test_blocked_packing_matches_rows_and_interpreter(gemm, monkeypatch, name, tile):
    lhs, rhs, dtype, attrs = CASES[name]
    text = _module(lhs, rhs, dtype, attrs)
    if tile is not None:  # tiles starting inside a position's batch elements
        monkeypatch.setattr(cpu_conv_gemm, "MIN_TILE_ROWS", tile)
        monkeypatch.setattr(cpu_conv_gemm, "MAX_TILE_ROWS", tile)
    layout = gemm_layout(parse_hlo(text).entry.root)
    assert layout is not None and layout.batch_minor and layout.direct_input is None
    lanes = cpu_conv_gemm_kernel.VECTOR_BYTES * 8 // layout.geo.out_type.bits
    assert layout.geo.x_batch == 1 and layout.geo.batch >= lanes  # the blocked packing runs
    check_gemm(text, threads=(1, 2))
    blocked, rows = _bits(text, True, monkeypatch), _bits(text, False, monkeypatch)
    np.testing.assert_array_equal(blocked.view(np.uint8), rows.view(np.uint8))


def test_transpose_of_every_width():
    """_transpose's result r, lane c is input c's lane r (V = 16 and 8), checked by running
    its shuffles' masks on numpy arrays through a recording builder."""
    class Recorder:
        def shuffle_vector(self, a, b, mask):
            return np.concatenate([a, b])[[int(m.constant) for m in mask.constant]] if hasattr(
                mask.constant[0], "constant") else np.concatenate([a, b])[list(mask.constant)]

    for lanes in (16, 8):
        vecs = [np.arange(lanes) + 100 * i for i in range(lanes)]
        out = cpu_conv_gemm_kernel._transpose(Recorder(), vecs)
        for r in range(lanes):
            np.testing.assert_array_equal(out[r], np.arange(lanes) * 100 + r)
