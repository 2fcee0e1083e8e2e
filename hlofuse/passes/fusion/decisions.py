"""Fusion decisions as values, and the log that keeps them.

A `Decision` is either allowed or refused with a sentence that names both instructions and the
rule, the way XLA's `FusionDecision` explains itself. Decisions combine with `and_then`, so a
chain of rules stops at the first refusal and keeps its reason. Every decision a fusion pass
takes (fused or refused) is written to a `FusionLog`, which the pipeline keeps on the module as
`module.fusion_log` and the report reads. Codegen's kernel planner adds its own fusion-like
decisions to the same log ("planned": a reduction kernel also writing an expression that a later
fusion reads, codegen/shared_expressions.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator


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

    def __bool__(self) -> bool:
        return self.allowed

    def and_then(self, more: Callable[[], "Decision"]) -> "Decision":
        """This decision if refused, else the (lazily computed) next one."""
        return self if not self.allowed else more()

    def __str__(self) -> str:
        return "allowed" if self.allowed else f"refused [{self.rule}]: {self.reason}"


_ALLOW = Decision(True)


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
    _copies: dict = field(default_factory=dict, repr=False)  # copy name -> original name
    _planned_keys: set = field(default_factory=set, repr=False)

    def fused(self, pass_name: str, producer: str, consumer: str, fusion: str, **extra) -> None:
        """Record that `pass_name` fused `producer` into `consumer`, giving `fusion`."""
        self.entries.append(LogEntry(pass_name, "fused", producer, consumer, fusion=fusion, **extra))

    def refused(self, pass_name: str, producer: str, consumer: str, decision: Decision, fusion: str = "") -> None:
        """Record a refusal, once per pass and (producer, consumer, rule): a pass revisiting the
        pair (a growing fusion around the consumer, a duplicated copy of either, or the same
        pass run again) adds nothing new. The report shows the last decision per pair."""
        key = (pass_name, self.origin(producer), ", ".join(self.origin(c) for c in consumer.split(", ")),
               decision.rule)
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

    def copied(self, copy: str, original: str) -> None:
        """Record that `copy` is a duplicate of `original` (refusals name the original pair)."""
        self._copies[copy] = self.origin(original)

    def origin(self, name: str) -> str:
        """The original instruction `name` is a copy of (itself if it is none)."""
        return self._copies.get(name, name)

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


def module_log(module, target: str | None = None) -> FusionLog:
    """The FusionLog kept on `module` (created on first use); a pass gives its `target`."""
    log = getattr(module, "fusion_log", None)
    if log is None:
        log = FusionLog()
        module.fusion_log = log
    if target:
        log.target = target
    return log
