"""Narrow element types on the compiled backends (CPU and the emulated GPU grid), against the
interpreter (the oracle, which computes through ml_dtypes): the 8/6/4-bit floats computed in
f32 and rounded back, s4/u4 with 4-bit wrap-around, and the converts between all of them,
exhaustively over every bit pattern where the operands allow it."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse import parse_hlo
from hlofuse.hlo.dtypes import ELEMENT_TYPES
from hlofuse.runtime.interpreter import evaluate

TARGETS = ["cpu", "gpu-emulated"]
NARROW = ["f8e4m3fn", "f8e5m2", "f8e4m3", "f8e3m4", "f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz",
          "f8e8m0fnu", "f6e2m3fn", "f6e3m2fn", "f4e2m1fn"]
WIDE = ["f32", "f64", "f16", "bf16", "s32", "s8", "u8", "s4", "u4", "pred", "u64"]


def _module(params: list[tuple[str, int]], outs: list[tuple[str, str]]):
    """A module over 1-D parameters (type, size) whose tuple result lines are (type[n], expr)."""
    lines = [f"  p{i} = {t}[{n}] parameter({i})" for i, (t, n) in enumerate(params)]
    names = []
    for k, (shape, expr) in enumerate(outs):
        lines.append(f"  r{k} = {shape} {expr}")
        names.append(f"r{k}")
    shapes = ", ".join(s for s, _ in outs)
    lines.append(f"  ROOT t = ({shapes}) tuple({', '.join(names)})")
    return parse_hlo("HloModule m\nENTRY e {\n" + "\n".join(lines) + "\n}\n")


def _same(got, want, what: str, codes: int = 0) -> None:
    """Equal element by element; NaNs equal NaNs (their payloads may differ); with `codes`,
    narrow-float results may differ by that many steps of their bit pattern (transcendentals)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if want.dtype.kind in "iub":
        bad = np.nonzero(got != want)[0]
    else:
        g64, w64 = got.astype(np.float64), want.astype(np.float64)
        ok = (g64 == w64) | (np.isnan(g64) & np.isnan(w64))
        if codes and want.dtype.itemsize == 1:
            gi, wi = got.view(np.uint8).astype(int), want.view(np.uint8).astype(int)
            ok |= (np.abs(gi - wi) <= codes) & ~np.isnan(g64) & ~np.isnan(w64)
        bad = np.nonzero(~ok.reshape(-1))[0]
    assert bad.size == 0, (f"{what}: {bad.size} mismatches, first at {bad[:5]}: "
                           f"got {got.reshape(-1)[bad[:5]]}, want {want.reshape(-1)[bad[:5]]}")


def _check(module, args, target, codes: int = 0, labels=None):
    want = evaluate(module, args)
    got = hlofuse.compile(module, target=target)(*args)
    for k, (g, w) in enumerate(zip(got, want)):
        _same(g, w, labels[k] if labels else f"output {k}", codes)


def _all_patterns(name: str) -> np.ndarray:
    et = ELEMENT_TYPES[name]
    return np.arange(1 << et.bits, dtype=np.uint8).view(et.numpy)


def _float_grid() -> np.ndarray:
    """f32 values around every narrow format's range, ties, subnormals, inf and NaN."""
    base = np.concatenate([np.linspace(-600, 600, 2401), 2.0 ** np.arange(-140, 128, 0.25),
                           -(2.0 ** np.arange(-140, 128, 0.5))]).astype(np.float32)
    for name in NARROW:  # every representable value and the midpoints next to it
        v = _all_patterns(name).astype(np.float32)
        v = v[np.isfinite(v)]
        base = np.concatenate([base, v, v * np.float32(1.0625), v * np.float32(0.9375), v * np.float32(1.5)])
    special = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 1e-30, -1e-30, 3e38, -3e38], np.float32)
    return np.concatenate([base, special]).astype(np.float32)


def _not_e8m0_subnormal_inputs(name: str, x: np.ndarray) -> np.ndarray:
    # ml_dtypes rounds f32 subnormals (below 2**-126) to f8e8m0fnu inconsistently (1.0625 * 2**-127
    # goes to 2**-126, the farther neighbour); those inputs are left out for that format.
    if name != "f8e8m0fnu":
        return x
    a = np.abs(x.astype(np.float32))
    return x[~((a < np.float32(2.0 ** -126)) & (a != 0))]


def _oracle_converts(src: str, dst: str) -> bool:
    """Whether ml_dtypes (so the interpreter) converts between these two narrow floats directly
    (it has no cast between f8e8m0fnu and some others)."""
    try:
        np.zeros(1, ELEMENT_TYPES[src].numpy).astype(ELEMENT_TYPES[dst].numpy)
    except TypeError:
        return False
    return True


# ---- converts --------------------------------------------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", NARROW)
def test_convert_from_every_pattern(name, target):
    """Every bit pattern of `name` converted to the ordinary types and to every narrow float."""
    x = _all_patterns(name)
    n = x.size
    dsts = WIDE + [d for d in NARROW if d != name and _oracle_converts(name, d)]
    module = _module([(name, n)], [(f"{d}[{n}]", "convert(p0)") for d in dsts])
    _check(module, [x], target, labels=[f"{name}->{d}" for d in dsts])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("src", ["f32", "f64", "f16", "bf16"])
def test_convert_floats_to_narrow(src, target):
    """Rounding to nearest even, overflow to inf / NaN / the largest value per format, NaN."""
    grid = _float_grid()
    if src != "f32":
        with np.errstate(over="ignore"):
            grid = grid.astype(ELEMENT_TYPES[src].numpy)
    if src == "f64":  # values between f32 neighbours: rounded to f32 first, as ml_dtypes does
        grid = np.concatenate([grid, grid * (1 + 2.0 ** -30), grid * (1 - 2.0 ** -30)])
    for name in NARROW:
        x = _not_e8m0_subnormal_inputs(name, grid)
        module = _module([(src, x.size)], [(f"{name}[{x.size}]", "convert(p0)")])
        _check(module, [x], target, labels=[f"{src}->{name}"])


@pytest.mark.parametrize("target", TARGETS)
def test_convert_integers_to_narrow(target):
    ints = {"s32": np.array([0, 1, -1, 7, 8, 9, 17, 100, -100, 447, 449, 470, 500, 57344, 61440, 70000,
                             2**24 + 1, -(2**31)], np.int32),
            "s8": np.arange(-128, 128, dtype=np.int8), "u8": np.arange(256, dtype=np.uint8),
            "s4": np.arange(-8, 8).astype(ml_dtypes.int4), "u4": np.arange(16).astype(ml_dtypes.uint4),
            "u64": np.array([0, 1, 2**63 + 2**40, 449, 2**64 - 1], np.uint64)}
    for src, x in ints.items():
        module = _module([(src, x.size)], [(f"{d}[{x.size}]", "convert(p0)") for d in NARROW])
        _check(module, [x], target, labels=[f"{src}->{d}" for d in NARROW])


# ---- arithmetic on narrow floats ---------------------------------------------------------------
EXACT_UNARY = ["negate", "abs", "sign", "floor", "ceil", "round-nearest-even", "round-nearest-afz", "sqrt"]
APPROX_UNARY = ["exponential", "log", "tanh", "logistic", "sine"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", NARROW)
def test_unary_ops_on_every_pattern(name, target):
    """Unary ops computed in f32 and rounded back; transcendentals may differ by one step of
    the format where the f32 approximation and numpy round a tie-near value differently."""
    x = _all_patterns(name)
    n = x.size
    exact = _module([(name, n)], [(f"{name}[{n}]", f"{op}(p0)") for op in EXACT_UNARY]
                    + [(f"pred[{n}]", "is-finite(p0)"), (f"pred[{n}]", "compare(p0, p0), direction=EQ")])
    _check(exact, [x], target, labels=EXACT_UNARY + ["is-finite", "compare"])
    # f8e8m0fnu reaches 2**127, where the sign of an f32 sine depends on the argument reduction
    # (a negative result is NaN there); the others stay below 2**16.
    ops = [op for op in APPROX_UNARY if not (op == "sine" and name == "f8e8m0fnu")]
    approx = _module([(name, n)], [(f"{name}[{n}]", f"{op}(p0)") for op in ops])
    _check(approx, [x], target, codes=1, labels=ops)


ROUNDING = ["ceil", "floor", "round-nearest-even", "round-nearest-afz"]


@pytest.mark.parametrize("target", TARGETS)
def test_e8m0_rounding_under_the_flush_mode(target):
    """f8e8m0fnu's smallest value 2**-127 is an f32 subnormal, which denormals-are-zero reads
    as 0 (ceil 0, then e8m0's NaN); rounding is done in f64, where it is normal: ceil gives 1,
    floor and round 0 (NaN), as XLA:CPU and the interpreter."""
    x = _all_patterns("f8e8m0fnu")
    n = x.size
    module = _module([("f8e8m0fnu", n)], [(f"f8e8m0fnu[{n}]", f"{op}(p0)") for op in ROUNDING])
    _check(module, [x], target, labels=ROUNDING)
    got = hlofuse.compile(module, target=target)(x)
    assert float(got[0][0]) == 1.0 and all(np.isnan(float(g[0])) for g in got[1:])


def test_e8m0_rounding_as_xla():
    """The same rounding of every f8e8m0fnu pattern as XLA:CPU's (jax), 2**-127 included."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = _all_patterns("f8e8m0fnu")
    n = x.size
    module = _module([("f8e8m0fnu", n)], [(f"f8e8m0fnu[{n}]", f"{op}(p0)") for op in ROUNDING])
    want = jax.jit(lambda a: (jnp.ceil(a), jnp.floor(a), jax.lax.round(a, jax.lax.RoundingMethod.TO_NEAREST_EVEN),
                              jax.lax.round(a, jax.lax.RoundingMethod.AWAY_FROM_ZERO)))(x)
    for target in TARGETS:
        got = hlofuse.compile(module, target=target)(x)
        for k, (g, w) in enumerate(zip(got, want)):
            _same(g, np.asarray(w), f"{target} {ROUNDING[k]}")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["f8e4m3fn", "f8e5m2", "f8e4m3fnuz", "f4e2m1fn", "f8e8m0fnu"])
def test_binary_ops_on_every_pair(name, target):
    x = _all_patterns(name)
    a, b = np.repeat(x, x.size), np.tile(x, x.size)
    n = a.size
    ops = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]
    outs = [(f"{name}[{n}]", f"{op}(p0, p1)") for op in ops]
    outs += [(f"pred[{n}]", f"compare(p0, p1), direction={d}") for d in ("LT", "EQ", "GE")]
    labels = ops + ["LT", "EQ", "GE"]
    _check(_module([(name, n), (name, n)], outs), [a, b], target, labels=labels)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", NARROW)
def test_total_order_on_every_pair(name, target):
    """TOTALORDER compares by each format's own sign bit (the top of 4, 6 or 8 bits; none for
    f8e8m0fnu): -NaN < ... < -0 < +0 < ... < NaN."""
    x = _all_patterns(name)
    a, b = np.repeat(x, x.size), np.tile(x, x.size)
    n = a.size
    outs = [(f"pred[{n}]", f"compare(p0, p1), direction={d}, type=TOTALORDER") for d in ("LT", "EQ", "GE")]
    _check(_module([(name, n), (name, n)], outs), [a, b], target, labels=["LT", "EQ", "GE"])


@pytest.mark.parametrize("target", TARGETS)
def test_narrow_float_reduce_and_fusion(target):
    """A sum of f8 values (accumulated in f8, as XLA's reduce in that type does) fused with
    elementwise ops and a constant."""
    module = parse_hlo("""HloModule m
add {
  a = f8e5m2[] parameter(0)
  b = f8e5m2[] parameter(1)
  ROOT s = f8e5m2[] add(a, b)
}
ENTRY e {
  p = f8e4m3fn[16,8] parameter(0)
  c = f8e5m2[16,8] convert(p)
  k = f8e5m2[] constant(0.5)
  kb = f8e5m2[16,8] broadcast(k), dimensions={}
  m = f8e5m2[16,8] multiply(c, kb)
  z = f8e5m2[] constant(0)
  ROOT r = f8e5m2[16] reduce(m, z), dimensions={1}, to_apply=add
}
""")
    # Every partial sum is a multiple of 0.25 below 2 in magnitude, exact in f8e5m2, so the
    # result does not depend on the order the backend adds in.
    rng = np.random.default_rng(0)
    x = rng.choice([-0.5, 0.0, 0.5], (16, 8)).astype(ml_dtypes.float8_e4m3fn)
    _check(module, [x], target)
    (got,) = hlofuse.compile(module, target=target)(x)
    np.testing.assert_array_equal(got.astype(np.float32), x.astype(np.float32).sum(axis=1) * 0.5)


# ---- s4 / u4, s2 / u2 ------------------------------------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["s4", "u4", "s2", "u2"])
def test_int4_ops_on_every_pair(name, target):
    """Wrap-around arithmetic in 4 (2) bits, XLA's division by zero, shifts (also past the
    width), popcnt and count-leading-zeros in the bit pattern (an s4 -1 is 0b1111, an s2 -1
    0b11)."""
    x = _all_patterns(name)
    a, b = np.repeat(x, x.size), np.tile(x, x.size)
    n = a.size
    ops = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "and", "or", "xor",
           "shift-left", "shift-right-logical", "shift-right-arithmetic"]
    outs = [(f"{name}[{n}]", f"{op}(p0, p1)") for op in ops]
    outs += [(f"pred[{n}]", f"compare(p0, p1), direction={d}") for d in ("LT", "GE")]
    unary = ["not", "popcnt", "count-leading-zeros"] + (["negate", "abs", "sign"] if name.startswith("s") else [])
    outs += [(f"{name}[{n}]", f"{op}(p0)") for op in unary]
    _check(_module([(name, n), (name, n)], outs), [a, b], target, labels=ops + ["LT", "GE"] + unary)


@pytest.mark.parametrize("target", TARGETS)
def test_int4_converts_and_storage(target):
    """Floats to s4/u4 saturate (NaN -> 0), integers wrap; values come back one per byte with
    the high nibble clear, as ml_dtypes stores them."""
    floats = np.array([0.0, 0.5, -0.5, 7.9, 8.0, -8.6, -9.0, 15.5, 16.0, 300.0, -300.0, np.nan, np.inf, -np.inf],
                      np.float32)
    ints = np.array([0, 7, 8, -8, -9, 15, 16, 255, -1, 1000], np.int32)
    module = _module([("f32", floats.size), ("s32", ints.size)],
                     [(f"s4[{floats.size}]", "convert(p0)"), (f"u4[{floats.size}]", "convert(p0)"),
                      (f"s4[{ints.size}]", "convert(p1)"), (f"u4[{ints.size}]", "convert(p1)")])
    want = evaluate(module, [floats, ints])
    got = hlofuse.compile(module, target=target)(floats, ints)
    for g, w in zip(got, want):
        _same(g, w, "int4 convert")
    # Hand-derived: XLA saturates float -> int, NaN -> 0; s32 -> s4 keeps the low 4 bits.
    np.testing.assert_array_equal(got[0].astype(int), [0, 0, 0, 7, 7, -8, -8, 7, 7, 7, -8, 0, 7, -8])
    np.testing.assert_array_equal(got[2].astype(int), [0, 7, -8, -8, 7, -1, 0, -1, -1, -8])
    assert got[0].view(np.uint8).max() <= 15


@pytest.mark.parametrize("target", TARGETS)
def test_int2_converts_and_storage(target):
    """Floats to s2/u2 saturate (NaN -> 0), integers wrap, and to wider types; values come back
    one per byte with the high bits clear, as ml_dtypes stores them."""
    floats = np.array([0.0, 0.5, -0.5, 1.9, 2.0, -2.6, -3.0, 3.5, 4.0, np.nan, np.inf, -np.inf], np.float32)
    ints = np.array([0, 1, 2, -2, -3, 3, 4, 255, -1, 1000], np.int32)
    module = _module([("f32", floats.size), ("s32", ints.size), ("s2", 4), ("u2", 4)],
                     [(f"s2[{floats.size}]", "convert(p0)"), (f"u2[{floats.size}]", "convert(p0)"),
                      (f"s2[{ints.size}]", "convert(p1)"), (f"u2[{ints.size}]", "convert(p1)"),
                      ("f32[4]", "convert(p2)"), ("s32[4]", "convert(p3)"), ("u2[4]", "convert(p2)")])
    s2, u2 = _all_patterns("s2"), _all_patterns("u2")
    want = evaluate(module, [floats, ints, s2, u2])
    got = hlofuse.compile(module, target=target)(floats, ints, s2, u2)
    for g, w in zip(got, want):
        _same(g, w, "int2 convert")
    # Hand-derived: XLA saturates float -> int, NaN -> 0; s32 -> s2 keeps the low 2 bits.
    np.testing.assert_array_equal(got[0].astype(int), [0, 0, 0, 1, 1, -2, -2, 1, 1, 0, 1, -2])
    np.testing.assert_array_equal(got[2].astype(int), [0, 1, -2, -2, 1, -1, 0, -1, -1, 0])
    np.testing.assert_array_equal(got[4], [0, 1, -2, -1])
    assert max(g.view(np.uint8).max() for g in (got[0], got[1], got[2], got[3], got[6])) <= 3


def test_one_bit_integers_are_refused():
    from hlofuse.hlo.errors import UnsupportedError

    module = parse_hlo("HloModule m\nENTRY e {\n  p = s1[4] parameter(0)\n  ROOT n = s1[4] negate(p)\n}\n")
    with pytest.raises(UnsupportedError, match="s1"):
        hlofuse.compile(module, target="cpu")(np.zeros(4, ml_dtypes.int1))
