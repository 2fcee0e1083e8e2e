"""Fusion passes: producer-consumer fusion with duplication, multi-output (sibling and
producer-consumer) fusion, horizontal loop fusion; the cost model and the fusion report.

`fusion_passes(target)` is what `standard_pipeline(target, fusion=True)` runs; the passes are
registered as "call-inliner", "fusion", "fusion-no-duplication", "fusion-merger",
"multi-output-fusion", "sibling-fusion", "horizontal-fusion" and "fusion-pipeline" (they take
the pipeline's `target` option, GPU by default), and with "-cpu" / "-gpu" suffixed names for a
fixed target.
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


class FusionPipeline(HloPass):
    """All fusion passes of a target, in XLA's order."""

    name = "fusion-pipeline"

    def __init__(self, target: str | TargetParams = "gpu") -> None:
        self.params = target_params(target)
        self.passes = fusion_passes(self.params)

    def run(self, module) -> bool:
        """Run every fusion pass of the target in order; True if any changed the module."""
        changed = False
        for p in self.passes:
            changed |= bool(p.run(module))
        return changed


def fusion_passes(target: str | TargetParams = "gpu") -> list[HloPass]:
    """The fusion passes XLA runs for `target`: calls inlined first (fusion cannot see through
    them), producer-consumer fusion, and on the GPU fusion merging, multi-output and horizontal
    fusion."""
    params = target_params(target)
    passes: list[HloPass] = [CallInliner(params.name)]
    if params.multi_output:
        # XLA's GPU pipeline first fuses without duplication, then with it.
        passes.append(NonDuplicatingFusion(params))
    passes.append(InstructionFusion(params))
    if params.multi_output:
        passes.append(FusionMerger(params))
        passes.append(MultiOutputFusion(params))
    if params.horizontal:
        passes.append(HorizontalLoopFusion(params))
    return passes


def register_passes() -> None:
    """Register the fusion passes with the pass registry (called by pipeline.py)."""
    from ..pipeline import register_pass

    factories = {
        "call-inliner": CallInliner,
        "fusion": InstructionFusion,
        "fusion-no-duplication": NonDuplicatingFusion,
        "fusion-merger": FusionMerger,
        "multi-output-fusion": MultiOutputFusion,
        "sibling-fusion": SiblingFusion,
        "horizontal-fusion": HorizontalLoopFusion,
        "fusion-pipeline": FusionPipeline,
    }
    for name, cls in factories.items():
        register_pass(name, cls)  # takes the pipeline's `target` option (default "gpu")
        for target in ("gpu", "cpu"):
            register_pass(f"{name}-{target}", lambda cls=cls, target=target: cls(target))


__all__ = [
    "CPU", "CallInliner", "GPU", "Decision", "FusionLog", "FusionMerger", "FusionPipeline",
    "HorizontalLoopFusion", "InstructionFusion", "LogEntry", "MultiOutputFusion", "NonDuplicatingFusion",
    "SiblingFusion", "TargetParams", "fusion_passes", "module_cost", "module_log", "register_passes",
    "target_params",
]
