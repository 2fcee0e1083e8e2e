"""Reductions into narrow floats (bf16, f16) follow XLA:CPU bit for bit on every backend.

What XLA:CPU does (read from its optimized HLO, `tree_reduction_rewrite` in
codegen/planning.py and the interpreter's reduction.py say it in full): every step of
the reducer is computed in f32 and rounded back to the narrow type, and TreeReductionRewriter
first splits any reduced dimension longer than 32 into windows of 32 (reduce-window, then
reduce), each window folded sequentially from the init value. The interpreter, the CPU and the
emulated GPU (fused and unfused) must all give exactly XLA's bits. One exception, by XLA's own
`reassoc` flags: on an AVX2 host XLA:CPU's LLVM vectorizes some f16 sums over two short reduced
dimensions (XLA_AVX2_F16_LANES); there XLA's bits are checked against that order instead.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from xla_oracle import run_on_xla, xla_available

DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
TARGETS = [("cpu", True), ("cpu", False), ("gpu-emulated", True), ("gpu-emulated", False)]

# (input dims, reduced dims): row, column, middle, full, several windows, several tree levels
# (4096 = 32 * 32 * 4), every reduced dimension at most 32 (no tree, one long sequential fold).
SHAPES = [
    ([64], [0]),  # the reported case: 64 elements to a scalar
    ([7, 100], [1]),
    ([100, 7], [0]),
    ([3, 70, 5], [1]),
    ([70, 3, 40], [0, 2]),
    ([40, 50], [0, 1]),
    ([1000], [0]),
    ([4096], [0]),
    ([33], [0]),
    ([32], [0]),
    ([20, 30], [0, 1]),
    ([5, 32, 32], [1, 2]),
]


def _module(ty: str, dims, rdims, op: str = "add", init: str = "0") -> str:
    out = [d for i, d in enumerate(dims) if i not in rdims]
    shape = lambda ds: f"{ty}[{','.join(map(str, ds))}]"  # noqa: E731
    return f"""HloModule m
red {{
  a = {ty}[] parameter(0)
  b = {ty}[] parameter(1)
  ROOT c = {ty}[] {op}(a, b)
}}
ENTRY e {{
  p = {shape(dims)} parameter(0)
  z = {ty}[] constant({init})
  ROOT s = {shape(out)} reduce(p, z), dimensions={{{','.join(map(str, rdims))}}}, to_apply=red
}}
"""


def _input(ty: str, dims, seed: int, op: str = "add") -> np.ndarray:
    rng = np.random.default_rng(seed)
    if op == "multiply":  # products near 1, so every step rounds but nothing overflows
        return (1 + 0.05 * rng.standard_normal(dims)).astype(np.float32).astype(DTYPES[ty])
    return rng.standard_normal(dims).astype(np.float32).astype(DTYPES[ty])


def _bits(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def _run(text: str, args, target: str, fusion: bool = True):
    return hlofuse.compile(parse_hlo(text), target=target, fusion=fusion)(*args)


def _assert_backends_agree(text: str, args) -> np.ndarray:
    """Every compiled backend equals the interpreter bit for bit; returns the interpreter's."""
    want = _run(text, args, "interpreter")[0]
    for target, fusion in TARGETS:
        got = _run(text, args, target, fusion)[0]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=f"{target} fusion={fusion}")
    return want


needs_xla = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA CPU client is not usable here")


@needs_xla
@pytest.mark.parametrize("ty", sorted(DTYPES))
@pytest.mark.parametrize("dims,rdims", SHAPES, ids=lambda v: "x".join(map(str, v)))
def test_sum_matches_xla_cpu_bit_for_bit(ty, dims, rdims):
    """A narrow-float sum equals XLA:CPU's exactly on the interpreter, the CPU and the GPU
    (where XLA:CPU's LLVM keeps its fold in order: `_xla_vectorized_f16_lanes`)."""
    text = _module(ty, dims, rdims)
    args = [_input(ty, dims, len(dims) * 100 + sum(dims))]
    xla = run_on_xla(text, args)[0]
    want = _assert_backends_agree(text, args)
    lanes = _xla_vectorized_f16_lanes(ty, dims, rdims)
    if lanes:
        np.testing.assert_array_equal(_bits(_xla_lane_order_sum(args[0], len(rdims), lanes)), _bits(xla))
        return
    np.testing.assert_array_equal(_bits(want), _bits(xla))


def _host_has_avx512() -> bool:
    from hlofuse.emitters.cpu.target import CpuTarget

    return "+avx512f" in CpuTarget().cpu_features.split(",")


# XLA:CPU (jaxlib 0.10.2) marks its reduction adds `reassoc`. On the Zen 1 AVX2 host LLVM then
# vectorizes an f16 sum over two reduced dimensions of at most 32 (no tree rewrite) across the
# outer one: lane r % L folds rows r in order, a halving tree adds the L lanes, remaining rows
# follow in order (read from its optimized IR, --xla_dump_to: <4 x half> for 20 rows, <16 x half>
# for 32). So its bits there are not the fold's that the interpreter (the oracle: XLA's
# semantics, and its bits on the znver5 AVX-512 host) and every backend give.
XLA_AVX2_F16_LANES = {(20, 30): 4, (5, 32, 32): 16}


def _xla_vectorized_f16_lanes(ty: str, dims, rdims) -> int:
    """L where XLA:CPU sums `dims` over `rdims` in L lanes on this host (above), else 0."""
    if ty != "f16" or _host_has_avx512():
        return 0
    return XLA_AVX2_F16_LANES.get(tuple(dims), 0)


def _xla_lane_order_sum(x: np.ndarray, nred: int, lanes: int) -> np.ndarray:
    """The f16 sum of `x` over its last `nred` (= 2) dimensions in XLA:CPU's AVX2 order: each
    step in f32 rounded to f16, `lanes` accumulators over the outer reduced dimension."""
    assert nred == 2
    step = lambda a, b: np.float16(np.float32(a) + np.float32(b))  # noqa: E731
    rows = x.reshape(-1, *x.shape[-2:])
    out = []
    for mat in rows:
        main = len(mat) // lanes * lanes
        acc = [np.float16(0)] * lanes
        for r in range(main):
            for v in mat[r]:
                acc[r % lanes] = step(acc[r % lanes], v)
        while len(acc) > 1:
            half = len(acc) // 2
            acc = [step(acc[i], acc[i + half]) for i in range(half)]
        total = acc[0] if main else np.float16(0)
        for r in range(main, len(mat)):
            for v in mat[r]:
                total = step(total, v)
        out.append(total)
    return np.array(out, np.float16).reshape(x.shape[:-2])


@needs_xla
@pytest.mark.parametrize("ty", sorted(DTYPES))
@pytest.mark.parametrize("op,init,dims,rdims", [
    ("multiply", "1", [100], [0]),
    ("multiply", "1", [6, 300], [1]),
    ("maximum", "-inf", [300, 7], [0]),
    ("minimum", "inf", [70, 3, 40], [0, 2]),
    # A non-identity init: XLA:CPU's tree starts every window from it (so it joins 5 times in
    # 100 elements); the backends must do the same, not add it once.
    ("add", "0.5", [100], [0]),
    ("add", "-1", [300, 7], [0]),
    ("add", "0.5", [5000], [0]),
])
def test_other_reducers_and_inits_match_xla_cpu(ty, op, init, dims, rdims):
    """Multiply, max, min, and init values that are not the identity follow XLA:CPU too."""
    text = _module(ty, dims, rdims, op, init)
    args = [_input(ty, dims, 7, op)]
    xla = run_on_xla(text, args)[0]
    want = _assert_backends_agree(text, args)
    np.testing.assert_array_equal(_bits(want), _bits(xla))


@pytest.mark.parametrize("ty", sorted(DTYPES))
def test_per_step_rounding_and_windows_by_hand(ty):
    """1 followed by 63 values of 2**-12: derived by hand, without any backend.

    f32 accumulation with one rounding gives 1 + 63 * 2**-12 rounded; a sequential fold with
    per-step rounding loses every small term against 1 (2**-12 is less than half an ulp of 1
    in both types) and gives 1; XLA:CPU's tree adds the 31 small terms of the first window to 1
    one at a time (lost), sums the 32 of the second window exactly (2**-7), then adds the two
    window results once: 1 + 2**-7, which both types represent exactly."""
    x = np.full(64, 2.0 ** -12, dtype=DTYPES[ty])
    x[0] = 1
    text = _module(ty, [64], [0])
    want = _assert_backends_agree(text, [x])
    assert float(want) == 1 + 2.0 ** -7
    if xla_available():
        assert float(run_on_xla(text, [x])[0]) == 1 + 2.0 ** -7


@pytest.mark.parametrize("ty", sorted(DTYPES))
@pytest.mark.parametrize("dims,rdims", [([16, 200], [1]), ([200, 16], [0]), ([3000], [0])])
def test_fused_producer_and_epilogue(ty, dims, rdims):
    """The tree order also holds inside a fusion: an elementwise producer feeding the reduce
    (squares), an epilogue after it (a scaling: XLA's simplifier would turn a division by a
    constant into a multiplication by its rounded reciprocal, a difference that is not the
    reduction's), and a side output of the input's shape."""
    out = [d for i, d in enumerate(dims) if i not in rdims]
    shape = lambda ds: f"{ty}[{','.join(map(str, ds))}]"  # noqa: E731
    text = f"""HloModule m
red {{
  a = {ty}[] parameter(0)
  b = {ty}[] parameter(1)
  ROOT c = {ty}[] add(a, b)
}}
ENTRY e {{
  p = {shape(dims)} parameter(0)
  sq = {shape(dims)} multiply(p, p)
  z = {ty}[] constant(0)
  s = {shape(out)} reduce(sq, z), dimensions={{{','.join(map(str, rdims))}}}, to_apply=red
  k = {ty}[] constant(0.25)
  kb = {shape(out)} broadcast(k), dimensions={{}}
  scaled = {shape(out)} multiply(s, kb)
  ROOT t = ({shape(out)}, {shape(dims)}) tuple(scaled, sq)
}}
"""
    args = [_input(ty, dims, 11)]
    want = _run(text, args, "interpreter")
    for target, fusion in TARGETS:
        got = _run(text, args, target, fusion)
        for j, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_array_equal(_bits(g), _bits(w), err_msg=f"{target} fusion={fusion} out{j}")
    if xla_available():
        for j, (x, w) in enumerate(zip(run_on_xla(text, args), want)):
            np.testing.assert_array_equal(_bits(w), _bits(x), err_msg=f"interpreter vs XLA out{j}")


def test_empty_narrow_reduce_with_a_long_dimension():
    """An f16 sum over f16[0,343,254,0] (empty, with reduced dimensions longer than the tree's
    window): its init, on every backend. The tree rewrite divided by the 0-long dimension's
    window (ZeroDivisionError; the large-graph fuzzer, seed 49)."""
    text = """HloModule m
red {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT c = f16[] add(a, b)
}
ENTRY e {
  p = f16[0,343,254,0] parameter(0)
  z = f16[] constant(1.5)
  ROOT s = f16[] reduce(p, z), dimensions={0,1,2,3}, to_apply=red
}
"""
    args = [np.zeros((0, 343, 254, 0), np.float16)]
    for target, fusion in TARGETS:
        (got,) = _run(text, args, target, fusion)
        assert np.asarray(got) == np.float16(1.5), (target, fusion)
