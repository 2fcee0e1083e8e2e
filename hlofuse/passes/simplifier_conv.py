"""Simplifier rules for convolutions: a zero pad of the input folded into the window (XLA's
AlgebraicSimplifier::FoldConvInputPad), and a reverse of the weights' spatial dimensions folded
into the window's reversal.

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

convolution(x, reverse(w, D)) => convolution(x, w) with `rhs_reversal` flipped on every window
dimension whose kernel dimension is in D: the gradient of a convolution with respect to its input
is a convolution with the spatially reversed weights, which jax writes as a reverse feeding the
convolution (haiku's ResNet-18 training step has 16, each a loop kernel over a weight tensor of
up to 9 MB and 20-27 ms of LLVM). Window reversal is defined as that reverse (XLA's
WindowDimension.window_reversal: the kernel's spatial dimension read backwards), so every output
element sums the same products in the same window order: the same terms, bit for bit in the
interpreter. The compiled kernels read reversed weights in place (kernels/cpu_conv_gemm.py: a
GEMM per window tap, as for jax's `01oi` gradient weights already; cpu_conv.py and
cpu_conv_cold.py index the tap backwards). Folded only when D holds kernel spatial dimensions
alone (a reversed feature dimension is no window's); the reverse stays for any other user.
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


def fold_conv_weight_reverse(inst: HloInstruction) -> HloInstruction | None:
    """convolution(x, reverse(w, D)) => convolution(x, w) with the window's reversal flipped on
    the dimensions of D, which must all be kernel spatial dimensions (see the module
    docstring); None when the rule does not apply."""
    data, reverse = inst.operands
    if reverse.opcode != "reverse":
        return None
    dn = ConvDimensionNumbers.of(inst.attrs.get("dim_labels"))
    flipped = set(int(a) for a in reverse.attrs.get("dimensions", ()))
    if not flipped or not flipped <= set(dn.kernel_spatial):
        return None
    window = inst.attrs.get("window") or Window(tuple(WindowDimension() for _ in dn.kernel_spatial))
    if len(window.dimensions) != len(dn.kernel_spatial):
        return None
    dims = tuple(dataclasses.replace(d, window_reversal=d.window_reversal != (axis in flipped))
                 for axis, d in zip(dn.kernel_spatial, window.dimensions))
    attrs = dict(inst.attrs)
    attrs["window"] = Window(dims)
    return new_instruction(inst, "convolution", [data, reverse.operands[0]], attrs)


RULES = [("convolution", fold_conv_input_pad), ("convolution", fold_conv_weight_reverse)]
