"""The simplifier's convolution rules (simplifier_conv.py: a zero pad folded into the window, a
reverse of the weights folded into the window's reversal): what they fold and what they leave, the
same bits as before the fold in the reference interpreter (inputs with +-0, +-inf and NaN,
weights with inf and NaN on padding taps), and the CPU kernels on the folded module against the
interpreter on the original one."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.pipeline import PassPipeline
from hlofuse.passes.simplifier import AlgebraicSimplifier
from hlofuse.runtime.interpreter import evaluate


def _module(x: str, w: str, padding: str, value: str, conv_attrs: str, dtype: str = "f32") -> str:
    """x -> pad(x, value) -> convolution with w (shapes inferred by the parser)."""
    return (f"HloModule m\nENTRY e {{\n  x = {x} parameter(0)\n  w = {w} parameter(1)\n"
            f"  z = {dtype}[] constant({value})\n  p = pad(x, z), padding={padding}\n"
            f"  ROOT c = convolution(p, w), {conv_attrs}\n}}\n")


def _inputs(module, seed: int = 0, special: bool = True) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in module.entry.parameters:
        dt = p.shape.dtype.numpy
        a = rng.standard_normal(p.shape.dims).astype(dt) if p.shape.dtype.kind == "float" else \
            rng.integers(-5, 5, p.shape.dims).astype(dt)
        if special and p.shape.dtype.kind == "float" and a.size >= 4:
            flat = a.reshape(-1)
            flat[:4] = [0.0, -0.0, np.inf, np.nan] if p.parameter_number == 1 else [-0.0, 0.0, 1e30, -1e-30]
        out.append(a)
    return out


def _fold(text: str):
    module = parse_hlo(text)
    PassPipeline([AlgebraicSimplifier(), DeadCodeElimination()], verify=True).run(module)
    return module


def _value(result) -> np.ndarray:
    """The one array of a module's result (the interpreter and executables may wrap it)."""
    return np.asarray(result[0] if isinstance(result, (list, tuple)) else result)


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(_value(a)).view(np.uint8)


NHWC = "dim_labels=b01f_01io->b01f"
FOLDED = {
    # keras' ZeroPadding2D before a stride-2 depthwise convolution (MobileNetV2)
    "keras_stride2_depthwise": ("f32[2,8,8,6]", "f32[3,3,1,6]", "0_0x0_1x0_1x0_0", "0",
                                f"window={{size=3x3 stride=2x2}}, {NHWC}, feature_group_count=6"),
    # the pad added to the window's own padding, a dense convolution
    "added_to_window_padding": ("f32[1,5,6,3]", "f32[3,3,3,4]", "0_0x1_2x0_1x0_0", "0",
                                f"window={{size=3x3 pad=1_0x2_1}}, {NHWC}"),
    # a negative window padding cropping part of the pad's zeros
    "negative_window_padding": ("f32[1,6,6,2]", "f32[2,2,2,2]", "0_0x2_2x1_0x0_0", "0",
                                f"window={{size=2x2 pad=-1_-2x0_-1}}, {NHWC}"),
    # -0 is a zero pad too
    "negative_zero": ("f32[1,4,5,2]", "f32[3,3,2,3]", "0_0x1_1x1_1x0_0", "-0",
                      f"window={{size=3x3}}, {NHWC}"),
    # interior padding becomes lhs dilation, with window dilation and a stride
    "interior_to_lhs_dilation": ("f32[1,4,4,2]", "f32[2,2,2,2]", "0_0x1_0_1x0_2_2x0_0", "0",
                                 f"window={{size=2x2 stride=1x2 rhs_dilate=2x1}}, {NHWC}"),
    # NCHW / OIHW: the spatial dimensions are 2 and 3
    "nchw": ("f32[2,3,5,5]", "f32[4,3,3,3]", "0_0x0_0x1_1x2_0", "0",
             "window={size=3x3 stride=2x1}, dim_labels=bf01_oi01->bf01"),
    "f64": ("f64[1,5,5,2]", "f64[3,3,2,2]", "0_0x1_1x1_1x0_0", "0", f"window={{size=3x3}}, {NHWC}"),
    "s32": ("s32[1,5,5,2]", "s32[3,3,2,2]", "0_0x1_1x1_1x0_0", "0", f"window={{size=3x3}}, {NHWC}"),
}
KEPT = {
    "nonzero_value": ("f32[1,5,5,2]", "f32[3,3,2,2]", "0_0x1_1x1_1x0_0", "1", f"window={{size=3x3}}, {NHWC}"),
    "negative_pad": ("f32[1,5,5,2]", "f32[3,3,2,2]", "0_0x-1_1x1_1x0_0", "0", f"window={{size=3x3}}, {NHWC}"),
    "padded_feature": ("f32[1,5,5,2]", "f32[3,3,3,2]", "0_0x1_1x1_1x0_1", "0", f"window={{size=3x3}}, {NHWC}"),
    "padded_batch": ("f32[1,5,5,2]", "f32[3,3,2,2]", "1_0x1_1x1_1x0_0", "0", f"window={{size=3x3}}, {NHWC}"),
    "interior_and_lhs_dilation": ("f32[1,4,4,2]", "f32[2,2,2,2]", "0_0x0_0_1x0_0x0_0", "0",
                                  f"window={{size=2x2 lhs_dilate=2x1}}, {NHWC}"),
}


def _dtype(case) -> str:
    return case[0].split("[")[0]


@pytest.mark.parametrize("name", sorted(FOLDED))
def test_zero_pad_folds_into_the_window_with_the_same_bits(name):
    x, w, padding, value, attrs = FOLDED[name]
    text = _module(x, w, padding, value, attrs, _dtype(FOLDED[name]))
    original, folded = parse_hlo(text), _fold(text)
    assert not any(i.opcode == "pad" for i in folded.entry.instructions), "the pad was not folded"
    conv = folded.entry.root
    assert conv.opcode == "convolution" and conv.operands[0].opcode == "parameter"
    assert tuple(conv.shape.dims) == tuple(original.entry.root.shape.dims)
    for seed in range(3):
        args = _inputs(original, seed)
        assert np.array_equal(_bits(evaluate(original, args)), _bits(evaluate(folded, args)))


@pytest.mark.parametrize("name", sorted(KEPT))
def test_pads_the_rule_must_keep(name):
    x, w, padding, value, attrs = KEPT[name]
    folded = _fold(_module(x, w, padding, value, attrs))
    assert folded.entry.root.operands[0].opcode == "pad"


@pytest.mark.parametrize("name", sorted(FOLDED))
def test_folded_convolutions_on_the_cpu_match_the_interpreter(name):
    """The whole CPU pipeline (fold, then the conv kernels) against the interpreter on the
    unfolded module: the padding now comes from the window, the bits must not change (small
    contractions: the kernel sums in the interpreter's order)."""
    x, w, padding, value, attrs = FOLDED[name]
    text = _module(x, w, padding, value, attrs, _dtype(FOLDED[name]))
    original = parse_hlo(text)
    exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    for seed in range(2):
        args = _inputs(original, seed, special=False)
        want, got = _value(evaluate(original, args)), _value(exe(*args))
        assert want.shape == got.shape and np.array_equal(_bits(want), _bits(got)), name


def test_fold_lets_the_previous_epilogue_fuse():
    """MobileNetV2's stride-2 block: 1x1 expand + relu6, zero pad, depthwise 3x3 stride 2. With the
    pad folded the relu6 fuses into the expand convolution's kernel (kOutput) and no kernel
    writes the padded copy."""
    text = """HloModule m
ENTRY e {
  x = f32[2,8,8,4] parameter(0)
  w1 = f32[1,1,4,12] parameter(1)
  w2 = f32[3,3,1,12] parameter(2)
  e = f32[2,8,8,12] convolution(x, w1), window={size=1x1}, dim_labels=b01f_01io->b01f
  zero = f32[] constant(0)
  six = f32[] constant(6)
  lo = f32[2,8,8,12] broadcast(zero), dimensions={}
  hi = f32[2,8,8,12] broadcast(six), dimensions={}
  r = f32[2,8,8,12] clamp(lo, e, hi)
  p = f32[2,9,9,12] pad(r, zero), padding=0_0x0_1x0_1x0_0
  ROOT d = f32[2,4,4,12] convolution(p, w2), window={size=3x3 stride=2x2}, dim_labels=b01f_01io->b01f, feature_group_count=12
}
"""
    exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    fusions = [i for i in exe.fused_module.entry.instructions if i.opcode == "fusion"]
    assert [f.attrs["kind"] for f in fusions] == ["kOutput"]  # the expand convolution and its relu6
    assert not any(i.opcode == "pad" for c in exe.fused_module.computations for i in c.instructions)
    assert [k.custom for k in exe.program._planner.kernels] == ["conv", "conv"]
    args = _inputs(parse_hlo(text), 0, special=False)
    want, got = _value(evaluate(parse_hlo(text), args)), _value(exe(*args))
    assert want.shape == got.shape and np.array_equal(_bits(want), _bits(got))


def _reversed_module(x: str, w: str, dims: str, conv_attrs: str) -> str:
    """w -> reverse(w, dims) -> convolution of x with it (shapes inferred by the parser)."""
    return (f"HloModule m\nENTRY e {{\n  x = {x} parameter(0)\n  w = {w} parameter(1)\n"
            f"  r = reverse(w), dimensions={{{dims}}}\n  ROOT c = convolution(x, r), {conv_attrs}\n}}\n")


REVERSE_FOLDED = {
    # jax's input gradient of a 3x3 convolution (haiku's ResNet-18 step): both spatial dimensions
    "input_gradient_01oi": ("f32[2,5,5,4]", "f32[3,3,6,4]", "0,1",
                            "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01oi->b01f"),
    # one dimension, a window already reversed on the other (the two compose per dimension)
    "one_dimension_with_reversal": ("f32[1,6,5,2]", "f32[3,2,2,3]", "0",
                                    f"window={{size=3x2 pad=1_1x0_1 rhs_reversal=0x1}}, {NHWC}"),
    # a reverse that undoes the window's own reversal
    "undoes_rhs_reversal": ("f32[1,6,6,2]", "f32[3,3,2,2]", "0,1",
                            f"window={{size=3x3 stride=2x1 rhs_reversal=1x1}}, {NHWC}"),
    # NCHW / OIHW with lhs and rhs dilation, a stride and feature groups
    "nchw_dilated_grouped": ("f32[1,4,7,7]", "f32[4,2,3,2]", "2,3",
                             "window={size=3x2 stride=2x1 lhs_dilate=2x1 rhs_dilate=1x2}, "
                             "dim_labels=bf01_oi01->bf01, feature_group_count=2"),
    "f64_1d": ("f64[2,9,3]", "f64[4,3,2]", "0", "window={size=4 pad=2_1}, dim_labels=b0f_0io->b0f"),
    "s32": ("s32[1,5,5,2]", "s32[3,3,2,2]", "1", f"window={{size=3x3}}, {NHWC}"),
}
REVERSE_KEPT = {
    # a reversed feature dimension is no window's
    "input_feature": ("f32[1,5,5,2]", "f32[3,3,2,2]", "2", f"window={{size=3x3}}, {NHWC}"),
    "spatial_and_output_feature": ("f32[1,5,5,2]", "f32[3,3,2,2]", "0,3", f"window={{size=3x3}}, {NHWC}"),
}


@pytest.mark.parametrize("name", sorted(REVERSE_FOLDED))
def test_weight_reverse_folds_into_the_window_with_the_same_bits(name):
    x, w, dims, attrs = REVERSE_FOLDED[name]
    text = _reversed_module(x, w, dims, attrs)
    original, folded = parse_hlo(text), _fold(text)
    assert not any(i.opcode == "reverse" for i in folded.entry.instructions), "the reverse was not folded"
    conv = folded.entry.root
    assert conv.opcode == "convolution" and conv.operands[1].opcode == "parameter"
    for seed in range(3):
        args = _inputs(original, seed)
        assert np.array_equal(_bits(evaluate(original, args)), _bits(evaluate(folded, args)))


def test_weight_reverse_fold_flips_exactly_the_reversed_windows():
    x, w, dims, attrs = REVERSE_FOLDED["one_dimension_with_reversal"]
    window = _fold(_reversed_module(x, w, dims, attrs)).entry.root.attrs["window"]
    assert [d.window_reversal for d in window.dimensions] == [True, True]
    x, w, dims, attrs = REVERSE_FOLDED["undoes_rhs_reversal"]
    window = _fold(_reversed_module(x, w, dims, attrs)).entry.root.attrs["window"]
    assert [d.window_reversal for d in window.dimensions] == [False, False]


@pytest.mark.parametrize("name", sorted(REVERSE_KEPT))
def test_weight_reverses_the_rule_must_keep(name):
    x, w, dims, attrs = REVERSE_KEPT[name]
    folded = _fold(_reversed_module(x, w, dims, attrs))
    assert folded.entry.root.operands[1].opcode == "reverse"


@pytest.mark.parametrize("name", sorted(REVERSE_FOLDED))
@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
def test_reverse_folded_convolutions_match_the_interpreter(name, target):
    """The whole pipeline (fold, then the backend's convolution) against the interpreter on the
    unfolded module, with and without fusion."""
    x, w, dims, attrs = REVERSE_FOLDED[name]
    text = _reversed_module(x, w, dims, attrs)
    original = parse_hlo(text)
    for fusion in (True, False):
        exe = hlofuse.compile(parse_hlo(text), target=target, cache=False, fusion=fusion)
        for seed in range(2):
            args = _inputs(original, seed, special=False)
            want, got = _value(evaluate(original, args)), _value(exe(*args))
            assert want.shape == got.shape, name
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{name} {target}")
