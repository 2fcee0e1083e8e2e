"""The CPU convolution kernel (codegen/kernels/cpu_conv.py) against the reference interpreter.

Random convolutions over every dimension-number layout (permuted labels), 0 to 3 spatial
dimensions, strides, padding (negative too), lhs and rhs dilation, window reversal, feature
and batch groups, and element types; each must run as a custom "conv" kernel and agree with
the interpreter bit for bit where the interpreter sums term by term (small contractions:
the kernel sums in the same order), and to float32 rounding of the sum where the interpreter
sums in float64.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels.cpu_conv import conv_geometry
from hlofuse.codegen.kernels.cpu_conv_features import POSITION_BLOCK
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.interpreter.op_helpers import SEQUENTIAL_MAX_TERMS

from backend_oracle import bits_equal

FLOATS = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
INTS = {"s32": np.int32, "s8": np.int8, "u8": np.uint8, "s64": np.int64, "u16": np.uint16}


def _labels(rng: np.random.Generator, nsp: int, letters: str) -> str:
    """Dimension labels with the two named dimensions and the spatial digits in random order."""
    chars = list(letters) + [str(i) for i in range(nsp)]
    rng.shuffle(chars)
    return "".join(chars)


def _module(lhs: str, rhs: str, out_type: str, attrs: str) -> str:
    """A module convolving two parameters; the result's dimensions are inferred by the parser
    (a shape-less instruction) and written out with `out_type`."""
    probe = parse_hlo(f"HloModule p\nENTRY e {{\n  a = {lhs} parameter(0)\n  b = {rhs} parameter(1)\n"
                      f"  ROOT c = convolution(a, b), {attrs}\n}}\n")
    dims = ",".join(str(d) for d in probe.entry.root.shape.dims)
    return (f"HloModule conv\nENTRY e {{\n  a = {lhs} parameter(0)\n  b = {rhs} parameter(1)\n"
            f"  ROOT c = {out_type}[{dims}] convolution(a, b), {attrs}\n}}\n")


def random_convolution(seed: int, types: tuple[str, str, str] | None = None) -> str:
    """A random valid convolution module (see the module docstring)."""
    rng = np.random.default_rng(seed)
    nsp = int(rng.choice([0, 1, 2, 2, 3], p=[0.1, 0.25, 0.3, 0.2, 0.15]))
    groups = int(rng.choice([1, 1, 2, 3]))
    batch_grouped = groups > 1 and rng.random() < 0.3
    ci = int(rng.integers(1, 4))
    og = int(rng.integers(1, 4))
    batch = int(rng.integers(1, 3)) * (groups if batch_grouped else 1)
    features = ci * (1 if batch_grouped else groups)
    ld, rd, od = _labels(rng, nsp, "bf"), _labels(rng, nsp, "io"), _labels(rng, nsp, "bf")
    win = []
    in_sp, k_sp = [], []
    for _ in range(nsp):
        k = int(rng.integers(1, 4))
        stride, lhs_dil, rhs_dil = (int(rng.integers(1, 3)) for _ in range(3))
        lo, hi = (int(rng.integers(-1, 3)) for _ in range(2))
        size = int(rng.integers(max(1, (k - 1) * rhs_dil + 1 - lo - hi), 9))
        win.append((k, stride, lo, hi, lhs_dil, rhs_dil, int(rng.random() < 0.2)))
        in_sp.append(size)
        k_sp.append(k)
    lhs_dims = {"b": batch, "f": features, **{str(i): in_sp[i] for i in range(nsp)}}
    rhs_dims = {"i": ci, "o": og * groups, **{str(i): k_sp[i] for i in range(nsp)}}
    lt, rt, ot = types or ("f32", "f32", "f32")
    lhs = f"{lt}[{','.join(str(lhs_dims[c]) for c in ld)}]"
    rhs = f"{rt}[{','.join(str(rhs_dims[c]) for c in rd)}]"
    attrs = [f"dim_labels={ld}_{rd}->{od}"]
    if nsp:
        parts = ["size=" + "x".join(str(w[0]) for w in win), "stride=" + "x".join(str(w[1]) for w in win),
                 "pad=" + "x".join(f"{w[2]}_{w[3]}" for w in win), "lhs_dilate=" + "x".join(str(w[4]) for w in win),
                 "rhs_dilate=" + "x".join(str(w[5]) for w in win), "rhs_reversal=" + "x".join(str(w[6]) for w in win)]
        attrs.insert(0, "window={" + " ".join(parts) + "}")
    if groups > 1:
        attrs.append(("batch_group_count=" if batch_grouped else "feature_group_count=") + str(groups))
    return _module(lhs, rhs, ot, ", ".join(attrs))


def _inputs(module, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in module.entry.parameters:
        dt = p.shape.dtype.numpy
        dims = tuple(p.shape.dims)
        if np.dtype(dt).kind in "iu":
            info = np.iinfo(dt)
            out.append(rng.integers(max(info.min, -100), min(info.max, 100) + 1, dims).astype(dt))
        else:
            out.append(rng.standard_normal(dims).astype(dt))
    return out


def check(text: str, seed: int = 0) -> None:
    """`text` compiles to a conv kernel and agrees with the interpreter (module docstring)."""
    module = parse_hlo(text)
    args = _inputs(module, seed)
    (want,) = hlofuse.compile(parse_hlo(text), target="interpreter")(*args)
    exe = hlofuse.compile(parse_hlo(text), target="cpu")
    customs = [k.custom for k in exe.program._planner.kernels]
    assert customs == ["conv"], customs
    (got,) = exe(*args)
    conv = module.entry.root
    geo = conv_geometry(conv)
    terms = geo.group_inputs * math.prod(d.size for d in geo.window)
    exact = terms <= SEQUENTIAL_MAX_TERMS or not np.dtype(want.dtype).kind == "f"
    if exact or want.dtype.kind in "iu":
        ok = bits_equal(got, want)
        assert ok.all(), f"{int((~ok).sum())} of {ok.size} differ:\n{text}\ngot {got.ravel()[:8]}\nwant {want.ravel()[:8]}"
    else:
        tol = {np.float64: 1e-12, np.float32: 1e-5}.get(want.dtype.type, 1e-2)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                                   atol=tol * math.sqrt(terms), err_msg=text)


@pytest.mark.parametrize("seed", range(60))
def test_random_f32_convolutions(seed):
    check(random_convolution(seed), seed)


TYPE_CASES = [("f64", "f64", "f64"), ("bf16", "bf16", "bf16"), ("f16", "f16", "f16"), ("bf16", "bf16", "f32"),
              ("f32", "bf16", "f32"), ("s32", "s32", "s32"), ("s8", "s8", "s32"), ("u8", "u8", "u8"),
              ("s8", "s8", "f32"), ("f32", "f32", "f64"), ("u16", "s8", "s64")]


@pytest.mark.parametrize("types", TYPE_CASES, ids=["_".join(t) for t in TYPE_CASES])
@pytest.mark.parametrize("seed", range(3))
def test_random_typed_convolutions(types, seed):
    check(random_convolution(100 + seed, types), seed)


# Shapes of the benchmark's classes: depthwise NHWC (channels innermost), dense NHWC (output
# features innermost with blocked positions, including a row length that leaves a remainder),
# a MobileNet 1x1 expansion, NCHW, and large contractions summed to float32 rounding.
NAMED = {
    "depthwise_3x3": ("f32[1,10,10,32]", "f32[3,3,1,32]", "window={size=3x3 pad=1_1x1_1}, "
                      "dim_labels=b01f_01io->b01f, feature_group_count=32"),
    "depthwise_stride2_multiplier2": ("f32[2,9,11,8]", "f32[3,3,1,16]", "window={size=3x3 stride=2x2 pad=0_1x1_1}, "
                                      "dim_labels=b01f_01io->b01f, feature_group_count=8"),
    "dense_3x3": ("f32[1,9,11,16]", "f32[3,3,16,24]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"),
    "dense_3x3_stride2": ("f32[2,13,13,8]", "f32[3,3,8,8]", "window={size=3x3 stride=2x2 pad=1_1x1_1}, "
                          "dim_labels=b01f_01io->b01f"),
    "pointwise": ("f32[1,7,7,24]", "f32[1,1,24,96]", "window={size=1x1}, dim_labels=b01f_01io->b01f"),
    "nchw_oihw": ("f32[2,6,12,10]", "f32[5,6,3,3]", "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01"),
    "large_contraction": ("f32[1,6,6,64]", "f32[3,3,64,16]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"),
    "large_contraction_f64": ("f64[1,5,5,40]", "f64[3,3,40,8]", "window={size=3x3}, dim_labels=b01f_01io->b01f"),
    "large_contraction_bf16": ("bf16[1,5,5,40]", "bf16[3,3,40,8]", "window={size=3x3}, dim_labels=b01f_01io->b01f"),
    "empty_output": ("f32[1,2,2,3]", "f32[3,3,3,4]", "window={size=3x3}, dim_labels=b01f_01io->b01f"),
    "empty_features": ("f32[1,4,4,0]", "f32[3,3,0,4]", "window={size=3x3}, dim_labels=b01f_01io->b01f"),
}


@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_convolutions(name):
    lhs, rhs, attrs = NAMED[name]
    check(_module(lhs, rhs, lhs.split("[")[0], attrs))


def test_loop_order_rule():
    """Depthwise convolutions put channels innermost; dense ones output features, with
    blocked positions."""
    dw = parse_hlo(_module(*NAMED["depthwise_3x3"][:2], "f32", NAMED["depthwise_3x3"][2])).entry.root
    dense = parse_hlo(_module(*NAMED["dense_3x3"][:2], "f32", NAMED["dense_3x3"][2])).entry.root
    assert conv_geometry(dw).channels_innermost and not conv_geometry(dense).channels_innermost
    assert POSITION_BLOCK > 1


def test_unhandled_convolutions_stay_library_calls():
    """Complex convolutions keep the library rule (no custom kernel), still correct."""
    text = _module("c64[1,5,5,2]", "c64[3,3,2,2]", "c64", "window={size=3x3}, dim_labels=b01f_01io->b01f")
    module = parse_hlo(text)
    rng = np.random.default_rng(1)
    args = [(rng.standard_normal(tuple(p.shape.dims)) + 1j * rng.standard_normal(tuple(p.shape.dims))).astype(np.complex64)
            for p in module.entry.parameters]
    exe = hlofuse.compile(parse_hlo(text), target="cpu")
    assert not any(k.custom == "conv" for k in exe.program._planner.kernels)
    (got,) = exe(*args)
    (want,) = hlofuse.compile(parse_hlo(text), target="interpreter")(*args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ---- epilogue (kOutput) fusion ----------------------------------------------------------------
EPILOGUE = """HloModule m
fused {
  p0 = f32[2,6,7,8] parameter(0)
  p1 = f32[3,3,1,8] parameter(1)
  p2 = f32[8] parameter(2)
  c = f32[2,6,7,8] convolution(p0, p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=8
  b = f32[2,6,7,8] broadcast(p2), dimensions={3}
  a = f32[2,6,7,8] add(c, b)
  z = f32[] constant(0)
  six = f32[] constant(6)
  zb = f32[2,6,7,8] broadcast(z), dimensions={}
  sb = f32[2,6,7,8] broadcast(six), dimensions={}
  r = f32[2,6,7,8] clamp(zb, a, sb)
  ROOT h = bf16[2,6,7,8] convert(r)
}
ENTRY e {
  x = f32[2,6,7,8] parameter(0)
  w = f32[3,3,1,8] parameter(1)
  bias = f32[8] parameter(2)
  ROOT f = bf16[2,6,7,8] fusion(x, w, bias), kind=kOutput, calls=fused
}
"""


@pytest.mark.parametrize("layout", ["depthwise", "dense"])
def test_fused_epilogue_kernel(layout):
    """A kOutput fusion of a convolution, bias add, clamp and convert is one conv kernel that
    matches the interpreter bit for bit (the epilogue reads each result once, rounded)."""
    text = EPILOGUE
    if layout == "dense":  # output features innermost, blocked positions (7 = 4 + 3 remainder)
        text = text.replace("f32[3,3,1,8]", "f32[3,3,8,8]").replace(", feature_group_count=8", "")
    module = parse_hlo(text)
    args = [np.random.default_rng(2).standard_normal(tuple(p.shape.dims)).astype(np.float32) * 2
            for p in module.entry.parameters]
    exe = hlofuse.compile(parse_hlo(text), target="cpu", fusion=False)
    assert [k.custom for k in exe.program._planner.kernels] == ["conv"]
    (got,) = exe(*args)
    (want,) = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(*args)
    assert bits_equal(got, want).all()


PARTIAL_VECTORS = """HloModule m
fused {{
  p0 = f32[2,6,7,8] parameter(0)
  p1 = f32[3,3,8,{o}] parameter(1)
  p2 = f32[{o}] parameter(2)
  c = f32[2,6,7,{o}] convolution(p0, p1), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f
  b = f32[2,6,7,{o}] broadcast(p2), dimensions={{3}}
  ROOT a = f32[2,6,7,{o}] add(c, b)
}}
ENTRY e {{
  x = f32[2,6,7,8] parameter(0)
  w = f32[3,3,8,{o}] parameter(1)
  bias = f32[{o}] parameter(2)
  ROOT f = f32[2,6,7,{o}] fusion(x, w, bias), kind=kOutput, calls=fused
}}
"""


@pytest.mark.parametrize("features", [24, 40])
@pytest.mark.parametrize("nonfinite", [False, True], ids=["finite", "inf-weight"])
def test_blocked_positions_with_partial_vectors(features, nonfinite):
    """Output features that fill no whole vector (24, 40 f32) in blocked positions, each
    position's accumulators an array of their own (cpu_conv: 4 x 24 in one array made LLVM mix
    the positions' lanes), with a fused epilogue, a remainder position (7 = 4 + 3) and padding
    taps (an inf weight makes them NaN): the interpreter's bits."""
    text = PARTIAL_VECTORS.format(o=features)
    module = parse_hlo(text)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(tuple(p.shape.dims)).astype(np.float32) * 2 for p in module.entry.parameters]
    if nonfinite:
        args[1][0, 0, 3, features - 2] = np.inf
    exe = hlofuse.compile(parse_hlo(text), target="cpu", fusion=False, cache=False)
    assert [k.custom for k in exe.program._planner.kernels] == ["conv"]
    (got,) = exe(*args)
    (want,) = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(*args)
    assert bits_equal(got, want).all()
    assert np.isnan(want).any() == nonfinite


def test_mobilenet_block_fuses_epilogues():
    """jax's MobileNetV2 block (1x1 expand + bias + relu6, depthwise 3x3 + relu6, 1x1 project +
    residual): the fusion passes make three kOutput fusions, each one conv kernel."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    def conv(x, w, groups=1):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                            feature_group_count=groups)

    def block(x, w1, b1, w2, w3):
        h = jnp.clip(conv(x, w1) + b1, 0, 6)
        h = jnp.clip(conv(h, w2, groups=w2.shape[-1]), 0, 6)
        return x + conv(h, w3)

    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in
            [(1, 8, 8, 4), (1, 1, 4, 24), (24,), (3, 3, 1, 24), (1, 1, 24, 4)]]
    text = jax.jit(block).lower(*args).as_text(dialect="hlo")
    exe = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu")
    fusions = [i for i in exe.fused_module.entry.instructions if i.opcode == "fusion"]
    assert [f.attrs["kind"] for f in fusions] == ["kOutput"] * 3
    assert [k.custom for k in exe.program._planner.kernels] == ["conv"] * 3
    (got,) = exe(*args)
    (want,) = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(*args)
    assert bits_equal(got, want).all()


def test_convolution_with_two_users_is_not_output_fused():
    text = """HloModule m
ENTRY e {
  x = f32[1,5,5,2] parameter(0)
  w = f32[3,3,2,2] parameter(1)
  c = f32[1,5,5,2] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  e = f32[1,5,5,2] exponential(c)
  n = f32[1,5,5,2] negate(c)
  ROOT t = (f32[1,5,5,2], f32[1,5,5,2]) tuple(e, n)
}
"""
    exe = hlofuse.compile(parse_hlo(text), target="cpu")
    assert any(i.opcode == "convolution" for i in exe.fused_module.entry.instructions)
    rules = {(r["producer"], r["rule"]) for r in exe.report()["refused"]}
    assert rules == {("c", "conv-output-users")}


NONFINITE_CASES = [f"random{seed}" for seed in range(24)] + ["depthwise_3x3", "dense_3x3", "dense_3x3_stride2",
                                                            "nchw_oihw"]


@pytest.mark.parametrize("case", NONFINITE_CASES)
def test_inf_and_nan_weights_on_padding_and_holes(case):
    """Padding and lhs-dilation holes multiply a zero into the sum, as in the interpreter and
    XLA: a tap there whose weight is inf or NaN makes the output NaN (the kernel skipped those
    taps, giving the bias alone for jax's bf16 conv with pad=1_0 on a border row)."""
    if case.startswith("random"):
        seed = int(case[6:])
        text = random_convolution(200 + seed, ("f32", "f32", "f32") if seed % 3 else ("bf16", "bf16", "bf16"))
    else:
        seed, (lhs, rhs, attrs) = 0, NAMED[case]
        text = _module(lhs, rhs, "f32", attrs)
    module = parse_hlo(text)
    x, w = _inputs(module, seed)
    rng = np.random.default_rng(seed)
    flat = w.reshape(-1)
    if flat.size:
        flat[rng.integers(0, flat.size, max(1, flat.size // 8))] = np.array(
            [np.inf, -np.inf, np.nan], dtype=np.float32)[rng.integers(0, 3, max(1, flat.size // 8))].astype(w.dtype)
    (want,) = hlofuse.compile(parse_hlo(text), target="interpreter")(x, w)
    for fusion in (True, False):
        (got,) = hlofuse.compile(parse_hlo(text), target="cpu", fusion=fusion)(x, w)
        got, want_ = np.asarray(got, np.float64), np.asarray(want, np.float64)
        assert (np.isnan(got) == np.isnan(want_)).all(), f"NaN positions differ:\n{text}"
        assert (np.isinf(got) == np.isinf(want_)).all(), f"inf positions differ:\n{text}"


def test_padding_fill_times_inf_weight_is_nan():
    """The smallest case: a 1x1 window with one row of low padding; weight inf -> that output
    row is 0 * inf = NaN (interpreter and XLA), the other rows inf * x."""
    text = _module("f32[1,1,2,1]", "f32[1,1,1,1]", "f32", "window={size=1x1 pad=1_0x0_0}, dim_labels=bf01_oi01->bf01")
    x = np.array([[[[1.0], [2.0]]]], np.float32)
    w = np.array([[[[np.inf]]]], np.float32)
    (want,) = hlofuse.compile(parse_hlo(text), target="interpreter")(x, w)
    assert np.isnan(want[0, 0, 0, 0]) and np.isinf(want[0, 0, 1, 0])  # the oracle's semantics
    (got,) = hlofuse.compile(parse_hlo(text), target="cpu")(x, w)
    assert bits_equal(got, want).all(), (got, want)
