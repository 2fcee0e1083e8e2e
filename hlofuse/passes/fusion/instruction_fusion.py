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
"""
from __future__ import annotations

from typing import Callable

from ...hlo.ir import HloComputation, HloInstruction, HloModule
from .cost_model import TargetParams, distinct, duplication_saves_bytes, fusion_saves_bytes
from .decisions import Decision, FusionLog, module_log
from .fusibility import (
    combined_operands, creates_heavy_computation, effectively_at_most_unary, is_always_duplicable, is_expensive,
    is_fusible, is_input_fusible_reduction, is_loop_fusible_as_consumer, is_loop_fusible_as_producer,
    is_multi_output, is_physically_transposing, not_fusible_reason, reduction_count,
    fused_operands_reused, reduction_is_contiguous, reuses_operand_elements,
)
from .fusion_utils import Reachability, create_fusion, fuse_producer, operand_index, sort_computations
from .kernel_pass import KernelComputationPass

refuse = Decision.refuse
ALLOW = Decision.allow()


def _is_scalar_constant(inst: HloInstruction) -> bool:
    return inst.opcode == "constant" and inst.shape.is_array and inst.shape.element_count() == 1


def _would_duplicate(producer: HloInstruction, consumer: HloInstruction) -> bool:
    return any(u is not consumer for u in producer.users) or producer.is_root()


def _is_reduce_intermediate(inst: HloInstruction) -> bool:
    """XLA's IsReduceIntermediate: a single-operand, single-user convert/bitcast epilogue op."""
    if len(inst.operands) > 1 or len(inst.users) > 1:
        return False
    if inst.opcode in ("bitcast", "bitcast-convert", "convert"):
        return True
    if inst.opcode == "reshape":
        a, b = inst.operands[0].shape, inst.shape
        return [d for d in a.dims if d != 1] == [d for d in b.dims if d != 1]
    return False


def _minor_dim_concatenate(inst: HloInstruction) -> bool:
    """CPU: a concatenate along the minor dimension with enough bytes is better left a memcpy."""
    shape = inst.shape
    if shape.rank <= 1:
        return False
    dim = inst.attrs.get("dimensions", (0,))[0]
    minor = shape.layout.minor_to_major[0] if shape.layout is not None else shape.rank - 1
    dim_bytes = shape.dims[dim] * shape.dtype.byte_size
    return dim == minor and dim_bytes >= 64 and shape.byte_size() >= 2048


def _users(n: int) -> str:
    return f"{n} user" if n == 1 else f"{n} users"


def _reader_names(producer: HloInstruction, consumer: HloInstruction,
                  origin: Callable[[str], str] = str) -> tuple[str, str]:
    """(the instructions that read `producer`, the fusion they are in or ""), for reasons.

    A refusal names the original reader inside a consumer fusion (`origin` maps a duplicated
    copy to the instruction it copies), so the same refused pair reads the same however often
    the growing fusion around the reader, or a copy of it, is revisited.
    """
    if consumer.opcode != "fusion":
        return origin(consumer.name), ""
    param = consumer.fused_computation.parameter(operand_index(consumer, producer))
    readers = _distinct_names(origin(u.name) for u in param.users)
    return (", ".join(readers) or consumer.name), consumer.name


def _distinct_names(names) -> list[str]:
    out: list[str] = []
    for n in names:
        if n not in out:
            out.append(n)
    return out


def _consumer_label(producer: HloInstruction, consumer: HloInstruction, origin: Callable[[str], str] = str) -> str:
    """`consumer`'s name, or for a fusion "READERS (in FUSION)" naming who reads `producer`."""
    readers, fusion = _reader_names(producer, consumer, origin)
    return f"{readers} (in {fusion})" if fusion else readers


class ProducerConsumerRules:
    """XLA's ShouldFuse for one target: a Decision for fusing operand i into a consumer."""

    def __init__(self, params: TargetParams, may_duplicate: bool = True) -> None:
        self.params = params
        self.may_duplicate = may_duplicate
        # id(producer) -> whether this expensive producer may be duplicated (set per computation
        # by InstructionFusion.expensive_duplication; absent: refused with the generic reason)
        self.expensive_verdicts: dict[int, tuple[HloInstruction, Decision]] = {}
        # names a duplicated copy back to its original (the pass sets the log's mapping)
        self.origin: Callable[[str], str] = str
        # id(fusion) -> (fusion, {id(operand): operand} of the operands whose elements it
        # reads several times): computed once per fusion, then kept up to date by `note_fused`
        # as producers are fused in, so a fusion growing along a long chain is not walked
        # again for every producer (which made instruction fusion quadratic). The pass clears
        # it for each computation; only its own fusions change while it runs.
        self.reused_operands: dict[int, tuple[HloInstruction, dict[int, HloInstruction]]] = {}

    def verdict(self, producer: HloInstruction) -> Decision | None:
        """The pre-pass's decision on duplicating the expensive `producer`, if it took one."""
        entry = self.expensive_verdicts.get(id(producer))
        return entry[1] if entry is not None and entry[0] is producer else None

    def set_verdict(self, producer: HloInstruction, decision: Decision) -> None:
        """Remember the global pre-pass's verdict on duplicating expensive `producer`."""
        self.expensive_verdicts[id(producer)] = (producer, decision)

    def should_fuse(self, consumer: HloInstruction, index: int) -> Decision:
        """Whether operand `index` of `consumer` may be fused into it, with the reason when not."""
        producer = consumer.operands[index]
        p, c = producer.name, consumer.name
        if self.params.name == "cpu":
            checks = (self._cpu_constant, self._producer_fusible, self._cpu_concatenate,
                      self._reuse, self._base, self._cpu_reductions, self._scalar_constant,
                      self._producer_is_fusion, self._consumer_fusible)
        else:
            checks = (self._producer_is_fusion, self._reuse, self._transposing_into_reduce,
                      self._producer_fusible, self._reduce_epilogue, self._consumer_fusible,
                      self._multi_output_producer, self._gpu_constant, self._heavy, self._base,
                      self._budget)
        for check in checks:
            d = check(producer, consumer, p, c)
            if not d:
                return d
        return ALLOW

    # ---- the rules, each named after the XLA check it mirrors ----------------------------
    def _producer_is_fusion(self, producer, consumer, p, c) -> Decision:
        if producer.opcode == "fusion":
            return refuse("producer-is-fusion",
                          f"{p} is a fusion, which {self.params.name.upper()} instruction fusion does not fuse "
                          f"into {_consumer_label(producer, consumer, self.origin)} (the fusion merger and "
                          f"multi-output fusion decide)")
        return ALLOW

    def reused_by(self, consumer: HloInstruction) -> dict[int, HloInstruction]:
        """The operands of `consumer` whose elements it reads several times, by id."""
        if consumer.opcode != "fusion":
            return {id(op): op for i, op in enumerate(consumer.operands)
                    if i == operand_index(consumer, op) and reuses_operand_elements(consumer, i)}
        entry = self.reused_operands.get(id(consumer))
        if entry is None or entry[0] is not consumer:
            reused = {id(op): op for op in fused_operands_reused(consumer)}
            entry = self.reused_operands[id(consumer)] = (consumer, reused)
        return entry[1]

    def reused_after_fusing(self, consumer: HloInstruction, producer: HloInstruction) -> dict[int, HloInstruction]:
        """The operands whose elements the fusion of `producer` into `consumer` will re-read
        (asked before fusing: the fused producer is retired with its operands). XLA keeps such
        facts too, as they are lost in the fused graph.

        The fused copy of `producer` is read as its fused parameter was, so its operands are
        re-read if that parameter was, or if `producer` itself re-reads them."""
        before = self.reused_by(consumer)
        reused = dict(before)
        producer_reused = before.get(id(producer)) is producer
        for j, op in enumerate(producer.operands):
            if producer_reused or (j == operand_index(producer, op) and reuses_operand_elements(producer, j)):
                reused[id(op)] = op
        return reused

    def note_fused(self, fusion: HloInstruction, reused: dict[int, HloInstruction]) -> None:
        """Record `reused_after_fusing`'s answer for the grown `fusion` (its operands only)."""
        operands = {id(op) for op in fusion.operands}
        self.reused_operands[id(fusion)] = (fusion, {k: op for k, op in reused.items() if k in operands})

    def note_replaced(self, old: HloInstruction, new: HloInstruction) -> None:
        """`new` (a fusion made around `old`) took `old`'s place as an operand of its users."""
        for user in new.users:
            entry = self.reused_operands.get(id(user))
            if entry is not None and entry[0] is user and entry[1].pop(id(old), None) is old:
                entry[1][id(new)] = new

    def _reuse(self, producer, consumer, p, c) -> Decision:
        if producer.opcode != "fusion" and is_expensive(producer, self.params):
            if self.reused_by(consumer).get(id(producer)) is producer:
                return refuse("expensive-reused",
                              f"producer {p} is expensive and {_consumer_label(producer, consumer, self.origin)} "
                              f"reads each of its elements several times")
        return ALLOW

    def _transposing_into_reduce(self, producer, consumer, p, c) -> Decision:
        if is_input_fusible_reduction(consumer) and is_physically_transposing(producer):
            return refuse("transpose-into-reduce",
                          f"fusing transposing producer {p} into reduction {c} would break read coalescing")
        return ALLOW

    def _producer_fusible(self, producer, consumer, p, c) -> Decision:
        if not is_loop_fusible_as_producer(producer):
            readers = _reader_names(producer, consumer, self.origin)[0].split(", ")
            verb = "reads" if len(readers) == 1 else "read"
            return refuse("producer-not-fusible", f"{not_fusible_reason(producer)}; {' and '.join(readers)} "
                                                  f"{verb} it from memory")
        return ALLOW

    def _reduce_epilogue(self, producer, consumer, p, c) -> Decision:
        if producer.opcode == "reduce" and self.params.reduce_epilogue_only and reduction_is_contiguous(producer):
            members = ([i for i in consumer.fused_computation.instructions if i.opcode != "parameter"]
                       if consumer.opcode == "fusion" else [consumer])
            if not all(_is_reduce_intermediate(m) for m in members):
                return refuse("reduce-epilogue",
                              f"reduction {p} can only be fused into a convert/bitcast epilogue, "
                              f"not into {c}")
            if len(producer.users) > 1:
                return refuse("reduce-epilogue", f"reduction {p} has several users; its epilogue fusion needs one")
        return ALLOW

    def _consumer_fusible(self, producer, consumer, p, c) -> Decision:
        if consumer.opcode == "fusion":
            if consumer.attrs.get("kind") in ("kLoop", "kInput"):
                return ALLOW
            return refuse("consumer-not-fusible", f"consumer {c} is a {consumer.attrs.get('kind')} fusion")
        if not is_loop_fusible_as_consumer(consumer):
            return refuse("consumer-not-fusible",
                          f"consumer {c} ('{consumer.opcode}') cannot be the root of a loop or input fusion")
        return ALLOW

    def _multi_output_producer(self, producer, consumer, p, c) -> Decision:
        if is_multi_output(producer):
            return refuse("producer-multi-output", f"producer {p} is a multi-output fusion")
        return ALLOW

    def _gpu_constant(self, producer, consumer, p, c) -> Decision:
        if producer.opcode == "constant":
            if not _is_scalar_constant(producer):
                return refuse("constant", f"non-scalar constant {p} stays a global buffer, not fused into {c}")
            if consumer.opcode != "fusion":
                return refuse("constant", f"scalar constant {p} is only fused into an existing fusion, "
                                          f"not into {c}")
        return ALLOW

    def _cpu_constant(self, producer, consumer, p, c) -> Decision:
        if producer.opcode == "constant" and not _is_scalar_constant(producer):
            return refuse("constant", f"non-scalar constant {p} is not fused into {c}")
        return ALLOW

    def _scalar_constant(self, producer, consumer, p, c) -> Decision:
        if producer.opcode == "constant" and consumer.opcode != "fusion":
            return refuse("constant", f"scalar constant {p} is only fused into an existing fusion, not into {c}")
        return ALLOW

    def _heavy(self, producer, consumer, p, c) -> Decision:
        if creates_heavy_computation(producer, consumer):
            return refuse("heavy-computation",
                          f"fusing {p} into {c} would recompute a heavy reduction for each re-read element")
        return ALLOW

    def _base(self, producer, consumer, p, c) -> Decision:
        if producer.is_root():
            return refuse("root", f"producer {p} is the root of {producer.parent.name}; its value must be "
                                  f"materialized")
        if _would_duplicate(producer, consumer) and not is_always_duplicable(producer):
            c = " and ".join(_reader_names(producer, consumer, self.origin)[0].split(", "))
            if not self.may_duplicate:
                return refuse("no-duplication", f"fusing {p} into {c} would duplicate it and this pass "
                                                f"may not duplicate")
            if is_expensive(producer, self.params):
                verdict = self.verdict(producer)
                if verdict is not None:
                    return verdict
                users = distinct(producer.users)
                return refuse("expensive-duplicate",
                              f"producer {p} is expensive and has {len(users)} users; fusing it into {c} "
                              f"would compute it twice")
        return ALLOW

    def _cpu_concatenate(self, producer, consumer, p, c) -> Decision:
        limit = self.params.max_concatenate_operands
        for inst in (producer, consumer):
            if inst.opcode == "concatenate" and (
                    (limit is not None and len(inst.operands) > limit) or _minor_dim_concatenate(inst)):
                why = (f"{len(inst.operands)} > {limit} operands" if limit is not None
                       and len(inst.operands) > limit else "a large minor-dimension concatenate")
                return refuse("concatenate", f"concatenate {inst.name} is better unfused on the CPU ({why}); "
                                             f"{p} is not fused into {c}")
        return ALLOW

    def _cpu_reductions(self, producer, consumer, p, c) -> Decision:
        limit = self.params.max_reductions_per_fusion
        if limit is not None and consumer.opcode == "fusion" and producer.opcode == "reduce":
            n = reduction_count(consumer)
            if n > limit:
                return refuse("too-many-reductions", f"too many reductions: fusion {c} already holds {n} > "
                                                     f"{limit}; {p} is not fused into it")
        return ALLOW

    def _budget(self, producer, consumer, p, c) -> Decision:
        limit = self.params.max_unnested_reductions
        added = reduction_count(producer, unnested_only=True) if limit is not None else 0
        if added:
            n = reduction_count(consumer, unnested_only=True) + added
            if n > limit:
                return refuse("budget", f"reduction budget exceeded: {n} > {limit} unnested reductions "
                                        f"(fusing {p} into {_consumer_label(producer, consumer, self.origin)})")
        budget = self.params.max_operands_and_outputs
        if budget is None:
            return ALLOW
        operands = combined_operands(consumer, producer)
        if len(operands) <= len(consumer.operands):
            return ALLOW
        outputs = len(consumer.shape.leaves()) + len(producer.shape.leaves())
        total = len(operands) + outputs
        if total > budget:
            where = _consumer_label(producer, consumer, self.origin)
            return refuse("budget", f"operand budget exceeded: {total} > {budget} (fusing {p} into {where} "
                                    f"needs {len(operands)} operands + {outputs} outputs)")
        return ALLOW

    # ---- fusion kind -----------------------------------------------------------------------
    def choose_kind(self, producer: HloInstruction, consumer: HloInstruction) -> str:
        """kInput for a reduction hero on the GPU, kLoop otherwise (XLA's ChooseFusionKind)."""
        if self.params.input_fusion_kind == "kInput" and is_input_fusible_reduction(consumer):
            return "kInput"
        return "kLoop"


def _between(producer: HloInstruction, position: dict[int, int]) -> list[HloInstruction]:
    """The instructions reachable from `producer` (not itself) that come no later than its
    last user in post order (`position`), in post order: every instruction on a path from
    `producer` to a user is among them."""
    last = max((position[id(u)] for u in producer.users if id(u) in position), default=-1)
    found: dict[int, HloInstruction] = {}
    stack = [u for u in producer.users if position.get(id(u), last + 1) <= last]
    while stack:
        inst = stack.pop()
        if id(inst) in found:
            continue
        found[id(inst)] = inst
        stack.extend(u for u in inst.users if id(u) not in found and position.get(id(u), last + 1) <= last)
    return sorted(found.values(), key=lambda i: position[id(i)])


class InstructionFusion(KernelComputationPass):
    """Producer-consumer fusion with duplication for `target` ("gpu" or "cpu")."""

    name = "fusion"

    def __init__(self, target: str | TargetParams = "gpu", may_duplicate: bool = True) -> None:
        super().__init__(target)
        self.rules = ProducerConsumerRules(self.params, may_duplicate)
        self.may_duplicate = may_duplicate

    def run(self, module: HloModule) -> bool:
        """Fuse producers into consumers in every kernel computation; True if anything fused."""
        log = module_log(module, self.params.name)
        log.passes_run.add(self.name)
        self.rules.origin = log.origin
        return super().run(module)

    # ---- the global pre-pass ---------------------------------------------------------------
    def _fusible_on_all_paths(self, producer: HloInstruction, position: dict[int, int],
                              do_not_fuse: dict, reach: Reachability) -> dict[int, bool]:
        """XLA's CanFuseOnAllPaths for every instruction between `producer` and its users.

        An instruction can take `producer` on all paths if it is fusible and every operand that
        `producer` reaches may be fused into it and can itself take `producer` on all paths.
        Computed over the post order (operands first), so deep graphs need no recursion; only
        the instructions between `producer` and its last user in that order are visited, so a
        long chain costs a few steps per producer, not a walk of the whole computation.
        """
        users = producer.users
        result: dict[int, bool] = {id(producer): True}
        for inst in _between(producer, position):
            if not any(reach.is_reachable(inst, u) for u in users):
                continue
            ok = is_fusible(inst)
            for i, op in enumerate(inst.operands):
                if not ok:
                    break
                if not reach.is_reachable(producer, op):
                    continue
                ok = (id(op) not in do_not_fuse and bool(self.rules.should_fuse(inst, i))
                      and result.get(id(op), False))
            result[id(inst)] = ok
        return result

    def globally_unfusible(self, comp: HloComputation, reach: Reachability) -> dict[int, Decision]:
        """Producers that must not be duplicated, with the reason (ComputeGloballyUnfusible)."""
        out: dict[int, Decision] = {}
        order = comp.post_order()
        position = {id(inst): i for i, inst in enumerate(order)}
        for producer in reversed(order):
            # A producer nothing can fuse is refused pair by pair with its own reason.
            if not is_loop_fusible_as_producer(producer) or effectively_at_most_unary(producer):
                continue
            if not (self.rules.verdict(producer) or ALLOW):
                continue  # an expensive producer already refused with its own reason
            in_elems = sum(op.shape.element_count() if op.shape.is_array else 0
                           for op in distinct(producer.operands))
            out_elems = sum(s.element_count() for s in producer.shape.leaves())
            if in_elems <= out_elems:
                continue
            on_all_paths = self._fusible_on_all_paths(producer, position, out, reach)
            users = distinct(producer.users)
            blockers = [u for u in users if not on_all_paths.get(id(u), False)]
            if not blockers:
                continue
            who = "; ".join(self._why_blocked(producer, u) for u in blockers)
            out[id(producer)] = refuse(
                "not-fusible-into-all-users",
                f"producer {producer.name} reads more than it writes ({in_elems} > {out_elems} elements) and "
                f"has {_users(len(users))} of which {len(blockers)} cannot fuse it ({who}); duplicating it "
                f"would add memory traffic")
        return out

    def _why_blocked(self, producer: HloInstruction, user: HloInstruction) -> str:
        """Why `user` cannot take `producer`, as a short clause naming `user`."""
        if user.opcode != "fusion" and not is_loop_fusible_as_consumer(user):
            return f"{user.name} is a {user.opcode}, which cannot root a fusion"
        idx = next((i for i, o in enumerate(user.operands) if o is producer), None)
        if idx is not None:
            d = self.rules.should_fuse(user, idx)
            if not d:
                return f"{user.name}: {d.reason} [{d.rule}]"
        return f"{user.name}: a path from {producer.name} to it cannot be fused"

    def expensive_duplication(self, comp: HloComputation) -> dict[int, Decision]:
        """For each expensive producer with several users: may it be duplicated into all of them?

        Allowed when every user can fuse it (so the original disappears instead of being
        materialized next to its copies) and the cost model agrees: at most
        `max_expensive_copies` copies, and fewer bytes moved than materializing it once.
        Otherwise refused with a reason naming the users that cannot fuse it.
        """
        self.rules.expensive_verdicts = {}
        out: dict[int, Decision] = {}
        for producer in comp.instructions:
            users = distinct(producer.users)
            if (len(users) < 2 or producer.is_root() or not is_expensive(producer, self.params)
                    or not is_loop_fusible_as_producer(producer) or is_always_duplicable(producer)):
                continue
            p, n = producer.name, len(users)
            # judge each user as if duplicating this producer were allowed
            self.rules.set_verdict(producer, ALLOW)
            blockers = [self._why_blocked(producer, u) for u in users
                        if u.opcode != "fusion" and not is_loop_fusible_as_consumer(u)
                        or not self.rules.should_fuse(u, operand_index(u, producer))]
            limit = self.params.max_expensive_copies
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
            self.rules.set_verdict(producer, d)
            out[id(producer)] = d
        return out

    # ---- the main loop ---------------------------------------------------------------------
    def _run_on(self, comp: HloComputation, log: FusionLog) -> bool:
        reach = Reachability(comp)
        self.rules.expensive_verdicts = {}
        self.rules.reused_operands = {}
        if self.may_duplicate:
            self.expensive_duplication(comp)  # kept by the rules (ProducerConsumerRules.verdict)
        refused = self.globally_unfusible(comp, reach) if self.may_duplicate else {}
        # keyed by id but checked by identity: a new fusion may reuse a removed instruction's id
        do_not_duplicate = {id(i): (i, refused[id(i)]) for i in comp.instructions if id(i) in refused}
        queue = comp.post_order()
        position = {id(inst): i for i, inst in enumerate(queue)}
        changed = False
        while queue:
            inst = queue.pop()
            if inst is None:
                continue
            position.pop(id(inst), None)
            if inst.opcode != "fusion" and not is_loop_fusible_as_consumer(inst):
                continue  # tuples, calls, library ops...: every operand would be refused
            indices = [i for i, op in enumerate(inst.operands)
                       if id(op) in position and inst.operands.index(op) == i]
            indices.sort(key=lambda i: -position[id(inst.operands[i])])
            for i in indices:
                producer = inst.operands[i]
                if producer.opcode in ("parameter", "get-tuple-element", "tuple"):
                    continue
                entry = do_not_duplicate.get(id(producer))
                decision = entry[1] if entry is not None and entry[0] is producer else ALLOW
                if decision:
                    decision = self.rules.should_fuse(inst, i)
                if not decision:
                    consumer, fusion = _reader_names(producer, inst, log.origin)
                    log.refused(self.name, producer.name, consumer, decision, fusion=fusion)
                    continue
                if self._duplicates_expensive(producer, inst):
                    fusion = self._fuse_into_every_user(producer, inst, queue, position, log)
                    if fusion is None:
                        continue
                else:
                    fusion = self._fuse(producer, inst, log)
                if not producer.users and producer.parent is None:
                    idx = position.pop(id(producer), None)
                    if idx is not None:
                        queue[idx] = None
                    do_not_duplicate.pop(id(producer), None)
                if fusion is not inst:
                    do_not_duplicate.pop(id(inst), None)
                position[id(fusion)] = len(queue)
                queue.append(fusion)
                changed = True
                break
        if changed:
            sort_computations(comp)
        return changed

    def _duplicates_expensive(self, producer: HloInstruction, consumer: HloInstruction) -> bool:
        return (self.may_duplicate and _would_duplicate(producer, consumer) and not is_always_duplicable(producer)
                and is_expensive(producer, self.params))

    def _fuse_into_every_user(self, producer: HloInstruction, consumer: HloInstruction,
                              queue: list, position: dict, log: FusionLog) -> HloInstruction | None:
        """Duplicate the expensive `producer` into all of its users at once (all or nothing).

        The pre-pass judged the users as they were; they may have grown since (a user inside a
        fusion that now broadcasts it re-reads its elements), so every user is asked again, and
        only if all of them still take it is it fused into each, so it is never materialized
        and recomputed as well. Returns `consumer`'s fusion, or None (refusal logged).
        """
        users = distinct(producer.users)
        blockers = [self._why_blocked(producer, u) for u in users
                    if not self.rules.should_fuse(u, operand_index(u, producer))]
        if blockers:
            d = refuse("expensive-duplicate",
                       f"producer {producer.name} is expensive and has {len(users)} users of which "
                       f"{len(blockers)} cannot fuse it: {'; '.join(blockers)}")
            self.rules.set_verdict(producer, d)
            readers, fusion_name = _reader_names(producer, consumer, log.origin)
            log.refused(self.name, producer.name, readers, d, fusion=fusion_name)
            return None
        result = consumer
        for user in [consumer] + [u for u in users if u is not consumer]:
            fusion = self._fuse(producer, user, log)
            if user is consumer:
                result = fusion
                continue
            # the user's place in the queue (or a new one, if it was visited) goes to its fusion
            idx = position.pop(id(user), None)
            if idx is None:
                idx = len(queue)
                queue.append(fusion)
            else:
                queue[idx] = fusion
            position[id(fusion)] = idx
        return result

    def _fuse(self, producer: HloInstruction, consumer: HloInstruction, log: FusionLog) -> HloInstruction:
        kind = self.rules.choose_kind(producer, consumer)
        duplicated = _would_duplicate(producer, consumer)
        saved = fusion_saves_bytes(producer, consumer, duplicated)
        producer_name, consumer_name = producer.name, consumer.name
        elements = sum(s.element_count() for s in producer.shape.leaves())
        expensive = is_expensive(producer, self.params)
        reused = self.rules.reused_after_fusing(consumer, producer)
        if consumer.opcode == "fusion":
            fusion = consumer
            if kind == "kInput" or fusion.attrs.get("kind") != "kInput":
                fusion.attrs["kind"] = kind
        else:
            fusion = create_fusion(consumer, kind)
            self.rules.note_replaced(consumer, fusion)
        known = {id(i) for i in fusion.fused_computation.instructions} if duplicated else set()
        fuse_producer(fusion, producer)
        self.rules.note_fused(fusion, reused)
        if duplicated:
            for inst in fusion.fused_computation.instructions:
                if id(inst) not in known and inst.name.startswith(producer_name + "."):
                    log.copied(inst.name, producer_name)
        log.fused(self.name, producer_name, consumer_name, fusion.name, duplicated=duplicated,
                  duplicated_elements=elements if duplicated else 0,
                  duplicated_expensive=duplicated and expensive, rule=f"saves {saved} bytes")
        return fusion


class NonDuplicatingFusion(InstructionFusion):
    """Producer-consumer fusion that never duplicates: the first of XLA GPU's two instruction
    fusion passes. Its refusals are provisional: the duplicating pass after it decides again."""

    name = "fusion-no-duplication"

    def __init__(self, target: str | TargetParams = "gpu") -> None:
        super().__init__(target, may_duplicate=False)
