"""What a fusion pass knows while it runs, besides the graph: the fusion context.

A fusion pass is a value (its fields are its options) and keeps nothing between runs. Each
run builds a `FusionContext` per computation and passes it explicitly to the rules it asks
(`producer_consumer.should_fuse(consumer, index, ctx)`): the target's parameters, the log the
decisions go to, the reachability of the computation, the global pre-pass's verdicts on
duplicating expensive producers, and the caches that keep instruction fusion near-linear on long
chains. Maps are keyed by the instructions themselves (they hash by identity), so a new
instruction never inherits a removed one's entry.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...hlo.ir import HloComputation, HloInstruction
from .cost_model import TargetParams
from .decisions import Decision, FusionLog
from .cpu_multi_output import is_plain_loop
from .fusibility import fused_operands_reused, reuses_operand_elements
from .fusion_utils import Reachability
from .indexing_evaluation import reads_new_index
from .sibling_rules import hero


@dataclass
class FusionContext:
    """One fusion pass's run over one computation: its options and what it learns as it goes."""

    params: TargetParams
    log: FusionLog
    pass_name: str
    may_duplicate: bool = True
    comp: HloComputation | None = None
    # which instructions reach which (`reachability()`, built on first use; a pass that
    # fuses calls `fused_into`, which updates it, one that changes the graph otherwise calls
    # `graph_changed`, which drops it)
    _reach: Reachability | None = None
    # expensive producer -> whether it may be duplicated (decided by instruction fusion's
    # pre-pass, `expensive_duplication`; absent: refused with the generic reason)
    expensive_verdicts: dict[HloInstruction, Decision] = field(default_factory=dict)
    # fusion -> the operands whose elements it reads several times: computed once per fusion,
    # then kept up to date by `note_fused` as producers are fused in, so a fusion growing along
    # a long chain is not walked again for every producer (which made fusion quadratic)
    reused_operands: dict[HloInstruction, set[HloInstruction]] = field(default_factory=dict)
    # instruction -> whether it is a CPU plain loop (`plain_loop()`); the CPU's sibling rule asks
    # it of the same first sibling for every candidate pair: emptied by `graph_changed`, the
    # fused node's entry dropped by `fused_into`
    plain_loops: dict[HloInstruction, bool] = field(default_factory=dict)
    # fusion -> its hero (`hero()`): sibling fusion asks it of the same growing fusion for every
    # candidate pair, and it walks every output; dropped as `plain_loops` is
    heroes: dict[HloInstruction, HloInstruction] = field(default_factory=dict)
    # fusion -> (its computation's revision, the indexing analysis of indexing_evaluation.emitted_copies):
    # checked against the revision on each use, so nothing needs to drop it
    indexing: dict[HloInstruction, tuple] = field(default_factory=dict)
    # fusion -> (its computation's revision, whether an instruction of it reads an array operand
    # at another index: indexing_evaluation.reads_new_index): scanned on first use, then kept up
    # to date from the instructions instruction fusion adds (`note_grown`), so a fusion growing
    # along a chain is not walked again for the duplication check at every step
    new_index: dict[HloInstruction, tuple] = field(default_factory=dict)

    @classmethod
    def for_computation(cls, comp: HloComputation, params: TargetParams, log: FusionLog, pass_name: str,
                        may_duplicate: bool = True) -> "FusionContext":
        """A fresh context for running `pass_name` on `comp`."""
        return cls(params, log, pass_name, may_duplicate, comp)

    def reachability(self) -> Reachability:
        """Which instructions of the computation reach which, as the graph stands."""
        if self._reach is None:
            if self.comp is None:
                raise ValueError("a fusion context without a computation has no reachability")
            self._reach = Reachability(self.comp)
        return self._reach

    def graph_changed(self) -> None:
        """The pass changed the computation: reachability (and whether an instruction is a
        plain loop) is computed again when next asked."""
        self._reach = None
        self.plain_loops.clear()
        self.heroes.clear()

    def fused_into(self, node: HloInstruction) -> None:
        """The pass fused other instructions into `node` (grown, merged with a sibling or a
        producer, perhaps a new fusion read through new get-tuple-elements), and removed
        them if nothing else reads them: the reachability is updated downstream of `node`
        (`Reachability.update_downstream`) instead of rebuilt, and only `node`'s plain-loop
        answer and hero are dropped (an instruction's answer depends on its own body alone; the
        instructions merged away were not changed)."""
        if self._reach is not None:
            self._reach.update_downstream(node)
        self.plain_loops.pop(node, None)
        self.heroes.pop(node, None)

    def hero(self, inst: HloInstruction) -> HloInstruction:
        """`sibling_rules.hero(inst)`, kept per fusion until it changes. Only a fusion's is
        kept: its walk stops at its parameters, while a lone instruction's walks its operands
        in the computation, which other fusions change."""
        if inst.opcode != "fusion":
            return hero(inst)
        known = self.heroes.get(inst)
        if known is None:
            known = self.heroes[inst] = hero(inst)
        return known

    def plain_loop(self, inst: HloInstruction) -> bool:
        """`cpu_multi_output.is_plain_loop(inst)`, computed once per instruction until the
        graph changes (it walks a fusion's members)."""
        known = self.plain_loops.get(inst)
        if known is None:
            known = self.plain_loops[inst] = is_plain_loop(inst)
        return known

    def reads_new_index(self, fusion: HloInstruction) -> bool:
        """Whether some instruction of `fusion`'s computation reads an array operand at another
        index (indexing_evaluation.reads_new_index): if not, it emits every array once per index."""
        comp = fusion.fused_computation
        known = self.new_index.get(fusion)
        if known is not None and known[0] == comp.revision:
            return known[1]
        flag = any(reads_new_index(i) for i in comp.instructions)
        self.new_index[fusion] = (comp.revision, flag)
        return flag

    def note_grown(self, fusion: HloInstruction, revision: int, added: list[HloInstruction]) -> None:
        """Instruction fusion added `added` to `fusion` (whose computation was at `revision`
        before): its `reads_new_index` answer follows from them, if it was known."""
        known = self.new_index.get(fusion)
        if known is not None and known[0] == revision:
            flag = known[1] or any(reads_new_index(i) for i in added)
            self.new_index[fusion] = (fusion.fused_computation.revision, flag)

    # ---- naming -----------------------------------------------------------------------------
    def source_name(self, inst: HloInstruction) -> str:
        """The name a decision gives `inst`: the instruction it duplicates, else its own."""
        return self.log.source_name(inst)

    # ---- the pre-pass's verdicts ------------------------------------------------------------
    def verdict(self, producer: HloInstruction) -> Decision | None:
        """The pre-pass's decision on duplicating the expensive `producer`, if it took one."""
        return self.expensive_verdicts.get(producer)

    # ---- operands a consumer re-reads -------------------------------------------------------
    def reused_by(self, consumer: HloInstruction) -> set[HloInstruction]:
        """The operands of `consumer` whose elements it reads several times."""
        if consumer.opcode != "fusion":
            return _first_reads_reused(consumer)
        reused = self.reused_operands.get(consumer)
        if reused is None:
            reused = self.reused_operands[consumer] = set(fused_operands_reused(consumer))
        return reused

    def reused_after_fusing(self, consumer: HloInstruction, producer: HloInstruction) -> set[HloInstruction]:
        """The operands whose elements the fusion of `producer` into `consumer` will re-read
        (asked before fusing: the fused producer is retired with its operands). XLA keeps such
        facts too, as they are lost in the fused graph.

        The fused copy of `producer` is read as its fused parameter was, so its operands are
        re-read if that parameter was, or if `producer` itself re-reads them."""
        before = self.reused_by(consumer)
        reused = set(before)
        if producer in before:
            reused.update(producer.operands)
        else:
            reused |= _first_reads_reused(producer)
        return reused

    def note_fused(self, fusion: HloInstruction, reused: set[HloInstruction]) -> None:
        """Record `reused_after_fusing`'s answer for the grown `fusion` (its operands only)."""
        self.reused_operands[fusion] = reused & set(fusion.operands)

    def note_replaced(self, old: HloInstruction, new: HloInstruction) -> None:
        """`new` (a fusion made around `old`) took `old`'s place as an operand of its users."""
        for user in new.users:
            reused = self.reused_operands.get(user)
            if reused is not None and old in reused:
                reused.discard(old)
                reused.add(new)


def _first_reads_reused(inst: HloInstruction) -> set[HloInstruction]:
    """The operands of `inst` whose elements it reads several times, each judged at its first
    position among the operands (`reuses_operand_elements` of that index)."""
    seen: set[HloInstruction] = set()
    out: set[HloInstruction] = set()
    for i, op in enumerate(inst.operands):
        if op in seen:
            continue
        seen.add(op)
        if reuses_operand_elements(inst, i):
            out.add(op)
    return out
