"""Reference rules of reduce-window, select-and-scatter, sort and topk checked against jax.lax."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from jax import lax  # noqa: E402

from hlofuse.hlo.dtypes import from_numpy  # noqa: E402
from hlofuse.hlo.ir import HloComputation, HloInstruction  # noqa: E402
from hlofuse.hlo.shapes import TupleShape, array  # noqa: E402
from interp_ops_support import (  # noqa: E402
    binary_comp,
    close,
    instruction,
    make_window,
    opaque_add,
    pred_constant,
    rand,
    run,
    scalar_computation,
    shape_of,
    StubInterp,
)
from interp_ops_support import x64  # noqa: E402,F401  (autouse fixture)


# ---- reduce-window and select-and-scatter --------------------------------------------------------
RW_CASES = [
    # input shape, window, strides, padding, base dilation, window dilation
    ((6, 7), (2, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1)),
    ((8, 9), (3, 3), (2, 2), ((1, 1), (1, 0)), (1, 1), (1, 1)),
    ((5, 6), (2, 2), (1, 2), ((2, 1), (0, 3)), (2, 1), (1, 1)),
    ((9, 8), (2, 3), (1, 1), ((0, 0), (1, 1)), (1, 1), (2, 2)),
    ((7, 6), (3, 2), (2, 1), ((1, 2), (2, 0)), (2, 3), (2, 1)),
    ((11,), (4,), (3,), ((2, 2),), (1,), (1,)),
    ((8, 7), (2, 2), (1, 2), ((-1, 1), (2, -2)), (1, 2), (1, 1)),
    ((2, 6, 5, 3), (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)), (1, 1, 1, 1), (1, 1, 1, 1)),
]

RW_OPS = {"add": (lax.add, 0.0), "maximum": (lax.max, -np.inf), "minimum": (lax.min, np.inf),
          "multiply": (lax.mul, 1.0)}


@pytest.mark.parametrize("case", RW_CASES)
@pytest.mark.parametrize("opcode", list(RW_OPS))
def test_reduce_window_matches_jax(case, opcode):
    shape, win, strides, padding, base, dil = case
    x = rand(shape, np.float32, 0.5, 1.5)
    fn, init = RW_OPS[opcode]
    want = lax.reduce_window(x, np.float32(init), fn, win, strides, padding, base, dil)
    inst = instruction("reduce-window", shape_of(want), [shape_of(x), array("f32", ())],
                       window=make_window(win, strides, padding, base, dil), to_apply=binary_comp(opcode))
    close(run(inst, x, np.float32(init)), want, rtol=1e-5)


@pytest.mark.parametrize("case", RW_CASES[1:5])
def test_reduce_window_padding_is_not_visited(case):
    """A non-identity init (1) is added once, not once per padding element."""
    shape, win, strides, padding, base, dil = case
    x = rand(shape, np.float32)
    want = lax.reduce_window(x, np.float32(1), lambda a, b: a + b, win, strides, padding, base, dil)
    inst = instruction("reduce-window", shape_of(want), [shape_of(x), array("f32", ())],
                       window=make_window(win, strides, padding, base, dil), to_apply=opaque_add())
    close(run(inst, x, np.float32(1)), want, rtol=1e-5)


def _argmax_comp():
    """(value, index) pairs: keep the larger value; on ties the smaller index."""
    comp = HloComputation("argmax")
    av, ai, bv, bi = (comp.add_parameter(array(t, ()), f"x{i}") for i, t in enumerate(["f32", "s32", "f32", "s32"]))
    pred = array("pred", ())
    gt = comp.add_instruction(HloInstruction("compare", pred, [av, bv], {"direction": "GT"}))
    eq = comp.add_instruction(HloInstruction("compare", pred, [av, bv], {"direction": "EQ"}))
    lt = comp.add_instruction(HloInstruction("compare", pred, [ai, bi], {"direction": "LT"}))
    tie = comp.add_instruction(HloInstruction("and", pred, [eq, lt]))
    take = comp.add_instruction(HloInstruction("or", pred, [gt, tie]))
    v = comp.add_instruction(HloInstruction("select", array("f32", ()), [take, av, bv]))
    i = comp.add_instruction(HloInstruction("select", array("s32", ()), [take, ai, bi]))
    comp.root = comp.add_instruction(HloInstruction("tuple", TupleShape((v.shape, i.shape)), [v, i]))
    return comp


def test_variadic_reduce_window_argmax_matches_jax():
    shape, win, strides, padding, base, dil = RW_CASES[1]
    x = np.round(rand(shape, np.float32, 0, 4))  # ties on purpose
    idx = np.arange(x.size, dtype=np.int32).reshape(shape)

    def argmax(a, b):
        take = (a[0] > b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))
        return lax.select(take, a[0], b[0]), lax.select(take, a[1], b[1])

    init = (np.float32(-np.inf), np.int32(2**31 - 1))
    want_v, want_i = lax.reduce_window((x, idx), init, argmax, win, strides, padding)
    out = TupleShape((shape_of(want_v), shape_of(want_i)))
    inst = instruction("reduce-window", out, [shape_of(x), shape_of(idx), array("f32", ()), array("s32", ())],
                       window=make_window(win, strides, padding), to_apply=_argmax_comp())
    got_v, got_i = run(inst, x, idx, *init)
    close(got_v, want_v, rtol=0, atol=0)
    close(got_i, want_i, rtol=0, atol=0)


def test_variadic_reduce_window_recognised_pair():
    shape, win, strides, padding, base, dil = RW_CASES[2]
    x, y = rand(shape, np.float32), rand(shape, np.int32, -50, 50)
    want_x = lax.reduce_window(x, np.float32(0), lax.add, win, strides, padding, base, dil)
    want_y = lax.reduce_window(y, np.int32(-2**31), lax.max, win, strides, padding, base, dil)
    comp = HloComputation("pair")
    p = [comp.add_parameter(array(t, ()), f"x{i}") for i, t in enumerate(["f32", "s32", "f32", "s32"])]
    s = comp.add_instruction(HloInstruction("add", array("f32", ()), [p[0], p[2]]))
    m = comp.add_instruction(HloInstruction("maximum", array("s32", ()), [p[1], p[3]]))
    comp.root = comp.add_instruction(HloInstruction("tuple", TupleShape((s.shape, m.shape)), [s, m]))
    out = TupleShape((shape_of(want_x), shape_of(want_y)))
    inst = instruction("reduce-window", out, [shape_of(x), shape_of(y), array("f32", ()), array("s32", ())],
                       window=make_window(win, strides, padding, base, dil), to_apply=comp)
    got_x, got_y = run(inst, x, y, np.float32(0), np.int32(-2**31))
    close(got_x, want_x, rtol=1e-5)
    close(got_y, want_y, rtol=0, atol=0)


def _select_comp(direction: str, total_order: bool = False, swap: bool = False):
    def body(comp, p):
        attrs = {"direction": direction}
        if total_order:
            attrs["type"] = "TOTALORDER"
        ops = [p[1], p[0]] if swap else [p[0], p[1]]
        return comp.add_instruction(HloInstruction("compare", array("pred", ()), ops, attrs))
    return scalar_computation("select", body, 2)


SAS_CASES = [
    # input shape, window, strides, padding
    ((6, 8), (2, 2), (2, 2), ((0, 0), (0, 0))),
    ((7, 7), (3, 3), (2, 2), ((1, 1), (1, 1))),
    ((5, 9), (3, 2), (1, 1), ((0, 2), (1, 0))),
    ((2, 6, 6, 3), (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (0, 1), (0, 0))),
]


@pytest.mark.parametrize("case", SAS_CASES)
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("select", ["GE", "GE-totalorder", "general"])
def test_select_and_scatter_is_the_max_pool_gradient(case, ties, select):
    shape, win, strides, padding = case
    x = rand(shape, np.float32, 0, 3)
    if ties:
        x = np.round(x)
    pooled = lax.reduce_window(x, -np.inf, lax.max, win, strides, padding)
    cot = rand(pooled.shape, np.float32)
    want = jax.grad(lambda v: (lax.reduce_window(v, -np.inf, lax.max, win, strides, padding) * cot).sum())(x)
    if select == "general":  # GE written as select(x1 > x0, false, true): evaluated by calls
        sel = HloComputation("not_gt")
        a, b = sel.add_parameter(array("f32", ()), "a"), sel.add_parameter(array("f32", ()), "b")
        gt = sel.add_instruction(HloInstruction("compare", array("pred", ()), [b, a], {"direction": "GT"}))
        sel.root = sel.add_instruction(HloInstruction("select", array("pred", ()),
                                                      [gt, pred_constant(sel, False), pred_constant(sel, True)]))
    else:
        sel = _select_comp("GE", total_order=select.endswith("totalorder"))
    inst = instruction("select-and-scatter", shape_of(want), [shape_of(x), shape_of(cot), array("f32", ())],
                       window=make_window(win, strides, padding), select=sel, scatter=binary_comp("add"))
    close(run(inst, x, cot, np.float32(0)), want, rtol=1e-6)


def test_select_and_scatter_le_picks_the_first_minimum():
    x = np.array([[3, 1, 1, 2], [1, 5, 0, 0]], dtype=np.float32)
    src = np.array([[10, 20]], dtype=np.float32)
    inst = instruction("select-and-scatter", shape_of(x), [shape_of(x), shape_of(src), array("f32", ())],
                       window=make_window((2, 2), (2, 2)), select=_select_comp("LE"), scatter=binary_comp("add"))
    want = np.zeros_like(x)
    want[0, 1] = 10  # first of the two 1s in row-major window order
    want[1, 2] = 20  # first of the two 0s
    close(run(inst, x, src, np.float32(0)), want, rtol=0, atol=0)




# ---- sort and topk ------------------------------------------------------------------------------
def _compare_comp(direction, dtypes, total_order=False, swap=False):
    """Comparator over (lhs_i, rhs_i) pairs of `dtypes` comparing operand 0 only."""
    comp = HloComputation("cmp")
    p = [comp.add_parameter(array(t, ()), f"x{i}") for i, t in enumerate(t for t in dtypes for _ in (0, 1))]
    attrs = {"direction": direction, **({"type": "TOTALORDER"} if total_order else {})}
    ops = [p[1], p[0]] if swap else [p[0], p[1]]
    comp.root = comp.add_instruction(HloInstruction("compare", array("pred", ()), ops, attrs))
    return comp


def _sort_inst(operands, comp, dim, stable=True):
    shapes = [shape_of(o) for o in operands]
    out = TupleShape(tuple(shapes)) if len(operands) > 1 else shapes[0]
    return instruction("sort", out, shapes, dimensions=(dim,), is_stable=stable, to_apply=comp)


@pytest.mark.parametrize("shape,dim", [((10,), 0), ((4, 9), 1), ((7, 3, 5), 0), ((3, 8, 4), 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8])
def test_sort_with_values_matches_jax(shape, dim, dtype):
    keys = rand(shape, dtype, 0, 5)  # few distinct keys: stability matters
    vals = rand(shape, np.float32)
    want_k, want_v = lax.sort((keys, vals), dimension=dim, is_stable=True, num_keys=1)
    name = from_numpy(np.dtype(dtype)).name
    got_k, got_v = run(_sort_inst([keys, vals], _compare_comp("LT", [name, "f32"]), dim), keys, vals)
    close(got_k, want_k, rtol=0, atol=0)
    close(got_v, want_v, rtol=0, atol=0)


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint16, np.bool_])
def test_sort_descending_is_stable(dtype, swap):
    keys = rand((5, 12), np.int32, 0, 4).astype(dtype)
    idx = np.broadcast_to(np.arange(12, dtype=np.int32), keys.shape).copy()
    # GT as compare(p0, p1, GT) or equivalently compare(p1, p0, LT).
    comp = _compare_comp("LT" if swap else "GT", [from_numpy(np.dtype(dtype)).name, "s32"], swap=swap)
    got_k, got_i = run(_sort_inst([keys, idx], comp, 1), keys, idx)
    order = np.argsort(-keys.astype(np.int64), axis=1, kind="stable")  # reference: numpy, by hand
    close(got_k, np.take_along_axis(keys, order, 1), rtol=0, atol=0)
    close(got_i, order.astype(np.int32), rtol=0, atol=0)


def test_sort_totalorder_places_nan_and_signed_zero():
    want = np.array([-np.nan, -np.inf, -1.5, -0.0, 0.0, 2.0, np.inf, np.nan], dtype=np.float32)
    want[0] = -np.abs(np.float32(np.nan))  # a NaN with the sign bit set
    x = want[[5, 0, 7, 3, 1, 6, 4, 2]]
    got = run(_sort_inst([x], _compare_comp("LT", ["f32"], total_order=True), 0), x)
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()


def _lexicographic_comp():
    """(a0 < b0) or (a0 == b0 and a1 < b1): two sort keys, evaluated by calls."""
    comp = HloComputation("lex")
    a0, b0, a1, b1 = (comp.add_parameter(array(t, ()), f"x{i}") for i, t in enumerate(["s32", "s32", "f32", "f32"]))
    pred = array("pred", ())
    lt0 = comp.add_instruction(HloInstruction("compare", pred, [a0, b0], {"direction": "LT"}))
    eq0 = comp.add_instruction(HloInstruction("compare", pred, [a0, b0], {"direction": "EQ"}))
    lt1 = comp.add_instruction(HloInstruction("compare", pred, [a1, b1], {"direction": "LT"}))
    both = comp.add_instruction(HloInstruction("and", pred, [eq0, lt1]))
    comp.root = comp.add_instruction(HloInstruction("or", pred, [lt0, both]))
    return comp


@pytest.mark.parametrize("dim", [0, 1])
def test_sort_general_comparator_matches_jax_two_keys(dim):
    k0 = rand((6, 7), np.int32, 0, 3)
    k1 = np.round(rand((6, 7), np.float32, 0, 3))
    want0, want1 = lax.sort((k0, k1), dimension=dim, is_stable=True, num_keys=2)
    interp = StubInterp()
    got0, got1 = run(_sort_inst([k0, k1], _lexicographic_comp(), dim), k0, k1, interp=interp)
    close(got0, want0, rtol=0, atol=0)
    close(got1, want1, rtol=0, atol=0)
    assert interp.calls > 0


@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_jax(largest):
    x = np.round(rand((3, 4, 10), np.float32, 0, 6))  # ties: lower index first
    k = 4
    want_v, want_i = lax.top_k(x if largest else -x, k)
    if not largest:
        want_v = -want_v
    out = TupleShape((shape_of(np.asarray(want_v)), shape_of(np.asarray(want_i))))
    inst = instruction("topk", out, [shape_of(x)], k=k, largest=largest)
    got_v, got_i = run(inst, x)
    close(got_v, want_v, rtol=0, atol=0)
    close(got_i, want_i, rtol=0, atol=0)


def test_reduce_window_assign_keeps_the_last_visited_element():
    """to_apply returning its second parameter: each window yields its last real element."""
    x = rand((5, 6))
    win, strides, padding = (2, 3), (1, 2), ((1, 0), (0, 2))
    out_rows, out_cols = 5, 3
    want = np.full((out_rows, out_cols), np.float32(-7))
    for r in range(out_rows):
        for c in range(out_cols):
            for i in range(win[0]):
                for j in range(win[1]):
                    rr, cc = r * strides[0] + i - padding[0][0], c * strides[1] + j - padding[1][0]
                    if 0 <= rr < 5 and 0 <= cc < 6:
                        want[r, c] = x[rr, cc]
    assign = scalar_computation("assign", lambda comp, p: p[1], 2)
    inst = instruction("reduce-window", shape_of(want), [shape_of(x), array("f32", ())],
                       window=make_window(win, strides, padding), to_apply=assign)
    close(run(inst, x, np.float32(-7)), want, rtol=0, atol=0)


def test_reduce_window_max_in_a_type_without_infinity():
    """float8_e4m3fn cannot hold -inf, so padding is skipped by masks rather than filled."""
    import ml_dtypes
    x32 = np.round(rand((6, 7), np.float32, -8, 8))
    x = x32.astype(ml_dtypes.float8_e4m3fn)
    win, strides, padding = (3, 2), (2, 1), ((1, 1), (1, 0))
    want = lax.reduce_window(x.astype(np.float32), np.float32(-448), lax.max, win, strides, padding)
    want = np.asarray(want).astype(x.dtype)
    inst = instruction("reduce-window", shape_of(want), [shape_of(x), array("f8e4m3fn", ())],
                       window=make_window(win, strides, padding), to_apply=binary_comp("maximum", "f8e4m3fn"))
    got = run(inst, x, np.array(-448, x.dtype))
    close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("returns", [0, 1])
def test_select_and_scatter_scatter_parameter_order(returns):
    """scatter(source, current): returning parameter 0 stores the source value, parameter 1
    keeps the current (init) value."""
    x = np.array([[1, 5, 2, 0], [3, 4, 9, 1]], dtype=np.float32)
    src = np.array([[10, 20]], dtype=np.float32)
    pick = scalar_computation("pick", lambda comp, p: p[returns], 2)
    inst = instruction("select-and-scatter", shape_of(x), [shape_of(x), shape_of(src), array("f32", ())],
                       window=make_window((2, 2), (2, 2)), select=_select_comp("GE"), scatter=pick)
    want = np.full_like(x, -1)
    if returns == 0:
        want[0, 1], want[1, 2] = 10, 20  # the maxima 5 and 9
    close(run(inst, x, src, np.float32(-1)), want, rtol=0, atol=0)


def test_sort_keyed_on_the_second_operand():
    """compare(p2, p3, LT) orders by operand 1; operand 0 follows the same permutation."""
    a = np.arange(12, dtype=np.int32)
    b = rand((12,), np.int32, 0, 4)
    comp = HloComputation("cmp")
    p = [comp.add_parameter(array(t, ()), f"x{i}") for i, t in enumerate(["s32", "s32", "s32", "s32"])]
    comp.root = comp.add_instruction(HloInstruction("compare", array("pred", ()), [p[2], p[3]], {"direction": "LT"}))
    got_a, got_b = run(_sort_inst([a, b], comp, 0), a, b)
    order = np.argsort(b, kind="stable")
    close(got_a, a[order], rtol=0, atol=0)
    close(got_b, b[order], rtol=0, atol=0)


@pytest.mark.parametrize("seed", range(30))
def test_random_reduce_window_matches_jax(seed):
    r = np.random.default_rng(seed)
    rank = int(r.integers(1, 4))
    shape = tuple(int(r.integers(1, 7)) for _ in range(rank))
    win = tuple(int(r.integers(1, 4)) for _ in range(rank))
    strides = tuple(int(r.integers(1, 3)) for _ in range(rank))
    base = tuple(int(r.integers(1, 3)) for _ in range(rank))
    dil = tuple(int(r.integers(1, 3)) for _ in range(rank))
    padding = []
    for size, k, b, d in zip(shape, win, base, dil):
        lo, hi = int(r.integers(-1, 3)), int(r.integers(-1, 3))
        deficit = (k - 1) * d + 1 - ((size - 1) * b + 1 + lo + hi)
        padding.append((lo, hi + max(deficit, 0)))
    padding = tuple(padding)
    opcode = ["add", "maximum", "minimum"][seed % 3]
    x = rand(shape)
    fn, init = RW_OPS[opcode]
    want = lax.reduce_window(x, np.float32(init), fn, win, strides, padding, base, dil)
    inst = instruction("reduce-window", shape_of(want), [shape_of(x), array("f32", ())],
                       window=make_window(win, strides, padding, base, dil), to_apply=binary_comp(opcode))
    close(run(inst, x, np.float32(init)), want, rtol=1e-5)
