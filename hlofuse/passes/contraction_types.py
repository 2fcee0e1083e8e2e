"""Mixed-type dots and convolutions in the type XLA computes them in.

XLA lets a dot or a convolution take operands of other types than its result. Where the
operands' higher-precision type upcasts to the result's (s8 x s8 -> s32, bf16 x bf16 -> f32),
the contraction is computed in the result's type, which every hlofuse kernel and library step
already does. Where it does not and the kinds differ (f32 x s64 -> s32), XLA:CPU multiplies and
accumulates in the operands' higher-precision type and converts the result with `convert`'s
semantics (measured with jaxlib 0.10: an f32 x s64 dot into s32 is the f32 dot, saturated into
s32; an f32 x f32 convolution into s64 the f32 convolution, saturated into s64); hlofuse's
kernels and library steps converted the operands to the result's type first (the HLO mutation
fuzzer: seed 34, every element of such a dot wrong; seed 36, 141 of 150 elements of such a
convolution). This pass makes that order explicit in the graph,
`convert(contraction(convert(a), convert(b)))`, so that no kernel or library step needs a rule
of its own (hlo.dtypes.contraction_type_of_other_kind states it; the interpreter applies the
same). A c64 x f32 -> f32 convolution becomes the c64 convolution and its real part: complex
products, as XLA:CPU computes it (measured: (1 + inf i) * 2 gives NaN there too); where XLA
differs on non-finite weights is padding and dilation holes (docs/convolutions.md), not the
types. Linear in the module: one look at each instruction.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.dtypes import ElementType, contraction_type_of_other_kind
from ..hlo.instruction import HloInstruction
from ..hlo.ir import HloModule
from .pass_base import HloPass
from .rewrite import Rewriter


def needs_explicit_type(inst: HloInstruction) -> ElementType | None:
    """The type `inst` (a dot or a convolution) must be computed in when that is neither its
    result's type nor of the result's kind; None otherwise."""
    if inst.opcode not in ("dot", "convolution") or len(inst.operands) != 2 or not inst.shape.is_array:
        return None
    lhs, rhs = (op.shape for op in inst.operands)
    if not (lhs.is_array and rhs.is_array):
        return None
    return contraction_type_of_other_kind(lhs.dtype, rhs.dtype, inst.shape.dtype)


@dataclass(frozen=True)
class ContractionTypes(HloPass):
    """Rewrite each mixed-type dot or convolution whose computing type is of another kind than
    its result into converts around a contraction of one type (the module's doc)."""

    name: ClassVar[str] = "contraction-types"

    def run(self, module: HloModule) -> bool:
        """Rewrite every such dot and convolution; True if any was."""
        changed = False
        for comp in module.computations:
            if comp.is_fusion_computation():
                continue
            rewriter = Rewriter(comp)
            for inst in list(comp.instructions):
                calc = needs_explicit_type(inst)
                if calc is None:
                    continue
                operands = [op if op.shape.dtype == calc else
                            HloInstruction("convert", op.shape.with_dtype(calc), [op], name="convert")
                            for op in inst.operands]
                contraction = inst.clone(operands=operands)
                contraction.shape = inst.shape.with_dtype(calc)
                rewriter.replace(inst, HloInstruction("convert", inst.shape, [contraction], name="convert"))
                changed = True
            rewriter.finish()
        return changed
