"""Rank-0 values stay rank 0 through the compiled backends: entry results that are parameters
or constants, tuples of scalars, and every library rule that takes or returns scalars
(dynamic-slice, dynamic-update-slice, conditional with a pred or s32 index, while with a
scalar carry, pad values, reduce inits, clamp bounds, calls). Each module runs on cpu (fusion
on and off) and gpu-emulated; the expected values, shapes and dtypes are the interpreter's."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.runtime.io import check_arguments, contiguous

BACKENDS = [("cpu", True), ("cpu", False), ("gpu-emulated", True)]

ADD_S32 = "add { a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT s = s32[] add(a, b) }\n"
ADD_F32 = "addf { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"

# name -> (module text, arguments)
CASES: dict[str, tuple[str, list]] = {
    "root_param_f32": ("ENTRY e { ROOT a = f32[] parameter(0) }", [np.float32(2.5)]),
    "root_param_s32": ("ENTRY e { ROOT a = s32[] parameter(0) }", [np.int32(-7)]),
    "root_param_u32": ("ENTRY e { ROOT a = u32[] parameter(0) }", [np.uint32(4000000000)]),
    "root_param_pred": ("ENTRY e { ROOT a = pred[] parameter(0) }", [np.bool_(True)]),
    "root_param_0d_array": ("ENTRY e { ROOT a = f64[] parameter(0) }", [np.array(1.25)]),
    "root_second_param": ("ENTRY e { a = f32[3] parameter(0)\n ROOT b = s64[] parameter(1) }",
                          [np.ones(3, np.float32), np.int64(9)]),
    "root_constant": ("ENTRY e { ROOT c = f32[] constant(1.5) }", []),
    "root_constant_s8": ("ENTRY e { ROOT c = s8[] constant(-3) }", []),
    "tuple_of_scalars": ("ENTRY e { a = f32[] parameter(0)\n b = s32[] parameter(1)\n c = u8[] constant(7)\n"
                         " d = f32[] negate(a)\n ROOT t = (f32[], s32[], u8[], f32[]) tuple(a, b, c, d) }",
                         [np.float32(3), np.int32(5)]),
    "nested_tuple_of_scalars": ("ENTRY e { a = f32[] parameter(0)\n b = pred[] parameter(1)\n"
                                " i = (f32[], pred[]) tuple(a, b)\n ROOT t = ((f32[], pred[]), f32[]) tuple(i, a) }",
                                [np.float32(-1), np.bool_(False)]),
    "tuple_param_of_scalars": ("ENTRY e { p = (f32[], s32[]) parameter(0)\n"
                               " ROOT g = s32[] get-tuple-element(p), index=1 }",
                               [(np.float32(1), np.int32(42))]),
    "dynamic_slice_s32": ("ENTRY e { o = f32[6] parameter(0)\n i = s32[] parameter(1)\n"
                          " ROOT d = f32[2] dynamic-slice(o, i), dynamic_slice_sizes={2} }",
                          [np.arange(6, dtype=np.float32), np.int32(3)]),
    "dynamic_slice_u32_2d": ("ENTRY e { o = f32[4,5] parameter(0)\n i = u32[] parameter(1)\n j = u32[] parameter(2)\n"
                             " ROOT d = f32[2,3] dynamic-slice(o, i, j), dynamic_slice_sizes={2,3} }",
                             [np.arange(20, dtype=np.float32).reshape(4, 5), np.uint32(1), np.uint32(9)]),
    "dynamic_slice_to_scalar": ("ENTRY e { o = f32[6] parameter(0)\n i = s32[] parameter(1)\n"
                                " d = f32[1] dynamic-slice(o, i), dynamic_slice_sizes={1}\n"
                                " ROOT r = f32[] reshape(d) }",
                                [np.arange(6, dtype=np.float32), np.int32(4)]),
    "dus_u32": ("ENTRY e { a = f32[8] parameter(0)\n u = f32[2] parameter(1)\n i = u32[] parameter(2)\n"
                " ROOT d = f32[8] dynamic-update-slice(a, u, i) }",
                [np.zeros(8, np.float32), np.array([1, 2], np.float32), np.uint32(5)]),
    "dus_s32_2d_clamped": ("ENTRY e { a = s32[3,4] parameter(0)\n u = s32[2,2] parameter(1)\n"
                           " i = s32[] parameter(2)\n j = s32[] parameter(3)\n"
                           " ROOT d = s32[3,4] dynamic-update-slice(a, u, i, j) }",
                           [np.zeros((3, 4), np.int32), np.ones((2, 2), np.int32), np.int32(-4), np.int32(7)]),
    "dus_scalar_constant_index": ("ENTRY e { a = f32[5] parameter(0)\n u = f32[1] parameter(1)\n"
                                  " i = s32[] constant(2)\n ROOT d = f32[5] dynamic-update-slice(a, u, i) }",
                                  [np.zeros(5, np.float32), np.array([3], np.float32)]),
    "conditional_pred": ("t { p = f32[] parameter(0)\n ROOT n = f32[] negate(p) }\n"
                         "f { p = f32[] parameter(0)\n ROOT c = f32[] constant(0) }\n"
                         "ENTRY e { b = pred[] parameter(0)\n x = f32[] parameter(1)\n"
                         " ROOT c = f32[] conditional(b, x, x), true_computation=t, false_computation=f }",
                         [np.bool_(True), np.float32(4)]),
    "conditional_pred_false_passthrough": ("t { p = s32[] parameter(0)\n ROOT n = s32[] negate(p) }\n"
                                           "f { ROOT p = s32[] parameter(0) }\n"
                                           "ENTRY e { b = pred[] parameter(0)\n x = s32[] parameter(1)\n"
                                           " ROOT c = s32[] conditional(b, x, x), true_computation=t, "
                                           "false_computation=f }",
                                           [np.bool_(False), np.int32(6)]),
    "conditional_index": ("b0 { p = f32[] parameter(0)\n ROOT n = f32[] negate(p) }\n"
                          "b1 { p = f32[] parameter(0)\n ROOT m = f32[] multiply(p, p) }\n"
                          "b2 { ROOT p = f32[] parameter(0) }\n"
                          "ENTRY e { k = s32[] parameter(0)\n x = f32[] parameter(1)\n"
                          " ROOT c = f32[] conditional(k, x, x, x), branch_computations={b0, b1, b2} }",
                          [np.int32(1), np.float32(3)]),
    "conditional_index_out_of_range": ("b0 { p = f32[] parameter(0)\n ROOT n = f32[] negate(p) }\n"
                                       "b1 { ROOT p = f32[] parameter(0) }\n"
                                       "ENTRY e { k = s32[] parameter(0)\n x = f32[] parameter(1)\n"
                                       " ROOT c = f32[] conditional(k, x, x), branch_computations={b0, b1} }",
                                       [np.int32(-5), np.float32(3)]),
    "conditional_tuple_of_scalars": ("b0 { p = (f32[], s32[]) parameter(0)\n a = f32[] get-tuple-element(p), index=0\n"
                                     " b = s32[] get-tuple-element(p), index=1\n ROOT q = (s32[], f32[]) tuple(b, a) }\n"
                                     "b1 { p = (f32[], s32[]) parameter(0)\n a = s32[] constant(1)\n b = f32[] constant(2)\n"
                                     " ROOT q = (s32[], f32[]) tuple(a, b) }\n"
                                     "ENTRY e { k = s32[] parameter(0)\n x = f32[] parameter(1)\n y = s32[] parameter(2)\n"
                                     " t = (f32[], s32[]) tuple(x, y)\n"
                                     " ROOT c = (s32[], f32[]) conditional(k, t, t), branch_computations={b0, b1} }",
                                     [np.int32(0), np.float32(2), np.int32(3)]),
    "while_scalar_carry": ("cond { p = (s32[], f32[]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
                           " n = s32[] constant(5)\n ROOT lt = pred[] compare(i, n), direction=LT }\n"
                           "body { p = (s32[], f32[]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
                           " x = f32[] get-tuple-element(p), index=1\n one = s32[] constant(1)\n"
                           " i2 = s32[] add(i, one)\n y = f32[] add(x, x)\n ROOT t = (s32[], f32[]) tuple(i2, y) }\n"
                           "ENTRY e { i = s32[] parameter(0)\n x = f32[] parameter(1)\n t = (s32[], f32[]) tuple(i, x)\n"
                           " ROOT w = (s32[], f32[]) while(t), condition=cond, body=body }",
                           [np.int32(1), np.float32(1.5)]),
    "while_scalar_only": ("cond { p = s32[] parameter(0)\n n = s32[] constant(10)\n"
                          " ROOT lt = pred[] compare(p, n), direction=LT }\n"
                          "body { p = s32[] parameter(0)\n two = s32[] constant(2)\n ROOT m = s32[] add(p, two) }\n"
                          "ENTRY e { i = s32[] parameter(0)\n ROOT w = s32[] while(i), condition=cond, body=body }",
                          [np.int32(3)]),
    "while_zero_trips_returns_param": ("cond { p = s32[] parameter(0)\n ROOT f = pred[] constant(false) }\n"
                                       "body { ROOT p = s32[] parameter(0) }\n"
                                       "ENTRY e { i = s32[] parameter(0)\n"
                                       " ROOT w = s32[] while(i), condition=cond, body=body }",
                                       [np.int32(11)]),
    "pad_scalar_value_param": ("ENTRY e { x = f32[3] parameter(0)\n v = f32[] parameter(1)\n"
                               " ROOT p = f32[6] pad(x, v), padding=1_2 }",
                               [np.ones(3, np.float32), np.float32(-2)]),
    "reduce_scalar_init_param": (ADD_F32 + "ENTRY e { x = f32[4] parameter(0)\n i = f32[] parameter(1)\n"
                                 " ROOT r = f32[] reduce(x, i), dimensions={0}, to_apply=addf }",
                                 [np.arange(4, dtype=np.float32), np.float32(10)]),
    "clamp_scalar_bounds": ("ENTRY e { lo = s32[] parameter(0)\n x = s32[5] parameter(1)\n hi = s32[] parameter(2)\n"
                            " ROOT c = s32[5] clamp(lo, x, hi) }",
                            [np.int32(-1), np.array([-5, -1, 0, 3, 9], np.int32), np.int32(3)]),
    "broadcast_scalar_param": ("ENTRY e { x = u32[] parameter(0)\n ROOT b = u32[2,3] broadcast(x), dimensions={} }",
                               [np.uint32(17)]),
    "call_returns_scalar": ("c { p = f32[] parameter(0)\n ROOT q = f32[] parameter(1) }\n"
                            "ENTRY e { a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
                            " ROOT r = f32[] call(a, b), to_apply=c }",
                            [np.float32(1), np.float32(2)]),
    "sort_then_scalar_slice": ("lt { a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
                               " ROOT c = pred[] compare(a, b), direction=LT }\n"
                               "ENTRY e { x = f32[5] parameter(0)\n i = s32[] parameter(1)\n"
                               " s = f32[5] sort(x), dimensions={0}, to_apply=lt\n"
                               " d = f32[1] dynamic-slice(s, i), dynamic_slice_sizes={1}\n"
                               " ROOT r = f32[] reshape(d) }",
                               [np.array([3, 1, 4, 1, 5], np.float32), np.int32(2)]),
    "scatter_scalar_index_and_update": (ADD_S32 + "ENTRY e { o = s32[4] parameter(0)\n i = s32[] parameter(1)\n"
                                        " u = s32[] parameter(2)\n"
                                        " ROOT s = s32[4] scatter(o, i, u), update_window_dims={}, "
                                        "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
                                        "index_vector_dim=0, to_apply=add }",
                                        [np.arange(4, dtype=np.int32), np.int32(2), np.int32(10)]),
    "gather_scalar_index": ("ENTRY e { o = f32[5,2] parameter(0)\n i = u32[] parameter(1)\n"
                            " ROOT g = f32[2] gather(o, i), offset_dims={0}, collapsed_slice_dims={0}, "
                            "start_index_map={0}, index_vector_dim=0, slice_sizes={1,2} }",
                            [np.arange(10, dtype=np.float32).reshape(5, 2), np.uint32(3)]),
    "get_dimension_size": ("ENTRY e { x = f32[7,3] parameter(0)\n"
                           " ROOT s = s32[] get-dimension-size(x), dimensions={0} }",
                           [np.zeros((7, 3), np.float32)]),
    "dus_then_scalar_result": ("ENTRY e { a = f32[4] parameter(0)\n u = f32[1] parameter(1)\n i = u32[] parameter(2)\n"
                               " d = f32[4] dynamic-update-slice(a, u, i)\n"
                               " ROOT t = (f32[4], u32[]) tuple(d, i) }",
                               [np.zeros(4, np.float32), np.array([5], np.float32), np.uint32(2)]),
}


@pytest.mark.parametrize("target,fusion", BACKENDS, ids=[f"{t}-{'fused' if f else 'unfused'}" for t, f in BACKENDS])
@pytest.mark.parametrize("name", sorted(CASES))
def test_scalars_keep_rank_zero(name: str, target: str, fusion: bool) -> None:
    text, args = CASES[name]
    module = hlofuse.parse_hlo(f"HloModule {name}\n{text}\n")
    want = [np.asarray(w) for w in hlofuse.compile(module, target="interpreter")(*args)]
    got = hlofuse.compile(module, target=target, fusion=fusion)(*args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray)
        assert (g.dtype, g.shape) == (w.dtype, w.shape), f"got {g.dtype}{list(g.shape)}, want {w.dtype}{list(w.shape)}"
        np.testing.assert_array_equal(g, w)


def test_interpreter_agrees_on_the_leaf_shapes() -> None:
    """The oracle itself returns the declared shapes (a scalar root is rank 0)."""
    for name, (text, args) in CASES.items():
        module = hlofuse.parse_hlo(f"HloModule {name}\n{text}\n")
        leaves = module.entry.root.shape.leaves() if module.entry.root.shape.is_tuple else [module.entry.root.shape]
        outs = hlofuse.compile(module, target="interpreter")(*args)
        assert [tuple(np.asarray(o).shape) for o in outs] == [tuple(s.dims) for s in leaves], name


@pytest.mark.parametrize("value", [np.float32(1), np.array(2.0), np.ones((2, 3))[:, 1], np.ones((3, 4)).T,
                                   np.zeros((0, 2)), np.array([[1, 2]], np.int8)])
def test_contiguous_keeps_the_shape(value) -> None:
    got = contiguous(value)
    assert got.shape == np.shape(value) and got.flags.c_contiguous
    np.testing.assert_array_equal(got, value)


def test_checked_scalar_argument_is_rank_zero() -> None:
    module = hlofuse.parse_hlo("HloModule m\nENTRY e { a = f32[] parameter(0)\n b = (s32[], f32[2]) parameter(1)\n"
                               " ROOT c = f32[] add(a, a) }")
    a, b = check_arguments(module, [np.float32(1), (np.int32(2), np.ones(2, np.float32))])
    assert a.shape == () and b[0].shape == () and b[1].shape == (2,)


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
def test_scalar_result_is_a_copy_of_the_argument(target: str) -> None:
    """A parameter returned as the result comes back as a new array: writing it leaves the argument."""
    module = hlofuse.parse_hlo("HloModule m\nENTRY e { ROOT a = f32[] parameter(0) }")
    arg = np.array(5.0, np.float32)
    (out,) = hlofuse.compile(module, target=target)(arg)
    assert out.shape == () and out is not arg
    out[...] = 1
    assert arg == 5

