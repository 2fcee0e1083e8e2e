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
from .multi_output_fusion import MultiOutputFusion, SiblingFusion


def fusion_passes(target: str | TargetParams = "gpu") -> list[HloPass]:
    """The fusion passes XLA runs for `target`: calls inlined first (fusion cannot see through
    them), producer-consumer fusion, and on the GPU fusion merging, multi-output and horizontal
    fusion; on the CPU, sibling fusion of reductions (beyond XLA:CPU: it saves a pass over
    their common operand)."""
    params = target_params(target)
    # the passes take the target as given: its name (their option as `--passes` spells it), or
    # a TargetParams of the caller's own
    passes: list[HloPass] = [CallInliner(params.name)]
    if params.multi_output:
        # XLA's GPU pipeline first fuses without duplication, then with it.
        passes.append(NonDuplicatingFusion(target))
    passes.append(InstructionFusion(target))
    if params.multi_output:
        passes.append(FusionMerger(target))
        passes.append(MultiOutputFusion(target))
    else:  # the CPU: reductions of a common operand share one pass over it (multi_output_fusion.py)
        passes.append(SiblingFusion(target))
    if params.horizontal:
        passes.append(HorizontalLoopFusion(target))
    return passes


__all__ = [
    "CPU", "CallInliner", "GPU", "Decision", "FusionLog", "FusionMerger",
    "HorizontalLoopFusion", "InstructionFusion", "LogEntry", "MultiOutputFusion", "NonDuplicatingFusion",
    "SiblingFusion", "TargetParams", "fusion_passes", "module_cost", "module_log",
    "target_params",
]
