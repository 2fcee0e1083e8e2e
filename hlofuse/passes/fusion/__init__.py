"""Fusion passes: producer-consumer fusion with duplication, multi-output (sibling and
producer-consumer) fusion, horizontal loop fusion; the cost model and the fusion report.

`fusion_passes(target)` is what `standard_pipeline(target, fusion=True)` runs (and what the
pass table calls "fusion-pipeline"); every fusion pass takes a `target` option, GPU by default.
"""
from __future__ import annotations

from ..pass_base import HloPass
from .call_inliner import CallInliner
from .cost_model import CPU, GPU, TargetParams, module_cost, target_params
from .decisions import Decision, FusionLog, LogEntry, module_log
from .fusion_merger import FusionMerger
from .horizontal_fusion import HorizontalLoopFusion
from .instruction_fusion import InstructionFusion, NonDuplicatingFusion
from .horizontal_input_fusion import HorizontalInputFusion
from .multi_output_fusion import MultiOutputFusion, SiblingFusion
from .priority_fusion import PriorityFusion

# How producer-consumer fusion is decided: XLA's current GPU algorithm (a priority queue ordered
# by a performance model, priority_fusion.py) or its earlier pass sequence (instruction fusion,
# the fusion merger, multi-output fusion).
FUSION_ALGORITHMS = ("legacy", "priority")


def default_algorithm(target: str | TargetParams) -> str:
    """Priority fusion on the GPU (as XLA's GPU compiler), the legacy sequence on the CPU."""
    return "priority" if target_params(target).multi_output else "legacy"


def fusion_passes(target: str | TargetParams = "gpu", algorithm: str | None = None,
                  inline_calls: bool = True) -> list[HloPass]:
    """The fusion passes XLA runs for `target`: calls inlined first (fusion cannot see through
    them), producer-consumer fusion, and on the GPU multi-output and horizontal (loop, then
    input) fusion; on the CPU, sibling fusion of reductions and of plain loops over the same
    dimensions (beyond XLA:CPU: one kernel reads their common operand once; cpu_multi_output.py).

    `algorithm` ("legacy" or "priority"; None: `default_algorithm`) picks the producer-consumer
    half: priority fusion, or instruction fusion (on the GPU twice, without duplication first)
    followed on the GPU by the fusion merger. `inline_calls=False` leaves the call inliner out,
    for a pipeline that has run it already (passes/pipeline.standard_pipeline)."""
    params = target_params(target)
    algorithm = algorithm or default_algorithm(params)
    if algorithm not in FUSION_ALGORITHMS:
        raise ValueError(f"unknown fusion algorithm '{algorithm}' (expected {' or '.join(FUSION_ALGORITHMS)})")
    # the passes take the target as given: its name (their option as `--passes` spells it), or
    # a TargetParams of the caller's own
    passes: list[HloPass] = [CallInliner(params.name)] if inline_calls else []
    if algorithm == "priority":
        passes.append(PriorityFusion(target))
        passes.append(MultiOutputFusion(target) if params.multi_output else SiblingFusion(target))
        if params.horizontal:
            passes += [HorizontalLoopFusion(target), HorizontalInputFusion(target)]
        return passes
    if params.multi_output:
        # XLA's GPU pipeline first fuses without duplication, then with it.
        passes.append(NonDuplicatingFusion(target))
    passes.append(InstructionFusion(target))
    if params.multi_output:
        passes.append(FusionMerger(target))
        passes.append(MultiOutputFusion(target))
    else:  # the CPU: kernels of a common operand share one pass over it (cpu_multi_output.py)
        passes.append(SiblingFusion(target))
    if params.horizontal:
        # XLA's GPU pipeline: horizontal loop fusion, then horizontal input fusion
        passes += [HorizontalLoopFusion(target), HorizontalInputFusion(target)]
    return passes


__all__ = [
    "CPU", "CallInliner", "FUSION_ALGORITHMS", "GPU", "Decision", "FusionLog", "FusionMerger",
    "HorizontalInputFusion", "HorizontalLoopFusion", "PriorityFusion", "default_algorithm", "InstructionFusion", "LogEntry", "MultiOutputFusion", "NonDuplicatingFusion",
    "SiblingFusion", "TargetParams", "fusion_passes", "module_cost", "module_log",
    "target_params",
]
