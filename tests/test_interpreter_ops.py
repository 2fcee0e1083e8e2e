"""Reference rules of the heavy op families checked against jax.lax (an independent
implementation: XLA's CPU backend) over tables of configurations."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from hlofuse.hlo.attributes import ConvDimensionNumbers, Window, WindowDimension  # noqa: E402
from hlofuse.hlo.dtypes import from_numpy  # noqa: E402
from hlofuse.hlo.errors import UnsupportedError  # noqa: E402
from hlofuse.hlo.ir import HloComputation, HloInstruction  # noqa: E402
from hlofuse.hlo.opcodes import op_info  # noqa: E402
from hlofuse.hlo.shapes import ArrayShape, TupleShape, array  # noqa: E402

import hlofuse.runtime.interpreter.convolution  # noqa: E402,F401  (registers the rules)
import hlofuse.runtime.interpreter.dot  # noqa: E402,F401

RNG = np.random.default_rng(0)


# ---- helpers: build one instruction over parameters and run its rule ---------------------------
def shape_of(x) -> ArrayShape:
    x = np.asarray(x)
    return array(from_numpy(x.dtype), x.shape)


def param(shape, number: int) -> HloInstruction:
    p = HloInstruction("parameter", shape, name=f"p{number}")
    p.parameter_number = number
    return p


def instruction(opcode, out_shape, operand_shapes, **attrs) -> HloInstruction:
    ops = [param(s, i) for i, s in enumerate(operand_shapes)]
    return HloInstruction(opcode, out_shape, ops, attrs, name=f"{opcode}.0")


class StubInterp:
    """Evaluates the small scalar computations (combiners, comparators) the rules call."""

    BINARY = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
              "subtract": np.subtract, "and": np.logical_and, "or": np.logical_or}
    CMP = {"LT": np.less, "GT": np.greater, "LE": np.less_equal, "GE": np.greater_equal,
           "EQ": np.equal, "NE": np.not_equal}

    def __init__(self) -> None:
        self.calls = 0

    def call(self, comp: HloComputation, args):
        self.calls += 1
        env = {}
        for inst in comp.post_order():
            ops = [env[id(o)] for o in inst.operands]
            if inst.opcode == "parameter":
                v = np.asarray(args[inst.parameter_number])
            elif inst.opcode == "constant":
                v = inst.literal
            elif inst.opcode in self.BINARY:
                v = self.BINARY[inst.opcode](*ops).astype(inst.shape.dtype.numpy)
            elif inst.opcode == "compare":
                v = self.CMP[inst.attrs["direction"]](*ops)
            elif inst.opcode == "select":
                v = np.where(*ops)
            elif inst.opcode == "tuple":
                v = tuple(ops)
            else:
                raise NotImplementedError(inst.opcode)
            env[id(inst)] = v
        return env[id(comp.root)]


def run(inst: HloInstruction, *args, interp=None):
    return op_info(inst.opcode).reference(inst, [np.asarray(a) for a in args], interp or StubInterp())


def scalar_computation(name: str, body, n_params: int, dtype="f32") -> HloComputation:
    """A computation over `n_params` scalars whose root is `body(params)` (builds the instructions)."""
    comp = HloComputation(name)
    params = [comp.add_parameter(array(dtype, ()), f"x{i}") for i in range(n_params)]
    root = body(comp, params)
    comp.root = root
    return comp


def binary_comp(opcode: str, dtype="f32", swap=False) -> HloComputation:
    def body(comp, p):
        a, b = (p[1], p[0]) if swap else (p[0], p[1])
        return comp.add_instruction(HloInstruction(opcode, array(dtype, ()), [a, b]))
    return scalar_computation(opcode, body, 2, dtype)


def rand(shape, dtype=np.float32, low=-3, high=3):
    if np.issubdtype(np.dtype(dtype), np.integer):
        return RNG.integers(low, high, size=shape).astype(dtype)
    return RNG.uniform(low, high, size=shape).astype(dtype)


def close(actual, expected, rtol=1e-5, atol=1e-5):
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_allclose(actual.astype(np.float64) if actual.dtype.kind == "V" else actual,
                               expected.astype(np.float64) if expected.dtype.kind == "V" else expected,
                               rtol=rtol, atol=atol)


HIGHEST = lax.Precision.HIGHEST

# ---- dot ----------------------------------------------------------------------------------------
DOT_CASES = [
    # lhs shape, rhs shape, ((lc, rc), (lb, rb))
    ((3, 4), (4, 5), (((1,), (0,)), ((), ()))),
    ((4, 3), (4, 5), (((0,), (0,)), ((), ()))),
    ((2, 3, 4), (2, 4, 5), (((2,), (1,)), ((0,), (0,)))),
    ((3, 2, 4, 6), (6, 2, 5, 4), (((2, 3), (3, 0)), ((1,), (1,)))),
    ((2, 5, 3, 7), (3, 7, 2, 4), (((3,), (1,)), ((0, 2), (2, 0)))),
    ((5,), (5,), (((0,), (0,)), ((), ()))),
    ((3, 4), (5, 6), (((), ()), ((), ()))),  # outer product
]


@pytest.mark.parametrize("lshape,rshape,dn", DOT_CASES)
def test_dot_general_matches_jax(lshape, rshape, dn):
    a, b = rand(lshape), rand(rshape)
    want = lax.dot_general(a, b, dn, precision=HIGHEST)
    (lc, rc), (lb, rb) = dn
    inst = instruction("dot", shape_of(want), [shape_of(a), shape_of(b)], lhs_contracting_dims=lc,
                       rhs_contracting_dims=rc, lhs_batch_dims=lb, rhs_batch_dims=rb)
    close(run(inst, a, b), want, rtol=1e-4)


@pytest.mark.parametrize("in_dtype,out_dtype", [
    (np.int8, np.int32), (np.int32, np.int32), (np.uint8, np.uint32), ("bfloat16", np.float32),
    ("bfloat16", "bfloat16"), (np.float16, np.float16), (np.float64, np.float64), (np.complex64, np.complex64),
])
def test_dot_types_and_preferred_element_type(in_dtype, out_dtype):
    a, b = rand((6, 9), np.float64, -100, 100), rand((9, 4), np.float64, -100, 100)
    if np.dtype(in_dtype).kind in "iu":
        a, b = a.astype(in_dtype), b.astype(in_dtype)
    elif np.dtype(in_dtype).kind == "c":
        a = (a + 1j * rand((6, 9), np.float64)).astype(in_dtype)
        b = (b - 1j * rand((9, 4), np.float64)).astype(in_dtype)
    else:
        a, b = jnp.asarray(a, in_dtype), jnp.asarray(b, in_dtype)
        a, b = np.asarray(a), np.asarray(b)
    want = lax.dot_general(a, b, (((1,), (0,)), ((), ())), precision=HIGHEST, preferred_element_type=out_dtype)
    inst = instruction("dot", shape_of(want), [shape_of(a), shape_of(b)],
                       lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    got = run(inst, a, b)
    tol = 1e-2 if np.dtype(out_dtype).itemsize <= 2 else 1e-5
    close(got, want, rtol=tol, atol=tol * 100)


def test_integer_dot_wraps():
    a = np.full((1, 4), 2**30, dtype=np.int32)
    b = np.full((4, 1), 3, dtype=np.int32)
    inst = instruction("dot", shape_of(np.zeros((1, 1), np.int32)), [shape_of(a), shape_of(b)],
                       lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    want = np.array([[np.int64(12 * 2**30)]]).astype(np.int32)  # two's-complement wrap by hand
    assert run(inst, a, b)[0, 0] == want[0, 0]


# ---- convolution --------------------------------------------------------------------------------
def jax_specs_to_labels(lhs_spec: str, rhs_spec: str, out_spec: str) -> str:
    spatial = [ch for ch in rhs_spec if ch not in "OI"]
    def conv(spec, named):
        return "".join(named[ch] if ch in named else str(spatial.index(ch)) for ch in spec)
    return f"{conv(lhs_spec, {'N': 'b', 'C': 'f'})}_{conv(rhs_spec, {'O': 'o', 'I': 'i'})}->" \
           f"{conv(out_spec, {'N': 'b', 'C': 'f'})}"


CONV_CASES = [
    # specs, lhs spatial, kernel spatial, batch, in feat, out feat, strides, padding, lhs_dil, rhs_dil, fgc, bgc
    (("NCHW", "OIHW", "NCHW"), (7, 6), (3, 2), 2, 3, 4, (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1, 1),
    (("NHWC", "HWIO", "NHWC"), (8, 7), (3, 3), 2, 3, 5, (2, 1), ((1, 1), (2, 0)), (1, 1), (1, 1), 1, 1),
    (("NHWC", "HWIO", "NCHW"), (6, 6), (3, 3), 1, 2, 3, (1, 2), ((-1, 2), (1, -1)), (1, 1), (1, 1), 1, 1),
    (("NCHW", "OIHW", "NCHW"), (5, 6), (3, 2), 2, 2, 3, (1, 1), ((2, 2), (1, 1)), (2, 3), (1, 1), 1, 1),
    (("NCHW", "OIHW", "NCHW"), (9, 8), (3, 2), 2, 3, 2, (2, 1), ((1, 0), (0, 1)), (1, 1), (2, 3), 1, 1),
    (("NHWC", "HWIO", "NHWC"), (7, 7), (3, 3), 2, 6, 4, (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 2, 1),
    (("NHWC", "HWIO", "NHWC"), (6, 5), (3, 3), 1, 4, 8, (1, 1), ((1, 1), (1, 1)), (1, 1), (2, 1), 4, 1),
    (("NCHW", "OIHW", "NCHW"), (6, 5), (2, 2), 6, 3, 4, (1, 1), ((0, 1), (1, 0)), (1, 1), (1, 1), 1, 2),
    (("CHWN", "IOHW", "HNWC"), (5, 6), (2, 3), 2, 3, 4, (2, 2), ((1, 1), (0, 2)), (2, 1), (1, 2), 1, 1),
    (("NCH", "OIH", "NCH"), (11,), (3,), 2, 3, 4, (2,), ((1, 2),), (1,), (2,), 1, 1),
    (("NWC", "WIO", "NWC"), (10,), (4,), 3, 4, 2, (1,), ((3, 3),), (2,), (1,), 2, 1),
    (("NCDHW", "OIDHW", "NCDHW"), (5, 4, 6), (2, 3, 2), 2, 2, 3, (1, 2, 1), ((1, 0), (1, 1), (0, 0)),
     (1, 1, 2), (2, 1, 1), 1, 1),
    (("NDHWC", "DHWIO", "NDHWC"), (4, 4, 4), (2, 2, 2), 4, 2, 6, (1, 1, 1), ((0, 0), (0, 0), (0, 0)),
     (1, 1, 1), (1, 1, 1), 1, 2),
    (("NCHW", "OIHW", "NCHW"), (2, 2), (3, 3), 1, 1, 1, (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1, 1),
]


def _conv_operands(case, dtype=np.float32):
    specs, lsp, ksp, n, c, o, strides, padding, ldil, rdil, fgc, bgc = case
    lhs_spec, rhs_spec, _ = specs
    spatial = [ch for ch in rhs_spec if ch not in "OI"]
    lsizes = {"N": n, "C": c, **{ch: s for ch, s in zip(spatial, lsp)}}
    rsizes = {"O": o, "I": c // fgc, **{ch: s for ch, s in zip(spatial, ksp)}}
    lhs = rand(tuple(lsizes[ch] for ch in lhs_spec), dtype)
    rhs = rand(tuple(rsizes[ch] for ch in rhs_spec), dtype)
    return lhs, rhs


def _conv_inst(case, lhs, rhs, want, reversal=None):
    specs, lsp, ksp, n, c, o, strides, padding, ldil, rdil, fgc, bgc = case
    dims = tuple(
        WindowDimension(size=k, stride=s, padding_low=p[0], padding_high=p[1], window_dilation=rd,
                        base_dilation=ld, window_reversal=bool(reversal and reversal[i]))
        for i, (k, s, p, ld, rd) in enumerate(zip(ksp, strides, padding, ldil, rdil)))
    attrs = dict(window=Window(dims), dim_labels=ConvDimensionNumbers.from_labels(jax_specs_to_labels(*specs)))
    if fgc > 1:
        attrs["feature_group_count"] = fgc
    if bgc > 1:
        attrs["batch_group_count"] = bgc
    return instruction("convolution", shape_of(want), [shape_of(lhs), shape_of(rhs)], **attrs)


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0][0]}-{c[0][1]}-{c[0][2]}")
def test_convolution_matches_jax(case):
    specs, lsp, ksp, n, c, o, strides, padding, ldil, rdil, fgc, bgc = case
    lhs, rhs = _conv_operands(case)
    want = lax.conv_general_dilated(lhs, rhs, strides, padding, ldil, rdil, dimension_numbers=specs,
                                    feature_group_count=fgc, batch_group_count=bgc, precision=HIGHEST)
    close(run(_conv_inst(case, lhs, rhs, want), lhs, rhs), want, rtol=1e-4, atol=1e-4)


def test_convolution_window_reversal_is_a_flipped_kernel():
    case = CONV_CASES[1]
    specs, lsp, ksp, n, c, o, strides, padding, ldil, rdil, fgc, bgc = case
    lhs, rhs = _conv_operands(case)
    flipped = rhs[::-1, :, :, :]  # HWIO: reverse H only
    want = lax.conv_general_dilated(lhs, flipped, strides, padding, ldil, rdil, dimension_numbers=specs,
                                    precision=HIGHEST)
    inst = _conv_inst(case, lhs, rhs, want, reversal=(True, False))
    close(run(inst, lhs, rhs), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("in_dtype,out_dtype", [(np.int8, np.int32), ("bfloat16", "bfloat16"),
                                                (np.float16, np.float32)])
def test_convolution_types(in_dtype, out_dtype):
    case = CONV_CASES[5]
    specs, lsp, ksp, n, c, o, strides, padding, ldil, rdil, fgc, bgc = case
    lhs, rhs = _conv_operands(case, np.float64)
    if np.dtype(in_dtype).kind == "i":
        lhs, rhs = (np.round(x * 20).astype(in_dtype) for x in (lhs, rhs))
    else:
        lhs, rhs = (np.asarray(jnp.asarray(x, in_dtype)) for x in (lhs, rhs))
    want = lax.conv_general_dilated(lhs, rhs, strides, padding, ldil, rdil, dimension_numbers=specs,
                                    feature_group_count=fgc, precision=HIGHEST, preferred_element_type=out_dtype)
    tol = 0 if np.dtype(in_dtype).kind == "i" else 3e-2
    close(run(_conv_inst(case, lhs, rhs, want), lhs, rhs), want, rtol=tol, atol=tol * 10)


# ---- gather -------------------------------------------------------------------------------------
import hlofuse.runtime.interpreter.gather_scatter  # noqa: E402,F401

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


def _opaque_add(dtype="f32"):
    """add written so that it is not recognised: select(x1 == x1, x0 + x1, x0)."""
    def body(comp, p):
        s = array(dtype, ())
        total = comp.add_instruction(HloInstruction("add", s, [p[0], p[1]]))
        same = comp.add_instruction(HloInstruction("compare", array("pred", ()), [p[1], p[1]], {"direction": "EQ"}))
        return comp.add_instruction(HloInstruction("select", s, [same, total, p[0]]))
    return scalar_computation("opaque_add", body, 2, dtype)


@pytest.mark.parametrize("case", SCATTER_CASES)
def test_scatter_general_combiner_calls_the_computation(case):
    operand, indices, updates, dn = _scatter_data(case)
    want = lax.scatter_add(operand, indices, updates, dn, mode=lax.GatherScatterMode.FILL_OR_DROP)
    interp = StubInterp()
    inst = _scatter_inst(case, _opaque_add(), [operand], indices, [updates], shape_of(want))
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


# ---- reduce-window and select-and-scatter --------------------------------------------------------
import hlofuse.runtime.interpreter.windows  # noqa: E402,F401


def make_window(sizes, strides=None, padding=None, base=None, dil=None) -> Window:
    n = len(sizes)
    strides, base, dil = strides or (1,) * n, base or (1,) * n, dil or (1,) * n
    padding = padding or ((0, 0),) * n
    return Window(tuple(WindowDimension(size=k, stride=s, padding_low=p[0], padding_high=p[1],
                                        window_dilation=w, base_dilation=b)
                        for k, s, p, b, w in zip(sizes, strides, padding, base, dil)))


RW_CASES = [
    # input shape, window, strides, padding, base dilation, window dilation
    ((6, 7), (2, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1)),
    ((8, 9), (3, 3), (2, 2), ((1, 1), (1, 0)), (1, 1), (1, 1)),
    ((5, 6), (2, 2), (1, 2), ((2, 1), (0, 3)), (2, 1), (1, 1)),
    ((9, 8), (2, 3), (1, 1), ((0, 0), (1, 1)), (1, 1), (2, 2)),
    ((7, 6), (3, 2), (2, 1), ((1, 2), (2, 0)), (2, 3), (2, 1)),
    ((11,), (4,), (3,), ((2, 2),), (1,), (1,)),
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
                       window=make_window(win, strides, padding, base, dil), to_apply=_opaque_add())
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
                                                      [gt, _pred_constant(sel, False), _pred_constant(sel, True)]))
    else:
        sel = _select_comp("GE", total_order=select.endswith("totalorder"))
    inst = instruction("select-and-scatter", shape_of(want), [shape_of(x), shape_of(cot), array("f32", ())],
                       window=make_window(win, strides, padding), select=sel, scatter=binary_comp("add"))
    close(run(inst, x, cot, np.float32(0)), want, rtol=1e-6)


def _pred_constant(comp, value: bool):
    c = HloInstruction("constant", array("pred", ()))
    c.literal = np.array(value)
    return comp.add_instruction(c)


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
import hlofuse.runtime.interpreter.sort  # noqa: E402,F401


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


# ---- through the parser and evaluate(): fft, linear algebra, batch norm ----------------------------
from hlofuse.hlo.parser import parse_hlo  # noqa: E402
from hlofuse.runtime.interpreter import evaluate  # noqa: E402


def run_hlo(body: str, *args):
    """Evaluate an entry computation whose instructions are `body` (parameters p0, p1, ...)."""
    return evaluate(parse_hlo(f"HloModule test\n\nENTRY main {{\n{body}\n}}\n"), list(args))


def hlo_type(x) -> str:
    return shape_of(x).to_text(with_layout=False)


FFT_CASES = [
    ("FFT", (3, 8), (8,)), ("IFFT", (3, 8), (8,)), ("RFFT", (3, 8), (8,)), ("IRFFT", (3, 5), (8,)),
    ("FFT", (2, 4, 6), (4, 6)), ("RFFT", (2, 4, 6), (4, 6)), ("IRFFT", (2, 4, 4), (4, 6)),
    ("FFT", (2, 3, 4, 5), (3, 4, 5)), ("IRFFT", (3, 4, 3), (3, 4, 5)), ("RFFT", (7,), (7,)),
]


@pytest.mark.parametrize("kind,shape,lengths", FFT_CASES)
@pytest.mark.parametrize("precision", ["single", "double"])
def test_fft_matches_jax(kind, shape, lengths, precision):
    real = np.float32 if precision == "single" else np.float64
    cplx = np.complex64 if precision == "single" else np.complex128
    x = rand(shape, real)
    if kind in ("FFT", "IFFT", "IRFFT"):
        x = (x + 1j * rand(shape, real)).astype(cplx)
    axes = tuple(range(len(shape) - len(lengths), len(shape)))
    fn = {"FFT": jnp.fft.fftn, "IFFT": jnp.fft.ifftn, "RFFT": jnp.fft.rfftn, "IRFFT": jnp.fft.irfftn}[kind]
    want = np.asarray(fn(x, s=lengths, axes=axes))
    lens = ",".join(map(str, lengths))
    (got,) = run_hlo(f"  p0 = {hlo_type(x)} parameter(0)\n"
                     f"  ROOT f = {hlo_type(want)} fft(p0), fft_type={kind}, fft_length={{{lens}}}", x)
    tol = 1e-4 if precision == "single" else 1e-10
    close(got, want, rtol=tol, atol=tol)


def _spd(n, batch=(), dtype=np.float64):
    m = rand((*batch, n, n), np.float64)
    if np.dtype(dtype).kind == "c":
        m = m + 1j * rand((*batch, n, n), np.float64)
    a = m @ np.conj(np.swapaxes(m, -1, -2)) + n * np.eye(n)
    return a.astype(dtype)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype,batch", [(np.float32, ()), (np.float64, (3,)), (np.complex64, (2,))])
def test_cholesky_matches_jax(lower, dtype, batch):
    a = _spd(5, batch, dtype)
    garbage = a.copy()  # only the named triangle may be read
    tri = np.triu_indices(5, 1) if lower else np.tril_indices(5, -1)
    garbage[..., tri[0], tri[1]] = 99
    want_l = np.asarray(jax.lax.linalg.cholesky(a, symmetrize_input=False))
    (got,) = run_hlo(f"  p0 = {hlo_type(a)} parameter(0)\n"
                     f"  ROOT c = {hlo_type(a)} cholesky(p0), lower={'true' if lower else 'false'}", garbage)
    keep = np.tril if lower else np.triu
    want = keep(want_l if lower else np.conj(np.swapaxes(want_l, -1, -2)))
    close(keep(got), want.astype(dtype), rtol=1e-4, atol=1e-4)


def test_cholesky_not_positive_definite_gives_nan():
    a = np.array([[1.0, 2.0], [2.0, 1.0]], dtype=np.float32)
    (got,) = run_hlo("  p0 = f32[2,2] parameter(0)\n  ROOT c = f32[2,2] cholesky(p0), lower=true", a)
    assert np.isnan(got).any()


TRSM = [(left, lower, trans, unit) for left in (True, False) for lower in (True, False)
        for trans in ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT") for unit in (False, True)]


@pytest.mark.parametrize("left,lower,trans,unit", TRSM)
def test_triangular_solve_matches_jax(left, lower, trans, unit):
    dtype = np.complex64 if trans == "ADJOINT" else np.float32
    a = rand((2, 4, 4), np.float64) + 4 * np.eye(4)
    b = rand((2, 4, 3) if left else (2, 3, 4), np.float64)
    if trans == "ADJOINT":
        a, b = a + 1j * rand(a.shape, np.float64), b - 1j * rand(b.shape, np.float64)
    a, b = a.astype(dtype), b.astype(dtype)
    want = jax.lax.linalg.triangular_solve(a, b, left_side=left, lower=lower, transpose_a=trans != "NO_TRANSPOSE",
                                           conjugate_a=trans == "ADJOINT", unit_diagonal=unit)
    flags = (f"left_side={str(left).lower()}, lower={str(lower).lower()}, "
             f"unit_diagonal={str(unit).lower()}, transpose_a={trans}")
    (got,) = run_hlo(f"  p0 = {hlo_type(a)} parameter(0)\n  p1 = {hlo_type(b)} parameter(1)\n"
                     f"  ROOT t = {hlo_type(b)} triangular-solve(p0, p1), {flags}", a, b)
    close(got, np.asarray(want), rtol=1e-4, atol=1e-4)


def _bn_train_jax(x, scale, offset, eps, f):
    axes = tuple(d for d in range(x.ndim) if d != f)
    shape = [1] * x.ndim
    shape[f] = x.shape[f]
    mean = x.mean(axis=axes)
    var = ((x - mean.reshape(shape)) ** 2).mean(axis=axes)
    y = (x - mean.reshape(shape)) * lax.rsqrt(var.reshape(shape) + eps) * scale.reshape(shape) + offset.reshape(shape)
    return y, mean, var


@pytest.mark.parametrize("feature_index", [0, 1, 3])
def test_batch_norm_family_matches_jax(feature_index):
    x = rand((4, 3, 5, 2), np.float32)
    c = x.shape[feature_index]
    scale, offset = rand((c,), np.float32, 0.5, 2), rand((c,), np.float32)
    eps = 1e-3
    y, mean, var = _bn_train_jax(x.astype(np.float64), scale, offset, eps, feature_index)
    vec = f"f32[{c}]"
    ty = hlo_type(x)
    got_y, got_mean, got_var = run_hlo(
        f"  p0 = {ty} parameter(0)\n  p1 = {vec} parameter(1)\n  p2 = {vec} parameter(2)\n"
        f"  ROOT b = ({ty}, {vec}, {vec}) batch-norm-training(p0, p1, p2), epsilon=0.001, "
        f"feature_index={feature_index}", x, scale, offset)
    close(got_y, np.asarray(y, np.float32), rtol=1e-4, atol=1e-4)
    close(got_mean, np.asarray(mean, np.float32), rtol=1e-5, atol=1e-6)
    close(got_var, np.asarray(var, np.float32), rtol=1e-5, atol=1e-6)

    mean32, var32 = np.asarray(mean, np.float32), np.asarray(var, np.float32)
    (got_inf,) = run_hlo(
        f"  p0 = {ty} parameter(0)\n  p1 = {vec} parameter(1)\n  p2 = {vec} parameter(2)\n"
        f"  p3 = {vec} parameter(3)\n  p4 = {vec} parameter(4)\n"
        f"  ROOT b = {ty} batch-norm-inference(p0, p1, p2, p3, p4), epsilon=0.001, feature_index={feature_index}",
        x, scale, offset, mean32, var32)
    close(got_inf, np.asarray(y, np.float32), rtol=1e-4, atol=1e-4)

    dy = rand(x.shape, np.float32)
    _, vjp = jax.vjp(lambda a, s, o: _bn_train_jax(a, s, o, eps, feature_index)[0],
                     x.astype(np.float64), scale.astype(np.float64), offset.astype(np.float64))
    want_dx, want_ds, want_do = vjp(dy.astype(np.float64))
    got_dx, got_ds, got_do = run_hlo(
        f"  p0 = {ty} parameter(0)\n  p1 = {vec} parameter(1)\n  p2 = {vec} parameter(2)\n"
        f"  p3 = {vec} parameter(3)\n  p4 = {ty} parameter(4)\n"
        f"  ROOT g = ({ty}, {vec}, {vec}) batch-norm-grad(p0, p1, p2, p3, p4), epsilon=0.001, "
        f"feature_index={feature_index}", x, scale, mean32, var32, dy)
    close(got_dx, np.asarray(want_dx, np.float32), rtol=1e-3, atol=1e-4)
    close(got_ds, np.asarray(want_ds, np.float32), rtol=1e-3, atol=1e-4)
    close(got_do, np.asarray(want_do, np.float32), rtol=1e-4, atol=1e-4)


# ---- random numbers -----------------------------------------------------------------------------
RNG_ALGORITHMS = {"three_fry": lax.RandomAlgorithm.RNG_THREE_FRY, "philox": lax.RandomAlgorithm.RNG_PHILOX,
                  "default": lax.RandomAlgorithm.RNG_DEFAULT}
RNG_KEYS = [np.array([1, 2, 3, 4], np.uint32),
            np.array([0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFF], np.uint32)]  # counter carries


@pytest.mark.parametrize("algorithm", list(RNG_ALGORITHMS))
@pytest.mark.parametrize("shape", [(), (7,), (2, 3), (4, 1, 3), (5, 3, 7)])
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64, np.uint16, np.uint8])
def test_rng_bit_generator_is_bit_exact_with_xla(algorithm, shape, dtype):
    """JAX's HLO for lax.rng_bit_generator evaluated by hlofuse gives XLA's bits and state."""
    for key in RNG_KEYS:
        fn = lambda k: lax.rng_bit_generator(k, shape, dtype=dtype, algorithm=RNG_ALGORITHMS[algorithm])  # noqa: E731
        want_state, want_bits = fn(key)
        text = jax.jit(fn).lower(key).as_text(dialect="hlo")
        got_state, got_bits = evaluate(parse_hlo(text), [key])
        assert got_bits.dtype == np.dtype(dtype) and got_bits.shape == shape
        np.testing.assert_array_equal(got_bits, np.asarray(want_bits))
        np.testing.assert_array_equal(got_state, np.asarray(want_state))


@pytest.mark.parametrize("body", [
    "  a = f32[] constant(0)\n  b = f32[] constant(1)\n  ROOT r = f32[3] rng(a, b), distribution=rng_uniform",
    "  ROOT r = u64[2] rng-get-and-update-state(), delta=4",
])
def test_rng_with_unspecified_stream_is_unsupported(body):
    with pytest.raises(UnsupportedError, match="unspecified"):
        run_hlo(body)


# ---- end to end: JAX programs lowered to HLO text, evaluated, compared with JAX's own results -----
def _maxpool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)))


def _nan_floats(shape):
    x = np.round(rand(shape, np.float32, -3, 3))
    flat = x.reshape(-1)
    flat[::7] = np.nan
    flat[1::11] = -0.0
    flat[2::13] = np.inf
    return x


JAX_PROGRAMS = {
    "sort_nan_zero": (lambda x: jnp.sort(x, axis=1), lambda: [_nan_floats((6, 40))]),
    "sort_big_row": (lambda x: jnp.sort(x), lambda: [rand((2, 3000), np.float32)]),
    "argsort_stable": (lambda x: jnp.argsort(x, axis=0, stable=True), lambda: [np.round(rand((30, 4), np.float32))]),
    "sort_two_keys": (lambda a, b: lax.sort((a, b), num_keys=2),
                      lambda: [rand((50,), np.int32, 0, 4), np.round(rand((50,), np.float32, 0, 5))]),
    "sort_descending": (lambda x: -jnp.sort(-x, axis=0), lambda: [rand((25, 3), np.float32)]),
    "top_k": (lambda x: lax.top_k(x, 3), lambda: [rand((4, 9), np.float32)]),
    "einsum": (lambda a, b: jnp.einsum("bij,bjk->bik", a, b, precision=HIGHEST),
               lambda: [rand((2, 3, 4)), rand((2, 4, 5))]),
    "conv_nhwc": (lambda x, w: lax.conv_general_dilated(x, w, (2, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                                        precision=HIGHEST),
                  lambda: [rand((2, 9, 8, 3)), rand((3, 3, 3, 4))]),
    "conv_grad": (lambda x, w: jax.grad(lambda x, w: (lax.conv_general_dilated(
        x, w, (2, 2), "SAME", rhs_dilation=(1, 2), precision=HIGHEST) ** 2).sum(), argnums=(0, 1))(x, w),
                  lambda: [rand((2, 3, 8, 9)), rand((4, 3, 3, 2))]),
    "take": (lambda x, i: jnp.take(x, i, axis=1, mode="clip"),
             lambda: [rand((3, 7, 2)), RNG.integers(-2, 9, size=(4, 5)).astype(np.int32)]),
    "fancy_index": (lambda x, i, j: x[i, :, j], lambda: [rand((5, 3, 6)), RNG.integers(0, 5, size=(4,)).astype(np.int32),
                                                          RNG.integers(0, 6, size=(4,)).astype(np.int32)]),
    "scatter_add": (lambda x, i, u: x.at[i].add(u), lambda: [rand((6, 3)), RNG.integers(-1, 8, size=(9,)).astype(np.int32),
                                                             rand((9, 3))]),
    "scatter_max_2d": (lambda x, i, j, u: x.at[i, j].max(u),
                       lambda: [rand((5, 6)), RNG.integers(0, 5, size=(7,)).astype(np.int32),
                                RNG.integers(0, 6, size=(7,)).astype(np.int32), rand((7,))]),
    "scatter_set": (lambda x, i, u: x.at[i].set(u, unique_indices=True),
                    lambda: [rand((8, 2)), RNG.permutation(8)[:5].astype(np.int32), rand((5, 2))]),
    "vmap_gather": (jax.vmap(lambda x, i: x[i]), lambda: [rand((4, 6, 2)), RNG.integers(0, 6, size=(4, 3)).astype(np.int32)]),
    "vmap_scatter": (jax.vmap(lambda x, i, u: x.at[i].add(u)),
                     lambda: [rand((4, 6)), RNG.integers(0, 6, size=(4, 3)).astype(np.int32), rand((4, 3))]),
    "avg_pool": (lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "SAME") / 4,
                 lambda: [rand((2, 7, 7, 3))]),
    "max_pool_grad": (lambda x: jax.grad(lambda v: (_maxpool(v) ** 2).sum())(x), lambda: [np.round(rand((2, 7, 8, 3)))]),
    "cumsum": (lambda x: jnp.cumsum(x, axis=1), lambda: [rand((3, 20))]),
    "cummax": (lambda x: lax.cummax(x, axis=0), lambda: [rand((20, 3))]),
    "fft2": (lambda x: jnp.fft.rfft2(x), lambda: [rand((3, 8, 6))]),
}


@pytest.mark.parametrize("name", list(JAX_PROGRAMS))
def test_jax_program_through_evaluate(name):
    fn, make_args = JAX_PROGRAMS[name]
    args = make_args()
    want = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    got = evaluate(parse_hlo(text), args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        if w.dtype.kind == "f" or w.dtype.kind == "c":
            close(g, w, rtol=2e-4, atol=2e-4)
        else:
            close(g, w, rtol=0, atol=0)
