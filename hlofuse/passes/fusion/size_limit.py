"""A cap on the size of one fused kernel, so a long chain becomes several kernels LLVM compiles fast.

XLA bounds what one fusion may hold: GpuHloCostAnalysis::ProducerConsumerMergedTooLarge refuses
a fusion whose merged IR size (roughly its instruction count, a duplicated producer counted once
per reader) exceeds `kMaxIRSize = 10000` ("the fusion would be too large"; FusionMerger and GPU
instruction fusion ask it), besides the operand budget (`kMaxOperandsAndOutputsPerFusion = 96`)
and CPU's `kMaxReductionsInFusion = 5`, which its comment justifies the same way: giant fused
kernels make LLVM's compile time explode.

hlofuse's limit is lower than XLA's 10,000 because LLVM's time per fused instruction is not
constant: measured on a chain of f32[8,8] elementwise ops (benchmarks/compile_time.py, one
kernel each, LLVM optimisation + code generation at O3, load ~1 on 2 cores): 256 instructions
0.23 s (0.9 ms each), 512: 0.53 s (1.0 ms), 1,000: 1.3 s (1.3 ms), 2,000: 5.0 s (2.5 ms),
4,000: 15 s (3.8 ms). Up to about 512 the cost per instruction is flat; beyond it grows with the
kernel, so a 10,000-instruction kernel alone would take about a minute.
`MAX_FUSED_INSTRUCTIONS` (cost_model.py) = 512 keeps every kernel on the flat part, and
splitting costs one intermediate buffer per 512 instructions (a write and a read of one value
per element, negligible against 512 operations). Real models' fusions hold tens of instructions, so the cap never binds there.

The count is O(1) per question (`HloComputation.instruction_count` excludes parameters from a
length kept by the computation), so asking it for every producer keeps fusion linear.
"""
from __future__ import annotations

from typing import Protocol

from ...hlo.ir import HloInstruction
from .cost_model import MAX_FUSED_INSTRUCTIONS, TargetParams
from .decisions import Decision

__all__ = ["MAX_FUSED_INSTRUCTIONS", "fits_in_kernel", "kernel_size", "too_large"]


class _HasParams(Protocol):
    """What the rule reads of a FusionContext (which this module does not import: the context
    imports the fusion utilities, and this module stays below them)."""

    params: TargetParams

_ALLOW = Decision.allow()


def kernel_size(inst: HloInstruction) -> int:
    """How many instructions `inst` puts into a kernel: a fusion's fused instructions
    (parameters excluded), else 1. O(1)."""
    if inst.opcode != "fusion":
        return 1
    return inst.fused_computation.instruction_count(parameters=False)


def fits_in_kernel(producer: HloInstruction, consumer: HloInstruction,
                   limit: int | None = MAX_FUSED_INSTRUCTIONS) -> Decision:
    """Refuse (rule "fusion-too-large") when one kernel computing `consumer` and `producer`
    would hold more than `limit` instructions; None: no limit."""
    if limit is None:
        return _ALLOW
    total = kernel_size(consumer) + kernel_size(producer)
    if total > limit:
        return Decision.refuse(
            "fusion-too-large",
            f"the fusion would be too large: {producer.name} and {consumer.name} together hold {total} "
            f"instructions, more than {limit} per kernel (LLVM's compile time per instruction grows "
            f"beyond that)")
    return _ALLOW


def too_large(producer: HloInstruction, consumer: HloInstruction, ctx: _HasParams) -> Decision:
    """The producer-consumer rule: `fits_in_kernel` with the limit of the context's target."""
    return fits_in_kernel(producer, consumer, ctx.params.max_fused_instructions)
