"""topk ranks floats in XLA's total order on every backend: NaN of either sign, +-inf, -0 below
+0, duplicates by lower index first, for largest=true and false, k from 1 to n, batch dims and
every element type XLA:CPU takes. XLA:CPU itself (tests/xla_oracle.py) is the reference; the
compiled backends used to rank with a plain `<` on -x, dropping NaN and tying -0 with +0, and
negating unsigned (and the most negative signed) keys wrapped them."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xla_oracle import run_on_xla, xla_available

import hlofuse

pytestmark = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA client is not available")

TARGETS = ["interpreter", "cpu", "gpu-emulated"]
NAN, NEG_NAN, INF = np.float32(np.nan), np.copysign(np.float32(np.nan), np.float32(-1)), np.float32(np.inf)
# Rows of six values: NaN ranks above +inf (largest=true), -NaN below -inf; -0 ranks below +0;
# equal values keep their index order.
FLOAT_ROWS = np.array([
    [1, NAN, 7e4, -0.0, INF, 2],
    [NEG_NAN, 1, NAN, -INF, 0.0, -0.0],
    [0.0, -0.0, 0.0, -0.0, 1, 1],
    [-0.0, 0.0, -0.0, 0.0, -1, -1],
    [3, 3, 3, 1, 1, 3],
    [-INF, INF, NEG_NAN, NEG_NAN, NAN, 5],
], np.float32)
FLOATS = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64,
          "f8e4m3fn": ml_dtypes.float8_e4m3fn}
INTS = {"s32": np.int32, "s8": np.int8, "s64": np.int64, "u32": np.uint32, "u8": np.uint8, "u64": np.uint64}


def topk_module(ty: str, dims: tuple, k: int, largest: str) -> str:
    """A module returning (values, s32 indices) of one topk."""
    shape = ",".join(map(str, dims))
    out = ",".join(map(str, dims[:-1] + (k,)))
    return (f"HloModule m\nENTRY main {{\n  x = {ty}[{shape}] parameter(0)\n"
            f"  ROOT t = ({ty}[{out}], s32[{out}]) topk(x), k={k}, largest={largest}\n}}\n")


def _operand(ty: str) -> np.ndarray:
    if ty in FLOATS:
        with np.errstate(over="ignore"):  # 7e4 is inf in f8; XLA gets the same array
            return FLOAT_ROWS.astype(FLOATS[ty])
    if ty == "pred":
        return np.array([[1, 0, 1, 0, 0, 1], [0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 1, 1]], np.bool_)
    dt = INTS[ty]
    info = np.iinfo(dt)
    return np.array([
        [info.min, info.max, 0, 1, info.max, info.min],   # extremes: negating would wrap them
        [3, 3, 3, 1, 1, 3],
        [0, 2, 0, 2, 1, 1],
        [info.max, info.max - 1, info.min + 1, info.min, 5, 5],
    ], dt)


def _assert_same(got: tuple, want: list, what: str) -> None:
    assert len(got) == len(want) == 2, what
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype.itemsize == w.dtype.itemsize, what
        # Bits, not values: NaN's sign and -0 vs +0 matter.
        assert g.tobytes() == w.tobytes(), f"{what}: got {g.tolist()} want {w.tolist()}"


@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("largest", ["true", "false"])
@pytest.mark.parametrize("ty", [*FLOATS, *INTS, "pred"])
def test_topk_matches_xla(ty: str, largest: str, k: int) -> None:
    x = _operand(ty)
    text = topk_module(ty, x.shape, k, largest)
    want = run_on_xla(text, [x])
    for target in TARGETS:
        got = hlofuse.compile(hlofuse.parse_hlo(text), target=target)(x)
        _assert_same(got, want, f"{target} {ty} largest={largest} k={k}")


def test_the_reported_module() -> None:
    """The fuzzer's module: NaN is the largest value, not dropped."""
    x = np.array([[1, np.nan, 7e4, -0.0, np.inf, 2]], np.float32)
    text = topk_module("f32", (1, 6), 3, "true")
    want = run_on_xla(text, [x])
    assert np.isnan(want[0][0, 0]) and want[1].tolist() == [[1, 4, 2]]  # XLA's own answer
    for target in TARGETS:
        _assert_same(hlofuse.compile(hlofuse.parse_hlo(text), target=target)(x), want, target)


@pytest.mark.parametrize("dims", [(6,), (3, 2, 6), (2, 1), (4, 17)], ids=str)
@pytest.mark.parametrize("largest", ["true", "false"])
def test_topk_batch_dims_and_long_rows(dims: tuple, largest: str) -> None:
    """Rank 1 and rank 3 operands, a row of one, and rows long enough that a partial sort and a
    full sort could differ; values from a small set so that ties and NaN recur."""
    rng = np.random.default_rng(sum(dims))
    pool = np.array([NAN, NEG_NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 2.5], np.float32)
    x = pool[rng.integers(0, len(pool), dims)]
    for k in sorted({1, min(3, dims[-1]), dims[-1]}):
        text = topk_module("f32", dims, k, largest)
        want = run_on_xla(text, [x])
        for target in TARGETS:
            got = hlofuse.compile(hlofuse.parse_hlo(text), target=target)(x)
            _assert_same(got, want, f"{target} {dims} k={k} largest={largest}")


@pytest.mark.parametrize("largest", ["true", "false"])
@pytest.mark.parametrize("ty,dtype", [("s4", ml_dtypes.int4), ("u4", ml_dtypes.uint4)])
def test_sub_byte_topk_matches_the_interpreter(ty: str, dtype, largest: str) -> None:
    """XLA:CPU refuses topk on s4/u4 (its TopK lowering widens the indices), so the interpreter is
    the reference; the extremes (-8, 7, 15) and repeats are where a negated key would go wrong."""
    values = [[-8, 7, 0, -1, 7, -8], [3, 3, 1, 3, 0, 1]] if ty == "s4" else [[0, 15, 7, 15, 1, 0], [3, 3, 1, 3, 0, 1]]
    x = np.array(values, dtype)
    for k in (1, 3, 6):
        text = topk_module(ty, x.shape, k, largest)
        want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(x)
        ranked = np.sort(x.astype(np.int8), axis=-1)  # numpy's own order of the values
        ranked = ranked[:, ::-1] if largest == "true" else ranked
        np.testing.assert_array_equal(np.asarray(want[0]).astype(np.int8), ranked[:, :k])
        for target in ("cpu", "gpu-emulated"):
            got = hlofuse.compile(hlofuse.parse_hlo(text), target=target)(x)
            _assert_same(got, [np.asarray(w) for w in want], f"{target} {ty} k={k} largest={largest}")
