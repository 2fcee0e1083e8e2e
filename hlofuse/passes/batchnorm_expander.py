"""XLA's BatchNormExpander: batch-norm-training / -inference / -grad become elementwise ops,
broadcasts along the feature dimension and add-reductions over the other dimensions, which
the fusion passes then fuse like any other arithmetic.

The formulas are XLA's (so rounding follows XLA, not a textbook):
- training: mean = sum(x)/N, var = sum(x*x)/N - mean*mean,
  y = (x - mean) * rsqrt(var + eps) * scale + offset; the result is (y, mean, var);
- inference: true_scale = scale * rsqrt(var + eps), true_shift = offset - mean * true_scale,
  y = x * true_scale + true_shift;
- grad: grad_offset = sum(dy), grad_scale = sum(dy * (x - mean)) * rsqrt(var + eps),
  grad_x = scale * rsqrt(var + eps) / N * (N * dy - sum(dy) - (x - mean) * sum(dy * (x - mean)) / (var + eps)).
N, the number of elements per feature, is a constant here: hlofuse shapes are static.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..hlo.attributes import Raw
from ..hlo.errors import VerifierError
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..hlo.shapes import ArrayShape, Shape, array, scalar
from .pass_base import HloPass
from .rewrite import Rewriter

_BATCH_NORM = ("batch-norm-training", "batch-norm-inference", "batch-norm-grad")


def _attr_number(inst: HloInstruction, key: str, cast):
    value = inst.attrs.get(key)
    if value is None:
        raise VerifierError(f"{inst.opcode} needs attribute {key}", instruction=inst.name)
    try:
        return cast(str(value) if isinstance(value, Raw) else value)
    except (TypeError, ValueError):  # a malformed value (the fuzzer: epsilon==0.001) is the user's
        raise VerifierError(f"{inst.opcode}: attribute {key} must be a number, got {str(value)!r}",
                            instruction=inst.name) from None


class _Builder:
    """Makes the unattached instructions of one expansion (the Rewriter adds them)."""

    def __init__(self, reducers: "_AddReducers", module: HloModule, x: HloInstruction, feature: int) -> None:
        self.reducers = reducers
        self.module = module
        self.shape: ArrayShape = x.shape
        self.dtype = x.shape.dtype
        self.feature = feature
        self.feature_shape = array(self.dtype, (x.shape.dims[feature],))
        self.other_dims = tuple(d for d in range(x.shape.rank) if d != feature)
        self.count = math.prod(x.shape.dims[d] for d in self.other_dims)

    def op(self, opcode: str, shape: Shape, *operands: HloInstruction, **attrs) -> HloInstruction:
        """A new instruction (unattached)."""
        return HloInstruction(opcode, shape, operands, attrs, name=opcode)

    def constant(self, value: float) -> HloInstruction:
        """A scalar constant of the operand's element type."""
        c = HloInstruction("constant", scalar(self.dtype), name="constant")
        c.literal = np.asarray(value).astype(self.dtype.numpy).reshape(())
        return c

    def splat(self, value: float, shape: ArrayShape) -> HloInstruction:
        """`value` broadcast to `shape`."""
        return self.op("broadcast", shape, self.constant(value), dimensions=())

    def to_operand(self, feature_value: HloInstruction) -> HloInstruction:
        """A per-feature value broadcast along the feature dimension to the operand's shape."""
        return self.op("broadcast", self.shape, feature_value, dimensions=(self.feature,))

    def binary(self, opcode: str, a: HloInstruction, b: HloInstruction) -> HloInstruction:
        """Elementwise `opcode` of two operands of one shape."""
        return self.op(opcode, a.shape, a, b)

    def sum(self, value: HloInstruction) -> HloInstruction:
        """The add-reduction of an operand-shaped value over every dimension but the feature."""
        reducer = self.reducers.get(self.dtype)
        return self.op("reduce", self.feature_shape, value, self.constant(0.0),
                       dimensions=self.other_dims, to_apply=reducer)

    def mean(self, value: HloInstruction) -> HloInstruction:
        """`value` divided by the element count per feature."""
        return self.binary("divide", value, self.splat(self.count, value.shape))

    def rsqrt(self, value: HloInstruction) -> HloInstruction:
        """Elementwise reciprocal square root."""
        return self.op("rsqrt", value.shape, value)


def _expand_training(bld: _Builder, inst: HloInstruction, eps: float) -> HloInstruction:
    x, scale, offset = inst.operands
    mean = bld.mean(bld.sum(x))
    square_mean = bld.mean(bld.sum(bld.binary("multiply", x, x)))
    var = bld.binary("subtract", square_mean, bld.binary("multiply", mean, mean))
    inv_std = bld.rsqrt(bld.binary("add", bld.to_operand(var), bld.splat(eps, bld.shape)))
    centered = bld.binary("subtract", x, bld.to_operand(mean))
    scaled = bld.binary("multiply", bld.binary("multiply", centered, inv_std), bld.to_operand(scale))
    y = bld.binary("add", scaled, bld.to_operand(offset))
    return bld.op("tuple", inst.shape, y, mean, var)


def _expand_inference(bld: _Builder, inst: HloInstruction, eps: float) -> HloInstruction:
    x, scale, offset, mean, var = inst.operands
    fshape = bld.feature_shape
    true_scale = bld.binary("multiply", scale, bld.rsqrt(bld.binary("add", var, bld.splat(eps, fshape))))
    true_shift = bld.binary("subtract", offset, bld.binary("multiply", mean, true_scale))
    return bld.binary("add", bld.binary("multiply", x, bld.to_operand(true_scale)), bld.to_operand(true_shift))


def _expand_grad(bld: _Builder, inst: HloInstruction, eps: float) -> HloInstruction:
    x, scale, mean, var, dy = inst.operands
    var_eps = bld.binary("add", bld.to_operand(var), bld.splat(eps, bld.shape))
    inv_std = bld.rsqrt(bld.binary("add", var, bld.splat(eps, bld.feature_shape)))
    centered = bld.binary("subtract", x, bld.to_operand(mean))
    sum_dy_centered = bld.sum(bld.binary("multiply", dy, centered))
    grad_offset = bld.sum(dy)
    grad_scale = bld.binary("multiply", sum_dy_centered, inv_std)
    i1 = bld.binary("multiply", dy, bld.splat(bld.count, bld.shape))
    i4 = bld.binary("multiply", bld.to_operand(sum_dy_centered), centered)
    i5 = bld.binary("divide", i4, var_eps)
    i6 = bld.binary("subtract", bld.binary("subtract", i1, bld.to_operand(grad_offset)), i5)
    factor = bld.mean(bld.binary("multiply", bld.to_operand(scale), bld.rsqrt(var_eps)))
    grad_x = bld.binary("multiply", factor, i6)
    return bld.op("tuple", inst.shape, grad_x, grad_scale, grad_offset)


_EXPANDERS = {
    "batch-norm-training": _expand_training,
    "batch-norm-inference": _expand_inference,
    "batch-norm-grad": _expand_grad,
}


class _AddReducers:
    """The scalar add computations of one run, one per element type (made on first use)."""

    def __init__(self, module: HloModule) -> None:
        self.module = module
        self._by_dtype: dict[str, HloComputation] = {}

    def get(self, dtype) -> HloComputation:
        """The scalar add computation of `dtype` in the module."""
        comp = self._by_dtype.get(dtype.name)
        if comp is None:
            comp = HloComputation(f"add_{dtype.name}")
            self.module.add_computation(comp)
            a = comp.add_parameter(scalar(dtype), "lhs")
            b = comp.add_parameter(scalar(dtype), "rhs")
            comp.root = comp.add_instruction(HloInstruction("add", scalar(dtype), (a, b), name="add"))
            self._by_dtype[dtype.name] = comp
        return comp


@dataclass(frozen=True)
class BatchNormExpander(HloPass):
    """Rewrites the batch-norm ops of every non-fusion computation into simpler HLO."""

    name: ClassVar[str] = "batchnorm-expander"

    def run(self, module: HloModule) -> bool:
        """Expand every batch-norm instruction; True if there was one."""
        reducers = _AddReducers(module)
        changed = False
        for comp in list(module.computations):
            if comp.is_fusion_computation():
                continue
            targets = [i for i in comp.instructions if i.opcode in _BATCH_NORM]
            if not targets:
                continue
            rewriter = Rewriter(comp)
            for inst in targets:
                x = inst.operands[0]
                if not isinstance(x.shape, ArrayShape) or not x.shape.dtype.is_float:
                    raise VerifierError(f"{inst.opcode} needs a floating-point array operand", instruction=inst.name)
                feature = _attr_number(inst, "feature_index", int)
                eps = _attr_number(inst, "epsilon", float)
                bld = _Builder(reducers, module, x, feature)
                rewriter.replace(inst, _EXPANDERS[inst.opcode](bld, inst, eps))
            rewriter.finish()
            changed = True
        return changed

