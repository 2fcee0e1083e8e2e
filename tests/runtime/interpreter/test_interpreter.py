"""Unit tests of the reference interpreter's core families (elementwise, data movement, reduce,
control flow): XLA's edge-case semantics, expected values by hand or from numpy / jax.lax."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from hlofuse.hlo.dtypes import from_numpy
from hlofuse.hlo.errors import InputError, UnsupportedError
from hlofuse.hlo.ir import HloComputation, HloInstruction, HloModule
from hlofuse.hlo.opcodes import OPS
from hlofuse.hlo.shapes import ArrayShape, Layout, TupleShape, array, scalar
from hlofuse.hlo.rule_loader import RULE_MODULES
from hlofuse.hlo.rule_loader import load_rules
from hlofuse.runtime.interpreter import TOKEN, Interpreter, evaluate

jax = pytest.importorskip("jax")
lax = jax.lax
jnp = jax.numpy

I32_MIN = np.iinfo(np.int32).min


def shape_of(x) -> ArrayShape:
    x = np.asarray(x)
    return array(from_numpy(x.dtype), x.shape)


def op(opcode: str, out_shape, *args, **attrs):
    """Evaluate one instruction `opcode(parameters...)` on `args` with the given attributes."""
    m = HloModule("m")
    c = HloComputation("entry")
    m.add_computation(c, entry=True)
    params = [c.add_parameter(shape_of(a)) for a in args]
    if isinstance(out_shape, str):
        out_shape = array(out_shape, np.asarray(args[0]).shape)
    inst = c.add_instruction(HloInstruction(opcode, out_shape, params, attrs, opcode))
    c.root = inst
    out = evaluate(m, [np.asarray(a) for a in args])
    return out if len(out) > 1 or out_shape.is_tuple else out[0]


def binop_computation(opcode: str, dtype: str, name: str = "red") -> HloComputation:
    c = HloComputation(name)
    a = c.add_parameter(scalar(dtype))
    b = c.add_parameter(scalar(dtype))
    c.root = c.add_instruction(HloInstruction(opcode, scalar(dtype), [a, b]))
    return c


def same(a, b) -> None:
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.asarray(a).dtype == np.asarray(b).dtype


# ---- registry ---------------------------------------------------------------------------------
def test_every_core_family_loads_and_rules_are_registered():
    load_rules("reference")
    for family in ("elementwise", "conversion", "data_movement", "reduction", "control_flow"):
        assert f"hlofuse.runtime.interpreter.{family}" in RULE_MODULES["reference"]
    for opcode in ("add", "reduce", "while", "dynamic-slice", "convert", "compare", "fusion"):
        assert OPS[opcode].reference is not None, opcode


def test_unsupported_op_names_op_instruction_and_reason():
    with pytest.raises(UnsupportedError, match=r"infeed \(instruction infeed\).*not modelled"):
        op("infeed", "f32", np.ones(2, np.float32))


def test_custom_call_is_refused_with_target():
    with pytest.raises(UnsupportedError, match="lapack_spotrf"):
        op("custom-call", "f32", np.ones(2, np.float32), custom_call_target="lapack_spotrf")


# ---- integer arithmetic ----------------------------------------------------------------------
def test_integer_division_xla_semantics():
    x = np.array([7, -7, 7, -7, 5, I32_MIN, I32_MIN, 0], np.int32)
    y = np.array([2, 2, -2, -2, 0, -1, 1, 0], np.int32)
    same(op("divide", "s32", x, y), np.array([3, -3, -3, 3, -1, I32_MIN, I32_MIN, -1], np.int32))
    same(op("remainder", "s32", x, y), np.array([1, -1, 1, -1, 5, 0, 0, 0], np.int32))


def test_unsigned_division_by_zero_gives_all_ones_and_dividend():
    x = np.array([7, 9, 4000000000], np.uint32)
    y = np.array([0, 4, 0], np.uint32)
    same(op("divide", "u32", x, y), np.array([2**32 - 1, 2, 2**32 - 1], np.uint32))
    same(op("remainder", "u32", x, y), np.array([7, 1, 4000000000], np.uint32))


def test_integer_ops_match_jax_lax():
    rng = np.random.default_rng(1)
    x = rng.integers(-(2**31), 2**31, 64, dtype=np.int64).astype(np.int32)
    y = rng.integers(-20, 20, 64).astype(np.int32)
    y[y == 0] = 7
    for opcode, fn in [("divide", lax.div), ("remainder", lax.rem), ("multiply", lax.mul), ("add", lax.add),
                       ("subtract", lax.sub)]:
        same(op(opcode, "s32", x, y), np.asarray(fn(x, y)))


def test_wraparound():
    x = np.array([2**31 - 1, I32_MIN], np.int32)
    same(op("add", "s32", x, np.array([1, -1], np.int32)), np.array([I32_MIN, 2**31 - 1], np.int32))
    same(op("negate", "s32", x), np.array([I32_MIN + 1, I32_MIN], np.int32))
    same(op("abs", "s32", x), np.array([2**31 - 1, I32_MIN], np.int32))


def test_shifts_by_bit_width_or_more():
    x = np.array([-8, -8, -8, 8, 1, 1], np.int32)
    s = np.array([1, 32, 100, 33, 31, -1], np.int32)
    same(op("shift-left", "s32", x, s), np.array([-16, 0, 0, 0, I32_MIN, 0], np.int32))
    same(op("shift-right-arithmetic", "s32", x, s), np.array([-4, -1, -1, 0, 0, 0], np.int32))
    same(op("shift-right-logical", "s32", x, s), np.array([2147483644, 0, 0, 0, 0, 0], np.int32))
    for opcode, fn in [("shift-left", lax.shift_left), ("shift-right-arithmetic", lax.shift_right_arithmetic),
                       ("shift-right-logical", lax.shift_right_logical)]:
        same(op(opcode, "s32", x, s), np.asarray(fn(x, s)))


def test_shifts_of_u8():
    x = np.array([0x81, 0x81, 0xFF], np.uint8)
    s = np.array([1, 8, 7], np.uint8)
    same(op("shift-right-arithmetic", "u8", x, s), np.array([0xC0, 0xFF, 0xFF], np.uint8))
    same(op("shift-left", "u8", x, s), np.array([0x02, 0, 0x80], np.uint8))


def test_clz_popcnt():
    x = np.array([0, 1, -1, 0x00F00000, I32_MIN], np.int32)
    same(op("count-leading-zeros", "s32", x), np.array([32, 31, 0, 8, 0], np.int32))
    same(op("popcnt", "s32", x), np.array([0, 1, 32, 4, 1], np.int32))
    same(op("count-leading-zeros", "s32", x), np.asarray(lax.clz(x)))
    u = np.array([0, 1, 0x80, 0x0F], np.uint8)
    same(op("count-leading-zeros", "u8", u), np.array([8, 7, 0, 4], np.uint8))


def test_integer_power():
    x = np.array([2, 3, -2, 1, -1, -1, 2, 5], np.int32)
    y = np.array([10, 0, 3, -5, -3, -4, -1, 20], np.int32)
    expected = np.array([1024, 1, -8, 1, -1, 1, 0, (5**20) % 2**32], np.int64)
    expected = expected.astype(np.uint32).view(np.int32)
    same(op("power", "s32", x, y), expected)


def test_not_and_bitwise_on_pred_and_int():
    same(op("not", "pred", np.array([True, False])), np.array([False, True]))
    same(op("not", "s8", np.array([0, -1, 5], np.int8)), np.array([-1, 0, -6], np.int8))
    same(op("xor", "pred", np.array([True, True]), np.array([True, False])), np.array([False, True]))


# ---- floats ----------------------------------------------------------------------------------
def test_maximum_minimum_propagate_nan():
    x = np.array([np.nan, 1.0, 2.0], np.float32)
    y = np.array([1.0, np.nan, 3.0], np.float32)
    same(op("maximum", "f32", x, y), np.array([np.nan, np.nan, 3.0], np.float32))
    same(op("minimum", "f32", x, y), np.array([np.nan, np.nan, 2.0], np.float32))


def test_rounding_modes():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.0, 3.7], np.float32)
    same(op("round-nearest-even", "f32", x), np.array([0, 2, 2, -0.0, -2, 0, -0.0, 4], np.float32))
    afz = op("round-nearest-afz", "f32", x)
    same(afz, np.array([1, 2, 3, -1, -3, 0, -0.0, 4], np.float32))
    assert np.signbit(afz[6])
    same(afz, np.asarray(lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO)))


def test_sign_of_floats_keeps_zero_sign_and_nan():
    x = np.array([-3.0, 0.0, -0.0, np.nan, 2.0], np.float32)
    out = op("sign", "f32", x)
    np.testing.assert_array_equal(out, np.array([-1, 0, -0.0, np.nan, 1], np.float32))
    assert np.signbit(out[2])


def test_compare_total_order():
    vals = np.array([-np.nan, -np.inf, -1.0, -0.0, 0.0, 1.0, np.inf, np.nan], np.float32)
    vals[0] = -np.abs(vals[0])  # a negative NaN
    x = np.repeat(vals, len(vals))
    y = np.tile(vals, len(vals))
    lt = op("compare", "pred", x, y, direction="LT", type="TOTALORDER").reshape(8, 8)
    idx = np.arange(8)
    same(lt, idx[:, None] < idx[None, :])
    eq = op("compare", "pred", x, y, direction="EQ", type="TOTALORDER").reshape(8, 8)
    same(eq, np.eye(8, dtype=bool))


def test_compare_float_partial_order():
    x = np.array([np.nan, 1.0, -0.0], np.float32)
    y = np.array([np.nan, np.nan, 0.0], np.float32)
    same(op("compare", "pred", x, y, direction="EQ", type="FLOAT"), np.array([False, False, True]))
    same(op("compare", "pred", x, y, direction="NE"), np.array([True, True, False]))


def test_compare_unsigned_and_signed():
    x = np.array([0xFFFFFFFF, 1], np.uint32)
    y = np.array([1, 2], np.uint32)
    same(op("compare", "pred", x, y, direction="GT", type="UNSIGNED"), np.array([True, False]))


def test_bf16_arithmetic_rounds_every_op():
    x = np.array([1.0, 256.0], ml_dtypes.bfloat16)
    y = np.array([1 / 512, 1.0], ml_dtypes.bfloat16)
    out = op("add", "bf16", x, y)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.astype(np.float32), np.array([1.0, 256.0], np.float32))
    same(op("multiply", "bf16", x, y), np.asarray(lax.mul(x, y)))


def test_f16_division_and_exp_match_jax():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(50).astype(np.float16)
    y = (rng.standard_normal(50) + 3).astype(np.float16)
    same(op("divide", "f16", x, y), np.asarray(lax.div(x, y)))
    np.testing.assert_allclose(op("exponential", "f16", x).astype(np.float32),
                               np.asarray(lax.exp(x)).astype(np.float32), rtol=1e-3)


def test_transcendentals_match_numpy_in_f32():
    rng = np.random.default_rng(4)
    x = rng.standard_normal(200).astype(np.float32) * 3
    p = np.abs(x) + 0.01
    for opcode, fn, arg in [("exponential", np.exp, x), ("log", np.log, p), ("tanh", np.tanh, x),
                            ("sqrt", np.sqrt, p), ("rsqrt", lambda v: 1 / np.sqrt(v), p),
                            ("cbrt", np.cbrt, x), ("log-plus-one", np.log1p, p),
                            ("exponential-minus-one", np.expm1, x), ("sine", np.sin, x),
                            ("erf", np.vectorize(math.erf), x), ("logistic", lambda v: 1 / (1 + np.exp(-v)), x)]:
        got = op(opcode, "f32", arg)
        want = fn(arg.astype(np.float64)).astype(np.float32)
        np.testing.assert_array_max_ulp(got, want, maxulp=1)


def test_erf_and_logistic_extremes():
    x = np.array([-1000.0, -10.0, 0.0, 10.0, 1000.0], np.float32)
    same(op("logistic", "f32", x), np.array([0, 1 / (1 + np.exp(10.0)), 0.5, 1 / (1 + np.exp(-10.0)), 1], np.float32))
    same(op("erf", "f32", x), np.array([-1, -1, 0, 1, 1], np.float32))


def test_atan2_and_pow_float():
    x = np.array([1.0, -1.0, 0.0, 2.0], np.float32)
    y = np.array([1.0, -1.0, -1.0, 0.5], np.float32)
    np.testing.assert_allclose(op("atan2", "f32", x, y), np.arctan2(x, y), rtol=1e-7)
    np.testing.assert_allclose(op("power", "f32", np.abs(x) + 1, y), np.power(np.abs(x) + 1, y), rtol=1e-7)


def test_is_finite():
    x = np.array([1.0, np.inf, -np.inf, np.nan], np.float16)
    same(op("is-finite", ArrayShape(from_numpy(np.bool_), (4,)), x), np.array([True, False, False, False]))


def test_clamp_and_select():
    lo, hi = np.float32(-1), np.float32(1)
    x = np.array([-5, 0.5, 5, np.nan], np.float32)
    m = HloModule("m")
    c = HloComputation("entry")
    m.add_computation(c, entry=True)
    a, b, d = c.add_parameter(scalar("f32")), c.add_parameter(array("f32", (4,))), c.add_parameter(scalar("f32"))
    c.root = c.add_instruction(HloInstruction("clamp", array("f32", (4,)), [a, b, d]))
    np.testing.assert_array_equal(evaluate(m, [np.asarray(lo), x, np.asarray(hi)])[0],
                                  np.array([-1, 0.5, 1, np.nan], np.float32))
    p = np.array([True, False, True, False])
    same(op("select", "f32", p, x, -x), np.where(p, x, -x))


# ---- complex ---------------------------------------------------------------------------------
def test_complex_ops():
    re = np.array([1.0, -2.0, 0.0], np.float32)
    im = np.array([2.0, 0.5, 0.0], np.float32)
    z = op("complex", array("c64", (3,)), re, im)
    same(z, (re + 1j * im).astype(np.complex64))
    same(op("real", "f32", z), re)
    same(op("imag", "f32", z), im)
    np.testing.assert_allclose(op("abs", "f32", z), np.abs(re + 1j * im), rtol=1e-7)
    np.testing.assert_allclose(op("exponential", "c64", z), np.exp(z.astype(np.complex128)), rtol=1e-6)
    np.testing.assert_allclose(op("sign", "c64", z), np.array([z[0] / abs(z[0]), z[1] / abs(z[1]), 0]), rtol=1e-6)
    np.testing.assert_allclose(op("multiply", "c64", z, z), z * z, rtol=1e-6)


# ---- conversions -----------------------------------------------------------------------------
def test_convert_float_to_int_saturates_and_nan_is_zero():
    x = np.array([1.9, -1.9, 3e9, -3e9, np.nan, np.inf, -np.inf, 2147483520.0], np.float32)
    same(op("convert", "s32", x),
         np.array([1, -1, 2**31 - 1, I32_MIN, 0, 2**31 - 1, I32_MIN, 2147483520], np.int32))
    same(op("convert", "u8", x), np.array([1, 0, 255, 0, 0, 255, 0, 255], np.uint8))
    same(op("convert", "s32", x), np.asarray(lax.convert_element_type(x, jnp.int32)))


def test_convert_to_pred_and_from_pred():
    x = np.array([0.0, -0.0, 0.1, np.nan], np.float32)
    same(op("convert", ArrayShape(from_numpy(np.bool_), (4,)), x), np.array([False, False, True, True]))
    same(op("convert", "f32", np.array([True, False])), np.array([1.0, 0.0], np.float32))


def test_convert_int_wraps_and_f32_to_bf16_rounds_to_even():
    same(op("convert", "s8", np.array([200, -129, 127], np.int32)), np.array([-56, 127, 127], np.int8))
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8], np.float32)
    out = op("convert", "bf16", x)
    np.testing.assert_array_equal(out.astype(np.float32), np.array([1.0, 1 + 2**-6], np.float32))


def test_bitcast_convert_same_and_different_widths():
    x = np.array([1.0, -2.0], np.float32)
    same(op("bitcast-convert", "s32", x), x.view(np.int32))
    narrow = op("bitcast-convert", array("u16", (2, 2)), x)
    same(narrow, x.view(np.uint16).reshape(2, 2))
    same(narrow, np.asarray(lax.bitcast_convert_type(x, jnp.uint16)))
    wide = op("bitcast-convert", array("f32", (2,)), narrow)
    same(wide, x)


def test_reduce_precision_matches_jax():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(100).astype(np.float32) * 1000,
                        np.array([1e30, -1e-30, 1e-40, np.nan, np.inf, -np.inf, 65520.0, 65519.0], np.float32)])
    for e, mbits in [(8, 7), (5, 10), (4, 3), (5, 2), (8, 0)]:
        got = op("reduce-precision", "f32", x, exponent_bits=e, mantissa_bits=mbits)
        want = np.asarray(lax.reduce_precision(x, e, mbits))
        np.testing.assert_array_equal(got, want, err_msg=f"e{e}m{mbits}")


# ---- data movement ---------------------------------------------------------------------------
def test_broadcast_with_permuted_dimensions():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = op("broadcast", array("f32", (3, 4, 2)), x, dimensions=(2, 0))
    same(out, np.broadcast_to(x.T[:, None, :], (3, 4, 2)))


def test_transpose_reshape_reverse_slice():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    same(op("transpose", array("s32", (4, 2, 3)), x, dimensions=(2, 0, 1)), x.transpose(2, 0, 1))
    same(op("reshape", array("s32", (6, 4)), x), x.reshape(6, 4))
    same(op("reverse", "s32", x, dimensions=(0, 2)), x[::-1, :, ::-1])
    same(op("slice", array("s32", (1, 2, 2)), x, slice=((1, 2, 1), (0, 3, 2), (1, 4, 2))), x[1:2, 0:3:2, 1:4:2])


def test_bitcast_follows_layouts():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out_shape = ArrayShape(from_numpy(np.float32), (3, 2), (False, False), Layout((0, 1)))
    same(op("bitcast", out_shape, x), x.T)  # same bytes, read column-major
    same(op("bitcast", array("f32", (3, 2)), x), x.reshape(3, 2))


def test_dynamic_slice_clamps_starts():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    for i, j, ci, cj in [(3, 4, 2, 3), (-2, 1, 0, 1), (1, 100, 1, 3)]:
        out = op("dynamic-slice", array("f32", (2, 2)), x, np.int32(i), np.int32(j), dynamic_slice_sizes=(2, 2))
        same(out, x[ci:ci + 2, cj:cj + 2])
        if i >= 0 and j >= 0:  # JAX wraps negative starts before XLA clamps
            same(out, np.asarray(lax.dynamic_slice(x, (i, j), (2, 2))))


def test_dynamic_update_slice_clamps_starts():
    x = np.zeros((4, 5), np.int32)
    u = np.ones((2, 3), np.int32)
    for i, j, ci, cj in [(3, 4, 2, 2), (-1, -7, 0, 0), (1, 1, 1, 1)]:
        out = op("dynamic-update-slice", "s32", x, u, np.int32(i), np.int32(j))
        want = x.copy()
        want[ci:ci + 2, cj:cj + 3] = 1
        same(out, want)
    assert not x.any()  # the operand is not modified


def test_pad_negative_and_interior():
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    config = ((1, -1, 1), (-2, 2, 0))
    out = op("pad", array("f32", (3, 3)), x, np.float32(9), padding=config)
    same(out, np.asarray(lax.pad(x, np.float32(9), config)))
    config2 = ((0, 0, 2), (-1, -1, 1))
    out2 = op("pad", array("f32", (4, 3)), x, np.float32(0), padding=config2)
    same(out2, np.asarray(lax.pad(x, np.float32(0), config2)))


def test_concatenate_and_iota():
    a = np.ones((2, 2), np.int32)
    b = np.zeros((2, 1), np.int32)
    same(op("concatenate", array("s32", (2, 3)), a, b, dimensions=(1,)), np.concatenate([a, b], 1))
    m = HloModule("m")
    c = HloComputation("entry")
    m.add_computation(c, entry=True)
    c.root = c.add_instruction(HloInstruction("iota", array("bf16", (2, 3)), [], {"iota_dimension": 1}))
    same(evaluate(m, [])[0], np.broadcast_to(np.arange(3), (2, 3)).astype(ml_dtypes.bfloat16))


# ---- reduce ----------------------------------------------------------------------------------
def reduce_module(reducer: HloComputation, inputs, inits, dims, out_shape) -> HloModule:
    m = HloModule("m")
    m.add_computation(reducer)
    c = HloComputation("entry")
    m.add_computation(c, entry=True)
    ps = [c.add_parameter(shape_of(a)) for a in list(inputs) + list(inits)]
    c.root = c.add_instruction(HloInstruction("reduce", out_shape, ps, {"dimensions": dims, "to_apply": reducer}))
    return m


@pytest.mark.parametrize("opcode,ufunc", [("add", np.add), ("maximum", np.maximum), ("minimum", np.minimum),
                                          ("multiply", np.multiply)])
def test_reduce_recognised_reducers(opcode, ufunc):
    x = np.random.default_rng(6).standard_normal((3, 4, 5)).astype(np.float32)
    init = np.float32(0.5)
    m = reduce_module(binop_computation(opcode, "f32"), [x], [init], (0, 2), array("f32", (4,)))
    got = evaluate(m, [x, np.asarray(init)])[0]
    np.testing.assert_allclose(got, ufunc(ufunc.reduce(x, axis=(0, 2)), init), rtol=1e-6)


def test_reduce_generic_reducer_folds_in_order():
    # subtract is not associative: a fold from init in index order gives init - sum(x).
    x = np.arange(1, 7, dtype=np.int32).reshape(2, 3)
    m = reduce_module(binop_computation("subtract", "s32"), [x], [np.int32(100)], (1,), array("s32", (2,)))
    same(evaluate(m, [x, np.asarray(np.int32(100))])[0], np.array([94, 85], np.int32))


def test_reduce_with_nan_and_empty():
    x = np.array([[1.0, np.nan], [2.0, 3.0]], np.float32)
    m = reduce_module(binop_computation("maximum", "f32"), [x], [np.float32(-np.inf)], (1,), array("f32", (2,)))
    same(evaluate(m, [x, np.asarray(np.float32(-np.inf))])[0], np.array([np.nan, 3.0], np.float32))
    e = np.zeros((3, 0), np.float32)
    m2 = reduce_module(binop_computation("add", "f32"), [e], [np.float32(7)], (1,), array("f32", (3,)))
    same(evaluate(m2, [e, np.asarray(np.float32(7))])[0], np.full(3, 7, np.float32))


def argmax_reducer() -> HloComputation:
    """(value, index) max with first index on ties; NaN wins, as in jnp.argmax."""
    c = HloComputation("argmax")
    av, ai, bv, bi = (c.add_parameter(scalar(t)) for t in ("f32", "s32", "f32", "s32"))
    pred = array("pred", ())
    gt = c.add_instruction(HloInstruction("compare", pred, [av, bv], {"direction": "GT"}))
    nan = c.add_instruction(HloInstruction("compare", pred, [av, av], {"direction": "NE"}))
    eq = c.add_instruction(HloInstruction("compare", pred, [av, bv], {"direction": "EQ"}))
    lt_i = c.add_instruction(HloInstruction("compare", pred, [ai, bi], {"direction": "LT"}))
    tie = c.add_instruction(HloInstruction("and", pred, [eq, lt_i]))
    keep_a = c.add_instruction(HloInstruction("or", pred, [gt, nan]))
    keep_a = c.add_instruction(HloInstruction("or", pred, [keep_a, tie]))
    v = c.add_instruction(HloInstruction("select", scalar("f32"), [keep_a, av, bv]))
    i = c.add_instruction(HloInstruction("select", scalar("s32"), [keep_a, ai, bi]))
    c.root = c.add_instruction(HloInstruction("tuple", TupleShape((scalar("f32"), scalar("s32"))), [v, i]))
    return c


def test_variadic_reduce_argmax():
    x = np.array([[1.0, 5.0, 5.0, 2.0], [np.nan, 1.0, 9.0, 9.0], [0.0, -1.0, 3.0, 3.5]], np.float32)
    idx = np.broadcast_to(np.arange(4, dtype=np.int32), x.shape).copy()
    out_shape = TupleShape((array("f32", (3,)), array("s32", (3,))))
    m = reduce_module(argmax_reducer(), [x, idx], [np.float32(-np.inf), np.int32(0)], (1,), out_shape)
    vals, args = evaluate(m, [x, idx, np.asarray(np.float32(-np.inf)), np.asarray(np.int32(0))])
    same(args, np.asarray(jnp.argmax(x, axis=1)).astype(np.int32))
    same(vals, np.array([5.0, np.nan, 3.5], np.float32))


def test_reduce_pred_and_integers():
    b = np.array([[True, False], [True, True]])
    m = reduce_module(binop_computation("and", "pred"), [b], [np.bool_(True)], (1,), array("pred", (2,)))
    same(evaluate(m, [b, np.asarray(True)])[0], np.array([False, True]))
    i = np.array([[2**30, 2**30, 2**30]], np.int32)
    m2 = reduce_module(binop_computation("add", "s32"), [i], [np.int32(0)], (1,), array("s32", (1,)))
    same(evaluate(m2, [i, np.asarray(np.int32(0))])[0], np.array([-(2**30)], np.int32))  # wraps


# ---- control flow ----------------------------------------------------------------------------
def counting_while(limit: int) -> HloModule:
    """while (i < limit) { i += 1; x *= 2 } on (s32 i, f32 x)."""
    st = TupleShape((scalar("s32"), scalar("f32")))
    m = HloModule("m")
    cond = HloComputation("cond")
    p = cond.add_parameter(st)
    i = cond.add_instruction(HloInstruction("get-tuple-element", scalar("s32"), [p], {"index": 0}))
    lim = cond.add_instruction(HloInstruction("constant", scalar("s32")))
    lim.literal = np.int32(limit)
    cond.root = cond.add_instruction(HloInstruction("compare", array("pred", ()), [i, lim], {"direction": "LT"}))
    body = HloComputation("body")
    p = body.add_parameter(st)
    i = body.add_instruction(HloInstruction("get-tuple-element", scalar("s32"), [p], {"index": 0}))
    x = body.add_instruction(HloInstruction("get-tuple-element", scalar("f32"), [p], {"index": 1}))
    one = body.add_instruction(HloInstruction("constant", scalar("s32")))
    one.literal = np.array(1, np.int32)
    i2 = body.add_instruction(HloInstruction("add", scalar("s32"), [i, one]))
    x2 = body.add_instruction(HloInstruction("add", scalar("f32"), [x, x]))
    body.root = body.add_instruction(HloInstruction("tuple", st, [i2, x2]))
    m.add_computation(cond)
    m.add_computation(body)
    e = HloComputation("entry")
    m.add_computation(e, entry=True)
    a, b = e.add_parameter(scalar("s32")), e.add_parameter(scalar("f32"))
    t = e.add_instruction(HloInstruction("tuple", st, [a, b]))
    e.root = e.add_instruction(HloInstruction("while", st, [t], {"condition": cond, "body": body}))
    return m


def test_while_loop():
    i, x = evaluate(counting_while(5), [np.int32(1), np.float32(1.5)])
    same(i, np.int32(5))
    same(x, np.float32(1.5 * 16))


def conditional_module(pred_form: bool) -> HloModule:
    m = HloModule("m")
    branches = []
    for k, opcode in enumerate(("negate", "exponential", "sine")):
        b = HloComputation(f"branch{k}")
        p = b.add_parameter(scalar("f32"))
        b.root = b.add_instruction(HloInstruction(opcode, scalar("f32"), [p]))
        m.add_computation(b)
        branches.append(b)
    e = HloComputation("entry")
    m.add_computation(e, entry=True)
    sel = e.add_parameter(scalar("pred" if pred_form else "s32"))
    x = e.add_parameter(scalar("f32"))
    n = 2 if pred_form else 3
    attrs = ({"true_computation": branches[0], "false_computation": branches[1]} if pred_form
             else {"branch_computations": tuple(branches)})
    e.root = e.add_instruction(HloInstruction("conditional", scalar("f32"), [sel] + [x] * n, attrs))
    return m


def test_conditional_pred_and_index_forms():
    x = np.float32(0.5)
    same(evaluate(conditional_module(True), [np.bool_(True), x])[0], np.float32(-0.5))
    same(evaluate(conditional_module(True), [np.bool_(False), x])[0], np.float32(np.exp(0.5)))
    m = conditional_module(False)
    for index, want in [(0, -0.5), (1, np.exp(0.5)), (2, np.sin(0.5)), (7, np.sin(0.5)), (-1, np.sin(0.5))]:
        same(evaluate(m, [np.int32(index), x])[0], np.float32(want))


def test_map_and_fusion_and_call():
    m = HloModule("m")
    f = binop_computation("multiply", "f32", "mul")
    m.add_computation(f)
    e = HloComputation("entry")
    m.add_computation(e, entry=True)
    a, b = e.add_parameter(array("f32", (3,))), e.add_parameter(array("f32", (3,)))
    mp = e.add_instruction(HloInstruction("map", array("f32", (3,)), [a, b], {"dimensions": (0,), "to_apply": f}))
    fused = HloComputation("fused")
    pa, pb = fused.add_parameter(array("f32", (3,))), fused.add_parameter(array("f32", (3,)))
    fused.root = fused.add_instruction(HloInstruction("subtract", array("f32", (3,)), [pa, pb]))
    m.add_computation(fused)
    fu = e.add_instruction(HloInstruction("fusion", array("f32", (3,)), [mp, a], {"kind": "kLoop", "calls": fused}))
    fused.fusion_instruction = fu
    cl = e.add_instruction(HloInstruction("call", array("f32", (3,)), [fu, fu], {"to_apply": fused}))
    e.root = e.add_instruction(HloInstruction("tuple", TupleShape((array("f32", (3,)),) * 2), [fu, cl]))
    x, y = np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32)
    out = evaluate(m, [x, y])
    same(out[0], x * y - x)
    same(out[1], np.zeros(3, np.float32))


def test_tokens_and_after_all_flatten_away():
    m = HloModule("m")
    e = HloComputation("entry")
    m.add_computation(e, entry=True)
    a = e.add_parameter(array("f32", (2,)))
    from hlofuse.hlo.shapes import TOKEN_SHAPE
    tok = e.add_instruction(HloInstruction("after-all", TOKEN_SHAPE, []))
    dep = e.add_instruction(HloInstruction("add-dependency", a.shape, [a, tok]))
    bar = e.add_instruction(HloInstruction("opt-barrier", a.shape, [dep]))
    e.root = e.add_instruction(HloInstruction("tuple", TupleShape((a.shape, TOKEN_SHAPE)), [bar, tok]))
    out = evaluate(m, [np.ones(2, np.float32)])
    assert len(out) == 1
    same(out[0], np.ones(2, np.float32))
    assert Interpreter(m).call(e, [np.ones(2, np.float32)])[1] is TOKEN


# ---- argument validation ---------------------------------------------------------------------
def test_evaluate_validates_arguments():
    m = counting_while(3)
    with pytest.raises(InputError, match="takes 2 arguments, got 1"):
        evaluate(m, [np.int32(0)])
    with pytest.raises(InputError, match="element type f32"):
        evaluate(m, [np.int32(0), np.float64(1.0)])
    with pytest.raises(InputError, match="dimensions"):
        evaluate(m, [np.int32(0), np.zeros(2, np.float32)])


def test_elided_constant_is_reported():
    m = HloModule("m")
    e = HloComputation("entry")
    m.add_computation(e, entry=True)
    e.root = e.add_instruction(HloInstruction("constant", array("f32", (2,)), [], {}, "c"))
    with pytest.raises(UnsupportedError, match="constant c"):
        evaluate(m, [])


def test_python_scalars_take_the_parameter_type():
    i, x = evaluate(counting_while(4), [1, 0.5])
    same(i, np.int32(4))
    same(x, np.float32(4.0))


def test_variadic_reduce_argmax_long_rows_pairwise():
    rng = np.random.default_rng(9)
    x = rng.integers(0, 20, (3, 1000)).astype(np.float32)  # many ties: first index must win
    x[1, 500] = np.nan
    idx = np.broadcast_to(np.arange(1000, dtype=np.int32), x.shape).copy()
    out_shape = TupleShape((array("f32", (3,)), array("s32", (3,))))
    m = reduce_module(argmax_reducer(), [x, idx], [np.float32(-np.inf), np.int32(0)], (1,), out_shape)
    vals, args = evaluate(m, [x, idx, np.asarray(np.float32(-np.inf)), np.asarray(np.int32(0))])
    same(args, np.asarray(jnp.argmax(x, axis=1)).astype(np.int32))

