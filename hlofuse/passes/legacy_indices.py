"""Legacy start-index vectors: dynamic-slice and dynamic-update-slice once took their start
indices as one integer vector (`dynamic-slice(x, s32[3] starts)`), as XLA's parser still reads
and its shape inference still accepts (hlo_parser_test's DynamicSlice module); today's form
is one integer scalar per operand dimension. The verifier and the interpreter take both; the
passes, the element generators and the in-place kernels read the scalar form only, so this
pass rewrites the vector into scalars first:

    dynamic-slice(x, v)  ->  dynamic-slice(x, reshape(slice(v, [0:1])), reshape(slice(v, [1:2])), ...)

Same values (each start is still clamped where it is used), the form every later stage reads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.ir import HloInstruction, HloModule
from ..hlo.shape_inference_common import FIRST_START_INDEX, legacy_start_index_vector
from ..hlo.shapes import array
from .pass_base import HloPass
from .rewrite import Rewriter


def _scalar_starts(vector: HloInstruction) -> list[HloInstruction]:
    """One rank-0 instruction per element of the index vector `vector`."""
    dtype = vector.shape.dtype
    starts = []
    for k in range(vector.shape.dims[0]):
        piece = HloInstruction("slice", array(dtype, [1]), [vector], {"slice": [(k, k + 1, 1)]}, name="slice")
        starts.append(HloInstruction("reshape", array(dtype, []), [piece], name="reshape"))
    return starts


@dataclass(frozen=True)
class LegacyIndexVectors(HloPass):
    """Rewrite start-index vectors of dynamic-slice and dynamic-update-slice into scalars."""

    name: ClassVar[str] = "legacy-index-vectors"

    def run(self, module: HloModule) -> bool:
        """Rewrite every legacy-form instruction; True if any was."""
        changed = False
        for comp in module.computations_post_order():
            rewriter = Rewriter(comp)
            for inst in list(comp.instructions):
                vector = legacy_start_index_vector(inst)
                if vector is None:
                    continue
                first = FIRST_START_INDEX[inst.opcode]
                new = HloInstruction(inst.opcode, inst.shape, [*inst.operands[:first], *_scalar_starts(vector)],
                                     dict(inst.attrs), name=inst.name)
                rewriter.replace(inst, new)
                changed = True
            rewriter.finish()
        return changed
