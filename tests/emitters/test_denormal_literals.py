"""Literal denormals under the flush mode: a denormal written as a constant in the HLO must give
what the same value read from memory gives, i.e. what the interpreter (XLA:CPU's run-time
semantics, docs/denormals.md) gives. LLVM folds intrinsics such as minimum and sqrt on
constants without regard to the kernel's denormal mode, so without the element generators'
literal flush (ElementalEmitter.operand) `rsqrt(minimum(1, 1e-40))` came out as 1e20 where the
hardware's denormals-are-zero gives inf (found by the graph fuzzer, seed 31)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse.emitters.target import Target

DENORMAL = {"f32": "1e-40", "f64": "1e-310", "bf16": "9.184e-41"}
NUMPY = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16}

# Each case: the ROOT line over `pd` (the parameter padded with 1s, so LLVM sees constant
# elements in the padding), `bd` (the broadcast denormal literal), `pdd` (the parameter
# padded with the denormal) and `cd` (the parameter followed by four denormals).
CASES = {
    "minimum": "minimum(pd, bd)",
    "maximum": "maximum(bd, pd)",
    "add": "add(pd, bd)",
    "multiply": "multiply(bd, pd)",
    "divide-by-literal": "divide(pd, bd)",
    "compare": "compare(bd, pd), direction=LT",
    "compare-totalorder": "compare(bd, zero), direction=GT, type=TOTALORDER",
    "sqrt": "sqrt(bd)",
    "rsqrt-of-minimum": "rsqrt(m)",
    "exp": "exponential(bd)",
    "negate-keeps-bits": "negate(bd)",
    "select-keeps-bits": "select(cmp, bd, pd)",
    # The denormal as a pad's padding value: the operand is a select with a literal arm, which
    # LLVM folds after the element generators have run; the f32 functions computed in f64
    # widened it to a normal f64 (found by the graph fuzzer, seed 30: bf16 power(inf, 1e-40)
    # gave inf where the flushed exponent gives 1).
    "power-of-padded-literal": "power(bi, pdd)",
    "atan2-of-padded-literals": "atan2(pdd, pdd)",
    "cbrt-of-padded-literal": "cbrt(pdd)",
    # The same through a concatenate (seed 32: rsqrt(concatenate(x, broadcast(1e-40))) gave
    # 1e20 where the flushed operand gives inf) and through ops built on LLVM intrinsics.
    "rsqrt-of-concatenated-literal": "rsqrt(cd)",
    "sqrt-of-padded-literal": "sqrt(pdd)",
    "ceil-of-concatenated-literal": "ceil(cd)",
    "minimum-of-padded-literal": "minimum(pdd, pd)",
}


def _module(dtype: str, root: str) -> str:
    out = "pred" if root.startswith("compare") else dtype
    return f"""HloModule literals

ENTRY e {{
  p = {dtype}[4] parameter(0)
  one = {dtype}[] constant(1)
  pd = {dtype}[8] pad(p, one), padding=2_2
  d = {dtype}[] constant({DENORMAL[dtype]})
  bd = {dtype}[8] broadcast(d), dimensions={{}}
  pdd = {dtype}[8] pad(p, d), padding=2_2
  d4 = {dtype}[4] broadcast(d), dimensions={{}}
  cd = {dtype}[8] concatenate(p, d4), dimensions={{0}}
  i = {dtype}[] constant(inf)
  bi = {dtype}[8] broadcast(i), dimensions={{}}
  z = {dtype}[] constant(0)
  zero = {dtype}[8] broadcast(z), dimensions={{}}
  m = {dtype}[8] minimum(pd, bd)
  cmp = pred[8] compare(pd, zero), direction=GT
  ROOT r = {out}[8] {root}
}}
"""


def _run(text: str, target: str, x: np.ndarray) -> np.ndarray:
    exe = hlofuse.compile(hlofuse.parse_hlo(text), target=target)
    return np.asarray(exe(x)[0])


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype == np.bool_:
        return bool(np.array_equal(a, b))
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return bool(np.array_equal(a.view(width), b.view(width)))


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_literal_denormal_as_the_interpreter(case, dtype, target):
    text = _module(dtype, CASES[case])
    x = np.array([0.0, 2.0, -3.0, 65536.0], NUMPY[dtype])
    if case.startswith("cbrt"):
        # cubes glibc's f64 cbrt, which the kernels call, gets exactly: it is one ulp off the
        # correctly rounded cbrt that numpy gives for 2, 65536, 27 and 0.125, and this test is
        # about the literal
        x = np.array([0.0, 8.0, -64.0, 1000.0], NUMPY[dtype])
    want = _run(text, "interpreter", x)
    got = _run(text, target, x)
    assert _same_bits(got, want), f"{case} {dtype} {target}: {got} vs interpreter {want}"


def test_the_case_needs_the_literal_flush(monkeypatch):
    """The guard that the test above can fail: with the literal flush off, LLVM's fold of
    rsqrt(minimum(1, denormal)) gives a finite value where the interpreter gives inf."""
    monkeypatch.setattr(Target, "flushes_denormals", False)
    text = _module("f32", CASES["rsqrt-of-minimum"])
    x = np.array([0.0, 2.0, -3.0, 65536.0], np.float32)
    got = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)(x)[0]
    want = _run(text, "interpreter", x)
    assert np.isinf(want[0]) and np.isfinite(np.asarray(got)[0])


BF16_EDGES = np.array([0, 9.18e-41, -9.18e-41, 1e-39, -3e-39, 1.0, -0.0, np.nan, 1.2e-38, -np.inf],
                      ml_dtypes.bfloat16)


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("root", ["compare(p, zb), direction=EQ", "compare(zb, p), direction=NE",
                                  "compare(p, zb), direction=LT", "compare(p, q), direction=EQ",
                                  "convert(p)"])
def test_bf16_denormals_compare_as_zero(root, target):
    """A bf16 denormal compares equal to zero and converts to false, as denormals-are-zero
    reads it (the interpreter's semantics). LLVM's InstCombine turned the widened bf16's compare
    with zero into an integer test of its bits, which read the denormal as non-zero (fuzzer
    seed 41); XLA:CPU gets that fold too (docs/denormals.md)."""
    text = f"""HloModule bf16_daz

ENTRY e {{
  p = bf16[10] parameter(0)
  q = bf16[10] parameter(1)
  z = bf16[] constant(0)
  zb = bf16[10] broadcast(z), dimensions={{}}
  ROOT r = pred[10] {root}
}}
"""
    q = np.zeros(10, ml_dtypes.bfloat16)
    want = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(BF16_EDGES, q)[0])
    got = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target=target)(BF16_EDGES, q)[0])
    assert np.array_equal(got, want), f"{root} on {target}: {got.astype(int)} vs interpreter {want.astype(int)}"
    if "EQ" in root:
        assert want[1] and want[2] and want[3]  # the denormals read as zero


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("root", ["convert(w)", "compare(w, zw), direction=NE", "compare(w, zw), direction=EQ"])
def test_bf16_denormals_widened_to_f32_in_the_kernel_read_as_zero(root, target):
    """The same fold through a convert to f32 fused before the compare (graph fuzzer, seed 94:
    bf16 -> f32 -> pred gave true for 9.18e-41): the f32 compare reads a widened bf16 whose
    denormal DAZ must make zero."""
    text = f"""HloModule widened

ENTRY e {{
  p = bf16[10] parameter(0)
  w = f32[10] convert(p)
  z = f32[] constant(0)
  zw = f32[10] broadcast(z), dimensions={{}}
  ROOT r = pred[10] {root}
}}
"""
    want = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(BF16_EDGES)[0])
    got = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target=target, cache=False)(BF16_EDGES)[0])
    assert np.array_equal(got, want), f"{root} on {target}: {got.astype(int)} vs interpreter {want.astype(int)}"
    assert want[1] == want[2] == ("EQ" in root)  # the denormals read as zero


def test_the_bf16_case_needs_the_bit_flush(monkeypatch):
    """The guard that the test above can fail: without the flush on the bits, LLVM's fold
    makes a bf16 denormal convert to true."""
    monkeypatch.setattr(Target, "flushes_denormals", False)
    text = "HloModule t\n\nENTRY e {\n  p = bf16[10] parameter(0)\n  ROOT r = pred[10] convert(p)\n}\n"
    got = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)(BF16_EDGES)[0])
    assert got[1] and got[2]


# f16 runs in f32 (vcvtph2ps, which denormals-are-zero does not touch), where its denormals
# are normal numbers: nothing of an f16 is flushed (docs/denormals.md), on XLA:CPU as in the
# interpreter. The kernels' "denormal-fp-math" attribute, which LLVM applies to every float
# type, told LLVM's folder otherwise: the sum of 33,792 f16 6e-08 literals was 0, not 0.002014
# (the large-graph fuzzer, seed 85); the literal now reaches LLVM through an arithmetic fence.
F16_SUM = """HloModule f16_sum

add {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT r = f16[] add(a, b)
}

ENTRY e {
  p = f16[4] parameter(0)
  d = f16[] constant(6e-08)
  bd = f16[2816,4,3] broadcast(d), dimensions={}
  z = f16[] constant(0)
  s = f16[] reduce(bd, z), dimensions={0,1,2}, to_apply=add
  sb = f16[4] broadcast(s), dimensions={}
  ROOT r = f16[4] add(sb, p)
}
"""
F16_ROOTS = {
    "sum": None,
    "add": "add(bd8, p8)",
    "multiply": "multiply(bd8, k8)",
    "compare": "compare(bd8, z8), direction=GT",
    "divide": "divide(k8, bd8)",
}


def _f16_module(root: str | None) -> str:
    if root is None:
        return F16_SUM
    out = "pred" if root.startswith("compare") else "f16"
    return f"""HloModule f16_literal

ENTRY e {{
  p = f16[4] parameter(0)
  p8 = f16[8] concatenate(p, p), dimensions={{0}}
  d = f16[] constant(6e-08)
  bd8 = f16[8] broadcast(d), dimensions={{}}
  k = f16[] constant(1000)
  k8 = f16[8] broadcast(k), dimensions={{}}
  z = f16[] constant(0)
  z8 = f16[8] broadcast(z), dimensions={{}}
  ROOT r = {out}[8] {root}
}}
"""


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("case", sorted(F16_ROOTS))
def test_f16_denormal_literals_are_kept(case, target):
    text = _f16_module(F16_ROOTS[case])
    x = np.array([0.0, 2.0, -3.0, 0.5], np.float16)
    want = _run(text, "interpreter", x)
    got = _run(text, target, x)
    assert _same_bits(got, want), f"{case} {target}: {got} vs interpreter {want}"
    if case == "sum":  # the kept denormals add up, in any order: 33,792 x 2^-24 is 0.002014
        assert abs(float(want[0]) - 33792 * 2.0 ** -24) < 1e-5


def test_f16_literals_as_xla_cpu():
    """The same literals on XLA:CPU itself: kept, as the interpreter keeps them."""
    from xla_oracle import run_on_xla, xla_available

    if not xla_available():
        pytest.skip("XLA:CPU (jaxlib) is not available")
    x = np.array([0.0, 2.0, -3.0, 0.5], np.float16)
    for case, root in sorted(F16_ROOTS.items()):
        text = _f16_module(root)
        want = np.asarray(run_on_xla(text, [x])[0])
        assert _same_bits(_run(text, "interpreter", x), want), case


def test_the_f16_case_needs_the_fence(monkeypatch):
    """The guard that the tests above can fail: with the literal given to LLVM as a plain
    constant, its folder flushes it and the sum is 0."""
    from hlofuse.emitters import elemental_data

    monkeypatch.setattr(elemental_data, "_opaque_half", lambda em, value: (lambda idx: value))
    x = np.zeros(4, np.float16)
    got = np.asarray(hlofuse.compile(hlofuse.parse_hlo(F16_SUM), target="cpu", cache=False)(x)[0])
    assert got[0] == 0
