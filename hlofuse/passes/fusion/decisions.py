"""Fusion decisions as values, and the log that keeps them.

A `Decision` is either allowed or refused with a sentence that names both instructions and the
rule, the way XLA's `FusionDecision` explains itself. Decisions combine with `and_then`, so a
chain of rules stops at the first refusal and keeps its reason. Every decision a fusion pass
takes (fused or refused) is written to a `FusionLog`, which is a field of the module the passes
ran on (`HloModule.fusion_log`, `module_log` creates it) and of the `Executable` built from it,
and which the report reads. Codegen's kernel planner adds its own fusion-like
decisions to the same log ("planned": a reduction kernel also writing an expression that a later
fusion reads, codegen/shared_expressions.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from ...hlo.ir import HloInstruction, HloModule


@dataclass(frozen=True)
class Decision:
    """Allowed, or refused because of `rule` with the human sentence `reason`."""

    allowed: bool
    rule: str = ""
    reason: str = ""

    @staticmethod
    def allow() -> "Decision":
        """The shared 'yes' decision."""
        return _ALLOW

    @staticmethod
    def refuse(rule: str, reason: str) -> "Decision":
        """A refusal: `rule` is a short stable key ("cycle", "budget" ...), `reason` the sentence."""
        return Decision(False, rule, reason)

    @staticmethod
    def refuse_later(rule: str, why: Callable[[], str]) -> "Decision":
        """A refusal whose sentence `why()` writes when it is first read. For the rules a fusion
        pass asks of every pair each time a consumer comes back grown: the log keeps one
        refusal per pair and rule, so nearly every sentence was written for nothing (haiku's
        ResNet-18 step: 9,400 of 10,500). Only for a decision read, if at all, before the
        graph changes (the sentence names what `why` finds then): the pair rules' answers are
        logged or turned into another reason at once, never kept."""
        return _LaterRefusal(rule, why)

    def __bool__(self) -> bool:
        return self.allowed

    def and_then(self, more: Callable[[], "Decision"]) -> "Decision":
        """This decision if refused, else the (lazily computed) next one."""
        return self if not self.allowed else more()

    def __str__(self) -> str:
        return "allowed" if self.allowed else f"refused [{self.rule}]: {self.reason}"


_ALLOW = Decision(True)


class _LaterRefusal(Decision):
    """`Decision.refuse_later`'s refusal: `reason` is written on first read, then kept."""

    def __init__(self, rule: str, why: Callable[[], str]) -> None:  # (not the dataclass's)
        object.__setattr__(self, "allowed", False)
        object.__setattr__(self, "rule", rule)
        object.__setattr__(self, "_why", why)

    @property  # type: ignore[override]
    def reason(self) -> str:
        """The sentence, written by `why()` the first time it is read."""
        text = self.__dict__.get("_text")
        if text is None:
            text = self._why()
            object.__setattr__(self, "_text", text)
        return text

    def __eq__(self, other: object) -> bool:  # equal to the plain refusal with its sentence
        if isinstance(other, Decision):
            return (self.allowed, self.rule, self.reason) == (other.allowed, other.rule, other.reason)
        return NotImplemented

    __hash__ = Decision.__hash__


def first_refusal(*checks: Callable[[], Decision]) -> Decision:
    """Run `checks` in order; the first refusal, or allow if none refuses."""
    for check in checks:
        d = check()
        if not d:
            return d
    return _ALLOW


@dataclass
class LogEntry:
    """One decision of a fusion pass about a producer/consumer (or sibling) pair."""

    pass_name: str
    action: str  # "fused" | "refused" | "planned" (a kernel planner's decision)
    producer: str
    consumer: str
    rule: str = ""
    reason: str = ""
    fusion: str = ""  # "fused": the fusion that resulted; "refused": the fusion holding the consumer
    duplicated: bool = False  # the producer was copied, its original kept for other users
    duplicated_elements: int = 0  # elements the copy recomputes
    duplicated_expensive: bool = False

    def to_dict(self) -> dict:
        """The entry as a JSON-ready dict."""
        return dict(self.__dict__)

    def to_text(self) -> str:
        """One line per entry, readable."""
        if self.action == "fused":
            dup = " (duplicated)" if self.duplicated else ""
            return f"[{self.pass_name}] fused {self.producer} into {self.consumer} -> {self.fusion}{dup}"
        if self.action == "planned":
            return f"[{self.pass_name}] {self.producer} -> {self.consumer}: {self.reason} [{self.rule}]"
        where = f" (in {self.fusion})" if self.fusion else ""
        return f"[{self.pass_name}] refused {self.producer} -> {self.consumer}{where}: {self.reason} [{self.rule}]"


@dataclass
class FusionLog:
    """All decisions of the fusion passes that ran on a module, in order."""

    entries: list[LogEntry] = field(default_factory=list)
    target: str = ""  # the target whose fusion passes wrote the log ("gpu" or "cpu")
    passes_run: set = field(default_factory=set)  # names of the fusion passes that ran
    _refused_pairs: set = field(default_factory=set, repr=False)
    # duplicated copy -> (its `original` then, the name of the instruction it duplicates)
    _copies: dict[HloInstruction, tuple[HloInstruction, str]] = field(default_factory=dict, repr=False)
    _planned_keys: set = field(default_factory=set, repr=False)

    def fused(self, pass_name: str, producer: str, consumer: str, fusion: str, **extra) -> None:
        """Record that `pass_name` fused `producer` into `consumer`, giving `fusion`."""
        self.entries.append(LogEntry(pass_name, "fused", producer, consumer, fusion=fusion, **extra))

    def refused(self, pass_name: str, producer: str, consumer: str, decision: Decision, fusion: str = "") -> None:
        """Record a refusal, once per pass and (producer, consumer, rule): a pass revisiting the
        pair (a growing fusion around the consumer, a duplicated copy of either, or the same
        pass run again) adds nothing new, as the passes name a copy by the instruction it
        duplicates (`source_name`). The report shows the last decision per pair."""
        key = (pass_name, producer, consumer, decision.rule)
        if key in self._refused_pairs:
            return
        self._refused_pairs.add(key)
        self.entries.append(LogEntry(pass_name, "refused", producer, consumer, decision.rule, decision.reason,
                                     fusion=fusion))

    def planned(self, pass_name: str, producer: str, consumer: str, rule: str, reason: str) -> None:
        """Record a decision of codegen's kernel planner `pass_name` linking the kernels of
        `producer` and `consumer` (`rule` a short key, `reason` the sentence naming both), once:
        compiling the same fused module again plans the same way and adds nothing."""
        key = (pass_name, producer, consumer, rule)
        if key in self._planned_keys:
            return
        self._planned_keys.add(key)
        self.entries.append(LogEntry(pass_name, "planned", producer, consumer, rule, reason))

    def copied(self, copy: HloInstruction, original: HloInstruction) -> None:
        """Record that fusion made `copy` as a duplicate of `original` (an instruction the
        computation keeps for its other users), so refusals name the original pair."""
        self._copies[copy] = (copy.original, self.source_name(original))

    def source_name(self, inst: HloInstruction) -> str:
        """The name of the instruction `inst` duplicates, or its own when it is no duplicate.

        Not `inst.original.name`: that is the instruction of the input module, and one callee
        instruction inlined at two call sites is the original of two distinct instructions,
        while a refusal names the instruction of the module the fusion passes saw. A copy that
        later took another instruction's name and provenance (deduplicated in a fused
        computation) is known by that name."""
        entry = self._copies.get(inst)
        return entry[1] if entry is not None and entry[0] is inst.original else inst.name

    def refusals(self) -> list[LogEntry]:
        """The entries of refused fusions."""
        return [e for e in self.entries if e.action == "refused"]

    def fusions(self) -> list[LogEntry]:
        """The entries of fusions done."""
        return [e for e in self.entries if e.action == "fused"]

    def planner_decisions(self) -> list[LogEntry]:
        """The entries of the kernel planner's decisions (see `planned`)."""
        return [e for e in self.entries if e.action == "planned"]

    def __iter__(self) -> Iterator[LogEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def to_text(self) -> str:
        """One line per entry, readable."""
        return "\n".join(e.to_text() for e in self.entries)


def module_log(module: HloModule, target: str | None = None) -> FusionLog:
    """`module.fusion_log`, created on first use; a pass gives its `target`."""
    log = module.fusion_log
    if log is None:
        log = module.fusion_log = FusionLog()
    if target:
        log.target = target
    return log
