"""Reference semantics of `dot` (general dimension numbers) and `ragged-dot`."""
from __future__ import annotations

import math

import numpy as np

from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloInstruction
from ...hlo.opcodes import register_reference
from . import denormals
from .conversion import in_contraction_type
from .op_helpers import (accumulation_dtype, attr_dims, from_compute, product_dtype, result_dtype, sequential_dtype,
                         to_compute)


def dot_general(lhs: np.ndarray, rhs: np.ndarray, lb: tuple[int, ...], lc: tuple[int, ...],
                rb: tuple[int, ...], rc: tuple[int, ...], out_dtype: np.dtype,
                flush_products: bool = False) -> np.ndarray:
    """XLA's DotGeneral: result dimensions are batch, lhs free, rhs free (each in order).

    Accumulation (see op_helpers): a small float contraction is summed term by term in the
    result's precision (at least f32: bf16/f16 products accumulate in f32, then round), in
    increasing contracting index, as XLA's loops do; a large one in float64 by one matmul.
    Integers accumulate in int64 and wrap to the result type. The result shape's element
    type is the preferred_element_type.

    `flush_products` models XLA:CPU's FTZ inside the contraction: a product (and, summed term
    by term, a partial sum) that is a denormal of the precision it is computed in is zero.
    Where some product may be that small (`denormals.tiny_product_bound`), the contraction is
    summed term by term, whatever its size.
    """
    lfree = [d for d in range(lhs.ndim) if d not in lb and d not in lc]
    rfree = [d for d in range(rhs.ndim) if d not in rb and d not in rc]
    batch = [lhs.shape[d] for d in lb]
    m = [lhs.shape[d] for d in lfree]
    n = [rhs.shape[d] for d in rfree]
    k = math.prod(lhs.shape[d] for d in lc)
    outputs = math.prod(batch) * math.prod(m) * math.prod(n)
    seq = sequential_dtype(out_dtype, lhs.dtype, rhs.dtype, terms=k, outputs=outputs)
    acc = seq if seq is not None else accumulation_dtype(lhs.dtype, rhs.dtype, out_dtype)
    a = to_compute(lhs, acc).transpose(list(lb) + lfree + list(lc))
    b = to_compute(rhs, acc).transpose(list(rb) + list(rc) + rfree)
    a = a.reshape(math.prod(batch), math.prod(m), k)
    b = b.reshape(math.prod(batch), k, math.prod(n))
    bound = denormals.tiny_product_bound(lhs, rhs, product_dtype(lhs, rhs)) if flush_products else None
    if bound is not None:
        out = np.zeros((a.shape[0], a.shape[1], b.shape[2]), dtype=acc)
        for i in range(k):
            out += denormals.flush_below(a[:, :, i, None] * b[:, None, i, :], bound)
            if seq is not None:
                denormals.flush_below(out, bound)
    elif seq is not None:
        out = np.zeros((a.shape[0], a.shape[1], b.shape[2]), dtype=acc)
        for i in range(k):
            out += a[:, :, i, None] * b[:, None, i, :]
    else:
        out = np.matmul(a, b)
    return from_compute(out.reshape(batch + m + n), out_dtype)


@register_reference("dot")
def dot_reference(inst: HloInstruction, args: list, interp) -> np.ndarray:
    """`dot(lhs, rhs)` with lhs/rhs batch and contracting dimensions."""
    lhs, rhs = (np.asarray(a) for a in args)
    lb, lc = attr_dims(inst, "lhs_batch_dims"), attr_dims(inst, "lhs_contracting_dims")
    rb, rc = attr_dims(inst, "rhs_batch_dims"), attr_dims(inst, "rhs_contracting_dims")
    if len(lb) != len(rb) or len(lc) != len(rc):
        raise UnsupportedError(f"dot {inst.name}: lhs and rhs dimension numbers differ in length")
    if "sparsity" in inst.attrs:
        raise UnsupportedError(f"dot {inst.name}: sparse dot (sparsity=...) is not supported")
    flush = getattr(interp, "denormals", "keep") == "flush"
    return in_contraction_type(inst, lambda dtype: dot_general(lhs, rhs, lb, lc, rb, rc, dtype, flush_products=flush))


@register_reference("ragged-dot")
def ragged_dot_reference(inst: HloInstruction, args: list, interp) -> np.ndarray:
    """`ragged-dot(lhs, rhs, group_sizes)`: a dot whose lhs ragged dimension is cut into
    consecutive groups of the given sizes (group_sizes [g], or [lhs batch..., outer dims..., g]).

    - ragged non-contracting dimension (rhs has a group dimension): rows of group i multiply
      rhs group i; the result is [batch..., lhs free..., rhs free...], rows past the last
      group are zero;
    - ragged contracting dimension (no rhs group dimension): group i contracts only its own
      range; the result is [g, batch..., lhs free..., rhs free...];
    - ragged batch dimension (no rhs group dimension): batch entries are independent, so the
      grouping changes nothing and this is the ordinary dot (as in JAX's reference).
    """
    lhs, rhs, sizes = (np.asarray(a) for a in args)
    lc, rc = attr_dims(inst, "lhs_contracting_dims"), attr_dims(inst, "rhs_contracting_dims")
    lb, rb = attr_dims(inst, "lhs_batch_dims"), attr_dims(inst, "rhs_batch_dims")
    # XLA prints lhs_ragged_dims / rhs_group_dims; StableHLO spells the long names.
    lr = attr_dims(inst, "lhs_ragged_dims") or attr_dims(inst, "lhs_ragged_dimensions")
    rg = attr_dims(inst, "rhs_group_dims") or attr_dims(inst, "rhs_group_dimensions")
    if len(lr) != 1 or len(rg) > 1 or bool(rg) != (lr[0] not in lc and lr[0] not in lb):
        raise UnsupportedError(f"ragged-dot {inst.name}: needs one lhs ragged dimension, and one rhs group "
                               "dimension exactly when the ragged dimension is a non-contracting one")
    ragged = lr[0]
    out_dtype = result_dtype(inst.shape)
    acc = accumulation_dtype(lhs.dtype, rhs.dtype, out_dtype)
    # group_sizes' leading dimensions are the lhs batch dimensions, then the lhs dimensions of
    # the ragged dimension's kind (free or contracting) outer to it.
    lead = list(lb) + [d for d in range(ragged) if d not in lb and (d in lc) == (ragged in lc)]
    ends = np.cumsum(sizes.astype(np.int64), axis=-1)
    starts = ends - sizes.astype(np.int64)
    position = np.arange(lhs.shape[ragged]).reshape([-1 if d == ragged else 1 for d in range(lhs.ndim)])

    def rows_of(group: int) -> np.ndarray:
        shape = [1] * lhs.ndim
        for d, size in zip(lead, sizes.shape[:-1]):
            shape[d] = size
        lo, hi = starts[..., group].reshape(shape), ends[..., group].reshape(shape)
        return (position >= lo) & (position < hi)

    lhs_acc = to_compute(lhs, acc)
    groups = sizes.shape[-1]
    if rg:
        g_dim = rg[0]
        rb2, rc2 = (tuple(d - (d > g_dim) for d in dims) for dims in (rb, rc))
        out = None
        for g in range(groups):
            part = dot_general(np.where(rows_of(g), lhs_acc, 0), np.take(to_compute(rhs, acc), g, axis=g_dim),
                               lb, lc, rb2, rc2, acc)
            out = part if out is None else out + part
    elif ragged in lb:
        out = dot_general(lhs_acc, to_compute(rhs, acc), lb, lc, rb, rc, acc)
    else:
        out = np.stack([dot_general(np.where(rows_of(g), lhs_acc, 0), to_compute(rhs, acc), lb, lc, rb, rc, acc)
                        for g in range(groups)])
    return from_compute(out, out_dtype)
