"""Fusion merging (XLA's GPU FusionMerger): a loop fusion whose users are all fusions is merged
into every one of them when that does not add memory traffic, so an expensive producer is
duplicated only when every user fuses it and the duplication pays for itself.

For each kLoop fusion (defs before uses), the merge is refused with a reason when a user is not
a fusion, when a user may not take it (the producer-consumer rules, the budget, an expensive
producer under a consumer that re-reads elements), or when reading the producer's operands in
every user would move more than 10% more bytes than writing and re-reading its result.

Rule 8 of issue 16: a merge is refused when the user would emit the producer's code more than
`MAX_DUPLICATED_INDEXING` (15) times (XLA's FusionNodeIndexingEvaluation: each instruction of a
fused computation is emitted once per distinct index it is asked for; an elementwise user passes
its own index on, a slice, a broadcast or any shape change makes a new one, so two slices of one
value ask for it twice and a chain of slice pairs doubles the count at every step).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...hlo.ir import HloComputation, HloInstruction
from .context import FusionContext
from .cost_model import TargetParams, distinct
from .decisions import Decision
from .fusibility import (
    creates_heavy_computation, is_expensive, is_input_fusible_reduction, is_loop_fusion, is_multi_output,
    is_loop_fusible_as_consumer, is_physically_transposing, members, reuses_operand_elements,
)
from .fusion_utils import create_fusion, fuse_producer, operand_index, sort_computations
from .in_place import scatter_input
from .indexing_evaluation import MAX_DUPLICATED_INDEXING, fused_copies
from .kernel_pass import KernelComputationPass
from .size_limit import fits_in_kernel

refuse = Decision.refuse
_OK = Decision.allow()
_MAX_BYTES_RATIO = 1.10  # FusionMerger's merged_to_current_bytes_ratio limit
def transposes_most_data(fusion: HloInstruction) -> bool:
    """XLA's TransposesMostData: physically transposing instructions of `fusion` produce at
    least half as many elements as the fusion outputs."""
    out = sum(s.element_count() for s in fusion.shape.leaves()) or 1
    score = 0.0
    for inst in members(fusion):
        if is_physically_transposing(inst):
            score += sum(s.element_count() for s in inst.shape.leaves()) / out
            if score >= 0.5:
                return True
    return False


@dataclass(frozen=True)
class FusionMerger(KernelComputationPass):
    """Merge loop fusions into all of their (fusion) users when it does not add traffic (GPU)."""

    name: ClassVar[str] = "fusion-merger"

    def _run_on(self, comp: HloComputation, ctx: FusionContext) -> bool:
        log, params = ctx.log, ctx.params
        changed = False
        for producer in comp.post_order():
            if producer.parent is not comp or not is_loop_fusion(producer) or is_multi_output(producer):
                continue
            users = list(producer.users)
            if not users or producer.is_root():
                continue
            d = should_merge(producer, users, params)
            if not d:
                if any(u.opcode == "fusion" for u in users):  # else nothing to merge into
                    log.refused(self.name, producer.name, ", ".join(u.name for u in users), d)
                continue
            name = producer.name
            expensive = any(is_expensive(m, params) for m in members(producer))
            elements = sum(s.element_count() for s in producer.shape.leaves())
            for k, user in enumerate(users):
                duplicated = k < len(users) - 1
                consumer = user.name
                if user.opcode != "fusion":
                    kind = params.input_fusion_kind if is_input_fusible_reduction(user) else "kLoop"
                    user = create_fusion(user, kind)
                fuse_producer(user, producer)
                log.fused(self.name, name, consumer, user.name, rule="merged into every user",
                          duplicated=duplicated, duplicated_elements=elements if duplicated else 0,
                          duplicated_expensive=duplicated and expensive)
            changed = True
        if changed:
            sort_computations(comp)
        return changed


def should_merge(producer: HloInstruction, users: list[HloInstruction], params: TargetParams) -> Decision:
    """XLA's FusionMerger::ShouldMerge for `producer` and all of its users."""
    p = producer.name
    for user in users:
        # XLA merges into an unfused user too when it can root a loop or input fusion (it
        # becomes one); never into a bitcast, which is no kernel of its own
        unfused_ok = user.opcode not in ("fusion", "bitcast") and is_loop_fusible_as_consumer(user)
        if not unfused_ok and (user.opcode != "fusion" or user.attrs.get("kind") not in ("kLoop", "kInput")):
            what = f"a {user.attrs.get('kind')} fusion" if user.opcode == "fusion" else f"a {user.opcode}"
            return refuse("user-not-fusion", f"{p} cannot be merged into its users: {user.name} is {what}, "
                                             f"not a loop or input fusion")
    expensive = any(is_expensive(m, params) for m in members(producer))
    for user in users:
        idx = operand_index(user, producer)
        if expensive and reuses_operand_elements(user, idx):
            return refuse("expensive-reused", f"{p} computes expensive instructions and {user.name} reads "
                                              f"each of its elements several times")
        if is_input_fusible_reduction(user) and transposes_most_data(producer):
            return refuse("transpose-into-reduce", f"merging {p}, which transposes most of its data, into "
                                                   f"reduction {user.name} would break read coalescing")
        if creates_heavy_computation(producer, user):
            return refuse("heavy-computation", f"merging {p} into {user.name} would recompute a heavy "
                                               f"reduction for each element {user.name} re-reads")
        d = scatter_input(producer, user)  # never a scatter's updated operand (XLA's CanEmitInputFusedScatter)
        if not d:
            return d
        d = _budget(producer, user, params)
        if not d:
            return d
        d = fits_in_kernel(producer, user, params.max_fused_instructions)
        if not d:
            return d
        copies = fused_copies(user, producer) if user.opcode == "fusion" else 1
        if copies > MAX_DUPLICATED_INDEXING:
            return refuse("duplicated-indexing", f"{user.name} would emit {p}'s code {copies} times (once per "
                                                 f"distinct index it reads; at most {MAX_DUPLICATED_INDEXING})")
    # Bytes: unfused, the producer reads its operands once, writes its result once, and each
    # user reads that result; merged, every user reads the producer's operands instead.
    out = producer.shape.byte_size()
    ops = distinct(producer.operands)
    current = sum(o.shape.byte_size() for o in ops) + out + out * len(users)
    merged = sum(o.shape.byte_size() for u in users for o in ops if not any(o is x for x in u.operands))
    if merged > _MAX_BYTES_RATIO * current:
        return refuse("more-bytes", f"merging {p} into its {len(users)} users would move {merged} bytes "
                                    f"instead of {current} (more than {_MAX_BYTES_RATIO:.2f}x)")
    return _OK


def _budget(producer: HloInstruction, user: HloInstruction, params: TargetParams) -> Decision:
    budget = params.max_operands_and_outputs
    if budget is None:
        return _OK
    operands = distinct([o for o in list(user.operands) + list(producer.operands) if o is not producer])
    total = len(operands) + len(user.shape.leaves())
    if len(operands) > len(user.operands) and total > budget:
        return refuse("budget", f"operand budget exceeded: {total} > {budget} (merging {producer.name} into "
                                f"{user.name} needs {len(operands)} operands + {len(user.shape.leaves())} "
                                f"outputs)")
    return _OK
