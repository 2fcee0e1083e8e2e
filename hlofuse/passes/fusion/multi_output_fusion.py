"""Multi-output fusion (XLA's GpuMultiOutputFusion): sibling and producer-consumer.

Sibling: consumers that read a common operand merge into one kernel that reads it once
(`reduce(x)` and `reduce(x*x)` become one kInput fusion with a tuple root). Producer-consumer:
a producer that is also used elsewhere is fused into one consumer and stays an output of the
fusion, so it is computed once and its users read it through get-tuple-element.

Producers are visited defs-after-uses (reverse post order); for each, siblings first, then the
producer-consumer candidates, exactly in XLA's order.

On the CPU (beyond XLA:CPU, which has no multi-output fusion) only the sibling half runs, for
siblings that stay one CPU kernel (`cpu_multi_output.cpu_sibling_rule`): two reductions of the
same input dimensions (sum(x) and sum(x*x), or batch-norm's mean and mean of squares) become
one reduction kernel, and two plain loops over the same dimensions one loop nest; either way x
is read once instead of twice. A plain loop read by several kernels is computed in one loop
user as an extra output (`_fuse_loop_into_consumer`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...hlo.ir import HloComputation, HloInstruction
from .context import FusionContext
from .cost_model import TargetParams, distinct
from .cpu_multi_output import (
    CPU_MAX_OPERANDS_AND_OUTPUTS, KINDS_RULE, cpu_producer_consumer_rule, cpu_sibling_rule, reduce_signatures,
)
from .decisions import Decision
from .fusibility import (
    combined_operands, creates_heavy_computation, fusion_outputs, is_fusible, is_input_fusible_reduction,
    is_input_fusible_scatter,
    is_loop_fusible_as_producer, is_loop_fusion, is_multi_output, is_physically_transposing, members,
    not_fusible_reason, reduce_hero, reduction_count, reduction_is_contiguous,
)
from .fusion_utils import create_fusion, fuse_into_multi_output, fuse_producer, merge_siblings, sort_computations
from .kernel_pass import KernelComputationPass
from .sibling_rules import is_effective_scalar, is_transpose_hero, reads_disjoint_slices, shapes_compatible
from .size_limit import fits_in_kernel

refuse = Decision.refuse
_OK = Decision.allow()


def is_fusible_as_multi_output_root(inst: HloInstruction) -> bool:
    """XLA: reductions, loop fusions and elementwise instructions may root a multi-output fusion."""
    if not is_fusible(inst) or is_input_fusible_scatter(inst):  # a scatter fusion stays alone, as in XLA
        return False
    if inst.opcode == "fusion":
        return inst.attrs.get("kind") in ("kLoop", "kInput")
    # a tiled transpose roots a multi-output (transpose) fusion too (XLA's IsInputFusibleTranspose)
    return (is_input_fusible_reduction(inst) or is_transpose_hero(inst)
            or (inst.info.elementwise and len(inst.operands) > 0))


def fits_in_budget(a: HloInstruction, b: HloInstruction, params: TargetParams) -> Decision:
    """XLA's FusionFitsInBudget for a multi-output fusion of `a` and `b` (on the CPU, which
    has no budget of its own, the GPU's operand budget: cpu_multi_output.py)."""
    if params.max_unnested_reductions is not None:
        n = reduction_count(a, unnested_only=True) + reduction_count(b, unnested_only=True)
        if n > params.max_unnested_reductions:
            return refuse("budget", f"reduction budget exceeded: {n} > {params.max_unnested_reductions} "
                                    f"unnested reductions (fusing {a.name} and {b.name})")
    d = fits_in_kernel(a, b, params.max_fused_instructions)
    if not d:
        return d
    budget = params.max_operands_and_outputs
    if budget is None and not params.multi_output:  # the CPU's multi-output kernels
        budget = CPU_MAX_OPERANDS_AND_OUTPUTS
    if budget is None:
        return _OK
    operands = combined_operands(a, b)
    outputs = len(a.shape.leaves()) + len(b.shape.leaves())
    if len(operands) + outputs > budget:
        return refuse("budget", f"operand budget exceeded: {len(operands) + outputs} > {budget} (fusing {a.name} "
                                f"and {b.name} needs {len(operands)} operands + {outputs} outputs)")
    return _OK


def sibling_candidate(inst: HloInstruction) -> Decision:
    """XLA's IsSiblingFusionCandidate."""
    if not inst.users and not inst.is_root():
        return refuse("sibling", f"{inst.name} has no users")
    if not is_fusible_as_multi_output_root(inst):
        return refuse("sibling", f"{inst.name} ('{inst.opcode}') cannot root a multi-output fusion")
    if _nestable_variadic_reduction(inst):
        return refuse("sibling", f"{inst.name} is a variadic reduction")
    if is_multi_output(inst) and any(u.opcode != "get-tuple-element" for u in inst.users):
        return refuse("sibling", f"multi-output {inst.name} has a user that is not a get-tuple-element")
    if is_multi_output(inst) and inst.is_root():
        return refuse("sibling", f"multi-output {inst.name} is the root")
    return _OK


def _nestable_variadic_reduction(inst: HloInstruction) -> bool:
    """XLA's IsNestableVariadicReduction: a variadic reduce that is no input fusion's hero (a
    plain row-unfriendly one, or the root of a loop fusion) is not sibling-fused."""
    if not inst.shape.is_tuple or is_multi_output(inst):
        return False
    if inst.opcode == "reduce":
        return not reduction_is_contiguous(inst)
    return inst.opcode != "fusion" or inst.attrs.get("kind") == "kLoop" or inst.fused_computation.root.opcode != "reduce"


def _dus_root(inst: HloInstruction) -> bool:
    return any(o.opcode == "dynamic-update-slice" for o in fusion_outputs(inst))


def _priority(inst: HloInstruction) -> int:
    return 2 if is_multi_output(inst) else (1 if inst.opcode == "fusion" else 0)


@dataclass(frozen=True)
class MultiOutputFusion(KernelComputationPass):
    """Sibling and producer-consumer multi-output fusion (XLA's GpuMultiOutputFusion).

    `loop_siblings` (the CPU only): plain loops over the same dimensions that read a common
    operand share a kernel (cpu_multi_output.py); false keeps the CPU's earlier rule, reductions
    only (for measuring what the loop rule buys).

    Work: linear in the instructions plus the candidate pairs examined: each producer is
    visited once, and every pair of its users (XLA's FuseSiblings too) is judged in bounded
    time: the reachability is kept up to date after each merge (FusionContext.fused_into,
    touching only the instructions whose ancestors grew) rather than rebuilt, and a fusion's
    hero and plain-loop answer are kept until it changes. A merge itself costs the merged
    fusion's size, bounded by the budget. The pairs are quadratic in the users of one operand
    (an input every block of a stack reads: each refused pair is also logged).
    tests/passes/test_fusion_complexity.py counts work per instruction and pair."""

    name: ClassVar[str] = "multi-output-fusion"
    producer_consumer: ClassVar[bool] = True
    loop_siblings: bool = True

    def _run_on(self, comp: HloComputation, ctx: FusionContext) -> bool:
        log = ctx.log
        changed = False
        worklist = comp.post_order()
        while worklist:
            producer = worklist.pop()
            # Constants are never multi-output fused (the regular fusion pass handles them).
            if producer.parent is not comp or producer.opcode == "constant":
                continue
            changed |= _fuse_siblings(producer, ctx, self.loop_siblings)
            if not ctx.params.multi_output and producer.parent is comp:  # the CPU
                changed |= _fuse_reduction_into_epilogue(producer, ctx)
                if self.loop_siblings and producer.parent is comp:
                    changed |= _fuse_loop_into_consumer(producer, ctx)
            if not self.producer_consumer or producer.opcode == "parameter":
                continue
            consumer = _pick_consumer(producer, ctx)
            if consumer is None:
                continue
            name_p, name_c = producer.name, consumer.name
            fusion = consumer
            if consumer.opcode != "fusion":
                kind = "kInput" if is_input_fusible_reduction(consumer) else "kLoop"
                fusion = create_fusion(consumer, kind)
            fuse_into_multi_output(fusion, producer)
            log.fused(ctx.pass_name, name_p, name_c, fusion.name, rule="producer-consumer multi-output")
            ctx.fused_into(fusion)
            changed = True
        if changed:
            sort_computations(comp)
        return changed

# ---- siblings --------------------------------------------------------------------------
def _sibling_legal(a: HloInstruction, b: HloInstruction, parent: HloInstruction, ctx: FusionContext,
                   loop_siblings: bool = True) -> Decision:
    """Whether the sibling `b` may join `a`'s multi-output fusion (both read `parent`);
    `loop_siblings`: whether the CPU merges plain loops (MultiOutputFusion's option)."""
    if not ctx.params.multi_output:  # the CPU
        d = cpu_sibling_rule(a, b, parent, loop_siblings, ctx.plain_loop)
        if not d:
            return d
    d = sibling_candidate(b)
    if not d:
        return d
    reach = ctx.reachability()
    if reach.is_connected(a, b):
        first, second = (a, b) if reach.is_reachable(a, b) else (b, a)
        return refuse("cycle", f"would create a cycle: {second.name} depends on {first.name}, so the "
                               f"siblings {b.name} and {a.name} (both reading {parent.name}) cannot share "
                               f"a kernel")
    if reads_disjoint_slices(a, b, parent):
        return refuse("disjoint-slices", f"{a.name} and {b.name} read disjoint slices of {parent.name}: "
                                         f"they share no element of it, so one kernel saves no reads")
    d = shapes_compatible(a, b, ctx.hero)
    if not d:
        return d
    if _dus_root(a) or _dus_root(b):
        return refuse("dynamic-update-slice", f"cannot sibling-fuse dynamic-update-slice roots "
                                              f"of {a.name} and {b.name}")
    return fits_in_budget(a, b, ctx.params)

def _fuse_siblings(parent: HloInstruction, ctx: FusionContext, loop_siblings: bool = True) -> bool:
    """Merge the users of `parent` that may share a kernel into multi-output fusions
    (`loop_siblings`: see MultiOutputFusion)."""
    if is_effective_scalar(parent):
        # XLA's IsProfitableOperand: a scalar (or a broadcast of one) is not worth sharing
        return False
    siblings = sorted(parent.users, key=lambda u: -_priority(u))
    changed = False
    i = 0
    # the CPU merges plain loops that are lone instructions too (wrapped in a kLoop fusion when
    # the first merge happens): fourteen elementwise ops of one array are fourteen kernels there
    cpu_loops = not ctx.params.multi_output and loop_siblings
    while i < len(siblings):
        a = siblings[i]
        if not (a.opcode == "fusion" or (cpu_loops and ctx.plain_loop(a))) or not sibling_candidate(a):
            i += 1
            continue
        j = i + 1
        while j < len(siblings):
            b = siblings[j]
            d = _sibling_legal(a, b, parent, ctx, loop_siblings)
            if not d:
                # The CPU's kernel-kinds rule is not logged per pair: it is the target's
                # policy (cpu_multi_output.py), not a decision about these two instructions.
                if d.rule != KINDS_RULE and (b.opcode == "fusion" or is_fusible_as_multi_output_root(b)):
                    ctx.log.refused(ctx.pass_name, b.name, a.name, d)
                j += 1
                continue
            name_b = b.name
            if a.opcode != "fusion":
                a = siblings[i] = create_fusion(a, "kLoop")
            merge_siblings(a, b)
            ctx.log.fused(ctx.pass_name, name_b, a.name, a.name, rule=f"sibling (common operand {parent.name})")
            siblings.pop(j)
            ctx.fused_into(a)
            changed = True
        i += 1
    return changed

def _fuse_reduction_into_epilogue(producer: HloInstruction, ctx: FusionContext) -> bool:
    """CPU: a reduction `producer` whose one fusion user reduces the same input dimensions the
    same way and reads it only elementwise at the output index (batch norm's variance
    E[x*x] - mean*mean reading the mean) joins that user as an extra output: both reductions
    then fold in one pass over their input, the mean staying an output for its other readers."""
    users = list(producer.users)
    fusions = [u for u in users if u.opcode == "fusion"]
    if (is_multi_output(producer) or not producer.shape.is_array or len(fusions) != 1
            or any(u.opcode != "tuple" for u in users if u is not fusions[0])):
        return False
    consumer = fusions[0]
    if is_multi_output(consumer) or not sibling_candidate(consumer):
        return False
    ps, cs = reduce_signatures(producer), reduce_signatures(consumer)
    if not ps or not cs or len(ps | cs) != 1:
        return False
    comp = consumer.fused_computation
    for i, op in enumerate(consumer.operands):
        if op is producer:
            p = comp.parameter(i)
            if any(not u.info.elementwise or u.shape.dims != producer.shape.dims for u in p.users):
                return False
    if _cycle_through(producer, consumer, ctx) is not None:
        return False
    name_p, name_c = producer.name, consumer.name
    fuse_into_multi_output(consumer, producer)
    ctx.log.fused(ctx.pass_name, name_p, name_c, consumer.name,
                  rule="reduction into a reduction's epilogue (CPU multi-output)")
    ctx.fused_into(consumer)
    return True


def _fuse_loop_into_consumer(producer: HloInstruction, ctx: FusionContext) -> bool:
    """CPU: a plain loop `producer` that several kernels read (or the root) is computed in one
    of them, a plain loop fusion over the same dimensions, as an extra output
    (cpu_multi_output.cpu_producer_consumer_rule): its own kernel goes, with its write and that
    consumer's read of it; its other users read the output. Multi-output consumers first."""
    users = list(producer.users)
    if producer.opcode in ("parameter", "constant") or not ctx.plain_loop(producer) or not users:
        return False
    # Read by one reduction fusion only (its other readers were merged into it as siblings):
    # computed in it, no output kept. A producer with several readers was left out of each as
    # an expensive duplicate; once they are one kernel, nothing is duplicated. Elementwise
    # producers only (what the instruction fusion rules would have fused but for the duplicate).
    only = users[0] if len(users) == 1 and not producer.is_root() else None
    if only is not None and (only.opcode != "fusion" or reduce_hero(only) is None
                             or not _elementwise_only(producer)):
        return False
    for consumer in sorted(users, key=lambda u: -_priority(u)):
        d = cpu_producer_consumer_rule(producer, consumer, ctx.plain_loop)
        if d.rule == KINDS_RULE:
            continue  # not a loop kernel to compute it in (the target's policy, not logged)
        if d and (op := _cycle_through(producer, consumer, ctx)) is not None:
            d = refuse("cycle", f"would create a cycle: {consumer.name} reads {op.name}, which "
                                f"depends on {producer.name}")
        if d:
            d = fits_in_budget(producer, consumer, ctx.params)
        if not d:
            ctx.log.refused(ctx.pass_name, producer.name, consumer.name, d)
            continue
        name_p, name_c = producer.name, consumer.name
        if only is not None:
            fuse_producer(consumer, producer)
            ctx.log.fused(ctx.pass_name, name_p, name_c, consumer.name,
                          rule="producer-consumer (CPU: computed in its only user's kernel after sibling merges)")
            ctx.fused_into(consumer)
            return True
        if consumer.opcode != "fusion":
            consumer = create_fusion(consumer, "kLoop")
        fuse_into_multi_output(consumer, producer)
        ctx.log.fused(ctx.pass_name, name_p, name_c, consumer.name,
                      rule="producer-consumer multi-output (CPU: computed in its user's loop, kept as an output)")
        ctx.fused_into(consumer)
        return True
    return False


def _elementwise_only(inst: HloInstruction) -> bool:
    """Whether `inst` (or every member of its fusion) is elementwise, a broadcast or a constant."""
    return all(i.info.elementwise or i.opcode in ("broadcast", "constant") for i in members(inst))


def _cycle_through(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> HloInstruction | None:
    """An operand of `consumer` other than `producer` that depends on `producer`: computing
    `producer` inside `consumer` would then make the fusion depend on itself. None if none."""
    reach = ctx.reachability()
    return next((op for op in consumer.operands if op is not producer and reach.is_reachable(producer, op)), None)


# ---- producer-consumer -----------------------------------------------------------------
def _pc_legal(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """Whether `producer` may be computed as an extra output of `consumer`'s kernel."""
    if not is_fusible_as_multi_output_root(consumer):
        return refuse("consumer-not-mof-root",
                      f"{consumer.name} is a {consumer.opcode}, which cannot root a multi-output fusion")
    if is_multi_output(producer):
        return refuse("producer-multi-output", f"producer {producer.name} is a multi-output fusion")
    if not is_loop_fusible_as_producer(producer) or (producer.opcode == "fusion" and not is_loop_fusion(producer)):
        return refuse("producer-not-fusible", f"{not_fusible_reason(producer)}; it is not computed as an "
                                              f"extra output of {consumer.name}")
    if reduce_hero(producer) is not None:
        return refuse("producer-not-fusible", f"{producer.name} is a reduction, whose loop {consumer.name} "
                                              f"cannot share to compute it as an extra output")
    if is_physically_transposing(producer):
        return refuse("transposing", f"{producer.name} is physically transposing; as an extra output of "
                                     f"{consumer.name} its writes would not be coalesced")
    if creates_heavy_computation(producer, consumer):
        return refuse("heavy-computation", f"fusing {producer.name} into {consumer.name} would recompute "
                                           f"a heavy reduction for each element {consumer.name} re-reads")
    d = shapes_compatible(producer, consumer, ctx.hero)
    if not d:
        return d
    if (op := _cycle_through(producer, consumer, ctx)) is not None:
        return refuse("cycle", f"would create a cycle: {consumer.name} is reachable from "
                               f"{producer.name} through {op.name}")
    d = fits_in_budget(producer, consumer, ctx.params)
    if not d:
        return d
    if _profit_bytes(producer, consumer) < 0:
        return refuse("mof-more-bytes", f"fusing {producer.name} into {consumer.name} would move more bytes")
    return _OK

def _pick_consumer(producer: HloInstruction, ctx: FusionContext) -> HloInstruction | None:
    """The user to compute `producer` in as an extra output (refusals logged), or None."""
    users = list(producer.users)
    if not users or (len(users) == 1 and not is_multi_output(users[0]) and not producer.is_root()):
        return None
    if not is_loop_fusible_as_producer(producer) and producer.opcode != "fusion":
        return None
    candidates = []
    for consumer in users:
        d = _pc_legal(producer, consumer, ctx)
        if d:
            candidates.append(consumer)
        elif d.rule not in ("consumer-not-mof-root",):
            ctx.log.refused(ctx.pass_name, producer.name, consumer.name, d)
    if not candidates:
        return None
    best = max(_priority(c) for c in candidates)
    return next(c for c in candidates if _priority(c) == best)


def _profit_bytes(producer: HloInstruction, consumer: HloInstruction) -> int:
    """Bytes saved by computing `producer` inside `consumer`: the consumer no longer reads it."""
    shared = sum(op.shape.byte_size() for op in distinct(producer.operands)
                 if any(op is o for o in consumer.operands))
    return producer.shape.byte_size() + shared


@dataclass(frozen=True)
class SiblingFusion(MultiOutputFusion):
    """Only the sibling half of multi-output fusion."""

    name: ClassVar[str] = "sibling-fusion"
    producer_consumer: ClassVar[bool] = False
