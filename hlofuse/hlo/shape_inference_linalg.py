"""Shape rules of linear algebra: dot, convolution, fft, cholesky, triangular-solve and
batch normalization."""
from __future__ import annotations

from .attributes import ConvDimensionNumbers
from .ir import HloInstruction
from .opcodes import register_shape_rule
from .shape_inference_common import (
    array_operand, array_operands, attr, bool_attr, check_dims_in_range, declared_array, fail, int_attr, int_tuple,
    make_array,
    text,
)
from .shape_inference_reduce import windowed_dims
from .shapes import ArrayShape, Shape, TupleShape
from .dtypes import element_type


@register_shape_rule("dot")
def _dot(inst: HloInstruction) -> Shape:
    """dot with general dimension numbers: batch dims, then lhs free dims, then rhs free
    dims; the element type is the declared (preferred) one."""
    lhs, rhs = array_operands(inst, range(2))
    out = declared_array(inst)
    lb = int_tuple(inst, "lhs_batch_dims", ())
    rb = int_tuple(inst, "rhs_batch_dims", ())
    lc = int_tuple(inst, "lhs_contracting_dims", ())
    rc = int_tuple(inst, "rhs_contracting_dims", ())
    check_dims_in_range(inst, lb + lc, lhs.rank, "lhs batch/contracting dimension")
    check_dims_in_range(inst, rb + rc, rhs.rank, "rhs batch/contracting dimension")
    if len(lb) != len(rb):
        fail(inst, f"lhs_batch_dims {list(lb)} and rhs_batch_dims {list(rb)} differ in length")
    if len(lc) != len(rc):
        fail(inst, f"lhs_contracting_dims {list(lc)} and rhs_contracting_dims {list(rc)} differ in length")
    for kind, ls, rs in (("batch", lb, rb), ("contracting", lc, rc)):
        for a, b in zip(ls, rs):
            if lhs.dims[a] != rhs.dims[b]:
                fail(inst, f"{kind} dimension {a} of lhs {text(lhs)} (size {lhs.dims[a]}) does not match "
                           f"dimension {b} of rhs {text(rhs)} (size {rhs.dims[b]})")
    if lhs.dtype.is_pred != rhs.dtype.is_pred:
        fail(inst, f"cannot multiply {lhs.dtype.name} by {rhs.dtype.name}")
    dims = [lhs.dims[d] for d in lb]
    dims += [d for k, d in enumerate(lhs.dims) if k not in lb and k not in lc]
    dims += [d for k, d in enumerate(rhs.dims) if k not in rb and k not in rc]
    return make_array(out.dtype, dims)


@register_shape_rule("ragged-dot")
def _ragged_dot(inst: HloInstruction) -> Shape:
    """ragged-dot(lhs, rhs, group_sizes): the declared shape (group sizes are integers)."""
    lhs, rhs, groups = array_operands(inst, range(3))
    if not groups.dtype.is_integer:
        fail(inst, f"group sizes must be integers, are {groups.dtype.name}")
    return declared_array(inst)


@register_shape_rule("convolution")
def _convolution(inst: HloInstruction) -> Shape:
    """convolution: dim_labels place batch/feature/spatial dimensions; the window slides
    over the input's spatial dimensions; feature and batch groups divide evenly."""
    lhs, rhs = array_operands(inst, range(2))
    out = declared_array(inst)
    dn = attr(inst, "dim_labels")
    if not isinstance(dn, ConvDimensionNumbers):
        fail(inst, f"dim_labels must be convolution dimension numbers, got {dn!r}")
    n = len(dn.input_spatial)
    if lhs.rank != n + 2 or rhs.rank != n + 2:
        fail(inst, f"dim_labels {dn.to_labels()} need operands of rank {n + 2}, got {text(lhs)} and {text(rhs)}")
    fgc = int_attr(inst, "feature_group_count", 1)
    bgc = int_attr(inst, "batch_group_count", 1)
    if fgc < 1 or bgc < 1:
        fail(inst, "feature_group_count and batch_group_count must be >= 1")
    in_batch, in_feat = lhs.dims[dn.input_batch], lhs.dims[dn.input_feature]
    k_in, k_out = rhs.dims[dn.kernel_input_feature], rhs.dims[dn.kernel_output_feature]
    if in_feat % fgc or in_feat // fgc != k_in:
        fail(inst, f"input features ({in_feat}) / feature_group_count ({fgc}) must equal the kernel's "
                   f"input features ({k_in})")
    if k_out % fgc:
        fail(inst, f"kernel output features ({k_out}) must be divisible by feature_group_count ({fgc})")
    if k_out % bgc or in_batch % bgc:
        fail(inst, f"batch ({in_batch}) and kernel output features ({k_out}) must be divisible by "
                   f"batch_group_count ({bgc})")
    window = attr(inst, "window", None)
    if window is None:
        from .attributes import Window

        window = Window(())
    sizes = [rhs.dims[d] for d in dn.kernel_spatial]
    if n and [w.size for w in window.dimensions] != sizes:
        fail(inst, f"window sizes {[w.size for w in window.dimensions]} must equal the kernel's spatial "
                   f"dimensions {sizes}")
    spatial = windowed_dims(inst, tuple(lhs.dims[d] for d in dn.input_spatial), window)
    dims = [0] * (n + 2)
    dims[dn.output_batch] = in_batch // bgc
    dims[dn.output_feature] = k_out
    for k, d in enumerate(dn.output_spatial):
        dims[d] = spatial[k]
    return make_array(out.dtype, dims)


_COMPLEX_OF = {"f32": "c64", "f64": "c128"}
_REAL_OF = {"c64": "f32", "c128": "f64"}


@register_shape_rule("fft")
def _fft(inst: HloInstruction) -> Shape:
    """fft: FFT/IFFT keep a complex shape; RFFT maps real to complex with the last length
    halved plus one; IRFFT maps it back. Stricter than XLA, which does not compare FFT/IFFT
    lengths with the trailing dimensions: a transform of another length is refused here."""
    x = array_operand(inst, 0)
    kind = str(attr(inst, "fft_type")).upper()
    length = int_tuple(inst, "fft_length")
    if not 1 <= len(length) <= 3 or len(length) > x.rank:
        fail(inst, f"fft_length {list(length)} must have 1 to 3 entries, at most the operand rank {x.rank}")
    tail = x.dims[x.rank - len(length):]
    dims = list(x.dims)
    if kind in ("FFT", "IFFT"):
        if not x.dtype.is_complex:
            fail(inst, f"{kind} needs a complex operand, has {x.dtype.name}")
        if tuple(tail) != length:
            fail(inst, f"{kind} over {list(length)} needs trailing dimensions {list(length)}, has {list(tail)}")
        return make_array(x.dtype, dims)
    if kind == "RFFT":
        if x.dtype.name not in _COMPLEX_OF:
            fail(inst, f"RFFT needs an f32 or f64 operand, has {x.dtype.name}")
        if tuple(tail) != length:
            fail(inst, f"RFFT over {list(length)} needs trailing dimensions {list(length)}, has {list(tail)}")
        dims[-1] = length[-1] // 2 + 1 if length[-1] else 0
        return make_array(element_type(_COMPLEX_OF[x.dtype.name]), dims)
    if kind == "IRFFT":
        if x.dtype.name not in _REAL_OF:
            fail(inst, f"IRFFT needs a c64 or c128 operand, has {x.dtype.name}")
        want = tuple(length[:-1]) + ((length[-1] // 2 + 1) if length[-1] else 0,)
        if tuple(tail) != want:
            fail(inst, f"IRFFT over {list(length)} needs trailing dimensions {list(want)}, has {list(tail)}")
        dims[-1] = length[-1]
        return make_array(element_type(_REAL_OF[x.dtype.name]), dims)
    fail(inst, f"unknown fft_type {kind!r} (FFT, IFFT, RFFT or IRFFT)")


def _square_matrices(inst: HloInstruction, a: ArrayShape, what: str) -> None:
    if a.rank < 2 or a.dims[-1] != a.dims[-2]:
        fail(inst, f"{what} must be a batch of square matrices, is {text(a)}")
    if not (a.dtype.is_float or a.dtype.is_complex):
        fail(inst, f"{what} must be floating-point or complex, is {a.dtype.name}")


@register_shape_rule("cholesky")
def _cholesky(inst: HloInstruction) -> Shape:
    """cholesky: square floating matrices; the operand's shape."""
    a = array_operand(inst, 0)
    _square_matrices(inst, a, "operand")
    return make_array(a.dtype, a.dims)


@register_shape_rule("triangular-solve")
def _triangular_solve(inst: HloInstruction) -> Shape:
    """triangular-solve(a, b): a is [..., m, m]; b is [..., m, n] (left side) or [..., n, m]."""
    a, b = array_operands(inst, range(2))
    _square_matrices(inst, a, "a")
    if b.dtype != a.dtype or b.rank != a.rank or b.dims[:-2] != a.dims[:-2]:
        fail(inst, f"b {text(b)} must have a's element type, rank and batch dimensions ({text(a)})")
    m = a.dims[-1]
    solved = b.dims[-2] if bool_attr(inst, "left_side") else b.dims[-1]
    if solved != m:
        fail(inst, f"the solved dimension of b {text(b)} must have size {m}")
    return make_array(b.dtype, b.dims)


def _batch_norm(inst: HloInstruction, vectors: range) -> tuple[ArrayShape, ArrayShape]:
    x = array_operand(inst, 0)
    if not x.dtype.is_float:
        fail(inst, f"operand must be floating-point, is {x.dtype.name}")
    f = int_attr(inst, "feature_index")
    if not 0 <= f < x.rank:
        fail(inst, f"feature_index {f!r} is out of range for rank {x.rank}")
    vec = make_array(x.dtype, (x.dims[f],))
    for k in vectors:
        s = array_operand(inst, k)
        if s.dtype != x.dtype or s.dims != vec.dims:
            fail(inst, f"operand {k} must be {text(vec)} (one value per feature), is {text(s)}")
    return make_array(x.dtype, x.dims), vec


@register_shape_rule("batch-norm-training")
def _bn_training(inst: HloInstruction) -> Shape:
    """batch-norm-training(x, scale, offset): (normalized x, batch mean, batch variance)."""
    x, vec = _batch_norm(inst, range(1, 3))
    return TupleShape((x, vec, vec))


@register_shape_rule("batch-norm-inference")
def _bn_inference(inst: HloInstruction) -> Shape:
    """batch-norm-inference(x, scale, offset, mean, variance): x's shape."""
    x, _ = _batch_norm(inst, range(1, 5))
    return x


@register_shape_rule("batch-norm-grad")
def _bn_grad(inst: HloInstruction) -> Shape:
    """batch-norm-grad(x, scale, mean, variance, grad): (grad x, grad scale, grad offset)."""
    x, vec = _batch_norm(inst, range(1, 4))
    g = array_operand(inst, 4)
    if g.dims != x.dims or g.dtype != x.dtype:
        fail(inst, f"grad_output {text(g)} must have the operand's shape {text(x)}")
    return TupleShape((x, vec, vec))
