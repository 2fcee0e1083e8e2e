"""Reference rules of dot, convolution, fft, linear algebra, batch norm and rng checked against
jax.lax (XLA's CPU backend, an independent implementation) over tables of configurations."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from hlofuse.hlo.attributes import ConvDimensionNumbers, Window, WindowDimension  # noqa: E402
from hlofuse.hlo.errors import UnsupportedError  # noqa: E402
from hlofuse.hlo.parser import parse_hlo  # noqa: E402
from hlofuse.runtime.interpreter import evaluate  # noqa: E402
from interp_ops_support import (  # noqa: E402
    HIGHEST,
    close,
    hlo_type,
    instruction,
    rand,
    run,
    run_hlo,
    shape_of,
    spd_matrix,
)
from interp_ops_support import x64  # noqa: E402,F401  (autouse fixture)


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
    # Contractions of more than 256 terms take the float64 einsum path.
    (("NHWC", "HWIO", "NHWC"), (6, 7), (3, 3), 2, 80, 4, (2, 1), ((1, 1), (0, 1)), (1, 1), (1, 2), 2, 1),
    (("NCHW", "OIHW", "NCHW"), (5, 5), (2, 2), 4, 70, 4, (1, 1), ((0, 1), (1, 0)), (2, 1), (1, 1), 1, 2),
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




# ---- through the parser and evaluate(): fft, linear algebra, batch norm ----------------------------
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


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype,batch", [(np.float32, ()), (np.float64, (3,)), (np.complex64, (2,))])
def test_cholesky_matches_jax(lower, dtype, batch):
    a = spd_matrix(5, batch, dtype)
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


RNG_CASES = [(alg, shape, np.uint32) for alg in ("three_fry", "philox")
             for shape in [(), (7,), (2, 3), (4, 1, 3), (5, 3, 7)]]
RNG_CASES += [(alg, shape, dtype) for alg in ("three_fry", "philox") for shape in [(2, 3), (5, 3, 7)]
              for dtype in (np.uint64, np.uint16, np.uint8)]
RNG_CASES += [("default", (5, 3, 7), np.uint32), ("default", (3,), np.uint64)]


@pytest.mark.parametrize("algorithm,shape,dtype", RNG_CASES)
def test_rng_bit_generator_is_bit_exact_with_xla(algorithm, shape, dtype):
    """JAX's HLO for lax.rng_bit_generator evaluated by hlofuse gives XLA's bits and state."""
    key = RNG_KEYS[len(shape) % 2]
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


def test_small_float_dot_sums_term_by_term_in_float32():
    """Bit-exact with a hand-written sequential float32 sum (XLA's loop order)."""
    a, b = rand((3, 7)), rand((7, 4))
    want = np.zeros((3, 4), np.float32)
    for i in range(3):
        for j in range(4):
            acc = np.float32(0)
            for k in range(7):
                acc = np.float32(acc + np.float32(a[i, k] * b[k, j]))
            want[i, j] = acc
    inst = instruction("dot", shape_of(want), [shape_of(a), shape_of(b)],
                       lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    assert run(inst, a, b).tobytes() == want.tobytes()


def test_large_float_dot_accumulates_in_float64():
    a, b = rand((2, 600)), rand((600, 3))
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    inst = instruction("dot", shape_of(want), [shape_of(a), shape_of(b)],
                       lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    assert run(inst, a, b).tobytes() == want.tobytes()


@pytest.mark.parametrize("sizes", [(2, 0, 3, 1), (1, 1, 1, 1), (0, 0, 0, 5), (2, 2, 0, 0)])
def test_ragged_dot_matches_jax(sizes):
    lhs, rhs = rand((6, 5)), rand((4, 5, 3))
    group_sizes = np.array(sizes, np.int32)
    want = lax.ragged_dot(lhs, rhs, group_sizes, precision=HIGHEST)
    inst = instruction("ragged-dot", shape_of(want), [shape_of(lhs), shape_of(rhs), shape_of(group_sizes)],
                       lhs_contracting_dims=(1,), rhs_contracting_dims=(1,), lhs_ragged_dims=(0,),
                       rhs_group_dims=(0,))
    close(run(inst, lhs, rhs, group_sizes), want, rtol=1e-5)


def test_ragged_dot_as_xla_prints_it():
    lhs, rhs, sizes = rand((6, 5)), rand((3, 5, 2)), np.array([1, 3, 2], np.int32)
    (got,) = run_hlo("  p0 = f32[6,5] parameter(0)\n  p1 = f32[3,5,2] parameter(1)\n  p2 = s32[3] parameter(2)\n"
                     "  ROOT r = f32[6,2] ragged-dot(p0, p1, p2), lhs_contracting_dims={1}, rhs_contracting_dims={1},"
                     " lhs_ragged_dims={0}, rhs_group_dims={0}", lhs, rhs, sizes)
    close(got, lax.ragged_dot(lhs, rhs, sizes, precision=HIGHEST), rtol=1e-5)


RAGGED_CASES = [
    # lhs shape, rhs shape, ((lc, rc), (lb, rb)), lhs ragged, rhs group, group_sizes
    ((2, 11, 5), (3, 2, 5, 7), (((2,), (2,)), ((0,), (1,))), (1,), (0,), np.array([3, 4, 2])),
    ((2, 11, 5), (3, 2, 5, 7), (((2,), (2,)), ((0,), (1,))), (1,), (0,), np.array([[3, 4, 2], [0, 9, 1]])),
    ((4, 6, 5), (2, 5, 3), (((2,), (1,)), ((), ())), (1,), (0,), np.array([[1, 2], [3, 3], [0, 4], [6, 0]])),
    ((2, 3, 10), (2, 10, 4), (((2,), (1,)), ((0,), (0,))), (2,), (), np.array([3, 0, 5])),
    ((3, 9), (9, 4), (((1,), (0,)), ((), ())), (1,), (), np.array([2, 3, 4])),
    ((7, 3, 4), (7, 4, 2), (((2,), (1,)), ((0,), (0,))), (0,), (), np.array([2, 1, 3])),
    ((2, 6, 3, 4), (2, 6, 4, 5), (((3,), (2,)), ((0, 1), (0, 1))), (1,), (), np.array([[1, 2], [3, 3]])),
]


@pytest.mark.parametrize("lshape,rshape,dn,ragged,group,sizes", RAGGED_CASES)
def test_ragged_dot_general_matches_jax(lshape, rshape, dn, ragged, group, sizes):
    lhs, rhs, sizes = rand(lshape), rand(rshape), sizes.astype(np.int32)
    rdn = lax.RaggedDotDimensionNumbers(dot_dimension_numbers=dn, lhs_ragged_dimensions=list(ragged),
                                        rhs_group_dimensions=list(group))
    want = lax.ragged_dot_general(lhs, rhs, sizes, rdn, precision=HIGHEST)
    (lc, rc), (lb, rb) = dn
    inst = instruction("ragged-dot", shape_of(want), [shape_of(lhs), shape_of(rhs), shape_of(sizes)],
                       lhs_contracting_dims=lc, rhs_contracting_dims=rc, lhs_batch_dims=lb, rhs_batch_dims=rb,
                       lhs_ragged_dims=ragged, rhs_group_dims=group)
    close(run(inst, lhs, rhs, sizes), want, rtol=1e-5)


def _random_conv_case(seed: int):
    """A random valid convolution: layouts, sizes, strides, padding (negative too), dilations, groups."""
    r = np.random.default_rng(seed)
    nsp = int(r.integers(1, 3))
    spatial_letters = "HWD"[:nsp]
    fgc, bgc = (int(r.integers(1, 4)), 1) if r.random() < 0.7 else (1, int(r.integers(1, 3)))
    n, ci = bgc * int(r.integers(1, 3)), int(r.integers(1, 4))
    c, o = fgc * ci if bgc == 1 else ci, fgc * bgc * int(r.integers(1, 3))
    kernel = [int(r.integers(1, 4)) for _ in range(nsp)]
    strides = [int(r.integers(1, 4)) for _ in range(nsp)]
    ldil = [int(r.integers(1, 3)) for _ in range(nsp)]
    rdil = [int(r.integers(1, 3)) for _ in range(nsp)]
    sizes, padding = [], []
    for k, ld, rd in zip(kernel, ldil, rdil):
        size = int(r.integers(1, 8))
        lo, hi = int(r.integers(-1, 3)), int(r.integers(-1, 3))
        span = (k - 1) * rd + 1
        base = (size - 1) * ld + 1
        if base + lo + hi < span:  # make the window fit at least once
            hi += span - (base + lo + hi)
        sizes.append(size)
        padding.append((lo, hi))
    perm = lambda letters: "".join(r.permutation(list(letters)))  # noqa: E731
    specs = (perm("NC" + spatial_letters), perm("OI" + spatial_letters), perm("NC" + spatial_letters))
    return (specs, tuple(sizes), tuple(kernel), n, c, o, tuple(strides), tuple(padding), tuple(ldil),
            tuple(rdil), fgc, bgc)


@pytest.mark.parametrize("seed", range(40))
def test_random_convolution_matches_jax(seed):
    case = _random_conv_case(seed)
    specs, lsp, ksp, n, c, o, strides, padding, ldil, rdil, fgc, bgc = case
    lhs, rhs = _conv_operands(case)
    want = lax.conv_general_dilated(lhs, rhs, strides, padding, ldil, rdil, dimension_numbers=specs,
                                    feature_group_count=fgc, batch_group_count=bgc, precision=HIGHEST)
    close(run(_conv_inst(case, lhs, rhs, want), lhs, rhs), want, rtol=1e-4, atol=1e-4)


def test_convolution_without_spatial_dimensions_is_a_matmul():
    a, b = rand((3, 4)), rand((4, 5))
    (got,) = run_hlo("  p0 = f32[3,4] parameter(0)\n  p1 = f32[4,5] parameter(1)\n"
                     "  ROOT c = f32[3,5] convolution(p0, p1), dim_labels=bf_io->bf", a, b)
    close(got, np.asarray(jnp.matmul(a, b, precision=HIGHEST)), rtol=1e-5)
