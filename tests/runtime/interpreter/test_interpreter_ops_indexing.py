"""Reference rules of gather and scatter checked against jax.lax over tables of dimension numbers."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from hlofuse.hlo.dtypes import from_numpy  # noqa: E402
from hlofuse.hlo.ir import HloComputation, HloInstruction  # noqa: E402
from hlofuse.hlo.parser import parse_hlo  # noqa: E402
from hlofuse.hlo.shapes import TupleShape, array  # noqa: E402
from hlofuse.runtime.interpreter import evaluate  # noqa: E402
from interp_ops_support import (  # noqa: E402
    RNG,
    binary_comp,
    close,
    instruction,
    opaque_add,
    rand,
    run,
    scalar_computation,
    shape_of,
    StubInterp,
)
from interp_ops_support import x64  # noqa: E402,F401  (autouse fixture)


# ---- gather -------------------------------------------------------------------------------------

GATHER_CASES = [
    # operand shape, indices batch shape, offset_dims, collapsed, start_index_map, op batching,
    # indices batching, slice_sizes
    ((5, 4), (3,), (1,), (0,), (0,), (), (), (1, 4)),
    ((6, 5, 4), (2, 3), (2,), (0, 1), (0, 1), (), (), (1, 1, 4)),
    ((7, 8), (4,), (1, 2), (), (0, 1), (), (), (3, 2)),
    ((7, 8), (4,), (0,), (0,), (0,), (), (), (1, 8)),
    ((6, 7, 5), (3,), (1, 2), (2,), (2, 0), (), (), (2, 7, 1)),
    ((3, 5, 4), (3, 2), (2,), (1,), (1,), (0,), (0,), (1, 1, 4)),
    ((5, 3, 4), (2, 3), (2,), (0,), (0,), (1,), (1,), (1, 1, 4)),
    ((4, 6, 3, 5), (4, 3, 2), (3, 4), (1,), (1, 3), (0,), (0,), (1, 1, 3, 2)),
]


@pytest.mark.parametrize("case", GATHER_CASES)
@pytest.mark.parametrize("ivd_first", [False, True])
def test_gather_matches_jax(case, ivd_first):
    oshape, bshape, offset_dims, collapsed, smap, obatch, ibatch, sizes = case
    operand = rand(oshape)
    # Indices deliberately range past both ends: XLA clamps each start so the slice fits.
    hi = max(oshape) + 3
    indices = RNG.integers(-3, hi, size=(*bshape, len(smap))).astype(np.int32)
    dn = lax.GatherDimensionNumbers(offset_dims, collapsed, smap, obatch, ibatch)
    want = lax.gather(operand, indices, dn, sizes, mode=lax.GatherScatterMode.CLIP)
    ivd = len(bshape)
    hlo_indices = indices
    if ivd_first:
        # Put the index vector first: indices batching dimensions shift up by one.
        hlo_indices, ivd = np.moveaxis(indices, -1, 0), 0
        ibatch = tuple(d + 1 for d in ibatch)
    inst = instruction("gather", shape_of(want), [shape_of(operand), shape_of(hlo_indices)],
                       offset_dims=offset_dims, collapsed_slice_dims=collapsed, start_index_map=smap,
                       operand_batching_dims=obatch, start_indices_batching_dims=ibatch,
                       index_vector_dim=ivd, slice_sizes=sizes)
    close(run(inst, operand, hlo_indices), want, rtol=0, atol=0)


def test_gather_implicit_index_vector_dim():
    operand = rand((6, 3))
    idx = np.array([[0, 5], [9, -1]], dtype=np.int64)
    want = lax.gather(operand, idx[..., None], lax.GatherDimensionNumbers((2,), (0,), (0,)), (1, 3),
                      mode=lax.GatherScatterMode.CLIP)
    inst = instruction("gather", shape_of(want), [shape_of(operand), shape_of(idx)], offset_dims=(2,),
                       collapsed_slice_dims=(0,), start_index_map=(0,), index_vector_dim=2, slice_sizes=(1, 3))
    close(run(inst, operand, idx), want, rtol=0, atol=0)


# ---- scatter ------------------------------------------------------------------------------------
SCATTER_CASES = [
    # operand shape, indices batch shape, updates shape, update_window_dims, inserted_window_dims,
    # scatter_dims_to_operand_dims, input batching, indices batching
    ((6, 4), (5,), (5, 4), (1,), (0,), (0,), (), ()),
    ((5, 6), (7,), (7,), (), (0, 1), (0, 1), (), ()),
    ((8, 7), (3,), (3, 2, 3), (1, 2), (), (0, 1), (), ()),
    ((3, 5, 4), (3, 2), (3, 2, 4), (2,), (1,), (1,), (0,), (0,)),
    ((6, 4), (5,), (4, 5), (0,), (0,), (0,), (), ()),
    ((4, 5, 3), (2, 4), (2, 4, 3), (2,), (1,), (1,), (0,), (1,)),
]

SCATTERS = {  # combiner opcode -> jax scatter function
    "add": lax.scatter_add, "maximum": lax.scatter_max, "minimum": lax.scatter_min,
    "multiply": lax.scatter_mul,
}


def _scatter_data(case, dtype=np.float32):
    oshape, bshape, ushape, uwd, iwd, sdod, ob, ib = case
    operand = rand(oshape, dtype, 1, 4)
    # Indices past both ends: windows that do not fit must be skipped as a whole.
    indices = RNG.integers(-2, max(oshape) + 1, size=(*bshape, len(sdod))).astype(np.int32)
    indices.reshape(-1, len(sdod))[0] = 0  # at least one window is in bounds
    updates = rand(ushape, dtype, 1, 4)
    dn = lax.ScatterDimensionNumbers(uwd, iwd, sdod, ob, ib)
    return operand, indices, updates, dn


def _scatter_inst(case, comp, operands, indices, updates, out_shape):
    oshape, bshape, ushape, uwd, iwd, sdod, ob, ib = case
    shapes = [shape_of(o) for o in operands] + [shape_of(indices)] + [shape_of(u) for u in updates]
    return instruction("scatter", out_shape, shapes, update_window_dims=uwd, inserted_window_dims=iwd,
                       scatter_dims_to_operand_dims=sdod, input_batching_dims=ob,
                       scatter_indices_batching_dims=ib, index_vector_dim=len(bshape), to_apply=comp)


@pytest.mark.parametrize("case", SCATTER_CASES)
@pytest.mark.parametrize("opcode", list(SCATTERS))
def test_scatter_matches_jax(case, opcode):
    operand, indices, updates, dn = _scatter_data(case)
    want = SCATTERS[opcode](operand, indices, updates, dn, mode=lax.GatherScatterMode.FILL_OR_DROP)
    inst = _scatter_inst(case, binary_comp(opcode), [operand], indices, [updates], shape_of(want))
    close(run(inst, operand, indices, updates), want, rtol=1e-6)


@pytest.mark.parametrize("case", SCATTER_CASES[:3])
def test_scatter_assign_matches_jax(case):
    operand, indices, updates, dn = _scatter_data(case)
    # Distinct in-bounds start indices, so that which duplicate wins is not in question.
    n = int(np.prod(indices.shape[:-1]))
    limit = np.array(operand.shape)[list(case[5])]
    flat = RNG.permutation(int(np.prod(limit)))[:n]
    indices = np.stack(np.unravel_index(flat, tuple(limit)), -1).reshape(indices.shape).astype(np.int32)
    want = lax.scatter(operand, indices, updates, dn, mode=lax.GatherScatterMode.FILL_OR_DROP)
    assign = scalar_computation("assign", lambda c, p: p[1], 2)
    inst = _scatter_inst(case, assign, [operand], indices, [updates], shape_of(want))
    close(run(inst, operand, indices, updates), want, rtol=0, atol=0)


@pytest.mark.parametrize("case", SCATTER_CASES)
def test_scatter_general_combiner_calls_the_computation(case):
    operand, indices, updates, dn = _scatter_data(case)
    want = lax.scatter_add(operand, indices, updates, dn, mode=lax.GatherScatterMode.FILL_OR_DROP)
    interp = StubInterp()
    inst = _scatter_inst(case, opaque_add(), [operand], indices, [updates], shape_of(want))
    close(run(inst, operand, indices, updates, interp=interp), want, rtol=1e-6)
    assert interp.calls > 0


@pytest.mark.parametrize("general", [False, True])
def test_variadic_scatter(general):
    case = SCATTER_CASES[0]
    a, indices, ua, dn = _scatter_data(case)
    b, ub = rand(a.shape, np.int32, 0, 50), rand(ua.shape, np.int32, 0, 50)
    want_a = lax.scatter_add(a, indices, ua, dn, mode=lax.GatherScatterMode.FILL_OR_DROP)
    want_b = lax.scatter_max(b, indices, ub, dn, mode=lax.GatherScatterMode.FILL_OR_DROP)

    def body(comp, p):
        sa = comp.add_instruction(HloInstruction("add", array("f32", ()), [p[0], p[2]]))
        sb = comp.add_instruction(HloInstruction("maximum", array("s32", ()), [p[3], p[1]]))
        if general:  # an extra select makes the combiner unrecognisable
            t = comp.add_instruction(HloInstruction("compare", array("pred", ()), [p[1], p[1]], {"direction": "EQ"}))
            sa = comp.add_instruction(HloInstruction("select", array("f32", ()), [t, sa, p[0]]))
        return comp.add_instruction(HloInstruction("tuple", TupleShape((sa.shape, sb.shape)), [sa, sb]))

    comp = HloComputation("pair")
    params = [comp.add_parameter(array(t, ()), f"x{i}") for i, t in enumerate(["f32", "s32", "f32", "s32"])]
    comp.root = body(comp, params)
    out_shape = TupleShape((shape_of(want_a), shape_of(want_b)))
    inst = _scatter_inst(case, comp, [a, b], indices, [ua, ub], out_shape)
    got_a, got_b = run(inst, a, b, indices, ua, ub)
    close(got_a, want_a, rtol=1e-6)
    close(got_b, want_b, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.int32, "bfloat16", np.float16])
def test_scatter_add_types(dtype):
    case = SCATTER_CASES[0]
    operand, indices, updates, dn = _scatter_data(case, np.float32)
    operand, updates = (np.asarray(jnp.asarray(x, dtype)) for x in (operand, updates))
    want = lax.scatter_add(operand, indices, updates, dn, mode=lax.GatherScatterMode.FILL_OR_DROP)
    inst = _scatter_inst(case, binary_comp("add", from_numpy(np.dtype(dtype)).name), [operand], indices,
                         [updates], shape_of(want))
    close(run(inst, operand, indices, updates), want, rtol=1e-2)


SCATTER_ORDERED_HLO = """
HloModule m

combine {
  x0 = f32[] parameter(0)
  x1 = f32[] parameter(1)
  two = f32[] constant(2)
  twice = f32[] multiply(x0, two)
  ROOT r = f32[] add(twice, x1)
}

ENTRY main {
  p0 = f32[6,2] parameter(0)
  p1 = s32[9,1] parameter(1)
  p2 = f32[9,2] parameter(2)
  ROOT s = f32[6,2] scatter(p0, p1, p2), update_window_dims={1}, inserted_window_dims={0},
    scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=combine
}
"""


def test_scatter_order_dependent_combiner_through_evaluate():
    """acc*2 + update depends on the order of duplicate updates: it must be update order."""
    operand = rand((6, 2))
    indices = np.array([[1], [3], [1], [7], [1], [0], [3], [-1], [5]], np.int32)  # 7 and -1 are dropped
    updates = rand((9, 2))
    want = operand.copy()
    for i, row in enumerate(indices[:, 0]):  # by hand, one update after another
        if 0 <= row < 6:
            want[row] = want[row] * np.float32(2) + updates[i]
    (got,) = evaluate(parse_hlo(SCATTER_ORDERED_HLO), [operand, indices, updates])
    close(got, want, rtol=0, atol=0)
    # The same through per-element calls (the stub offers no batched calls).
    inst = parse_hlo(SCATTER_ORDERED_HLO).entry.root
    close(run(inst, operand, indices, updates), want, rtol=0, atol=0)


def _random_gather_case(seed: int):
    """Random valid gather dimension numbers (no batching dims: those have their own table)."""
    r = np.random.default_rng(seed)
    rank = int(r.integers(1, 4))
    oshape = tuple(int(r.integers(1, 6)) for _ in range(rank))
    smap = tuple(int(d) for d in r.permutation(rank)[:int(r.integers(1, rank + 1))])
    collapsed = tuple(sorted(int(d) for d in smap if r.random() < 0.5))
    sizes = tuple(1 if d in collapsed else int(r.integers(1, oshape[d] + 1)) for d in range(rank))
    bshape = tuple(int(r.integers(1, 4)) for _ in range(int(r.integers(0, 3))))
    n_offset = rank - len(collapsed)
    out_rank = len(bshape) + n_offset
    offset_dims = tuple(sorted(int(d) for d in r.permutation(out_rank)[:n_offset]))
    return oshape, bshape, offset_dims, collapsed, smap, sizes


@pytest.mark.parametrize("seed", range(40))
def test_random_gather_and_scatter_match_jax(seed):
    oshape, bshape, offset_dims, collapsed, smap, sizes = _random_gather_case(seed)
    operand = rand(oshape)
    indices = RNG.integers(-2, max(oshape) + 2, size=(*bshape, len(smap))).astype(np.int32)
    gdn = lax.GatherDimensionNumbers(offset_dims, collapsed, smap)
    want = lax.gather(operand, indices, gdn, sizes, mode=lax.GatherScatterMode.CLIP)
    inst = instruction("gather", shape_of(want), [shape_of(operand), shape_of(indices)], offset_dims=offset_dims,
                       collapsed_slice_dims=collapsed, start_index_map=smap, index_vector_dim=len(bshape),
                       slice_sizes=sizes)
    close(run(inst, operand, indices), want, rtol=0, atol=0)
    # The scatter with the same numbers writes updates shaped like that gather's result.
    updates = rand(np.shape(want))
    sdn = lax.ScatterDimensionNumbers(offset_dims, collapsed, smap)
    want = lax.scatter_add(operand, indices, updates, sdn, mode=lax.GatherScatterMode.FILL_OR_DROP)
    inst = instruction("scatter", shape_of(want), [shape_of(operand), shape_of(indices), shape_of(updates)],
                       update_window_dims=offset_dims, inserted_window_dims=collapsed,
                       scatter_dims_to_operand_dims=smap, index_vector_dim=len(bshape), to_apply=binary_comp("add"))
    close(run(inst, operand, indices, updates), want, rtol=1e-5, atol=1e-5)


# Two degenerate gathers of XLA's gather simplifier tests.
SCALAR_GATHER = """HloModule g
ENTRY e {
  operand = f32[] parameter(0)
  indices = s32[7,0] parameter(1)
  ROOT gather = f32[7] gather(operand, indices), offset_dims={}, collapsed_slice_dims={},
      start_index_map={}, index_vector_dim=1, slice_sizes={}
}
"""
EMPTY_COLLAPSED_GATHER = """HloModule g
ENTRY e {
  operand = f32[0,2] parameter(0)
  indices = s32[3] parameter(1)
  ROOT gather = f32[3,2] gather(operand, indices), offset_dims={1}, collapsed_slice_dims={0},
      start_index_map={0}, index_vector_dim=1, slice_sizes={0,2}
}
"""


@pytest.mark.parametrize("target", ["interpreter", "cpu", "gpu-emulated"])
def test_a_gather_of_a_scalar_with_empty_index_vectors_repeats_it(target):
    """Seven empty index vectors each read the whole scalar operand (the interpreter's slice
    of a rank-0 operand was a scalar it could not shape into the seven results)."""
    import hlofuse

    exe = hlofuse.compile(parse_hlo(SCALAR_GATHER), target=target, cache=False)
    out = np.asarray(exe(np.float32(2.5), np.zeros((7, 0), np.int32))[0])
    np.testing.assert_array_equal(out, np.full(7, 2.5, np.float32))


def test_a_gather_of_empty_collapsed_slices_into_a_nonempty_output_is_refused():
    """Each output element would come from an empty slice (the compiled gather read out of
    bounds and crashed): refused, naming the dimension."""
    from hlofuse.hlo.errors import VerifierError
    from hlofuse.hlo.verifier import verify

    with pytest.raises(VerifierError, match="slice size 0 in collapsed or batching dimension 0"):
        verify(parse_hlo(EMPTY_COLLAPSED_GATHER))
