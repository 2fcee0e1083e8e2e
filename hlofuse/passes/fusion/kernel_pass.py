"""The shared frame of the fusion passes: one target's parameters, run on every kernel computation."""
from __future__ import annotations

from dataclasses import dataclass

from ...hlo.ir import HloComputation, HloModule
from ..pass_base import HloPass
from .context import FusionContext
from .cost_model import TargetParams, kernel_computations, target_params
from .decisions import FusionLog, module_log


@dataclass(frozen=True)
class KernelComputationPass(HloPass):
    """A fusion pass for one target that rewrites each non-fusion kernel computation in turn.

    A value: its fields are its options (`target`, "gpu" or "cpu", or a TargetParams); it keeps
    nothing between runs. Each computation gets a fresh `FusionContext` (`context`) holding
    what the run learns; subclasses implement `_run_on(comp, ctx)`; `run` drops computations
    left unreachable.
    """

    target: str | TargetParams = "gpu"

    def __post_init__(self) -> None:
        target_params(self.target)  # an unknown target is an error when the pass is made

    @property
    def params(self) -> TargetParams:
        """The target's fusion parameters."""
        return target_params(self.target)

    def log_of(self, module: HloModule) -> FusionLog:
        """The module's fusion log (created on first use), marked with this pass's target."""
        return module_log(module, self.params.name)

    def context(self, comp: HloComputation, log: FusionLog) -> FusionContext:
        """A fresh context for running this pass on `comp`."""
        return FusionContext.for_computation(comp, self.params, log, self.name)

    def run(self, module: HloModule) -> bool:
        """Run `_run_on` on every kernel computation of `module`; True if any changed."""
        log = self.log_of(module)
        changed = False
        for comp in kernel_computations(module):
            if not comp.is_fusion_computation():
                changed |= self._run_on(comp, self.context(comp, log))
        if changed:
            module.remove_unreachable_computations()
        return changed

    def _run_on(self, comp: HloComputation, ctx: FusionContext) -> bool:
        raise NotImplementedError
