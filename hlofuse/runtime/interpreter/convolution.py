"""Reference semantics of `convolution`: any dimension numbers, strides, padding (negative
too), lhs (base) and rhs (window) dilation, window reversal, feature and batch groups.

The input is brought to [batch, feature, spatial...], dilated and padded; every window is
then viewed with `sliding_window_view` (no copy) and contracted with the kernel by one
einsum, so no Python loop runs per output element.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...hlo.attributes import ConvDimensionNumbers, Window, WindowDimension
from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloInstruction
from ...hlo.opcodes import register_reference
from .op_helpers import accumulation_dtype, attr_int, from_compute, result_dtype, to_compute


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


def window_output_size(padded: int, d: WindowDimension) -> int:
    """Number of window positions along one (already dilated and padded) dimension."""
    dilated_window = (d.size - 1) * d.window_dilation + 1
    if padded < dilated_window:
        return 0
    return (padded - dilated_window) // d.stride + 1


def convolve(lhs: np.ndarray, rhs: np.ndarray, window: Window, dn: ConvDimensionNumbers,
             feature_groups: int, batch_groups: int, out_dtype: np.dtype, name: str = "") -> np.ndarray:
    """XLA's ConvGeneralDilated on numpy arrays; the result is laid out as `dn` says.

    Products accumulate in float64 for every float type (int64 for integers), then round once
    to `out_dtype` (the result shape's type, i.e. preferred_element_type).
    """
    nsp = len(dn.input_spatial)
    dims = list(window.dimensions)
    if len(dims) != nsp:
        raise UnsupportedError(f"convolution {name}: window has {len(dims)} dimensions, "
                               f"dim_labels has {nsp} spatial dimensions")
    if feature_groups > 1 and batch_groups > 1:
        raise UnsupportedError(f"convolution {name}: feature_group_count and batch_group_count "
                               "cannot both exceed 1")
    acc = accumulation_dtype(lhs.dtype, rhs.dtype, out_dtype)
    x = to_compute(lhs, acc).transpose([dn.input_batch, dn.input_feature, *dn.input_spatial])
    k = to_compute(rhs, acc).transpose([dn.kernel_output_feature, dn.kernel_input_feature, *dn.kernel_spatial])
    for i, d in enumerate(dims):
        if d.window_reversal:
            k = np.flip(k, axis=2 + i)
    x = dilate_and_pad(x, list(range(2, 2 + nsp)), dims, 0)
    out_spatial = [window_output_size(x.shape[2 + i], d) for i, d in enumerate(dims)]
    n, c = x.shape[:2]
    o, ci = k.shape[:2]
    out_batch = n // batch_groups
    if 0 in out_spatial or 0 in (n, c, o):
        result = np.zeros((out_batch, o, *out_spatial), dtype=acc)
    else:
        dilated = [(d.size - 1) * d.window_dilation + 1 for d in dims]
        patches = sliding_window_view(x, dilated, axis=tuple(range(2, 2 + nsp)))
        index = (slice(None), slice(None)) + tuple(slice(None, None, d.stride) for d in dims) \
            + tuple(slice(None, None, d.window_dilation) for d in dims)
        patches = patches[index]  # [n, c, out spatial..., window...]
        sp = "".join(chr(ord("p") + i) for i in range(nsp))  # output positions
        win = "".join(chr(ord("h") + i) for i in range(nsp))  # window offsets
        if batch_groups > 1:
            # The batch splits group-major into batch_groups groups; output feature group g
            # (of o // batch_groups features) reads batch group g.
            pg = patches.reshape(batch_groups, out_batch, c, *patches.shape[2:])
            kg = k.reshape(batch_groups, o // batch_groups, ci, *k.shape[2:])
            result = np.einsum(f"gnc{sp}{win},goc{win}->ngo{sp}", pg, kg, optimize=True)
        else:
            # Input features split into feature_groups groups of ci; output feature group g
            # (of o // feature_groups features) reads input group g.
            g = feature_groups
            pg = patches.reshape(n, g, c // g, *patches.shape[2:])
            kg = k.reshape(g, o // g, ci, *k.shape[2:])
            result = np.einsum(f"ngc{sp}{win},goc{win}->ngo{sp}", pg, kg, optimize=True)
        result = result.reshape(out_batch, o, *out_spatial)
    perm = [dn.output_batch, dn.output_feature, *dn.output_spatial]
    return from_compute(result.transpose(np.argsort(perm)), out_dtype)


@register_reference("convolution")
def convolution_reference(inst: HloInstruction, args: list, interp) -> np.ndarray:
    """`convolution(lhs, rhs), window=..., dim_labels=...` with optional group counts."""
    lhs, rhs = (np.asarray(a) for a in args)
    dn = inst.attrs.get("dim_labels")
    if isinstance(dn, str) or (dn is not None and not isinstance(dn, ConvDimensionNumbers)):
        dn = ConvDimensionNumbers.from_labels(str(dn))
    if dn is None:
        raise UnsupportedError(f"convolution {inst.name}: missing dim_labels")
    window = inst.attrs.get("window") or Window(tuple(WindowDimension() for _ in dn.input_spatial))
    return convolve(lhs, rhs, window, dn, attr_int(inst, "feature_group_count", 1),
                    attr_int(inst, "batch_group_count", 1), result_dtype(inst.shape), inst.name)
