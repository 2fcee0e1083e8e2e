"""The shared frame of the fusion passes: one target's parameters, run on every kernel computation."""
from __future__ import annotations

from ...hlo.ir import HloComputation, HloModule
from ..pass_base import HloPass
from .cost_model import TargetParams, kernel_computations, target_params
from .decisions import FusionLog, module_log


class KernelComputationPass(HloPass):
    """A fusion pass for one target that rewrites each non-fusion kernel computation in turn.

    Subclasses implement `_run_on(comp, log)`; `run` drops computations left unreachable.
    """

    def __init__(self, target: str | TargetParams = "gpu") -> None:
        self.params = target_params(target)

    def run(self, module: HloModule) -> bool:
        """Run `_run_on` on every kernel computation of `module`; True if any changed."""
        log = module_log(module, self.params.name)
        changed = False
        for comp in kernel_computations(module):
            if not comp.is_fusion_computation():
                changed |= self._run_on(comp, log)
        if changed:
            module.remove_unreachable_computations()
        return changed

    def _run_on(self, comp: HloComputation, log: FusionLog) -> bool:
        raise NotImplementedError
