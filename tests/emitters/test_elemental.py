"""Element generators, one opcode at a time, compiled for the CPU and checked against numpy /
hand-derived XLA semantics on edge values (exact for integers and basic f32 arithmetic)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hlofuse.hlo.dtypes import from_numpy
from hlofuse.hlo.opcodes import OPS
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.rule_loader import load_rules
from hlofuse.runtime.cpu_executor import CpuProgram
from tests.fuzz.values import flush_denormals as ftz

F32_EDGE = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.7, -3.7, 1e-40, -1e-40, 1e30, -1e30,
                     3.4028235e38, -3.4028235e38, np.inf, -np.inf, np.nan, 1.17549435e-38, 0.49999997,
                     8388609.0, -8388609.0], np.float32)


def run(body: str, *args) -> list[np.ndarray]:
    """Compile a module whose entry is `body` (parameters p0, p1, ...) and run it."""
    module = parse_hlo(f"HloModule t\n\nENTRY e {{\n{body}\n}}\n")
    return CpuProgram.compile(module).run(list(args))


def hlo_type(a: np.ndarray) -> str:
    return f"{from_numpy(a.dtype).name}[{','.join(map(str, a.shape))}]"


def unary(op: str, x: np.ndarray, out_dtype: str | None = None, attrs: str = "") -> np.ndarray:
    out = hlo_type(x) if out_dtype is None else f"{out_dtype}[{','.join(map(str, x.shape))}]"
    return run(f"  p0 = {hlo_type(x)} parameter(0)\n  ROOT r = {out} {op}(p0){attrs}", x)[0]


def binary(op: str, x: np.ndarray, y: np.ndarray, out_dtype: str | None = None, attrs: str = "") -> np.ndarray:
    out = hlo_type(x) if out_dtype is None else f"{out_dtype}[{','.join(map(str, x.shape))}]"
    body = (f"  p0 = {hlo_type(x)} parameter(0)\n  p1 = {hlo_type(y)} parameter(1)\n"
            f"  ROOT r = {out} {op}(p0, p1){attrs}")
    return run(body, x, y)[0]


def pairs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.meshgrid(values, values, indexing="ij")
    return a.reshape(-1), b.reshape(-1)


# ---- registry coverage ------------------------------------------------------------------------
def test_every_fusible_opcode_has_a_generator_or_a_reason():
    load_rules("elemental")

    missing = [n for n, i in OPS.items() if i.fusion != "never" and n != "parameter"
               and i.elemental is None and "elemental" not in i.unsupported]
    assert missing == []


def test_every_unfused_opcode_runs_or_says_why():
    load_rules("elemental")
    load_rules("library")

    missing = [n for n, i in OPS.items() if i.fusion == "never" and n != "fusion" and i.elemental is None
               and i.library is None and "library" not in i.unsupported]
    assert missing == []


# ---- f32 arithmetic: exact ---------------------------------------------------------------------
@pytest.mark.parametrize("op,ref", [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
                                    ("divide", np.divide), ("maximum", np.maximum), ("minimum", np.minimum),
                                    ("remainder", np.fmod)])
def test_f32_binary_exact(op, ref):
    a, b = pairs(F32_EDGE)
    with np.errstate(all="ignore"):
        # Kernels run as XLA:CPU's, denormals flushed: operands read as zero, results written
        # as zero; fmod tests the divisor for zero with a float compare but computes on bits.
        want = np.fmod(a, ftz(b)) if op == "remainder" else ftz(ref(ftz(a), ftz(b)))
    np.testing.assert_array_equal(binary(op, a, b), want)


@pytest.mark.parametrize("op,ref", [
    ("negate", np.negative), ("abs", np.abs), ("floor", np.floor), ("ceil", np.ceil),
    ("round-nearest-even", np.rint), ("sqrt", np.sqrt), ("sign", np.sign),
    ("round-nearest-afz", lambda x: (np.sign(x) * np.floor(np.abs(x.astype(np.float64)) + 0.5)).astype(np.float32)),
])
def test_f32_unary_exact(op, ref):
    with np.errstate(all="ignore"):  # negate and abs move bits; the others flush denormals
        want = ref(F32_EDGE) if op in ("negate", "abs") else ftz(ref(ftz(F32_EDGE)))
    np.testing.assert_array_equal(unary(op, F32_EDGE), want)


def test_is_finite_and_maximum_propagates_nan():
    np.testing.assert_array_equal(unary("is-finite", F32_EDGE, "pred"), np.isfinite(F32_EDGE))
    x = np.array([np.nan, 1.0, np.nan], np.float32)
    y = np.array([1.0, np.nan, np.nan], np.float32)
    assert np.isnan(binary("maximum", x, y)).all() and np.isnan(binary("minimum", x, y)).all()


def test_compare_float_and_totalorder():
    a, b = pairs(np.array([0.0, -0.0, 1.0, -np.inf, np.inf, np.nan], np.float32))
    for d, ref in [("EQ", np.equal), ("NE", np.not_equal), ("LT", np.less), ("GE", np.greater_equal)]:
        np.testing.assert_array_equal(binary("compare", a, b, "pred", f", direction={d}"), ref(a, b))
    # TOTALORDER: -0 < +0 and NaN above +inf (hand-derived).
    got = binary("compare", np.array([-0.0, np.inf, 1.0], np.float32), np.array([0.0, np.nan, np.nan], np.float32),
                 "pred", ", direction=LT, type=TOTALORDER")
    np.testing.assert_array_equal(got, [True, True, True])


# ---- integers: XLA's semantics, derived by hand -------------------------------------------------
def _xla_div(x: int, y: int, bits: int, signed: bool) -> int:
    if y == 0:
        return -1 if signed else (1 << bits) - 1
    if signed and x == -(1 << (bits - 1)) and y == -1:
        return x
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


def _xla_rem(x: int, y: int, bits: int, signed: bool) -> int:
    if y == 0:
        return x
    if signed and x == -(1 << (bits - 1)) and y == -1:
        return 0
    return x - _xla_div(x, y, bits, signed) * y


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_integer_division_and_remainder(dtype):
    info = np.iinfo(dtype)
    vals = np.array(sorted({0, 1, 2, 7, info.max, info.min, info.max - 1} | ({-1, -7} if info.min < 0 else set())), dtype)
    a, b = pairs(vals)
    bits, signed = info.bits, info.min < 0
    want_div = np.array([_xla_div(int(x), int(y), bits, signed) for x, y in zip(a, b)]).astype(dtype)
    want_rem = np.array([_xla_rem(int(x), int(y), bits, signed) for x, y in zip(a, b)]).astype(dtype)
    np.testing.assert_array_equal(binary("divide", a, b), want_div)
    np.testing.assert_array_equal(binary("remainder", a, b), want_rem)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64])
def test_integer_arith_and_shifts(dtype):
    info = np.iinfo(dtype)
    bits = info.bits
    x = np.array([0, 1, 5, info.max, info.min, 3, 3, 3, 3], dtype)
    s = np.array([0, 1, 3, 1, 1, bits - 1, bits, bits + 5, 2], dtype)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(binary("add", x, s), x + s)
        np.testing.assert_array_equal(binary("multiply", x, s), x * s)
    signed = info.min < 0
    mask = (1 << bits) - 1

    def wrap(v: int, as_signed: bool = signed) -> int:
        v &= mask
        return v - (1 << bits) if as_signed and v >> (bits - 1) else v

    def ref(fn):
        return np.array([wrap(fn(int(v), int(c) & mask)) for v, c in zip(x, s)], dtype)

    np.testing.assert_array_equal(binary("shift-left", x, s), ref(lambda v, c: 0 if c >= bits else v << c))
    np.testing.assert_array_equal(binary("shift-right-logical", x, s),
                                  ref(lambda v, c: 0 if c >= bits else (v & mask) >> c))
    np.testing.assert_array_equal(binary("shift-right-arithmetic", x, s),
                                  ref(lambda v, c: wrap(v, True) >> min(c, bits - 1)))


def test_clz_popcnt_not_sign_abs_integers():
    x = np.array([0, 1, 2, 255, -1, -2147483648, 2147483647, 12345], np.int32)
    u = x.view(np.uint32).astype(np.int64)
    np.testing.assert_array_equal(unary("count-leading-zeros", x), [32 - int(v).bit_length() for v in u])
    np.testing.assert_array_equal(unary("popcnt", x), [bin(int(v)).count("1") for v in u])
    np.testing.assert_array_equal(unary("not", x), ~x)
    np.testing.assert_array_equal(unary("sign", x), np.sign(x))
    np.testing.assert_array_equal(unary("abs", x), np.abs(x))  # INT_MIN stays INT_MIN (wraps)


def test_integer_power_and_min_max_clamp():
    x = np.array([2, -3, 0, 1, -1, -1, 5, 2], np.int32)
    y = np.array([10, 3, 0, -5, -3, -4, 0, -1], np.int32)
    want = [1024, -27, 1, 1, -1, 1, 1, 0]  # negative exponents: 0 unless the base is +-1
    np.testing.assert_array_equal(binary("power", x, y), want)
    u = np.array([0, 200, 255], np.uint8)
    v = np.array([1, 100, 254], np.uint8)
    np.testing.assert_array_equal(binary("maximum", u, v), np.maximum(u, v))
    body = ("  p0 = s32[4] parameter(0)\n  lo = s32[] constant(-2)\n  hi = s32[] constant(3)\n"
            "  ROOT r = s32[4] clamp(lo, p0, hi)")
    np.testing.assert_array_equal(run(body, np.array([-5, 0, 3, 9], np.int32))[0], [-2, 0, 3, 3])


# ---- conversions ---------------------------------------------------------------------------------
def test_float_to_int_saturates_and_nan_is_zero():
    x = np.array([1.9, -1.9, 3e9, -3e9, np.nan, np.inf, -np.inf, 127.5, -128.5, 0.0], np.float32)
    np.testing.assert_array_equal(unary("convert", x, "s32"),
                                  [1, -1, 2147483647, -2147483648, 0, 2147483647, -2147483648, 127, -128, 0])
    np.testing.assert_array_equal(unary("convert", x, "s8"), [1, -1, 127, -128, 0, 127, -128, 127, -128, 0])
    np.testing.assert_array_equal(unary("convert", x, "u8"), [1, 0, 255, 0, 0, 255, 0, 127, 0, 0])
    np.testing.assert_array_equal(unary("convert", x, "pred"), x != 0)


def test_float_narrowing_rounds_to_nearest_even():
    rng = np.random.default_rng(0)
    x = np.concatenate([F32_EDGE, rng.standard_normal(500).astype(np.float32) * 1000,
                        np.array([1.00390625, 1.01171875, 65520.0, 65504.0, 1e-8], np.float32)])
    bf = unary("convert", x, "bf16")
    np.testing.assert_array_equal(bf.view(np.uint16)[~np.isnan(x)], x.astype(ml_dtypes.bfloat16).view(np.uint16)[~np.isnan(x)])
    assert np.isnan(bf.astype(np.float32)[np.isnan(x)]).all()
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(unary("convert", x, "f16"), x.astype(np.float16))
    # f64 -> f32 is a hardware conversion: an f32 denormal result is flushed (as on XLA:CPU).
    np.testing.assert_array_equal(unary("convert", x.astype(np.float64), "f32"), ftz(x))


def test_bf16_and_f16_arithmetic_rounds_each_op():
    rng = np.random.default_rng(1)
    a = rng.standard_normal(256).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal(256).astype(ml_dtypes.bfloat16)
    want = (a.astype(np.float32) * b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(binary("multiply", a, b).view(np.uint16), want.view(np.uint16))
    h, k = a.astype(np.float16), b.astype(np.float16)
    np.testing.assert_array_equal(binary("add", h, k), h + k)


def test_int_to_float_and_int_widening():
    x = np.array([-1, 0, 127, -128, 16777217], np.int32)
    np.testing.assert_array_equal(unary("convert", x, "f32"), x.astype(np.float32))
    np.testing.assert_array_equal(unary("convert", x, "s64"), x.astype(np.int64))
    np.testing.assert_array_equal(unary("convert", x, "u8"), x.astype(np.uint8))
    u = np.array([0, 255, 128], np.uint8)
    np.testing.assert_array_equal(unary("convert", u, "s32"), u.astype(np.int32))
    np.testing.assert_array_equal(unary("convert", u, "f32"), u.astype(np.float32))


def test_bitcast_convert_same_and_changing_width():
    x = np.array([1.0, -2.5, np.inf], np.float32)
    np.testing.assert_array_equal(unary("bitcast-convert", x, "s32"), x.view(np.int32))
    halves = run("  p0 = f32[3] parameter(0)\n  ROOT r = u16[3,2] bitcast-convert(p0)", x)[0]
    np.testing.assert_array_equal(halves, x.view(np.uint16).reshape(3, 2))
    back = run("  p0 = u16[3,2] parameter(0)\n  ROOT r = f32[3] bitcast-convert(p0)", halves)[0]
    np.testing.assert_array_equal(back, x)


def test_reduce_precision_to_bf16_matches_rounding():
    x = np.random.default_rng(2).standard_normal(300).astype(np.float32)
    got = unary("reduce-precision", x, attrs=", exponent_bits=8, mantissa_bits=7")
    np.testing.assert_array_equal(got, x.astype(ml_dtypes.bfloat16).astype(np.float32))


# ---- data movement ------------------------------------------------------------------------------
def test_broadcast_transpose_reshape_reverse_iota():
    v = np.arange(4, dtype=np.float32)
    m = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(run("  p0 = f32[4] parameter(0)\n  ROOT r = f32[3,4] broadcast(p0), dimensions={1}", v)[0],
                                  np.broadcast_to(v, (3, 4)))
    np.testing.assert_array_equal(run("  p0 = f32[2,3,4] parameter(0)\n  ROOT r = f32[4,2,3] transpose(p0), dimensions={2,0,1}", m)[0],
                                  np.transpose(m, (2, 0, 1)))
    np.testing.assert_array_equal(run("  p0 = f32[2,3,4] parameter(0)\n  ROOT r = f32[6,4] reshape(p0)", m)[0], m.reshape(6, 4))
    np.testing.assert_array_equal(run("  p0 = f32[2,3,4] parameter(0)\n  ROOT r = f32[2,3,4] reverse(p0), dimensions={0,2}", m)[0],
                                  m[::-1, :, ::-1])
    np.testing.assert_array_equal(run("  ROOT r = s32[3,5] iota(), iota_dimension=1")[0], np.broadcast_to(np.arange(5), (3, 5)))


def test_slice_dynamic_slice_clamps_concatenate_pad():
    m = np.arange(40, dtype=np.int32).reshape(5, 8)
    np.testing.assert_array_equal(run("  p0 = s32[5,8] parameter(0)\n  ROOT r = s32[2,3] slice(p0), slice={[1:5:2], [0:8:3]}", m)[0],
                                  m[1:5:2, 0:8:3])
    body = ("  p0 = s32[5,8] parameter(0)\n  i = s32[] parameter(1)\n  j = s32[] parameter(2)\n"
            "  ROOT r = s32[2,3] dynamic-slice(p0, i, j), dynamic_slice_sizes={2,3}")
    np.testing.assert_array_equal(run(body, m, np.int32(4), np.int32(-3))[0], m[3:5, 0:3])  # clamped starts
    body = ("  p0 = s32[5,8] parameter(0)\n  p1 = s32[5,2] parameter(1)\n"
            "  ROOT r = s32[5,10] concatenate(p0, p1), dimensions={1}")
    other = -np.arange(10, dtype=np.int32).reshape(5, 2)
    np.testing.assert_array_equal(run(body, m, other)[0], np.concatenate([m, other], 1))
    body = ("  p0 = s32[5,8] parameter(0)\n  z = s32[] constant(-1)\n"
            "  ROOT r = s32[11,7] pad(p0, z), padding=1_1_1x-1_0")
    want = np.full((11, 7), -1, np.int32)
    want[1:10:2, :] = m[:, 1:]
    np.testing.assert_array_equal(run(body, m)[0], want)


def test_constant_arrays_and_select():
    body = ("  p0 = pred[4] parameter(0)\n  c = f32[4] constant({1, 2, 3, 4})\n  d = f32[4] constant({-1, -2, -3, -4})\n"
            "  ROOT r = f32[4] select(p0, c, d)")
    np.testing.assert_array_equal(run(body, np.array([True, False, False, True]))[0], [1, -2, -3, 4])


def test_gather_rows_with_clamping():
    table = np.arange(20, dtype=np.float32).reshape(5, 4)
    idx = np.array([[0], [4], [7], [-2]], np.int32)
    body = ("  p0 = f32[5,4] parameter(0)\n  p1 = s32[4,1] parameter(1)\n"
            "  ROOT r = f32[4,4] gather(p0, p1), offset_dims={1}, collapsed_slice_dims={0}, "
            "start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}")
    np.testing.assert_array_equal(run(body, table, idx)[0], table[np.clip(idx[:, 0], 0, 4)])


def test_complex_arithmetic():
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(64) + 1j * rng.standard_normal(64)).astype(np.complex64)
    b = (rng.standard_normal(64) + 1j * rng.standard_normal(64)).astype(np.complex64)
    np.testing.assert_allclose(binary("multiply", a, b), a * b, rtol=1e-6)
    np.testing.assert_allclose(binary("divide", a, b), a / b, rtol=1e-5)
    np.testing.assert_allclose(unary("abs", a, "f32"), np.abs(a), rtol=1e-6)
    np.testing.assert_allclose(unary("exponential", a), np.exp(a), rtol=1e-5)


def test_bitcast_follows_physical_layouts():
    """bitcast(f32[3,4]{0,1}) -> f32[4,3]{1,0} is a transpose of the logical values."""
    m = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = run("  p0 = f32[3,4]{0,1} parameter(0)\n  ROOT r = f32[4,3]{1,0} bitcast(p0)", m)[0]
    np.testing.assert_array_equal(got, m.T)


@pytest.mark.parametrize("op,ref", [("sqrt", np.sqrt), ("rsqrt", lambda z: 1 / np.sqrt(z)), ("log", np.log),
                                    ("exponential-minus-one", np.expm1), ("log-plus-one", np.log1p),
                                    ("sine", np.sin), ("cosine", np.cos), ("tan", np.tan), ("tanh", np.tanh),
                                    ("sign", lambda z: z / np.abs(z))])
def test_complex_functions(op, ref):
    rng = np.random.default_rng(4)
    z = (rng.standard_normal(200) + 1j * rng.standard_normal(200)).astype(np.complex128)
    z[:4] = [1e-9 + 1e-9j, -4 + 0j, 0.5j, -2 - 3j]
    np.testing.assert_allclose(unary(op, z), ref(z), rtol=1e-12, atol=1e-14)
    w = (rng.standard_normal(200) + 1j * rng.standard_normal(200)).astype(np.complex128)
    np.testing.assert_allclose(binary("power", z, w), np.power(z, w), rtol=1e-11)


def test_unsupported_element_types_are_named():
    from hlofuse.hlo.errors import UnsupportedError

    # 8-bit floats, s4/u4 and s2/u2 are supported now (tests/emitters/test_backend_types.py); s1 is not.
    with pytest.raises(UnsupportedError, match="s1"):
        run("  p0 = s1[4] parameter(0)\n  ROOT r = s1[4] negate(p0)",
            np.zeros(4, ml_dtypes.int1))
