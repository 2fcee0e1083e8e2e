"""Priority fusion (XLA's GPU PriorityFusion): producers fused most-profitable first.

Every producer that can fuse into all of its users gets a priority: the time the performance
model (perf_model.py) says fusing it into all of them saves. Producers wait in a priority queue;
the most profitable one is fused into every user (its own kernel disappears: nothing is ever
both materialized and recomputed), and then the producers whose consumers changed are
re-prioritised (the operands of the grown fusions, and the grown fusions themselves as
producers). A producer the model says costs time (a negative priority) is refused with the
model's estimate as the reason; so is one some user cannot take (the producer-consumer rules of
the target, with the fusion merger's limit on duplicated indexing, rule 8 of issue 16).

Unlike instruction fusion followed by the fusion merger, one queue decides both: a fusion is a
producer like any instruction, so a chain grows from its most profitable link, and an expensive
producer may be recomputed under a broadcast when the model says the traffic saved outweighs the
work (the estimate names the cost: "duplicating costs 0.2 us"). Sibling (multi-output) fusion
runs after it, as in XLA's GPU pipeline (fusion_passes).
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import ClassVar

from ...hlo.ir import HloComputation, HloInstruction
from .context import FusionContext
from .decisions import Decision
from .fusibility import (
    is_fusible, is_loop_fusible_as_consumer, is_loop_fusible_as_producer, is_multi_output, members, reduce_hero,
    reduction_is_contiguous, transpose_is_bitcast,
)
from .fusion_utils import create_fusion, fuse_producer, sort_computations
from .kernel_pass import KernelComputationPass
from .perf_model import Device, Estimate, KernelFacts, device_for, fusion_estimate
from .producer_consumer import (
    base, choose_kind, cpu_constant, gpu_constant, producer_fusible, producer_is_fusion, reduce_epilogue, reuse,
    rules_for, scalar_constant,
)

refuse = Decision.refuse
ALLOW = Decision.allow()

# Rules of instruction fusion that priority fusion replaces: it fuses fusions too (the merger's
# job before), always into every user (so `base`'s duplication verdicts do not apply), and lets
# the model price an expensive producer under a re-reading consumer instead of refusing it.
_REPLACED = (producer_is_fusion, reuse, base)
# Constants are not in the queue: scalar ones are fused into every fusible user at the end
# (XLA: "small constants should be fused, because they can be folded"), larger ones stay buffers.
_CONSTANT_RULES = (gpu_constant, cpu_constant, scalar_constant)
_SKIPPED = ("parameter", "tuple", "get-tuple-element", "constant")


def _intermediate(inst: HloInstruction) -> bool:
    """XLA's IsIntermediate (one operand): an op a reduction's epilogue may hold - elementwise
    with one operand (a copy only if it keeps the layout), or a bitcast, or a reshape or
    transpose that is one."""
    if len(inst.operands) != 1:
        return False
    if inst.opcode == "copy":
        return inst.shape.layout == inst.operands[0].shape.layout
    if inst.info.elementwise or inst.opcode == "bitcast":
        return True
    if inst.opcode == "reshape":
        a, b = inst.operands[0].shape, inst.shape
        return [d for d in a.dims if d != 1] == [d for d in b.dims if d != 1]
    return inst.opcode == "transpose" and transpose_is_bitcast(inst)


def reduction_epilogue(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """GPU priority fusion: a reduction (or a fusion with a reduce hero) fuses into a consumer
    that is only its epilogue - every op of the consumer takes one operand (XLA's reduction
    epilogue fusion: `log(reduce(x))` is one kernel) - and only when the reduction has one user.
    The kernel stays a reduction (kInput)."""
    p, c = producer.name, consumer.name
    ops = [m for m in members(consumer) if m.opcode != "parameter"] if consumer.opcode == "fusion" else [consumer]
    bad = next((m for m in ops if not _intermediate(m)), None)
    if bad is not None:
        where = f" in {c}" if consumer.opcode == "fusion" else ""
        return refuse("reduce-epilogue", f"reduction {p} only fuses into an epilogue of one-operand ops; "
                                         f"{bad.name} ('{bad.opcode}'){where} is not one")
    if len(producer.users) > 1:
        return refuse("reduce-epilogue", f"reduction {p} has several users; its epilogue fusion needs one")
    return ALLOW


def _is_reduction_kernel(producer: HloInstruction, ctx: FusionContext) -> bool:
    """A reduction that runs as a reduction kernel (GPU, contiguous: XLA's reduction emitter);
    a non-contiguous one is a loop like any other producer (the `reduce_epilogue` rule's case)."""
    hero = reduce_hero(producer)
    return (ctx.params.multi_output and hero is not None and not is_multi_output(producer)
            and reduction_is_contiguous(hero))


def _legal(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """Whether `consumer` may take `producer`: the target's rules, and rule 8's limit."""
    if consumer.opcode != "fusion" and (consumer.opcode == "bitcast" or not is_loop_fusible_as_consumer(consumer)):
        return refuse("consumer-not-fusible",
                      f"consumer {consumer.name} ('{consumer.opcode}') cannot be the root of a loop or input fusion")
    epilogue = _is_reduction_kernel(producer, ctx)
    if epilogue:
        d = reduction_epilogue(producer, consumer, ctx)
        if not d:
            return d
    for rule in rules_for(ctx):
        if rule in _REPLACED or rule in _CONSTANT_RULES or (epilogue and rule in (producer_fusible, reduce_epilogue)):
            continue
        d = rule(producer, consumer, ctx)
        if not d:
            return d
    return ALLOW


def _is_candidate(producer: HloInstruction) -> bool:
    """Whether `producer` is worth asking about at all (anything else is never fused)."""
    if producer.opcode in _SKIPPED or not _consumers(producer) or producer.is_root():
        return False
    return is_fusible(producer) and not is_multi_output(producer)


def _consumers(producer: HloInstruction) -> list[HloInstruction]:
    """The users `producer` is fused into: all but bitcasts, which keep reading it from memory
    (XLA's CanFuseWithAllNonBitcastUsers: a bitcast is no kernel, fusing into it gains nothing)."""
    return [u for u in producer.users if u.opcode != "bitcast"]


def _is_scalar_constant(inst: HloInstruction) -> bool:
    return inst.opcode == "constant" and inst.shape.is_array and inst.shape.element_count() == 1


@dataclass
class _Queue:
    """The priority queue of one computation, with lazy invalidation by version."""

    comp: HloComputation
    ctx: FusionContext
    device: Device
    heap: list = None  # type: ignore[assignment]
    version: dict = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.heap, self.version, self._tick = [], {}, itertools.count()
        self.facts = KernelFacts(self.device)

    def evaluate(self, producer: HloInstruction) -> tuple[Decision, Estimate | None]:
        """May `producer` fuse into all of its users, and what would it save?"""
        users = _consumers(producer)
        if not is_loop_fusible_as_producer(producer) and producer.opcode != "fusion":
            return refuse("producer-not-fusible", ""), None
        if producer.opcode == "fusion" and producer.attrs.get("kind") not in ("kLoop", "kInput"):
            return refuse("producer-not-fusible", ""), None
        blocked = next(((u, d) for u in users for d in [_legal(producer, u, self.ctx)] if not d), None)
        est = fusion_estimate(producer, users, self.device, keeps_producer=len(users) < len(producer.users),
                              facts=self.facts)
        if blocked is not None:
            # what the rule costs, in the model's terms (a refusal is also a price paid)
            d = blocked[1]
            return refuse(d.rule, f"{d.reason} (the model, had it been allowed: {est.text})"), None
        if est.saving < 0:
            names = ", ".join(u.name for u in users)
            return refuse("unprofitable", f"{producer.name} is not fused into {names}: {est.text} "
                                          f"({self.device.name})"), est
        return ALLOW, est

    def push(self, producer: HloInstruction, log_refusal: bool = True) -> None:
        """(Re-)prioritise `producer`: queue it if it may fuse, else log why not."""
        self.version[producer] = v = self.version.get(producer, 0) + 1
        if producer.parent is not self.comp or not _is_candidate(producer):
            return
        d, est = self.evaluate(producer)
        if d and est is not None:
            heapq.heappush(self.heap, (-est.saving, next(self._tick), v, producer))
        elif log_refusal and d.reason:
            user = next((u for u in _consumers(producer) if not _legal(producer, u, self.ctx)), None)
            consumer = user.name if user is not None and d.rule != "unprofitable" else \
                ", ".join(u.name for u in _consumers(producer))
            self.ctx.log.refused(self.ctx.pass_name, producer.name, consumer, d)

    def run(self) -> bool:
        """Fuse until no producer saves time; True if anything fused."""
        for inst in self.comp.post_order():
            self.push(inst)
        changed = False
        while self.heap:
            neg, _, v, producer = heapq.heappop(self.heap)
            if producer.parent is not self.comp or self.version.get(producer) != v:
                continue
            d, est = self.evaluate(producer)  # the graph may have changed under it
            if not d or est is None:
                self.push(producer)
                continue
            if est.saving != -neg:
                heapq.heappush(self.heap, (-est.saving, next(self._tick), v, producer))
                continue
            touched = self.fuse(producer, est)
            changed = True
            for inst in touched:
                self.push(inst)
        changed |= self.fuse_constants()
        if changed:
            sort_computations(self.comp)
        return changed

    def fuse_constants(self) -> bool:
        """Fuse every scalar constant into each user that can take it (XLA's last step of
        priority fusion); an unfused user becomes a fusion of its own."""
        ctx, changed = self.ctx, False
        for const in [i for i in self.comp.instructions if _is_scalar_constant(i)]:
            for user in list(const.users):
                if const.is_root() or not _legal(const, user, ctx):
                    continue
                fusion = user if user.opcode == "fusion" else create_fusion(user, choose_kind(const, user, ctx))
                name, consumer = const.name, user.name
                fuse_producer(fusion, const)
                ctx.log.fused(ctx.pass_name, name, consumer, fusion.name, duplicated=bool(const.users),
                              rule="a scalar constant, fused into every user that can take it (no traffic, "
                                   "no launch: folded into the kernel)")
                changed = True
        if changed:
            ctx.graph_changed()
        return changed

    def fuse(self, producer: HloInstruction, est: Estimate) -> list[HloInstruction]:
        """Fuse `producer` into every user; the grown fusions and their operands (to re-prioritise)."""
        ctx = self.ctx
        users = _consumers(producer)
        keeps = len(users) < len(producer.users)  # bitcast users keep reading it
        name, original = producer.name, producer.original
        note = est.text
        fusions: list[HloInstruction] = []
        for k, user in enumerate(users):
            kind = choose_kind(producer, user, ctx)
            if _is_reduction_kernel(producer, ctx):
                kind = "kInput"  # a reduction with its epilogue is still a reduction kernel
            if user.opcode == "fusion":
                fusion = user
                if kind == "kInput" or fusion.attrs.get("kind") != "kInput":
                    fusion.attrs["kind"] = kind
            else:
                fusion = create_fusion(user, kind)
            consumer_name = user.name
            duplicated = k < len(users) - 1 or keeps
            known = set(fusion.fused_computation.instructions) if duplicated else set()
            fuse_producer(fusion, producer)
            if duplicated and producer.opcode != "fusion":
                for inst in fusion.fused_computation.instructions:
                    if inst not in known and inst.original is original:
                        ctx.log.copied(inst, producer)
            ctx.log.fused(ctx.pass_name, name, consumer_name, fusion.name, duplicated=duplicated,
                          rule=note + (f" (fused into all {len(users)} users)" if len(users) > 1 else ""))
            fusions.append(fusion)
        ctx.graph_changed()
        touched = list(fusions)
        for f in fusions:
            touched.extend(o for o in f.operands if o not in touched)
        return touched


@dataclass(frozen=True)
class PriorityFusion(KernelComputationPass):
    """Producers fused into all of their users, most profitable first by the performance model.

    Work: near-linear in the computation: each producer is priced when queued and again only
    when a fusion next to it grows (a stale queue entry is skipped by its version), and each
    fusion is one pop of the heap (O(log n)). tests/passes/test_fusion_complexity.py counts it."""

    name: ClassVar[str] = "priority-fusion"

    def run(self, module) -> bool:
        """Run priority fusion on every kernel computation; True if anything fused."""
        self.log_of(module).passes_run.add(self.name)
        return super().run(module)

    def _run_on(self, comp: HloComputation, ctx: FusionContext) -> bool:
        return _Queue(comp, ctx, device_for(self.params.name)).run()
