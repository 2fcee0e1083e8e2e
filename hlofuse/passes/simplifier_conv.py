"""Simplifier rule for convolutions (XLA's AlgebraicSimplifier::FoldConvInputPad).

convolution(pad(x, 0), w) => convolution(x, w) with the pad's edge padding added to the
window's padding, and its interior padding turned into lhs dilation: keras pads the input of
every stride-2 convolution with ZeroPadding2D (MobileNetV2's depthwise blocks, ResNet's stem),
and jax lowers that to a pad feeding the convolution. The pad is a loop over the whole padded
input, written to memory and read back; it also stands between the convolution before it and
that convolution's elementwise epilogue (batch norm, activation), which then cannot fuse into
it (an epilogue ends at a reader that is not elementwise). Folded, the epilogue fuses and the
padded copy is never made.

Bit for bit: a padding tap of the window and a zero of the pad contribute the same term,
0 * w, at the same place of each output element's sum (the interpreter and the CPU kernels
sum window offsets in order; the kernels skip padding taps, whose +-0 terms cannot change an
accumulator that starts at +0 and so never holds -0, and add them when a weight is inf or NaN).
A pad of -0 gives the same terms with the other sign: the same sums.

Folded only when, as in XLA: the padding value is a zero constant; the batch and feature
dimensions of the input are not padded; no edge padding is negative (a negative edge crops x,
and cropping before the window's padding is not the same as after); and a dimension with
interior padding has no lhs dilation of its own (the two would compose into a non-uniform
dilation).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..hlo.attributes import ConvDimensionNumbers, Window, WindowDimension
from ..hlo.ir import HloInstruction
from .simplifier_base import new_instruction, scalar_constant


def _is_zero(value_inst: HloInstruction) -> bool:
    """Whether the pad value `value_inst` is a constant zero (+0, -0, or integer 0)."""
    value = scalar_constant(value_inst)
    if value is None or value_inst.shape.dtype.kind not in ("float", "sint", "uint"):
        return False
    return bool(np.asarray(value, dtype=np.float64) == 0)


def fold_conv_input_pad(inst: HloInstruction) -> HloInstruction | None:
    """convolution(pad(x, 0), w) => convolution(x, w) with the padding in its window (see the
    module docstring); None when the rule does not apply."""
    pad, weights = inst.operands
    if pad.opcode != "pad" or not _is_zero(pad.operands[1]):
        return None
    dn = ConvDimensionNumbers.of(inst.attrs.get("dim_labels"))
    config = [tuple(c) for c in pad.attrs.get("padding", ())]
    window = inst.attrs.get("window") or Window(tuple(WindowDimension() for _ in dn.input_spatial))
    if len(config) != pad.shape.rank or len(window.dimensions) != len(dn.input_spatial):
        return None
    if any(config[a] != (0, 0, 0) for a in (dn.input_batch, dn.input_feature)):
        return None
    dims = []
    for axis, d in zip(dn.input_spatial, window.dimensions):
        lo, hi, interior = config[axis]
        if lo < 0 or hi < 0 or (interior and d.base_dilation != 1):
            return None
        dims.append(dataclasses.replace(d, padding_low=d.padding_low + lo, padding_high=d.padding_high + hi,
                                        base_dilation=d.base_dilation * (interior + 1)))
    attrs = dict(inst.attrs)
    attrs["window"] = Window(tuple(dims))
    return new_instruction(inst, "convolution", [pad.operands[0], weights], attrs)


RULES = [("convolution", fold_conv_input_pad)]
