"""Producer-consumer fusion with duplication (XLA's InstructionFusion, GPU and CPU flavours).

Consumers are visited in reverse post order (root first). For each, its operands are tried in
the order the queue would reach them; the first one that may fuse is fused (creating a fusion
around the consumer, or growing the consumer's fusion) and the grown fusion goes back on the
queue. A producer with other users is duplicated into the consumer when it is cheap. Two
pre-passes decide, before any fusion, which producers may be duplicated at all:

- `globally_unfusible` forbids duplicating producers that read more than they write unless
  every user can fuse them (InstructionFusion::ComputeGloballyUnfusible);
- `expensive_duplication` lets an expensive producer (exp, log, ...) be duplicated only when
  every one of its users can fuse it, so that it is never materialized as well as recomputed,
  and the cost model agrees: at most `TargetParams.max_expensive_copies` copies, and fewer
  bytes moved than materializing it once. (XLA never duplicates an expensive producer; this
  is hlofuse's refinement, which turns `add(exp(x), y), mul(exp(x), y)` into two kernels
  instead of three.)

The producer-consumer rules are pure functions in producer_consumer.py; everything a run learns
(the pre-passes' verdicts, the re-read operands of growing fusions) lives in its FusionContext.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...hlo.ir import HloComputation, HloInstruction
from .context import FusionContext
from .cost_model import distinct, duplication_saves_bytes, fusion_saves_bytes
from .decisions import Decision
from .fusibility import (
    effectively_at_most_unary, is_always_duplicable, is_expensive, is_fusible, is_loop_fusible_as_consumer,
    is_loop_fusible_as_producer,
)
from .dot_fusion import output_fusion_note
from .fusion_utils import create_fusion, fuse_producer, operand_index, sort_computations
from .kernel_pass import KernelComputationPass
from .producer_consumer import choose_kind, reader_names, should_fuse, would_duplicate

refuse = Decision.refuse
ALLOW = Decision.allow()


def _users(n: int) -> str:
    return f"{n} user" if n == 1 else f"{n} users"


def _between(producer: HloInstruction, position: dict[HloInstruction, int]) -> list[HloInstruction]:
    """The instructions reachable from `producer` (not itself) that come no later than its
    last user in post order (`position`), in post order: every instruction on a path from
    `producer` to a user is among them."""
    last = max((position[u] for u in producer.users if u in position), default=-1)
    found: set[HloInstruction] = set()
    get = position.get
    stack = [u for u in producer.users if get(u, last + 1) <= last]
    while stack:
        inst = stack.pop()
        if inst in found:
            continue
        found.add(inst)
        for u in inst.users:
            if u not in found and get(u, last + 1) <= last:
                stack.append(u)
    return sorted(found, key=position.__getitem__)


# ---- the global pre-passes -------------------------------------------------------------------

def _fusible_on_all_paths(producer: HloInstruction, position: dict[HloInstruction, int],
                          do_not_fuse: dict[HloInstruction, Decision],
                          ctx: FusionContext) -> dict[HloInstruction, bool]:
    """XLA's CanFuseOnAllPaths for every instruction between `producer` and its users.

    An instruction can take `producer` on all paths if it is fusible and every operand that
    `producer` reaches may be fused into it and can itself take `producer` on all paths.
    Computed over the post order (operands first), so deep graphs need no recursion; only
    the instructions between `producer` and its last user in that order are visited, so a
    long chain costs a few steps per producer, not a walk of the whole computation.
    """
    reach = ctx.reachability()
    reaches_a_user = reach.reaches_one_of(list(producer.users))
    result: dict[HloInstruction, bool] = {producer: True}
    for inst in _between(producer, position):
        if not reaches_a_user(inst):
            continue
        ok = is_fusible(inst)
        for i, op in enumerate(inst.operands):
            if not ok:
                break
            if not reach.is_reachable(producer, op):
                continue
            ok = op not in do_not_fuse and bool(should_fuse(inst, i, ctx)) and result.get(op, False)
        result[inst] = ok
    return result


def globally_unfusible(comp: HloComputation, ctx: FusionContext,
                       order: list[HloInstruction] | None = None) -> dict[HloInstruction, Decision]:
    """Producers that must not be duplicated, with the reason (ComputeGloballyUnfusible);
    `order`: `comp`'s post order, if the caller has it."""
    out: dict[HloInstruction, Decision] = {}
    if order is None:
        order = comp.post_order()
    position = {inst: i for i, inst in enumerate(order)}
    for producer in reversed(order):
        # A producer nothing can fuse is refused pair by pair with its own reason.
        if not is_loop_fusible_as_producer(producer) or effectively_at_most_unary(producer):
            continue
        if not (ctx.verdict(producer) or ALLOW):
            continue  # an expensive producer already refused with its own reason
        in_elems = sum(op.shape.element_count() if op.shape.is_array else 0 for op in distinct(producer.operands))
        out_elems = sum(s.element_count() for s in producer.shape.leaves())
        if in_elems <= out_elems:
            continue
        on_all_paths = _fusible_on_all_paths(producer, position, out, ctx)
        users = list(producer.users)
        blockers = [u for u in users if not on_all_paths.get(u, False)]
        if not blockers:
            continue
        who = "; ".join(_why_blocked(producer, u, ctx) for u in blockers)
        out[producer] = refuse(
            "not-fusible-into-all-users",
            f"producer {producer.name} reads more than it writes ({in_elems} > {out_elems} elements) and "
            f"has {_users(len(users))} of which {len(blockers)} cannot fuse it ({who}); duplicating it "
            f"would add memory traffic")
    return out


def _why_blocked(producer: HloInstruction, user: HloInstruction, ctx: FusionContext) -> str:
    """Why `user` cannot take `producer`, as a short clause naming `user`."""
    if user.opcode != "fusion" and not is_loop_fusible_as_consumer(user):
        return f"{user.name} is a {user.opcode}, which cannot root a fusion"
    idx = next((i for i, o in enumerate(user.operands) if o is producer), None)
    if idx is not None:
        d = should_fuse(user, idx, ctx)
        if not d:
            return f"{user.name}: {d.reason} [{d.rule}]"
    return f"{user.name}: a path from {producer.name} to it cannot be fused"


def expensive_duplication(comp: HloComputation, ctx: FusionContext) -> dict[HloInstruction, Decision]:
    """For each expensive producer with several users: may it be duplicated into all of them?

    Allowed when every user can fuse it (so the original disappears instead of being
    materialized next to its copies) and the cost model agrees: at most
    `max_expensive_copies` copies, and fewer bytes moved than materializing it once.
    Otherwise refused with a reason naming the users that cannot fuse it. The verdicts go to
    `ctx.expensive_verdicts`, where the `base` rule finds them.
    """
    params = ctx.params
    for producer in comp.instructions:
        users = list(producer.users)
        if (len(users) < 2 or producer.is_root() or not is_expensive(producer, params)
                or not is_loop_fusible_as_producer(producer) or is_always_duplicable(producer)):
            continue
        p, n = producer.name, len(users)
        # judge each user as if duplicating this producer were allowed
        ctx.expensive_verdicts[producer] = ALLOW
        blockers = [_why_blocked(producer, u, ctx) for u in users
                    if u.opcode != "fusion" and not is_loop_fusible_as_consumer(u)
                    or not should_fuse(u, operand_index(u, producer), ctx)]
        limit = params.max_expensive_copies
        saved = duplication_saves_bytes(producer, users)
        if blockers:
            d = refuse("expensive-duplicate",
                       f"producer {p} is expensive and has {n} users of which {len(blockers)} cannot fuse it: "
                       f"{'; '.join(blockers)}")
        elif n > limit:
            d = refuse("expensive-duplicate",
                       f"producer {p} is expensive and has {n} users; duplicating it into all of them "
                       f"would compute it {n} times (at most {limit})")
        elif saved <= 0:
            d = refuse("expensive-duplicate",
                       f"producer {p} is expensive and has {n} users; duplicating it into all of them "
                       f"would move {-saved} more bytes than materializing it once")
        else:
            d = ALLOW
        ctx.expensive_verdicts[producer] = d
    return dict(ctx.expensive_verdicts)


# ---- the main loop -------------------------------------------------------------------------------

def fuse_computation(comp: HloComputation, ctx: FusionContext) -> bool:
    """Producer-consumer fusion over `comp`, consumers root first; True if anything fused."""
    if ctx.may_duplicate:
        expensive_duplication(comp, ctx)  # kept in the context (FusionContext.verdict)
    order = comp.post_order()  # (the pre-pass changes nothing: one walk for both)
    do_not_duplicate = globally_unfusible(comp, ctx, order) if ctx.may_duplicate else {}
    queue: list[HloInstruction | None] = list(order)
    position = {inst: i for i, inst in enumerate(queue)}
    changed = False
    while queue:
        inst = queue.pop()
        if inst is None:
            continue
        position.pop(inst, None)
        if inst.opcode != "fusion" and not is_loop_fusible_as_consumer(inst):
            continue  # tuples, calls, library ops...: every operand would be refused
        for i in _queued_operands(inst, position):
            producer = inst.operands[i]
            if producer.opcode in ("parameter", "get-tuple-element", "tuple"):
                continue
            decision = do_not_duplicate.get(producer, ALLOW)
            if decision:
                decision = should_fuse(inst, i, ctx)
            if not decision:
                consumer, fusion = reader_names(producer, inst, ctx)
                ctx.log.refused(ctx.pass_name, producer.name, consumer, decision, fusion=fusion)
                continue
            if _duplicates_expensive(producer, inst, ctx):
                if _user_still_queued(producer, inst, position):
                    continue  # the last of its users to be visited copies it into all of them
                fusion = _fuse_into_every_user(producer, inst, queue, position, ctx)
                if fusion is None:
                    continue
            else:
                fusion = _fuse(producer, inst, ctx)
            if not producer.users and producer.parent is None:
                idx = position.pop(producer, None)
                if idx is not None:
                    queue[idx] = None
                do_not_duplicate.pop(producer, None)
            if fusion is not inst:
                do_not_duplicate.pop(inst, None)
            position[fusion] = len(queue)
            queue.append(fusion)
            changed = True
            break
    if changed:
        sort_computations(comp)
    return changed


def _queued_operands(inst: HloInstruction, position: dict[HloInstruction, int]) -> list[int]:
    """The index of the first occurrence of each distinct operand of `inst` still queued, the
    one the queue would reach first (the latest in it) first (in one pass over the operands: a
    fusion re-queued after every producer it takes has dozens)."""
    seen: set[HloInstruction] = set()
    out: list[tuple[int, int]] = []
    for i, op in enumerate(inst.operands):
        if op in seen:
            continue
        seen.add(op)
        at = position.get(op)
        if at is not None:
            out.append((at, i))
    out.sort(reverse=True)  # (distinct operands hold distinct places: no ties)
    return [i for _, i in out]


def _duplicates_expensive(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> bool:
    return (ctx.may_duplicate and would_duplicate(producer, consumer) and not is_always_duplicable(producer)
            and is_expensive(producer, ctx.params))


def _user_still_queued(producer: HloInstruction, consumer: HloInstruction,
                       position: dict[HloInstruction, int]) -> bool:
    """Whether a user of `producer` other than `consumer` has yet to be visited as a consumer.

    Copying an expensive producer into all of its users at once turns each of them into a
    fusion; one not visited yet would then reach its own consumer as a fusion, which
    instruction fusion does not fuse (`producer_is_fusion`), though as an instruction it would
    have been: batch norm's `rsqrt(add(var / n, eps))` lost its add to the copy of `var / n`
    and became two kernels (XLA:CPU's one). So the copying waits for the last user in queue
    order, by when every other user has taken what it fuses."""
    return any(u is not consumer and u in position and (u.opcode == "fusion" or is_loop_fusible_as_consumer(u))
               for u in producer.users)


def _fuse_into_every_user(producer: HloInstruction, consumer: HloInstruction, queue: list,
                          position: dict[HloInstruction, int], ctx: FusionContext) -> HloInstruction | None:
    """Duplicate the expensive `producer` into all of its users at once (all or nothing).

    The pre-pass judged the users as they were; they may have grown since (a user inside a
    fusion that now broadcasts it re-reads its elements), so every user is asked again, and
    only if all of them still take it is it fused into each, so it is never materialized
    and recomputed as well. Returns `consumer`'s fusion, or None (refusal logged).
    """
    users = list(producer.users)
    blockers = [_why_blocked(producer, u, ctx) for u in users if not should_fuse(u, operand_index(u, producer), ctx)]
    if blockers:
        d = refuse("expensive-duplicate",
                   f"producer {producer.name} is expensive and has {len(users)} users of which "
                   f"{len(blockers)} cannot fuse it: {'; '.join(blockers)}")
        ctx.expensive_verdicts[producer] = d
        readers, fusion_name = reader_names(producer, consumer, ctx)
        ctx.log.refused(ctx.pass_name, producer.name, readers, d, fusion=fusion_name)
        return None
    result = consumer
    for user in [consumer] + [u for u in users if u is not consumer]:
        fusion = _fuse(producer, user, ctx)
        if user is consumer:
            result = fusion
            continue
        # the user's place in the queue (or a new one, if it was visited) goes to its fusion
        idx = position.pop(user, None)
        if idx is None:
            idx = len(queue)
            queue.append(fusion)
        else:
            queue[idx] = fusion
        position[fusion] = idx
    return result


def _fuse(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> HloInstruction:
    """Fuse `producer` into `consumer` (made a fusion first if it is none) and log it; a copy
    left by duplication is recorded as a copy of `producer` in the log."""
    kind = choose_kind(producer, consumer, ctx)
    duplicated = would_duplicate(producer, consumer)
    saved = fusion_saves_bytes(producer, consumer, duplicated)
    producer_name, consumer_name = producer.name, consumer.name
    elements = sum(s.element_count() for s in producer.shape.leaves())
    expensive = is_expensive(producer, ctx.params)
    reused = ctx.reused_after_fusing(consumer, producer)
    if consumer.opcode == "fusion":
        fusion = consumer
        if kind == "kInput" or fusion.attrs.get("kind") != "kInput":
            fusion.attrs["kind"] = kind
    else:
        fusion = create_fusion(consumer, kind)
        ctx.note_replaced(consumer, fusion)
    original = producer.original
    added: list[HloInstruction] = []
    revision = fusion.fused_computation.revision
    fuse_producer(fusion, producer, added)
    ctx.note_fused(fusion, reused)
    ctx.note_grown(fusion, revision, added)
    if duplicated:
        for inst in added:
            if inst.original is original:
                ctx.log.copied(inst, producer)
    ctx.log.fused(ctx.pass_name, producer_name, consumer_name, fusion.name, duplicated=duplicated,
                  duplicated_elements=elements if duplicated else 0,
                  duplicated_expensive=duplicated and expensive,
                  rule=f"saves {saved} bytes" + output_fusion_note(producer, kind))
    return fusion


# ---- the passes ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProducerConsumerFusion(KernelComputationPass):
    """The frame both instruction fusion passes share: one run of `fuse_computation` per
    kernel computation, with a fresh context each. Subclasses say whether they duplicate.

    Work: near-linear in the computation. Each consumer is visited once plus once per producer
    it takes (a fusion goes back on the queue), and each visit asks its distinct queued
    operands once; a fusion's re-read operands are kept up to date, not re-walked
    (FusionContext.reused_operands). The pre-pass's reachability is built once in O(n) set
    unions of n bits, and each of its producers walks only the instructions between it and its
    last user. Bounded factors: a fusion's operands (at most the budget's) are scanned per
    producer fused. tests/passes/test_fusion_complexity.py counts it."""

    may_duplicate: ClassVar[bool] = True

    def run(self, module) -> bool:
        """Fuse producers into consumers in every kernel computation; True if anything fused."""
        self.log_of(module).passes_run.add(self.name)
        return super().run(module)

    def context(self, comp: HloComputation, log) -> FusionContext:
        """A fresh context for fusing in `comp`."""
        return FusionContext.for_computation(comp, self.params, log, self.name, self.may_duplicate)

    def _run_on(self, comp: HloComputation, ctx: FusionContext) -> bool:
        return fuse_computation(comp, ctx)


@dataclass(frozen=True)
class InstructionFusion(ProducerConsumerFusion):
    """Producer-consumer fusion with duplication for `target` ("gpu" or "cpu")."""

    may_duplicate: bool = True  # type: ignore[misc]  # an option here, fixed in the base
    name: ClassVar[str] = "fusion"


@dataclass(frozen=True)
class NonDuplicatingFusion(ProducerConsumerFusion):
    """Producer-consumer fusion that never duplicates: the first of XLA GPU's two instruction
    fusion passes. Its refusals are provisional: the duplicating pass after it decides again."""

    may_duplicate: ClassVar[bool] = False
    name: ClassVar[str] = "fusion-no-duplication"
