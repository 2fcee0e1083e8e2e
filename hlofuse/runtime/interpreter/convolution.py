"""Reference semantics of `convolution`: any dimension numbers, strides, padding (negative
too), lhs (base) and rhs (window) dilation, window reversal, feature and batch groups.

The input is brought to [batch, feature, spatial...], dilated and padded; every window is
then viewed with `sliding_window_view` (no copy) and contracted with the kernel by one
einsum, or term by term for small float contractions; no Python loop runs per output
element.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...hlo.attributes import ConvDimensionNumbers, Window, WindowDimension
from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloInstruction
from ...hlo.opcodes import register_reference
from . import denormals
from .conversion import in_contraction_type
from .op_helpers import (accumulation_dtype, attr_int, from_compute, product_dtype, sequential_dtype,
                         to_compute)


def dilate_and_pad(x: np.ndarray, axes: list[int], dims: list[WindowDimension], fill) -> np.ndarray:
    """Insert `base_dilation - 1` fill values between elements along `axes`, then pad each
    axis by (padding_low, padding_high) with `fill`; negative padding crops."""
    for axis, d in zip(axes, dims):
        if d.base_dilation > 1 and x.shape[axis] > 0:
            size = (x.shape[axis] - 1) * d.base_dilation + 1
            shape = list(x.shape)
            shape[axis] = size
            out = np.full(shape, fill, dtype=x.dtype)
            index = [slice(None)] * x.ndim
            index[axis] = slice(None, None, d.base_dilation)
            out[tuple(index)] = x
            x = out
        lo, hi = d.padding_low, d.padding_high
        if lo > 0 or hi > 0:
            widths = [(0, 0)] * x.ndim
            widths[axis] = (max(lo, 0), max(hi, 0))
            x = np.pad(x, widths, constant_values=fill)
        if lo < 0 or hi < 0:
            index = [slice(None)] * x.ndim
            index[axis] = slice(max(-lo, 0), x.shape[axis] - max(-hi, 0))
            x = x[tuple(index)]
    return x


def _padded_size(size: int, d: WindowDimension) -> int:
    """Size of one input dimension after base dilation and padding."""
    dilated = (size - 1) * d.base_dilation + 1 if size > 0 else 0
    return max(dilated + d.padding_low + d.padding_high, 0)


def _sum_sequentially(pg: np.ndarray, kg: np.ndarray, nsp: int, acc: np.dtype,
                      flush_bound: float | None = None, flush_sums: bool = False) -> np.ndarray:
    """sum over (window offset, input feature) of pg * kg, one term at a time: window offsets
    in row-major order outside, input features inside, as XLA's loops run them. With
    `flush_bound`, each product below it is zero (FTZ), and with `flush_sums` each partial sum."""
    batch, groups, ci = pg.shape[:3]
    out_spatial = pg.shape[3:3 + nsp]
    og = kg.shape[1]
    result = np.zeros((batch, groups, og, *out_spatial), dtype=acc)
    expand = (slice(None), slice(None), None) + (Ellipsis,)
    for offset in itertools.product(*(range(s) for s in kg.shape[3:])):
        for j in range(ci):
            tap = pg[(slice(None), slice(None), j, Ellipsis) + offset][expand]
            weight = kg[(slice(None), slice(None), j) + offset].reshape(1, groups, og, *([1] * nsp))
            if flush_bound is None:
                result += tap * weight
                continue
            result += denormals.flush_below(tap * weight, flush_bound)
            if flush_sums:
                denormals.flush_below(result, flush_bound)
    return result


def window_output_size(padded: int, d: WindowDimension) -> int:
    """Number of window positions along one (already dilated and padded) dimension."""
    dilated_window = (d.size - 1) * d.window_dilation + 1
    if padded < dilated_window:
        return 0
    return (padded - dilated_window) // d.stride + 1


# Patch tensors ([batch, features, output positions, window offsets]) of more elements than this
# are not contracted by one einsum, which copies them: a weight-gradient-like convolution of a
# 30x30 window over 32x32 outputs of 128 x 512 features needed 450 GiB (XLA's swap-conv-operands
# test module). They are contracted one window offset at a time instead (`_contract_by_taps`).
PATCH_ELEMENT_BUDGET = 1 << 26


def _nonzero_outputs(tap: int, d: WindowDimension, size: int, out: int) -> tuple[int, int]:
    """[lo, hi) of the output positions along one dimension whose input, at window offset
    `tap` (already times the window dilation), is an element of the operand (of `size`) and not
    padding: the others add 0 * weight, which is +0 for a finite weight."""
    extent = (size - 1) * d.base_dilation + 1 if size > 0 else 0
    first, last = d.padding_low - tap, d.padding_low + extent - 1 - tap  # padded index - tap
    lo = max(0, -(-first // d.stride))
    hi = min(out, last // d.stride + 1) if last >= 0 else 0
    return lo, max(lo, hi)


def _contract_by_taps(x: np.ndarray, kg: np.ndarray, dims: list, sizes: list[int], out_spatial: list[int],
                      grouped, batch: int, acc: np.dtype) -> np.ndarray:
    """The einsum's contraction one window offset at a time: for each offset, the outputs whose
    input is not padding (all of them when a weight is inf or NaN, for which 0 * weight is NaN)
    get that offset's input features times its weights. `x`: the dilated, padded input [n, c,
    spatial...]; `kg`: [group, og, ci, window...]; `grouped(view)`: an [n, c, positions...]
    view as [batch, group, ci, positions...]."""
    sp = "".join(chr(ord("p") + i) for i in range(len(dims)))
    finite = bool(np.all(np.isfinite(kg))) if kg.dtype.kind in "fc" else True
    result = np.zeros((batch, kg.shape[0], kg.shape[1], *out_spatial), dtype=acc)
    for offset in itertools.product(*(range(d.size) for d in dims)):
        taps = [t * d.window_dilation for t, d in zip(offset, dims)]
        ranges = [_nonzero_outputs(tap, d, size, out) if finite else (0, out)
                  for tap, d, size, out in zip(taps, dims, sizes, out_spatial)]
        if any(hi <= lo for lo, hi in ranges):
            continue
        ins = tuple(slice(lo * d.stride + tap, (hi - 1) * d.stride + tap + 1, d.stride)
                    for (lo, hi), d, tap in zip(ranges, dims, taps))
        view = grouped(x[(slice(None), slice(None)) + ins])
        weights = kg[(slice(None), slice(None), slice(None)) + offset]
        result[(slice(None), slice(None), slice(None)) + tuple(slice(lo, hi) for lo, hi in ranges)] += np.einsum(
            f"ngc{sp},goc->ngo{sp}", view, weights, optimize=True)
    return result


def convolve(lhs: np.ndarray, rhs: np.ndarray, window: Window, dn: ConvDimensionNumbers,
             feature_groups: int, batch_groups: int, out_dtype: np.dtype, name: str = "",
             flush_products: bool = False) -> np.ndarray:
    """XLA's ConvGeneralDilated on numpy arrays; the result is laid out as `dn` says.

    Accumulation (see op_helpers): a small float contraction is summed term by term in the
    result's precision (at least f32), window offsets outside and input features inside, as
    XLA's loops do; a large one in float64 by one einsum; integers in int64, wrapped. The
    result is rounded once to `out_dtype` (the result shape's type: preferred_element_type).
    `flush_products` models XLA:CPU's FTZ inside the contraction as `dot.dot_general` does:
    where some product may be a denormal, the sum runs term by term with those products zero.
    """
    nsp = len(dn.input_spatial)
    dims = list(window.dimensions)
    if len(dims) != nsp:
        raise UnsupportedError(f"convolution {name}: window has {len(dims)} dimensions, "
                               f"dim_labels has {nsp} spatial dimensions")
    if feature_groups > 1 and batch_groups > 1:
        raise UnsupportedError(f"convolution {name}: feature_group_count and batch_group_count "
                               "cannot both exceed 1")
    n, c = lhs.shape[dn.input_batch], lhs.shape[dn.input_feature]
    o, ci = rhs.shape[dn.kernel_output_feature], rhs.shape[dn.kernel_input_feature]
    window_size = math.prod(d.size for d in dims)
    out_batch = n // batch_groups
    outputs = out_batch * o * math.prod(window_output_size(
        _padded_size(lhs.shape[ax], d), d) for ax, d in zip(dn.input_spatial, dims))
    seq = sequential_dtype(out_dtype, lhs.dtype, rhs.dtype, terms=window_size * ci, outputs=outputs)
    acc = seq if seq is not None else accumulation_dtype(lhs.dtype, rhs.dtype, out_dtype)
    x = to_compute(lhs, acc).transpose([dn.input_batch, dn.input_feature, *dn.input_spatial])
    k = to_compute(rhs, acc).transpose([dn.kernel_output_feature, dn.kernel_input_feature, *dn.kernel_spatial])
    for i, d in enumerate(dims):
        if d.window_reversal:
            k = np.flip(k, axis=2 + i)
    x = dilate_and_pad(x, list(range(2, 2 + nsp)), dims, 0)
    out_spatial = [window_output_size(x.shape[2 + i], d) for i, d in enumerate(dims)]
    if 0 in out_spatial or 0 in (n, c, o):
        result = np.zeros((out_batch, o, *out_spatial), dtype=acc)
    else:
        dilated = [(d.size - 1) * d.window_dilation + 1 for d in dims]
        patches = sliding_window_view(x, dilated, axis=tuple(range(2, 2 + nsp)))
        index = (slice(None), slice(None)) + tuple(slice(None, None, d.stride) for d in dims) \
            + tuple(slice(None, None, d.window_dilation) for d in dims)
        patches = patches[index]  # [n, c, out spatial..., window...]
        if batch_groups > 1:
            # The batch splits group-major into batch_groups groups; output feature group g
            # (of o // batch_groups features) reads batch group g.
            def grouped(v):
                return v.reshape(batch_groups, out_batch, c, *v.shape[2:]).swapaxes(0, 1)
            kg = k.reshape(batch_groups, o // batch_groups, ci, *k.shape[2:])
        else:
            # Input features split into feature_groups groups of ci; output feature group g
            # (of o // feature_groups features) reads input group g.
            def grouped(v):
                return v.reshape(n, feature_groups, c // feature_groups, *v.shape[2:])
            kg = k.reshape(feature_groups, o // feature_groups, ci, *k.shape[2:])
        pg = grouped(patches)
        # pg: [batch, group, ci, out spatial..., window...]; kg: [group, og, ci, window...]
        bound = denormals.tiny_product_bound(lhs, rhs, product_dtype(lhs, rhs)) if flush_products else None
        if seq is None and bound is None and pg.size > PATCH_ELEMENT_BUDGET:
            sizes = [lhs.shape[ax] for ax in dn.input_spatial]
            result = _contract_by_taps(x, kg, dims, sizes, out_spatial, grouped, pg.shape[0], acc)
        elif seq is not None or bound is not None:
            result = _sum_sequentially(pg, kg, nsp, acc, bound, flush_sums=seq is not None)
        else:
            sp = "".join(chr(ord("p") + i) for i in range(nsp))  # output positions
            win = "".join(chr(ord("h") + i) for i in range(nsp))  # window offsets
            result = np.einsum(f"ngc{sp}{win},goc{win}->ngo{sp}", pg, kg, optimize=True)
        result = result.reshape(out_batch, o, *out_spatial)
    perm = [dn.output_batch, dn.output_feature, *dn.output_spatial]
    return from_compute(result.transpose(np.argsort(perm)), out_dtype)


@register_reference("convolution")
def convolution_reference(inst: HloInstruction, args: list, interp) -> np.ndarray:
    """`convolution(lhs, rhs), window=..., dim_labels=...` with optional group counts."""
    lhs, rhs = (np.asarray(a) for a in args)
    dn = inst.attrs.get("dim_labels")
    if dn is None:
        raise UnsupportedError(f"convolution {inst.name}: missing dim_labels")
    dn = ConvDimensionNumbers.of(dn)
    window = inst.attrs.get("window") or Window(tuple(WindowDimension() for _ in dn.input_spatial))
    groups = attr_int(inst, "feature_group_count", 1), attr_int(inst, "batch_group_count", 1)
    flush = getattr(interp, "denormals", "keep") == "flush"
    return in_contraction_type(inst, lambda dtype: convolve(lhs, rhs, window, dn, *groups, dtype, inst.name,
                                                            flush_products=flush))
