"""The interpreter on the narrowest types: s4/u4 integer ops computed in 4 bits, and TOTALORDER
compares reading each narrow float format's own sign bit.

Expected values are derived by hand from the bit patterns (exhaustively: all 16 patterns of a
4-bit type, all 256 pairs of them), and cross-checked against XLA's own CPU compiler where it
supports the type (s4, u4, the f8 types and f4e2m1fn; not the f6 types).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from xla_oracle import run_on_xla, xla_available  # noqa: E402

from hlofuse.hlo.dtypes import ELEMENT_TYPES  # noqa: E402
from hlofuse.hlo.parser import parse_hlo  # noqa: E402
from hlofuse.runtime.interpreter import evaluate  # noqa: E402

needs_xla = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA CPU client is not usable here")

PATTERNS = list(range(16))  # every 4-bit pattern
PAIRS = [(a, b) for a in PATTERNS for b in PATTERNS]


def module_text(params: list[tuple[str, int]], outs: list[tuple[str, str]]) -> str:
    """A module over 1-D parameters (type, size) whose tuple result lines are (type[n], expr)."""
    lines = [f"  p{i} = {t}[{n}] parameter({i})" for i, (t, n) in enumerate(params)]
    lines += [f"  r{k} = {shape} {expr}" for k, (shape, expr) in enumerate(outs)]
    lines.append(f"  ROOT t = ({', '.join(s for s, _ in outs)}) tuple({', '.join(f'r{k}' for k in range(len(outs)))})")
    return "HloModule m\nENTRY e {\n" + "\n".join(lines) + "\n}\n"


def run(text: str, args: list[np.ndarray]) -> list[np.ndarray]:
    return evaluate(parse_hlo(text), args)


def int4_array(name: str, patterns) -> np.ndarray:
    """s4/u4 values with the given 4-bit patterns (ml_dtypes keeps the pattern in the low nibble)."""
    return np.asarray(patterns, np.uint8).view(ELEMENT_TYPES[name].numpy)


def pattern_of(x: np.ndarray) -> list[int]:
    return [int(v) & 0xF for v in np.asarray(x).astype(np.int64)]


def signed4(p: int) -> int:
    return p - 16 if p >= 8 else p


def value4(name: str, p: int) -> int:
    return signed4(p) if name == "s4" else p


# ---- s4 / u4: bit operations in 4 bits -------------------------------------------------------
def test_int4_bit_op_examples():
    """The cases the byte-wide computation got wrong, written out as bit patterns."""
    s4 = lambda *p: int4_array("s4", p)  # noqa: E731
    u4 = lambda *p: int4_array("u4", p)  # noqa: E731
    text = module_text([("s4", 4), ("s4", 4), ("u4", 4), ("u4", 4)],
                       [("s4[4]", "shift-right-logical(p0, p1)"), ("s4[4]", "shift-right-arithmetic(p0, p1)"),
                        ("s4[4]", "shift-left(p0, p1)"), ("s4[4]", "popcnt(p0)"), ("s4[4]", "count-leading-zeros(p0)"),
                        ("u4[4]", "shift-right-arithmetic(p2, p3)"), ("u4[4]", "count-leading-zeros(p2)")])
    x = s4(0b1111, 0b1000, 0b0001, 0b1010)
    amount = s4(0b0001, 0b0011, 0b0100, 0b1111)  # 1, 3, 4 (past the width), 15 read unsigned
    ux, uamount = u4(0b1000, 0b1000, 0b0001, 0b0111), u4(0b0001, 0b0100, 0b0000, 0b0010)
    srl, sra, shl, pop, clz, usra, uclz = run(text, [x, amount, ux, uamount])
    assert pattern_of(srl) == [0b0111, 0b0001, 0b0000, 0b0000]
    assert pattern_of(sra) == [0b1111, 0b1111, 0b0000, 0b1111]
    assert pattern_of(shl) == [0b1110, 0b0000, 0b0000, 0b0000]
    assert pop.astype(int).tolist() == [4, 1, 1, 2]
    assert clz.astype(int).tolist() == [0, 0, 3, 0]
    assert pattern_of(usra) == [0b1100, 0b1111, 0b0001, 0b0001]  # u4 ashr copies bit 3, as for u8
    assert uclz.astype(int).tolist() == [0, 0, 3, 1]


@pytest.mark.parametrize("name", ["s4", "u4"])
def test_int4_shifts_on_every_pair(name):
    a, b = int4_array(name, [p for p, _ in PAIRS]), int4_array(name, [q for _, q in PAIRS])
    n = len(PAIRS)
    text = module_text([(name, n), (name, n)], [(f"{name}[{n}]", f"{op}(p0, p1)") for op in
                                                ("shift-left", "shift-right-logical", "shift-right-arithmetic")])
    shl, srl, sra = (pattern_of(v) for v in run(text, [a, b]))
    # Amounts are the unsigned 4-bit pattern: 4..15 shift everything out.
    assert shl == [(p << q) & 0xF if q < 4 else 0 for p, q in PAIRS]
    assert srl == [p >> q if q < 4 else 0 for p, q in PAIRS]
    assert sra == [(signed4(p) >> min(q, 3)) & 0xF for p, q in PAIRS]


@pytest.mark.parametrize("name", ["s4", "u4"])
def test_int4_unary_ops_on_every_pattern(name):
    x = int4_array(name, PATTERNS)
    ops = ["popcnt", "count-leading-zeros", "not", "negate"] + (["abs", "sign"] if name == "s4" else [])
    got = run(module_text([(name, 16)], [(f"{name}[16]", f"{op}(p0)") for op in ops]), [x])
    res = dict(zip(ops, got))
    assert res["popcnt"].astype(int).tolist() == [bin(p).count("1") for p in PATTERNS]
    assert res["count-leading-zeros"].astype(int).tolist() == [4 - p.bit_length() for p in PATTERNS]
    assert pattern_of(res["not"]) == [p ^ 0xF for p in PATTERNS]
    assert pattern_of(res["negate"]) == [-p & 0xF for p in PATTERNS]  # -(-8) wraps to -8
    if name == "s4":
        assert pattern_of(res["abs"]) == [abs(signed4(p)) & 0xF for p in PATTERNS]  # |-8| wraps to -8
        assert res["sign"].astype(int).tolist() == [(v > 0) - (v < 0) for v in map(signed4, PATTERNS)]



@pytest.mark.parametrize("name", ["s1", "u1", "s2", "u2"])
def test_int1_int2_ops_in_their_own_width(name):
    """s1/u1/s2/u2 computed in 1 or 2 bits, not in s4's 4 (popcnt(s2 -2) is 1, not the 3 of
    0b1110 wrapped to -1; a float converts saturating at the type's own range)."""
    bits, signed = int(name[1:]), name[0] == "s"
    mask = (1 << bits) - 1
    patterns = list(range(1 << bits))
    pairs = [(p, q) for p in patterns for q in patterns]

    def value(p: int) -> int:
        return p - (1 << bits) if signed and p >> (bits - 1) else p

    arr = lambda ps: np.asarray(ps, np.uint8).view(ELEMENT_TYPES[name].numpy)  # noqa: E731
    pat = lambda a: [int(v) & mask for v in np.asarray(a).astype(np.int64)]  # noqa: E731
    a, b = arr([p for p, _ in pairs]), arr([q for _, q in pairs])
    floats = np.array([-100.0, -1.5, -1.0, -0.5, 0.0, 0.9, 1.0, 1.9, 2.5, 3.0, 20.0, np.nan], np.float32)
    ints = np.arange(-6, 6, dtype=np.int32)
    n, m = len(pairs), len(floats)
    ops = [f"{op}(p0)" for op in ("popcnt", "count-leading-zeros", "not", "negate")]
    ops += [f"{op}(p0, p1)" for op in ("add", "multiply", "shift-left", "shift-right-logical",
                                        "shift-right-arithmetic")]
    text = module_text([(name, n), (name, n), ("f32", m), ("s32", m)],
                       [(f"{name}[{n}]", e) for e in ops]
                       + [(f"{name}[{m}]", "convert(p2)"), (f"{name}[{m}]", "convert(p3)")])
    got = run(text, [a, b, floats, ints])
    pc, clz, nt, neg, add, mul, shl, srl, sra, from_f, from_i = got
    ps = [p for p, _ in pairs]
    assert pat(pc) == [bin(p).count("1") & mask for p in ps]
    assert pat(clz) == [(bits - p.bit_length()) & mask for p in ps]
    assert pat(nt) == [p ^ mask for p in ps]
    assert pat(neg) == [-p & mask for p in ps]
    assert pat(add) == [(p + q) & mask for p, q in pairs]
    assert pat(mul) == [(value(p) * value(q)) & mask for p, q in pairs]
    assert pat(shl) == [(p << q) & mask if q < bits else 0 for p, q in pairs]
    assert pat(srl) == [p >> q if q < bits else 0 for p, q in pairs]
    top = lambda p: p - (1 << bits) if p >> (bits - 1) else p  # noqa: E731  (ashr copies bit w-1, unsigned too)
    assert pat(sra) == [(top(p) >> min(q, bits - 1)) & mask for p, q in pairs]
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, mask)
    assert np.asarray(from_f).astype(int).tolist() == [0 if np.isnan(f) else min(max(int(np.trunc(f)), lo), hi)
                                                      for f in floats]
    assert pat(from_i) == [int(i) & mask for i in ints]  # integers keep their low bits

def _trunc_div(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


@pytest.mark.parametrize("name", ["s4", "u4"])
def test_int4_arithmetic_on_every_pair(name):
    """Wrap-around in 4 bits; XLA's x/0 (all ones), x%0 (x), INT_MIN/-1 (INT_MIN), INT_MIN%-1 (0)."""
    a, b = int4_array(name, [p for p, _ in PAIRS]), int4_array(name, [q for _, q in PAIRS])
    n = len(PAIRS)
    ops = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum"]
    got = dict(zip(ops, run(module_text([(name, n), (name, n)], [(f"{name}[{n}]", f"{op}(p0, p1)") for op in ops]),
                            [a, b])))
    vals = [(value4(name, p), value4(name, q)) for p, q in PAIRS]
    assert pattern_of(got["add"]) == [(x + y) & 0xF for x, y in vals]
    assert pattern_of(got["subtract"]) == [(x - y) & 0xF for x, y in vals]
    assert pattern_of(got["multiply"]) == [(x * y) & 0xF for x, y in vals]
    assert pattern_of(got["divide"]) == [0xF if y == 0 else _trunc_div(x, y) & 0xF for x, y in vals]
    assert pattern_of(got["remainder"]) == [x & 0xF if y == 0 else (x - _trunc_div(x, y) * y) & 0xF for x, y in vals]
    assert pattern_of(got["maximum"]) == [max(x, y) & 0xF for x, y in vals]
    assert pattern_of(got["minimum"]) == [min(x, y) & 0xF for x, y in vals]


def test_int4_converts():
    """Floats saturate (NaN -> 0, truncating toward zero), integers keep their low 4 bits."""
    floats = np.array([0.0, -0.0, 0.9, -0.9, 7.9, 8.0, -8.0, -8.6, 15.5, 16.0, -1.0, np.nan, np.inf, -np.inf],
                      np.float32)
    ints = np.array([0, 7, 8, -8, -9, 15, 16, 17, -1, 255, -(2**31)], np.int32)
    n, m = floats.size, ints.size
    text = module_text([("f32", n), ("s32", m), ("s4", 16), ("u4", 16)],
                       [(f"s4[{n}]", "convert(p0)"), (f"u4[{n}]", "convert(p0)"), (f"s4[{m}]", "convert(p1)"),
                        (f"u4[{m}]", "convert(p1)"), ("u4[16]", "convert(p2)"), ("s4[16]", "convert(p3)"),
                        ("f32[16]", "convert(p2)"), ("s32[16]", "convert(p3)")])
    s4, u4 = int4_array("s4", PATTERNS), int4_array("u4", PATTERNS)
    fs4, fu4, is4, iu4, s4u4, u4s4, s4f, u4i = run(text, [floats, ints, s4, u4])
    assert fs4.astype(int).tolist() == [0, 0, 0, 0, 7, 7, -8, -8, 7, 7, -1, 0, 7, -8]
    assert fu4.astype(int).tolist() == [0, 0, 0, 0, 7, 8, 0, 0, 15, 15, 0, 0, 15, 0]
    assert pattern_of(is4) == pattern_of(iu4) == [v & 0xF for v in ints.tolist()]
    assert pattern_of(s4u4) == pattern_of(u4s4) == PATTERNS  # s4 <-> u4 keeps the bits
    assert s4f.tolist() == [float(signed4(p)) for p in PATTERNS]
    assert u4i.tolist() == PATTERNS


def test_int4_converts_from_f4():
    """f4e2m1fn values (patterns 0..15: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives) truncate
    toward zero into s4; u4 saturates the negatives at 0."""
    x = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn)
    s4, u4 = run(module_text([("f4e2m1fn", 16)], [("s4[16]", "convert(p0)"), ("u4[16]", "convert(p0)")]), [x])
    assert s4.astype(int).tolist() == [0, 0, 1, 1, 2, 3, 4, 6, 0, 0, -1, -1, -2, -3, -4, -6]
    assert u4.astype(int).tolist() == [0, 0, 1, 1, 2, 3, 4, 6] + [0] * 8


INT4_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "and", "or", "xor",
               "shift-left", "shift-right-logical", "shift-right-arithmetic", "power"]
# XLA:CPU (jaxlib 0.10) counts popcnt(s4) in the sign-extended byte (popcnt(s4 -8) == 5), unlike
# its u4 popcnt, its own count-leading-zeros and StableHLO's definition (set bits of the 4-bit
# value); the interpreter counts 4 bits, so s4 popcnt is checked by hand above only.
INT4_UNARY = {"s4": ["negate", "abs", "sign", "not", "count-leading-zeros"],
              "u4": ["not", "popcnt", "count-leading-zeros"]}
CONVERT_DSTS = ["s4", "u4", "s8", "u8", "s32", "u64", "pred", "f32", "f16", "bf16", "f8e4m3fn", "f8e5m2", "f4e2m1fn"]


@needs_xla
@pytest.mark.parametrize("name", ["s4", "u4"])
def test_int4_ops_match_xla(name):
    a, b = int4_array(name, [p for p, _ in PAIRS]), int4_array(name, [q for _, q in PAIRS])
    n = len(PAIRS)
    outs = [(f"{name}[{n}]", f"{op}(p0, p1)") for op in INT4_BINARY]
    outs += [(f"{name}[{n}]", f"{op}(p0)") for op in INT4_UNARY[name]]
    outs += [("pred[%d]" % n, f"compare(p0, p1), direction={d}") for d in ("LT", "GE", "NE")]
    outs += [(f"{name}[{n}]", "clamp(p1, p0, p1)")]
    outs += [(f"{dst}[{n}]", "convert(p0)") for dst in CONVERT_DSTS if dst != name]
    text = module_text([(name, n), (name, n)], outs)
    for (shape, expr), got, want in zip(outs, run(text, [a, b]), run_on_xla(text, [a, b])):
        assert got.dtype == want.dtype, expr
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64), err_msg=f"{shape} {expr}")


@needs_xla
def test_converts_to_int4_match_xla():
    """Not from f4e2m1fn: XLA:CPU (jaxlib 0.10) converts its largest value 6.0 to every integer
    type's maximum (6.0 -> s32 gives 2**31-1), its saturation bound rounded down to 6 in f4; the
    interpreter gives 6 (test_int4_converts_from_f4 below)."""
    edge = np.array([0.0, -0.0, 0.5, -0.5, 0.99, 7.0, 7.9, 8.0, -8.0, -8.6, -9.0, 15.0, 15.5, 16.0, 17.0, -1.0,
                     300.0, -300.0, np.nan, -np.nan, np.inf, -np.inf, 3e38, -3e38, 1e-30])
    ints = np.array([0, 1, 7, 8, 15, 16, 17, -1, -7, -8, -9, -16, -17, 100, -100, 127, -128, 255, 1000,
                     -(2**31), 2**31 - 1])
    with np.errstate(over="ignore"):
        sources = {"f32": edge.astype(np.float32), "f64": edge, "f16": edge.astype(np.float16),
                   "bf16": edge.astype(ml_dtypes.bfloat16), "f8e4m3fn": edge.astype(ml_dtypes.float8_e4m3fn),
                   "f8e5m2": edge.astype(ml_dtypes.float8_e5m2),
                   "s32": ints.astype(np.int32), "s64": ints, "u32": ints.astype(np.uint32),
                   "u64": ints.astype(np.uint64), "s8": ints.astype(np.int8), "u8": ints.astype(np.uint8),
                   "pred": ints != 0}
    names = list(sources)
    params = [(src, sources[src].size) for src in names]
    outs = [(f"{dst}[{sources[src].size}]", f"convert(p{i})") for i, src in enumerate(names) for dst in ("s4", "u4")]
    text = module_text(params, outs)
    args = [sources[src] for src in names]
    for (shape, expr), got, want in zip(outs, run(text, args), run_on_xla(text, args)):
        np.testing.assert_array_equal(got.astype(int), want.astype(int), err_msg=f"{shape} {expr} of {text}")


# ---- TOTALORDER on narrow floats --------------------------------------------------------------
def _ascending(name: str) -> list[int]:
    """Every bit pattern of `name` in total order, written out from the format's bit layout:
    negatives by decreasing magnitude (the NaN with the largest magnitude first), -0, then the
    positives by increasing pattern; fnuz's NaN (the sign bit alone) is a negative NaN, below
    everything (as XLA orders it); f8e8m0fnu has no sign bit and orders by its pattern."""
    if name == "f8e8m0fnu":
        return list(range(256))  # 0x00 = 2**-127 ... 0xFE = 2**127, 0xFF = NaN
    width = ELEMENT_TYPES[name].bits
    sign = 1 << (width - 1)
    negatives = [sign | m for m in reversed(range(sign))]  # ..., sign|1, sign|0 (= -0)
    if name.endswith("fnuz"):
        negatives = [sign] + negatives[:-1]
    return negatives + list(range(sign))


TOTAL_ORDER_TYPES = ["f4e2m1fn", "f6e2m3fn", "f6e3m2fn", "f8e8m0fnu", "f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz",
                     "f8e4m3fn", "f8e5m2", "f8e4m3", "f8e3m4"]


def _all_pairs(name: str) -> tuple[np.ndarray, np.ndarray, list[int]]:
    et = ELEMENT_TYPES[name]
    x = np.arange(1 << et.bits, dtype=np.uint8)
    a, b = np.repeat(x, x.size), np.tile(x, x.size)
    return a.view(et.numpy), b.view(et.numpy), list(range(x.size))


def test_total_order_layouts_by_hand():
    """The orders `_ascending` writes out, checked against the formats' values for a few types."""
    assert _ascending("f4e2m1fn") == [0b1111, 0b1110, 0b1101, 0b1100, 0b1011, 0b1010, 0b1001, 0b1000,
                                      0b0000, 0b0001, 0b0010, 0b0011, 0b0100, 0b0101, 0b0110, 0b0111]
    f4 = np.array(_ascending("f4e2m1fn"), np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    assert f4.tolist() == [-6, -4, -3, -2, -1.5, -1, -0.5, -0.0, 0.0, 0.5, 1, 1.5, 2, 3, 4, 6]
    for name in ("f6e2m3fn", "f6e3m2fn"):
        v = np.array(_ascending(name), np.uint8).view(ELEMENT_TYPES[name].numpy).astype(np.float64)
        assert np.all(np.diff(v) >= 0) and np.signbit(v[31]) and not np.signbit(v[32])
    fnuz = np.array(_ascending("f8e4m3fnuz"), np.uint8).view(ml_dtypes.float8_e4m3fnuz).astype(np.float64)
    assert np.isnan(fnuz[0]) and np.all(np.diff(fnuz[1:]) > 0)


@pytest.mark.parametrize("name", TOTAL_ORDER_TYPES)
def test_total_order_compare_on_every_pair(name):
    a, b, patterns = _all_pairs(name)
    rank = np.empty(len(patterns), int)
    rank[_ascending(name)] = np.arange(len(patterns))
    n = a.size
    text = module_text([(name, n), (name, n)], [(f"pred[{n}]", f"compare(p0, p1), direction={d}, type=TOTALORDER")
                                                for d in ("LT", "EQ", "GE")])
    lt, eq, ge = run(text, [a, b])
    ra, rb = rank[a.view(np.uint8)], rank[b.view(np.uint8)]
    np.testing.assert_array_equal(lt, ra < rb)
    np.testing.assert_array_equal(eq, ra == rb)  # -0 != +0, NaN == the same NaN pattern
    np.testing.assert_array_equal(ge, ra >= rb)


@pytest.mark.parametrize("name", ["f4e2m1fn", "f6e3m2fn", "f8e8m0fnu", "f8e4m3fnuz"])
def test_sort_total_order(name):
    """sort with a TOTALORDER comparator puts the patterns in the written-out order."""
    et = ELEMENT_TYPES[name]
    n = 1 << et.bits
    x = np.random.default_rng(1).permutation(n).astype(np.uint8).view(et.numpy)
    text = f"""HloModule m
less {{
  a = {name}[] parameter(0)
  b = {name}[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT, type=TOTALORDER
}}
ENTRY e {{
  p = {name}[{n}] parameter(0)
  ROOT s = {name}[{n}] sort(p), dimensions={{0}}, to_apply=less
}}
"""
    (got,) = run(text, [x])
    assert got.view(np.uint8).tolist() == _ascending(name)


XLA_TOTAL_ORDER_TYPES = [t for t in TOTAL_ORDER_TYPES if not t.startswith("f6")]  # XLA:CPU cannot compile f6


@needs_xla
@pytest.mark.parametrize("name", XLA_TOTAL_ORDER_TYPES)
def test_total_order_matches_xla(name):
    a, b, _ = _all_pairs(name)
    n = a.size
    text = module_text([(name, n), (name, n)], [(f"pred[{n}]", "compare(p0, p1), direction=LT, type=TOTALORDER")])
    np.testing.assert_array_equal(run(text, [a, b])[0], run_on_xla(text, [a, b])[0])


@pytest.mark.parametrize("op", ["sine", "cosine", "exponential", "log", "tanh", "logistic"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_narrow_transcendentals_round_through_f32(op, dtype):
    """XLA computes a transcendental function of a narrow float in f32 and rounds that to the
    narrow type; the interpreter's f64 value is rounded to f32 first, so next to a tie of the
    narrow type it gives XLA's answer: f16 sin(-0.2094) is -0.20776367 (XLA:CPU's and the
    kernels'), not -0.20788574, the f64 value rounded once (the large-graph fuzzer, seed 66).
    Every bit pattern from 2**-15 to 4 and its negation is checked against numpy's f64
    function rounded twice (f64 -> f32 -> the narrow type)."""
    import ml_dtypes

    np_type = np.float16 if dtype == "f16" else ml_dtypes.bfloat16
    if dtype == "f16":
        x = np.arange(0x2000, 0x4400, dtype=np.uint16).view(np.float16)  # 2**-15 .. 4
    else:
        x = np.arange(0x3800, 0x4080, dtype=np.uint16).view(ml_dtypes.bfloat16)  # 2**-15 .. 4
    x = np.concatenate([x, -x])
    f64 = {"sine": np.sin, "cosine": np.cos, "exponential": np.exp, "log": np.log, "tanh": np.tanh,
           "logistic": lambda v: 1 / (1 + np.exp(-v))}[op]
    text = f"HloModule m\nENTRY e {{\n  x = {dtype}[{x.size}] parameter(0)\n  ROOT r = {dtype}[{x.size}] {op}(x)\n}}\n"
    (got,) = evaluate(parse_hlo(text), [x])
    with np.errstate(invalid="ignore"):
        want = f64(x.astype(np.float64)).astype(np.float32).astype(np_type)
    got = np.asarray(got)
    nan = np.isnan(want.astype(np.float32))
    assert list(np.isnan(got.astype(np.float32))) == list(nan)  # log of a negative: NaN, its bits numpy's
    np.testing.assert_array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))
    if dtype == "f16" and op == "sine":
        assert got[list(x.view(np.uint16)).index(0xB2B3)] == np.float16(-0.20776367)
