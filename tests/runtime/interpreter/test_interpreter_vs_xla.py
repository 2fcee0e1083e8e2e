"""Differential tests: the interpreter against XLA's own CPU compiler on the same HLO text.

Each test builds one module that applies many ops (taken from the op registry) to edge-case
inputs, runs it on both, and reports every op whose results differ. Integer, predicate and
exactly-rounded float ops must match bit for bit; transcendental functions (XLA uses its own
approximations) within a few ulps.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from xla_oracle import run_on_xla, xla_available  # noqa: E402

from hlofuse.hlo.dtypes import from_numpy  # noqa: E402
from hlofuse.hlo.opcodes import OPS, opcodes_where  # noqa: E402
from hlofuse.hlo.parser import parse_hlo  # noqa: E402
from hlofuse.runtime.interpreter import evaluate  # noqa: E402

pytestmark = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA CPU client is not usable here")

N = 48
FLOATS = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64}
INTS = {"s32": np.int32, "u32": np.uint32, "s8": np.int8, "u8": np.uint8, "s64": np.int64}


def float_inputs(dtype, seed: int) -> np.ndarray:
    edge = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, np.nan, np.inf, -np.inf, 1e-3, 100.0, -100.0, 3.0]
    rng = np.random.default_rng(seed)
    rest = rng.standard_normal(N - len(edge)) * 3
    return np.concatenate([edge, rest]).astype(dtype)


def int_inputs(dtype, seed: int) -> np.ndarray:
    info = np.iinfo(dtype)
    bits = info.bits
    edge = [0, 1, 2, 7, info.max, info.min, bits - 1, bits, bits + 1, 3]
    if info.min < 0:
        edge += [-1, -7, -2, -bits]
    rng = np.random.default_rng(seed)
    rest = rng.integers(info.min, int(info.max) + 1, N - len(edge), dtype=np.int64 if info.min < 0 else np.uint64)
    return np.concatenate([np.array(edge, dtype=np.int64).astype(dtype), rest.astype(dtype)])


def module_text(ops: list[tuple[str, str, list[int], str]], params: list[str]) -> str:
    """An entry applying each (opcode, result type, parameter numbers, extra attributes) op."""
    lines = [f"  p{i} = {t}[{N}] parameter({i})" for i, t in enumerate(params)]
    names = []
    for k, (opcode, rtype, operands, extra) in enumerate(ops):
        args = ", ".join(f"p{i}" for i in operands)
        lines.append(f"  r{k} = {rtype}[{N}] {opcode}({args}){extra}")
        names.append(f"r{k}")
    out_shape = ", ".join(f"{o[1]}[{N}]" for o in ops)
    lines.append(f"  ROOT t = ({out_shape}) tuple({', '.join(names)})")
    return "HloModule diff\n\nENTRY main {\n" + "\n".join(lines) + "\n}\n"


def compare_all(text: str, args: list[np.ndarray], ops, max_ulps: dict[str, float]) -> None:
    got = evaluate(parse_hlo(text), args)
    want = run_on_xla(text, args)
    problems = []
    for (opcode, rtype, operands, extra), g, w in zip(ops, got, want):
        label = f"{opcode}{extra} -> {rtype}"
        if g.dtype != w.dtype:
            problems.append(f"{label}: dtype {g.dtype} vs XLA {w.dtype}")
            continue
        kind = w.dtype.kind
        if kind in "biu":
            bad = g != w
        else:
            gf, wf = g.astype(np.float64), w.astype(np.float64)
            both_nan = np.isnan(gf) & np.isnan(wf)
            exact = (gf == wf) | both_nan
            tol = max_ulps.get(opcode, 0)
            # Tolerance in ulps of the result type (within a factor 2: eps * |x|).
            fi = ml_dtypes.finfo(w.dtype) if w.dtype.kind != "c" else np.finfo(w.real.dtype)
            spacing = float(fi.eps) * np.maximum(np.abs(wf), float(fi.tiny))
            with np.errstate(invalid="ignore"):  # inf - inf where both are infinite
                close = np.abs(gf - wf) <= tol * spacing
            if tol:
                # XLA's approximations flush results below the normal range to zero.
                close |= (np.abs(gf) < float(fi.tiny)) & (np.abs(wf) < float(fi.tiny))
            bad = ~(exact | (close & np.isfinite(gf) & np.isfinite(wf)))
        if np.any(bad):
            i = int(np.argmax(bad))
            inputs = ", ".join(str(args[p][i]) for p in operands)
            problems.append(f"{label}: {int(bad.sum())} differ, e.g. ({inputs}) -> {g[i]} vs XLA {w[i]}")
    assert not problems, "\n".join(problems)


UNARY = opcodes_where(lambda i: i.kind == "unary" and i.arity == 1)
BINARY = opcodes_where(lambda i: i.kind == "binary" and i.arity == 2)
# XLA's newer functions, which jaxlib 0.10's XLA:CPU does not compile (atan: does not parse);
# tests/emitters/test_newer_functions.py checks the interpreter against Python's math instead.
XLA_CPU_LACKS = ("sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh")
FLOAT_UNARY = [o for o in UNARY if o not in ("not", "count-leading-zeros", "popcnt", "real", "imag", "bitcast-convert",
                                               "convert", "reduce-precision", *XLA_CPU_LACKS)]
INT_UNARY = ["abs", "negate", "sign", "not", "count-leading-zeros", "popcnt", "copy"]
FLOAT_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2"]
INT_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "and", "or", "xor",
              "shift-left", "shift-right-arithmetic", "shift-right-logical", "power"]
# XLA CPU's own approximations of transcendental functions, in ulps of the result type.
TRANSCENDENTAL_ULPS = {o: 4 for o in opcodes_where(lambda i: i.elementwise and bool(i.math))}
TRANSCENDENTAL_ULPS.update({"tan": 8, "erf": 8, "power": 8, "atan2": 4})


def test_op_lists_come_from_the_registry():
    for o in FLOAT_UNARY + INT_UNARY + FLOAT_BINARY + INT_BINARY:
        assert o in OPS, o


@pytest.mark.parametrize("t", list(FLOATS))
def test_float_elementwise_vs_xla(t):
    dtype = FLOATS[t]
    x, y = float_inputs(dtype, 1), float_inputs(dtype, 2)[::-1].copy()
    ops = [(o, "pred" if o == "is-finite" else t, [0], "") for o in FLOAT_UNARY]
    ops += [(o, t, [0, 1], "") for o in FLOAT_BINARY]
    compare_all(module_text(ops, [t, t]), [x, y], ops, TRANSCENDENTAL_ULPS)


@pytest.mark.parametrize("t", list(INTS))
def test_integer_elementwise_vs_xla(t):
    dtype = INTS[t]
    x, y = int_inputs(dtype, 1), int_inputs(dtype, 2)[::-1].copy()
    unary = [o for o in INT_UNARY if t[0] == "s" or o not in ("abs", "sign")]  # StableHLO refuses unsigned abs
    ops = [(o, t, [0], "") for o in unary] + [(o, t, [0, 1], "") for o in INT_BINARY]
    compare_all(module_text(ops, [t, t]), [x, y], ops, {})


@pytest.mark.parametrize("t", ["f32", "bf16", "s32", "u8"])
def test_compare_vs_xla(t):
    dtype = {**FLOATS, **INTS}[t]
    x = float_inputs(dtype, 3) if t in FLOATS else int_inputs(dtype, 3)
    y = np.roll(x, 5)
    y[:8] = x[:8]  # some equal pairs
    types = ["FLOAT", "TOTALORDER"] if t in FLOATS else (["SIGNED"] if t[0] == "s" else ["UNSIGNED"])
    ops = [("compare", "pred", [0, 1], f", direction={d}, type={ty}")
           for d in ("EQ", "NE", "LT", "LE", "GT", "GE") for ty in types]
    compare_all(module_text(ops, [t, t]), [x, y], ops, {})


@pytest.mark.parametrize("src", ["f32", "f16", "bf16", "s32", "u32", "s8", "u8", "pred"])
def test_convert_vs_xla(src):
    if src == "pred":
        x = np.arange(N) % 3 == 0
    elif src in FLOATS:
        x = float_inputs(FLOATS[src], 4) * np.array(1e3 if src != "f16" else 10, FLOATS[src])
    else:
        x = int_inputs(INTS[src], 4)
    targets = ["f32", "f16", "bf16", "f64", "s32", "u32", "s8", "u8", "s64", "pred"]
    ops = [("convert", t, [0], "") for t in targets if t != src]
    compare_all(module_text(ops, [src]), [x], ops, {})


def test_select_clamp_vs_xla():
    x, lo, hi = float_inputs(np.float32, 5), float_inputs(np.float32, 6), float_inputs(np.float32, 7)
    text = module_text([("clamp", "f32", [0, 1, 2], "")], ["f32", "f32", "f32"])
    compare_all(text, [lo, x, hi], [("clamp", "f32", [0, 1, 2], "")], {})


# ---- whole modules: data movement, reduce, control flow ---------------------------------------
MODULES = {
    "dynamic_slice_clamping": ("""HloModule m
ENTRY e {
  x = f32[5,6] parameter(0)
  i = s32[] parameter(1)
  j = s32[] parameter(2)
  u = f32[2,3] parameter(3)
  ds = f32[3,2] dynamic-slice(x, i, j), dynamic_slice_sizes={3,2}
  dus = f32[5,6] dynamic-update-slice(x, u, j, i)
  ROOT t = (f32[3,2], f32[5,6]) tuple(ds, dus)
}
""", lambda rng: [rng.standard_normal((5, 6)).astype(np.float32), np.int32(-3), np.int32(9),
                  rng.standard_normal((2, 3)).astype(np.float32)]),
    "pad_reverse_concat_transpose": ("""HloModule m
ENTRY e {
  x = f32[4,6] parameter(0)
  y = f32[2,6] parameter(1)
  z = f32[] constant(0.5)
  p = f32[7,5] pad(x, z), padding=1_-1_1x-2_1_0
  r = f32[4,6] reverse(x), dimensions={0,1}
  c = f32[6,6] concatenate(x, y), dimensions={0}
  tr = f32[6,4] transpose(x), dimensions={1,0}
  b = f32[3,4,6] broadcast(x), dimensions={1,2}
  io = s32[4,3] iota(), iota_dimension=1
  sl = f32[2,2] slice(x), slice={[1:4:2], [0:6:4]}
  ROOT t = (f32[7,5], f32[4,6], f32[6,6], f32[6,4], f32[3,4,6], s32[4,3], f32[2,2]) tuple(p, r, c, tr, b, io, sl)
}
""", lambda rng: [rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((2, 6)).astype(np.float32)]),
    "bitcast_convert_widths": ("""HloModule m
ENTRY e {
  x = f32[3] parameter(0)
  a = u8[3,4] bitcast-convert(x)
  b = s16[3,2] bitcast-convert(x)
  c = f32[3] bitcast-convert(a)
  d = s32[3] bitcast-convert(x)
  ROOT t = (u8[3,4], s16[3,2], f32[3], s32[3]) tuple(a, b, c, d)
}
""", lambda rng: [np.array([1.5, -0.0, np.nan], np.float32)]),
    "variadic_reduce_argmin": ("""HloModule m
argmin {
  av = f32[] parameter(0)
  ai = s32[] parameter(1)
  bv = f32[] parameter(2)
  bi = s32[] parameter(3)
  lt = pred[] compare(av, bv), direction=LT
  eq = pred[] compare(av, bv), direction=EQ
  il = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, il)
  take = pred[] or(lt, tie)
  v = f32[] select(take, av, bv)
  i = s32[] select(take, ai, bi)
  ROOT r = (f32[], s32[]) tuple(v, i)
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[4,7] parameter(0)
  idx = s32[4,7] iota(), iota_dimension=1
  pinf = f32[] constant(inf)
  zero = s32[] constant(0)
  r = (f32[4], s32[4]) reduce(x, idx, pinf, zero), dimensions={1}, to_apply=argmin
  v = f32[4] get-tuple-element(r), index=0
  i = s32[4] get-tuple-element(r), index=1
  z = f32[] constant(0)
  s = f32[7] reduce(x, z), dimensions={0}, to_apply=add
  ROOT t = (f32[4], s32[4], f32[7]) tuple(v, i, s)
}
""", lambda rng: [np.round(rng.standard_normal((4, 7)), 1).astype(np.float32)]),
    "conditional_out_of_range_and_while": ("""HloModule m
b0 {
  p = f32[3] parameter(0)
  ROOT n = f32[3] negate(p)
}
b1 {
  p = f32[3] parameter(0)
  ROOT n = f32[3] exponential(p)
}
cond {
  s = (s32[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  k = s32[] constant(5)
  ROOT c = pred[] compare(i, k), direction=LT
}
body {
  s = (s32[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[3] get-tuple-element(s), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  x2 = f32[3] multiply(x, x)
  ROOT t = (s32[], f32[3]) tuple(i2, x2)
}
ENTRY e {
  k = s32[] parameter(0)
  x = f32[3] parameter(1)
  c = f32[3] conditional(k, x, x), branch_computations={b0, b1}
  z = s32[] constant(2)
  init = (s32[], f32[3]) tuple(z, x)
  w = (s32[], f32[3]) while(init), condition=cond, body=body
  ROOT t = (f32[3], (s32[], f32[3])) tuple(c, w)
}
""", lambda rng: [np.int32(7), np.array([1.01, -0.5, 0.9], np.float32)]),
}


@pytest.mark.parametrize("name", list(MODULES))
def test_module_vs_xla(name):
    text, make_args = MODULES[name]
    args = make_args(np.random.default_rng(0))
    got = evaluate(parse_hlo(text), args)
    want = run_on_xla(text, args)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, f"out{k}"
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, equal_nan=True, err_msg=f"out{k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"out{k}")


@pytest.mark.parametrize("t", ["f16", "bf16"])
def test_reduce_precision_of_narrow_floats_vs_xla(t):
    x = float_inputs(FLOATS[t], 8) * np.array(7, FLOATS[t])
    ops = [("reduce-precision", t, [0], f", exponent_bits={e}, mantissa_bits={m}")
           for e, m in [(5, 2), (4, 3), (8, 7), (3, 1)]]
    compare_all(module_text(ops, [t]), [x], ops, {})


def test_float8_conversions_vs_xla():
    x = float_inputs(np.float32, 9) * np.float32(40)
    ops = [("convert", t, [0], "") for t in ("f8e4m3fn", "f8e5m2")]
    compare_all(module_text(ops, ["f32"]), [x], ops, {})
    y = x.astype(ml_dtypes.float8_e4m3fn)
    back = [("convert", t, [0], "") for t in ("f32", "f16", "bf16", "s32")]
    compare_all(module_text(back, ["f8e4m3fn"]), [y], back, {})


def test_complex_elementwise_vs_xla():
    rng = np.random.default_rng(10)
    z = (rng.standard_normal(N) + 1j * rng.standard_normal(N)).astype(np.complex64)
    w = (rng.standard_normal(N) + 1j * rng.standard_normal(N)).astype(np.complex64)
    unary = ["negate", "exponential", "log", "sqrt", "tanh", "sign", "exponential-minus-one", "log-plus-one",
             "sine", "cosine", "rsqrt"]
    ops = [(o, "c64", [0], "") for o in unary] + [(o, "c64", [0, 1], "") for o in ("add", "subtract", "multiply",
                                                                                       "divide", "power")]
    ops += [("abs", "f32", [0], ""), ("real", "f32", [0], ""), ("imag", "f32", [0], ""),
            ("compare", "pred", [0, 1], ", direction=EQ"), ("compare", "pred", [0, 0], ", direction=NE")]
    got = evaluate(parse_hlo(module_text(ops, ["c64", "c64"])), [z, w])
    want = run_on_xla(module_text(ops, ["c64", "c64"]), [z, w])
    for (opcode, rtype, _, extra), g, e in zip(ops, got, want):
        assert g.dtype == e.dtype, opcode
        if e.dtype == np.bool_:
            np.testing.assert_array_equal(g, e, err_msg=opcode)
        else:
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=1e-6, err_msg=opcode)
