"""Dense convolutions as tiled im2col + GEMM (codegen/kernels/cpu_conv_gemm.py) against the
reference interpreter, and the rule choosing them over the direct kernel.

The GEMM path is forced (`prefers_gemm` patched to say yes; no compile cache, so no program
compiled under the real rule is reused) on random convolutions of every dimension-number
layout, stride, padding, lhs and rhs dilation and window reversal (packed weights), f32 and
f64, with tiles of 8 rows so that most of them run as many units with a partial last tile,
crossing batch elements where the layout lets them; with fused epilogues (bias, relu, residual,
a convert to bf16 through a scratch C tile; NHWC and NCHW outputs); and bit for bit the same on
1, 2 and 3 threads. BLAS sums in its own blocked order, so results agree with the interpreter's
float64 sums to float rounding.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import cpu_conv_gemm
from hlofuse.codegen.kernels.cpu_conv import conv_geometry
from hlofuse.codegen.kernels.cpu_conv_gemm import gemm_layout, prefers_gemm, valid_tap_fraction
from hlofuse.hlo.parser import parse_hlo

from test_conv import _inputs, _module, random_convolution


@pytest.fixture
def forced(monkeypatch):
    """The GEMM path for every convolution it can run, in tiles of 8 rows (not oneDNN's)."""
    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)
    monkeypatch.setattr(cpu_conv_gemm, "prefers_gemm", lambda conv: True)
    monkeypatch.setattr(cpu_conv_gemm, "MIN_TILE_ROWS", 8)
    monkeypatch.setattr(cpu_conv_gemm, "MAX_TILE_ROWS", 8)


def _customs(exe) -> list:
    return [k.custom for k in exe.program._planner.kernels]


def _close(got: np.ndarray, want: np.ndarray, terms: int, text: str) -> None:
    tol = 1e-12 if want.dtype == np.float64 else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                               atol=tol * math.sqrt(max(terms, 1)), err_msg=text)


def check_gemm(text: str, seed: int = 0, threads: tuple[int, ...] = (None,)) -> list:
    """`text` runs through a conv_gemm kernel and agrees with the interpreter, the same bits on
    each of `threads` (None: the default count); returns the kernels' emitter names."""
    module = parse_hlo(text)
    args = _inputs(module, seed)
    (want,) = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(*args)
    exe = hlofuse.compile(parse_hlo(text), target="cpu", fusion=False, cache=False)
    customs = _customs(exe)
    assert customs[-1] == "conv_gemm", customs
    conv = next(i for c in module.computations_post_order() for i in c.instructions if i.opcode == "convolution")
    geo = conv_geometry(conv)
    terms = geo.group_inputs * math.prod(d.size for d in geo.window)
    first = None
    for n in threads:
        if n is not None:
            exe.program.driver.pin_threads(n)
        (got,) = exe(*args)
        if want.dtype == ml_dtypes.bfloat16:
            np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)
        else:
            _close(got, want, terms, text)
        if first is None:
            first = got
        np.testing.assert_array_equal(got.view(np.uint8), first.view(np.uint8))
    return customs


def _gemm_seeds(dtype: str, count: int = 24) -> list[int]:
    """The first `count` seeds whose random convolution the GEMM kernels take (the others are
    grouped or empty: test_only_grouped_or_empty_convolutions_stay_direct)."""
    seeds = []
    for seed in range(400):
        if gemm_layout(parse_hlo(random_convolution(seed, (dtype, dtype, dtype))).entry.root) is not None:
            seeds.append(seed)
            if len(seeds) == count:
                break
    return seeds


@pytest.mark.parametrize("dtype,seed", [(d, s) for d in ("f32", "f64") for s in _gemm_seeds(d)])
def test_random_dense_convolutions(forced, seed, dtype):
    """Random dense float convolutions run through the GEMM kernels, correctly."""
    check_gemm(random_convolution(seed, (dtype, dtype, dtype)), seed)


def test_only_grouped_or_empty_convolutions_stay_direct():
    """Of the random float convolutions, the GEMM layout refuses only grouped or empty ones."""
    refused = 0
    for seed in range(80):
        text = random_convolution(seed, ("f32", "f32", "f32"))
        conv = parse_hlo(text).entry.root
        if gemm_layout(conv) is None:
            refused += 1
            geo = conv_geometry(conv)
            assert geo.groups > 1 or 0 in conv.shape.dims or 0 in conv.operands[0].shape.dims \
                or 0 in conv.operands[1].shape.dims, text
    assert 0 < refused < 80


# Named layouts: NHWC/HWIO (weights in place, tiles across batch elements), NCHW/OIHW (K in
# (input feature, window) order, transposed output: tiles within one batch element), NHWC with
# OIHW weights (in place, K in their order), 0io1 weights (packed), 01oi weights and window reversal (a GEMM per
# tap), a strided 1x1 and an
# unpadded unit-stride 1x1 (input read in place), lhs and rhs dilation, 3 spatial dimensions.
NAMED = {
    "nhwc_hwio": ("f32[3,7,9,8]", "f32[3,3,8,12]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"),
    "nchw_oihw": ("f32[2,8,7,9]", "f32[12,8,3,3]", "window={size=3x3 stride=2x1 pad=1_1x0_2}, dim_labels=bf01_oi01->bf01"),
    "nhwc_oihw": ("f32[2,7,9,8]", "f32[12,8,3,3]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_oi01->b01f"),
    "weights_0io1": ("f32[2,7,9,8]", "f32[3,8,12,3]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_0io1->b01f"),
    "input_gradient_01oi": ("f32[2,6,6,16]", "f32[3,3,8,16]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01oi->b01f"),
    "reversed": ("f64[2,6,7,5]", "f64[3,2,5,9]", "window={size=3x2 pad=2_2x1_1 rhs_reversal=1x0}, dim_labels=b01f_01io->b01f"),
    "pointwise_in_place": ("f32[3,5,7,16]", "f32[1,1,16,24]", "window={size=1x1}, dim_labels=b01f_01io->b01f"),
    "pointwise_nchw": ("f32[3,16,5,7]", "f32[24,16,1,1]", "window={size=1x1}, dim_labels=bf01_oi01->bf01"),
    "pointwise_stride2": ("f32[2,9,9,16]", "f32[1,1,16,24]", "window={size=1x1 stride=2x2}, dim_labels=b01f_01io->b01f"),
    "dilated": ("f32[2,11,10,6]", "f32[3,3,6,10]", "window={size=3x3 stride=2x1 pad=2_1x0_3 lhs_dilate=2x1 "
                "rhs_dilate=1x2}, dim_labels=b01f_01io->b01f"),
    "three_spatial": ("f64[2,5,4,6,3]", "f64[2,3,2,3,7]", "window={size=2x3x2 pad=1_0x1_1x0_1}, "
                      "dim_labels=b012f_012io->b012f"),
    "feature_first_output": ("f32[2,6,6,8]", "f32[3,3,8,10]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->f01b"),
}


@pytest.mark.parametrize("tiles", ["8-row", "default"])
@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_layouts(monkeypatch, name, tiles):
    monkeypatch.setattr(cpu_conv_gemm, "prefers_gemm", lambda conv: True)
    if tiles == "8-row":
        monkeypatch.setattr(cpu_conv_gemm, "MIN_TILE_ROWS", 8)
        monkeypatch.setattr(cpu_conv_gemm, "MAX_TILE_ROWS", 8)
    lhs, rhs, attrs = NAMED[name]
    customs = check_gemm(_module(lhs, rhs, lhs.split("[")[0], attrs), threads=(1, 2, 3))
    # 01oi and reversed weights run one GEMM per tap (each tap's [I, O] block in place); 0io1
    # blocks have no unit stride, so a loop kernel packs those weights first
    packed = name == "weights_0io1"
    assert customs == ([None, "conv_gemm"] if packed else ["conv_gemm"]), customs
    if name in ("input_gradient_01oi", "reversed"):
        assert gemm_layout(_conv(lhs, rhs, attrs)).tap_offsets
        monkeypatch.setattr(cpu_conv_gemm, "PER_TAP_WEIGHTS", False)  # the packed path still agrees
        customs = check_gemm(_module(lhs, rhs, lhs.split("[")[0], attrs), threads=(1, 2))
        assert customs == [None, "conv_gemm"], customs


EPILOGUE = """HloModule m
fused {{
  p0 = f32[{x}] parameter(0)
  p1 = f32[{w}] parameter(1)
  p2 = f32[{o}] parameter(2)
  p3 = f32[{y}] parameter(3)
  c = f32[{y}] convolution(p0, p1), window={{size=3x3 pad=1_1x1_1}}, dim_labels={labels}
  b = f32[{y}] broadcast(p2), dimensions={{{fdim}}}
  a = f32[{y}] add(c, b)
  z = f32[] constant(0)
  zb = f32[{y}] broadcast(z), dimensions={{}}
  r = f32[{y}] maximum(a, zb)
  s = f32[{y}] add(r, p3)
  ROOT h = {out}[{y}] convert(s)
}}
ENTRY e {{
  x = f32[{x}] parameter(0)
  w = f32[{w}] parameter(1)
  bias = f32[{o}] parameter(2)
  res = f32[{y}] parameter(3)
  ROOT f = {out}[{y}] fusion(x, w, bias, res), kind=kOutput, calls=fused
}}
"""


@pytest.mark.parametrize("out", ["f32", "bf16"])
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_fused_epilogue(forced, layout, out):
    """bias + relu + residual (+ convert to bf16: C in a scratch tile) on each tile, in place
    in the output (NHWC: rows across batch elements; NCHW: BLAS writes the transposed tile)."""
    if layout == "nhwc":
        shapes = dict(x="2,6,7,8", w="3,3,8,16", o="16", y="2,6,7,16", labels="b01f_01io->b01f", fdim=3)
    else:
        shapes = dict(x="2,8,6,7", w="16,8,3,3", o="16", y="2,16,6,7", labels="bf01_oi01->bf01", fdim=1)
    customs = check_gemm(EPILOGUE.format(out=out, **shapes), threads=(1, 2, 3))
    assert customs == ["conv_gemm"]


BIAS_RELU = """HloModule m
fused {
  p0 = f32[2,6,7,16] parameter(0)
  p1 = f32[3,3,16,32] parameter(1)
  p2 = f32[32] parameter(2)
  c = f32[2,6,7,32] convolution(p0, p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  b = f32[2,6,7,32] broadcast(p2), dimensions={3}
  a = f32[2,6,7,32] add(c, b)
  z = f32[] constant(0)
  zb = f32[2,6,7,32] broadcast(z), dimensions={}
  ROOT r = f32[2,6,7,32] maximum(a, zb)
}
ENTRY e {
  x = f32[2,6,7,16] parameter(0)
  w = f32[3,3,16,32] parameter(1)
  bias = f32[32] parameter(2)
  ROOT f = f32[2,6,7,32] fusion(x, w, bias), kind=kOutput, calls=fused
}
"""


def test_epilogue_over_few_features_is_not_gathered(monkeypatch):
    """32 output features, bias + relu in place: LLVM fully unrolled the epilogue's feature
    loop and vectorized the loop over the tile's rows with gathers and scatters (a 3x3
    64 -> 32 convolution + bias + relu at batch 64, 28x28: 8% slower in all). The row loop is
    kept from the vectorizer; results as before, on 1-3 threads."""
    from hlofuse.codegen.cpu import emit_kernel_module
    from hlofuse.emitters.cpu.target import CpuTarget, optimized_module

    monkeypatch.setattr(cpu_conv_gemm, "prefers_gemm", lambda conv: True)  # default tiles
    check_gemm(BIAS_RELU, threads=(1, 2, 3))
    exe = hlofuse.compile(parse_hlo(BIAS_RELU), target="cpu", fusion=False, cache=False)
    (kernel,) = [k for k in exe.program._planner.kernels if k.custom == "conv_gemm"]
    opt = str(optimized_module(str(emit_kernel_module(kernel, CpuTarget(), "few_features_test"))))
    assert "masked.gather" not in opt and "masked.scatter" not in opt
    assert "x float>" in opt


def test_nonfinite_weights_on_padding():
    """A padding tap times an inf weight is NaN, as in the interpreter (zeros in the patches)."""
    text = _module("f32[1,6,6,8]", "f32[3,3,8,256]", "f32",
                   "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f")
    module = parse_hlo(text)
    x, w = _inputs(module, 3)
    w[0, 0, 0, 5] = np.inf
    exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    assert _customs(exe) == ["conv_gemm"]
    (got,) = exe(x, w)
    (want,) = hlofuse.compile(parse_hlo(text), target="interpreter")(x, w)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(want).any()
    fin = np.isfinite(want)
    _close(got[fin], want[fin], 72, text)


# ---- the rule ----------------------------------------------------------------------------------
def _conv(lhs: str, rhs: str, attrs: str):
    return parse_hlo(_module(lhs, rhs, lhs.split("[")[0], attrs)).entry.root


PAD1 = "window={size=3x3 pad=1_1x1_1}, "
NHWC = "dim_labels=b01f_01io->b01f"


RULE_CASES = [
    # (case, GEMM with oneDNN's sgemm, GEMM with OpenBLAS): CPU-time ratios GEMM / direct on one
    # thread with oneDNN (docs/convolutions.md), the OpenBLAS column as measured before oneDNN
    # ResNet-50 3x3 at 14x14 and 7x7 with 256 and 512 features: GEMM
    (("f32[1,14,14,256]", "f32[3,3,256,256]", PAD1 + NHWC), True, True),
    (("f32[1,7,7,512]", "f32[3,3,512,512]", PAD1 + NHWC), True, True),
    # 1x1 projections to 256+ features: GEMM; to 64: direct (oneDNN 1.12, OpenBLAS 1.2-2.6)
    (("f32[4,32,32,64]", "f32[1,1,64,256]", "window={size=1x1}, " + NHWC), True, True),
    (("f32[4,32,32,256]", "f32[1,1,256,64]", "window={size=1x1}, " + NHWC), False, False),
    # to 128 and 112 features: oneDNN GEMM (0.65, 0.42), OpenBLAS direct
    (("f32[4,32,32,256]", "f32[1,1,256,128]", "window={size=1x1}, " + NHWC), True, False),
    (("f32[4,56,56,128]", "f32[1,1,128,112]", "window={size=1x1}, " + NHWC), True, False),
    # to 96 from a contraction of 128+: oneDNN GEMM (0.90-1.02 here; MobileNetV2's 384 -> 96 and
    # 576 -> 96 at 10x10 0.65-0.67), OpenBLAS direct; from 16 input features (K = 16): direct (1.42-1.49)
    (("f32[4,28,28,192]", "f32[1,1,192,96]", "window={size=1x1}, " + NHWC), True, False),
    (("f32[8,10,10,576]", "f32[1,1,576,96]", "window={size=1x1}, " + NHWC), True, False),
    (("f32[8,80,80,16]", "f32[1,1,16,96]", "window={size=1x1}, " + NHWC), False, False),
    # 3x3 with 64 features: direct (oneDNN 1.10-1.17); 128: oneDNN GEMM (0.76-0.86)
    (("f32[1,56,56,64]", "f32[3,3,64,64]", PAD1 + NHWC), False, False),
    (("f32[1,28,28,128]", "f32[3,3,128,128]", PAD1 + NHWC), True, False),
    # 512 features on 2x2 (0.44 of the taps on input): oneDNN GEMM (0.42), OpenBLAS direct
    (("f32[16,2,2,512]", "f32[3,3,512,512]", PAD1 + NHWC), True, False),
    # a 3x3 window over 1x1 positions (1/9 of the taps): direct for both
    (("f32[64,1,1,512]", "f32[3,3,512,512]", PAD1 + NHWC), False, False),
    # input gradients (01oi weights): GEMM (2.5-14x faster), even with 64 features
    (("f32[16,16,16,64]", "f32[3,3,64,64]", PAD1 + "dim_labels=b01f_01oi->b01f"), True, True),
    # the stem (3 input features), bf16, depthwise: direct
    (("f32[1,224,224,3]", "f32[7,7,3,64]", "window={size=7x7 stride=2x2 pad=3_3x3_3}, " + NHWC), False, False),
    (("bf16[1,14,14,256]", "bf16[3,3,256,256]", PAD1 + NHWC), False, False),
    (("f32[1,14,14,256]", "f32[3,3,1,256]", PAD1 + NHWC + ", feature_group_count=256"), False, False),
    # a weight gradient (out 3x3 per batch element): GEMM over its (positions, batch) rows
    (("f32[16,16,16,64]", "f32[16,16,16,256]", "window={size=16x16 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf"),
     True, True),
]


@pytest.mark.parametrize("requested", ["onednn", "openblas"])
@pytest.mark.parametrize("case,onednn,openblas", RULE_CASES)
def test_rule(monkeypatch, requested, case, onednn, openblas):
    """The rule by the f32 GEMM library that would run the convolution (HLOFUSE_GEMM; oneDNN
    only where its library loads)."""
    from hlofuse.runtime.gemm_provider import gemm_provider

    monkeypatch.setenv("HLOFUSE_GEMM", requested)
    want = onednn if gemm_provider("f32") == "onednn" else openblas
    assert prefers_gemm(_conv(*case)) is want


def test_rule_f64_and_compiled_path(monkeypatch):
    """f64 runs through OpenBLAS, so takes its thresholds (128 features: direct); the planner
    follows the rule (where oneDNN's primitives do not take the convolution first)."""
    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)
    case = ("f64[1,7,7,64]", "f64[3,3,64,512]", PAD1 + NHWC)
    assert prefers_gemm(_conv(*case))
    assert not prefers_gemm(_conv("f64[4,32,32,256]", "f64[1,1,256,128]", "window={size=1x1}, " + NHWC))
    exe = hlofuse.compile(parse_hlo(_module(case[0], case[1], "f64", case[2])), cache=False)
    assert _customs(exe) == ["conv_gemm"]
    small = ("f32[1,28,28,64]", "f32[3,3,64,64]", PAD1 + NHWC)
    exe = hlofuse.compile(parse_hlo(_module(small[0], small[1], "f32", small[2])), cache=False)
    assert _customs(exe) == ["conv"]


def test_valid_tap_fraction():
    """Hand-counted: 3x3 pad 1 over 4x4 outputs: (2+3+3+2)/12 per dimension; 1x1: all."""
    geo = conv_geometry(_conv("f32[1,4,4,8]", "f32[3,3,8,8]", PAD1 + NHWC))
    assert valid_tap_fraction(geo) == pytest.approx((10 / 12) ** 2)
    geo = conv_geometry(_conv("f32[1,4,4,8]", "f32[1,1,8,8]", "window={size=1x1}, " + NHWC))
    assert valid_tap_fraction(geo) == 1.0
    # lhs dilation 2, window 3, no padding: 2 of each 3 taps read a hole or an element alternately
    geo = conv_geometry(_conv("f32[1,4,4,8]", "f32[3,3,8,8]", "window={size=3x3 lhs_dilate=2x2}, " + NHWC))
    assert valid_tap_fraction(geo) == pytest.approx((8 / 15) ** 2)


def test_split_tile_rule():
    """Tiles by the shape alone: the fewest of at most `most` rows, two where one would hold
    128+ rows, an even count, the rows shared evenly in multiples of 8."""
    split = cpu_conv_gemm.split_tile
    assert split(100, 512) == 104 and split(127, 512) == 128  # under 2 x 64 rows: one tile
    assert split(128, 512) == 64 and split(200, 512) == 104  # one tile's rows: two tiles
    assert split(800, 512) == 400  # not 512 + 288
    assert split(3200, 512) == 400  # 8 tiles, not 7 (6 x 512 + 128)
    assert split(51200, 512) == 512 and split(8, 8) == 8
    for rows in range(1, 3000, 37):
        tile = split(rows, 512)
        tiles = -(-rows // tile)
        assert tile % 8 == 0 or tiles == 1
        assert tile <= 512 and (tiles == 1 or tiles % 2 == 0), (rows, tile)


def test_few_row_convolution_runs_as_two_units():
    """MobileNetV2's last stage (1x1 over 8 x 5x5 positions: 200 rows, one 512-row tile) runs
    as two units that threads can share, the same bits on 1 and 2 threads, and agrees with
    the interpreter: row tiles of 104 for its 960 -> 160, column panels of 480 for its
    160 -> 960 (more features than rows: `columns_first`)."""
    text = _module("f32[8,5,5,960]", "f32[1,1,960,160]", "f32", "window={size=1x1}, " + NHWC)
    layout = gemm_layout(parse_hlo(text).entry.root)
    assert prefers_gemm(parse_hlo(text).entry.root) and (layout.tile, layout.cols, layout.units) == (104, 160, 2)
    check_gemm(text, threads=(1, 2))
    text = _module("f32[8,5,5,160]", "f32[1,1,160,960]", "f32", "window={size=1x1}, " + NHWC)
    layout = gemm_layout(parse_hlo(text).entry.root)
    assert prefers_gemm(parse_hlo(text).entry.root) and (layout.tile, layout.cols, layout.units) == (200, 480, 2)
    check_gemm(text, threads=(1, 2))


def test_columns_first_rule(monkeypatch):
    """One tile's rows with more output features than rows are cut into column panels, not row
    tiles (each unit then packs half of the weights, not all of them); as many features as rows,
    more rows than one tile, or too little work for two panels keep the row tiles."""
    first = cpu_conv_gemm.columns_first
    assert first(256, 512, 1024, 512, "f32")  # keras ResNet-50's conv4_x 1x1 s2 512 -> 1024
    assert first(196, 512, 256, 2304, "f32")  # ImageNet-size conv4_x 3x3 256 (batch 1)
    assert not first(256, 512, 256, 1024, "f32")  # 1024 -> 256: features == rows
    assert not first(1024, 512, 2048, 512, "f32")  # two tiles' rows anyway
    assert not first(128, 512, 136, 8, "f32")  # 139,264 multiply-adds: no second panel
    monkeypatch.setattr(cpu_conv_gemm, "COLUMNS_FIRST", False)
    assert not first(256, 512, 1024, 512, "f32")


@pytest.mark.parametrize("case", [
    ("f32[4,16,16,512]", "f32[1,1,512,1024]", "window={size=1x1 stride=2x2}, ", (256, 512, 2)),
    ("f32[4,8,8,256]", "f32[1,1,256,1024]", "window={size=1x1}, ", (256, 512, 2)),
    ("f32[4,8,8,1024]", "f32[1,1,1024,256]", "window={size=1x1}, ", (128, 256, 2)),
    ("f32[1,14,14,256]", "f32[3,3,256,256]", PAD1, (200, 128, 2)),
], ids=["1x1_s2_512_1024", "1x1_256_1024", "1x1_1024_256", "3x3_256_b1"])
def test_resnet50_conv4_columns_first(monkeypatch, case):
    """keras ResNet-50's conv4_x convolutions over 256 rows (4 images of 8x8 positions) and one
    of ImageNet's batch 1 (196 rows): column panels where they have more features than rows;
    the interpreter's values, the same bits on 1, 2 and 3 threads."""
    lhs, rhs, window, want = case
    text = _module(lhs, rhs, "f32", window + NHWC)
    layout = gemm_layout(parse_hlo(text).entry.root)
    assert (layout.tile, layout.cols, layout.units) == want
    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)
    check_gemm(text, threads=(1, 2, 3))


def test_conformance_files_through_gemm(monkeypatch):
    """The StableHLO conformance convolution files pass with every dense float convolution
    they hold run by the GEMM kernels (in 8-row tiles); no cached program is read or stored."""
    from test_conv_windows import SHARED_STABLEHLO, _files

    from hlofuse.frontends.conformance import run_file

    if not SHARED_STABLEHLO.is_dir():
        pytest.skip("../shared/stablehlo_testdata is absent")
    import hlofuse.codegen.module_cache as module_cache
    import hlofuse.compiler as compiler

    monkeypatch.setattr(compiler, "_load_cached", lambda *args, **kwargs: None)
    monkeypatch.setattr(module_cache, "store_entry", lambda *args, **kwargs: None)
    monkeypatch.setattr(cpu_conv_gemm, "MIN_TILE_ROWS", 8)
    monkeypatch.setattr(cpu_conv_gemm, "MAX_TILE_ROWS", 8)
    routed = []
    monkeypatch.setattr(cpu_conv_gemm, "prefers_gemm",
                        lambda conv: (gemm_layout(conv) is not None and routed.append(conv.name)) or True)
    for name in _files("conv_general_dilated"):
        result = run_file(str(SHARED_STABLEHLO / name), backend="cpu")
        assert result.status == "passed", result.line()
    assert len(routed) >= 6, routed  # 7 of the 8 files hold a dense float convolution


def test_panel_cols_rule(monkeypatch):
    """One row tile is cut into up to COLUMN_PANELS column panels of output features, each at
    least MIN_PANEL_COLS (64) wide and of min_unit_multiply_adds, widths in 128-byte granules
    (32 f32, 16 f64); two or more row tiles, few features or little work stay uncut."""
    cols = cpu_conv_gemm.panel_cols
    assert cpu_conv_gemm.COLUMN_PANELS == 2
    assert cols(1, 64, 512, 4608, "f32") == 256  # keras ResNet-50's 3x3 512 -> 512 over 4 x 4x4
    assert cols(1, 64, 2048, 512, "f32") == 1024  # its 1x1 512 -> 2048
    assert cols(2, 64, 512, 4608, "f32") == 512  # two row tiles: uncut
    assert cols(1, 64, 127, 4608, "f32") == 127  # not two panels of 64
    assert cols(1, 64, 128, 4608, "f32") == 64
    assert cols(1, 8, 256, 64, "f32") == 256  # 131,072 multiply-adds: under one thread's share
    assert cols(1, 64, 200, 4608, "f32") == 128  # 200 / 2 = 100 -> 4 granules of 32: 128 + 72
    assert cols(1, 64, 200, 4608, "f64") == 112  # 100 -> 7 granules of 16: 112 + 88
    for features in range(8, 3000, 7):
        c = cols(1, 64, features, 4608, "f32")
        panels = -(-features // c)
        assert panels <= 2 and (panels == 1 or (c % 32 == 0 and c >= 64)), (features, c)
    monkeypatch.setattr(cpu_conv_gemm, "COLUMN_PANELS", 4)
    assert cols(1, 64, 512, 4608, "f32") == 128
    assert cols(1, 64, 300, 4608, "f32") == 96  # 300 / 4 = 75 -> 3 granules of 32: 96 x 3 + 12
    assert cols(1, 64, 200, 4608, "f64") == 80  # 3 panels: 200 / 3 = 67 -> 5 granules of 16


@pytest.mark.parametrize("case", [
    ("f32[4,4,4,512]", "f32[3,3,512,512]", PAD1, 256),
    ("f32[4,4,4,2048]", "f32[1,1,2048,512]", "window={size=1x1}, ", 256),
    ("f32[4,4,4,512]", "f32[1,1,512,2048]", "window={size=1x1}, ", 1024),
    ("f32[4,8,8,1024]", "f32[1,1,1024,2048]", "window={size=1x1 stride=2x2}, ", 1024),
], ids=["3x3_512", "1x1_2048_512", "1x1_512_2048", "1x1_s2_1024_2048"])
def test_resnet50_few_row_convolutions_cut_into_column_panels(monkeypatch, case):
    """keras ResNet-50's last-stage convolutions (4 images, 4x4 output positions: one 64-row
    tile) run as two column-panel units that threads can share; the 3x3 one agrees with the
    interpreter, the same bits on 1, 2 and 3 threads."""
    lhs, rhs, window, width = case
    text = _module(lhs, rhs, "f32", window + NHWC)
    conv = parse_hlo(text).entry.root
    layout = gemm_layout(conv)
    assert prefers_gemm(conv) and (layout.tile, layout.row_units, layout.cols, layout.units) == (64, 1, width, 2)
    if rhs.startswith("f32[3,3"):
        monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)
        check_gemm(text, threads=(1, 2, 3))


@pytest.fixture
def narrow_panels(monkeypatch):
    """The GEMM path (not oneDNN's), default row tiles, up to 4 column panels down to 8
    features and any work (so that small convolutions are cut into panels of one 128-byte
    granule)."""
    monkeypatch.setattr(cpu_conv_gemm, "COLUMN_PANELS", 4)
    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)
    monkeypatch.setattr(cpu_conv_gemm, "prefers_gemm", lambda conv: True)
    monkeypatch.setattr(cpu_conv_gemm, "MIN_PANEL_COLS", 8)
    monkeypatch.setattr(cpu_conv_gemm, "min_unit_multiply_adds", lambda dtype: 1)


# One row tile each (NCHW tiles stay within a batch element: one image), 80 output features:
# panels of 32 + 32 + 16 (f32 and f64 granules alike, 80 / 4 rounds up to 32).
PANEL_CASES = {
    "nhwc_hwio": ("f32[2,6,7,8]", "f32[3,3,8,80]", PAD1 + NHWC),
    "nchw_oihw": ("f32[1,8,7,9]", "f32[80,8,3,3]", "window={size=3x3 stride=2x1 pad=1_1x0_2}, dim_labels=bf01_oi01->bf01"),
    "packed_01oi": ("f32[2,6,6,16]", "f32[3,3,80,16]", PAD1 + "dim_labels=b01f_01oi->b01f"),
    "pointwise_in_place": ("f32[3,5,7,16]", "f32[1,1,16,80]", "window={size=1x1}, " + NHWC),
    "f64_dilated": ("f64[1,11,10,6]", "f64[3,3,6,80]", "window={size=3x3 stride=2x1 pad=2_1x0_3 lhs_dilate=2x1 "
                    "rhs_dilate=1x2}, " + NHWC),
}


@pytest.mark.parametrize("name", sorted(PANEL_CASES))
def test_column_panels(narrow_panels, name):
    """A convolution of one row tile cut into column panels (the last one narrower) agrees with
    the interpreter, the same bits on 1, 2 and 3 threads (the patch tile packed once per kernel
    call and reused by its next panels; weights, input and output offset per panel)."""
    lhs, rhs, attrs = PANEL_CASES[name]
    text = _module(lhs, rhs, lhs.split("[")[0], attrs)
    layout = gemm_layout(parse_hlo(text).entry.root)
    assert (layout.row_units, layout.cols, layout.col_panels) == (1, 32, 3), layout
    customs = check_gemm(text, threads=(1, 2, 3))
    assert customs[-1] == "conv_gemm"


@pytest.mark.parametrize("out", ["f32", "bf16"])
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_column_panels_with_epilogue(narrow_panels, layout, out):
    """bias + relu + residual (+ convert to bf16: C in a scratch tile) on each column panel:
    the epilogue reads the panel's bias features and writes only the panel's outputs."""
    if layout == "nhwc":
        shapes = dict(x="2,6,7,8", w="3,3,8,80", o="80", y="2,6,7,80", labels="b01f_01io->b01f", fdim=3)
    else:
        shapes = dict(x="1,8,6,7", w="80,8,3,3", o="80", y="1,80,6,7", labels="bf01_oi01->bf01", fdim=1)
    text = EPILOGUE.format(out=out, **shapes)
    conv = next(i for c in parse_hlo(text).computations for i in c.instructions if i.opcode == "convolution")
    assert gemm_layout(conv).col_panels == 3
    assert check_gemm(text, threads=(1, 2, 3)) == ["conv_gemm"]


WEIGHT_GRAD = "dim_labels=f01b_i01o->01bf"


@pytest.mark.parametrize("case", [
    ("f32[16,4,4,64]", "f32[16,4,4,128]", "window={size=4x4 pad=1_1x1_1}, "),
    ("f32[16,8,8,32]", "f32[16,4,4,64]", "window={size=4x4 pad=0_1x0_1 rhs_dilate=2x2}, "),
    ("f32[8,2,2,96]", "f32[8,2,2,112]", "window={size=2x2 pad=1_1x1_1}, "),
], ids=["3x3_64_128", "stride2_32_64", "2x2_window"])
def test_weight_gradients_run_with_position_major_rows(monkeypatch, case):
    """jax's weight gradients (haiku ResNet-18's training step: `f01b_i01o->01bf`, the batch is
    the forward convolution's input features, 3x3 positions each) run as GEMM tiles over the
    (positions, batch) rows, which the output's layout collapses: the interpreter's values, the
    same bits on 1, 2 and 3 threads."""
    lhs, rhs, window = case
    text = _module(lhs, rhs, "f32", window + WEIGHT_GRAD)
    layout = gemm_layout(parse_hlo(text).entry.root)
    assert layout is not None and layout.batch_minor and layout.span_batch and layout.rows >= 9 * 32
    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)
    monkeypatch.setattr(cpu_conv_gemm, "prefers_gemm", lambda conv: True)
    check_gemm(text, threads=(1, 2, 3))
    # with 8-row tiles: many tiles, each starting inside a position's batch elements
    monkeypatch.setattr(cpu_conv_gemm, "MIN_TILE_ROWS", 8)
    monkeypatch.setattr(cpu_conv_gemm, "MAX_TILE_ROWS", 8)
    check_gemm(text, seed=1, threads=(1, 2))


def test_forward_layouts_keep_batch_major_rows():
    """NHWC forward convolutions keep batch-major rows (the old layout), and so does an output
    whose batch dimension comes first."""
    assert not gemm_layout(_conv("f32[4,8,8,64]", "f32[3,3,64,128]", PAD1 + NHWC)).batch_minor
    assert not gemm_layout(_conv("f32[16,4,4,64]", "f32[16,4,4,128]",
                                 "window={size=4x4 pad=1_1x1_1}, dim_labels=f01b_i01o->b01f")).batch_minor


def test_rule_takes_deep_weight_gradients_from_64_features():
    """Weight gradients with 64+ output features and a contraction of 128+ run as GEMMs (haiku
    ResNet-18's 16x16-window 64 -> 64 and its stem's, 0.86x and 0.46x the direct kernel's
    time); 32 features, or a shallow contraction, keep the direct kernel."""
    deep = _conv("f32[16,16,16,64]", "f32[16,16,16,64]", "window={size=16x16 pad=1_1x1_1}, " + WEIGHT_GRAD)
    assert prefers_gemm(deep)
    stem = _conv("f32[16,64,64,3]", "f32[16,32,32,64]", "window={size=32x32 pad=2_3x2_3 rhs_dilate=2x2}, " + WEIGHT_GRAD)
    assert prefers_gemm(stem)
    assert not prefers_gemm(_conv("f32[16,16,16,64]", "f32[16,16,16,32]",
                                  "window={size=16x16 pad=1_1x1_1}, " + WEIGHT_GRAD))
    # K = 2x2 window x 8 batch = 32: shallow
    assert not prefers_gemm(_conv("f32[8,2,2,64]", "f32[8,2,2,64]", "window={size=2x2 pad=1_1x1_1}, " + WEIGHT_GRAD))


def test_tap_offsets_follow_the_window_and_its_reversal():
    """Each tap's [I, O] block of `01oi` weights f32[3,2,I=4,O=5] starts at (ky * 2 + kx) * 20;
    with the first window dimension reversed, tap (ky, kx) reads block (2 - ky, kx)."""
    conv = _conv("f32[1,6,6,5]", "f32[3,2,4,5]", "window={size=3x2 pad=1_1x0_1}, dim_labels=b01f_01oi->b01f")
    order, m, taps = cpu_conv_gemm._tap_weights(conv)
    assert order == (0, 1, cpu_conv_gemm.IN) and (m.rows, m.cols, m.row_stride, m.col_stride) == (5, 4, 1, 5)
    assert taps == (0, 20, 40, 60, 80, 100)
    conv = _conv("f32[1,6,6,5]", "f32[3,2,4,5]",
                 "window={size=3x2 pad=1_1x0_1 rhs_reversal=1x0}, dim_labels=b01f_01oi->b01f")
    assert cpu_conv_gemm._tap_weights(conv)[2] == (80, 100, 40, 60, 0, 20)
