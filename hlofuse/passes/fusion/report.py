"""The fusion report: what was fused, what it saves, and what was refused and why.

`build_report(before, after, log)` compares the module before and after the fusion passes;
`after` descends from `before` (the passes ran on `before.clone()`, or on `before` itself with
`before.clone()` kept), and each fused instruction is matched with the instruction of `before` it
came from through its origin (hlo/ir.py: OriginIndex), never by name. `FusionReport.to_text()`
is what `hlofuse compile --emit report` prints and `.to_dict()` is what `Executable.report()`
returns (JSON-able).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...hlo.ir import HloInstruction, HloModule
from ...hlo.origin import OriginIndex
from .cost_model import (
    ModuleCost, TargetParams, distinct, kernel_bytes, kernel_computations, launches_kernel, module_cost,
    target_params,
)
from .decisions import FusionLog, LogEntry
from .fusibility import fusion_outputs, is_expensive
from .placement import EntryView, FusionHistory, LoggedFusion, Placement

@dataclass
class FusionSummary:
    """One fusion kernel of the fused module."""

    name: str
    kind: str
    computation: str
    members: list[str]
    outputs: list[str]
    bytes_after: int  # read + written by the fusion kernel
    bytes_before: int  # read + written by its members' kernels before fusion
    kernels_before: int  # how many kernels its members were
    bytes_read_before: int = 0
    bytes_written_before: int = 0
    bytes_read_after: int = 0
    bytes_written_after: int = 0

    def to_dict(self) -> dict:
        """The report as a JSON-ready dict."""
        return dict(self.__dict__)


@dataclass
class RefusalPlace:
    """How the report names a refused entry's producer and the fusion holding its consumer."""

    producer: str  # the producer's name (a fusion merged away later: with where it went)
    where: str  # " (in F)", " (in F, since merged into G)", or ""
    final_fusions: list[str]  # the fusions of the fused module now holding the consumer


@dataclass
class FusionReport:
    """Fusions with their savings, module totals before and after, and refused candidates."""

    module: str
    before: ModuleCost
    after: ModuleCost
    fusions: list[FusionSummary] = field(default_factory=list)
    refused: list[LogEntry] = field(default_factory=list)
    planned: list[LogEntry] = field(default_factory=list)  # the kernel planner's decisions (codegen)
    # per refused entry: its names as the fused module knows them (a fusion merged away later
    # is named with the fusions it ended up in)
    refused_places: list["RefusalPlace"] = field(default_factory=list)
    decisions: list[LogEntry] = field(default_factory=list)  # every entry of the log, in order

    def _places(self) -> list["RefusalPlace"]:
        if len(self.refused_places) == len(self.refused):
            return self.refused_places
        return [RefusalPlace(e.producer, f" (in {e.fusion})" if e.fusion else "", [e.fusion] if e.fusion else [])
                for e in self.refused]

    def to_dict(self) -> dict:
        """The report as a JSON-ready dict."""
        return {
            "module": self.module,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "fusions": [f.to_dict() for f in self.fusions],
            "refused": [{"producer": e.producer, "consumer": e.consumer, "fusion": e.fusion,
                         "pass": e.pass_name, "rule": e.rule, "reason": e.reason} for e in self.refused],
            "planned": [{"producer": e.producer, "consumer": e.consumer, "pass": e.pass_name, "rule": e.rule,
                         "reason": e.reason} for e in self.planned],
            # priority fusion's fusions with the performance model's estimate (empty otherwise)
            "estimated": [{"producer": e.producer, "consumer": e.consumer, "fusion": e.fusion,
                           "duplicated": e.duplicated, "estimate": e.rule} for e in self._estimated()],
        }

    def _estimated(self) -> list[LogEntry]:
        return [e for e in self.decisions if e.action == "fused" and e.pass_name == "priority-fusion"]

    def to_text(self) -> str:
        """The report as readable text."""
        b, a = self.before, self.after
        lines = [
            f"Fusion report for module {self.module}",
            f"  kernels:     {b.kernels} -> {a.kernels}",
            f"  bytes moved: {b.bytes_moved} -> {a.bytes_moved} "
            f"(read {b.bytes_read} -> {a.bytes_read}, written {b.bytes_written} -> {a.bytes_written})",
            f"  duplicated work: {a.duplicated_elements} elements recomputed "
            f"({a.duplicated_expensive_elements} by expensive ops)",
            "",
            f"Fusions ({len(self.fusions)}):",
        ]
        for f in self.fusions:
            lines.append(f"  {f.name} kind={f.kind} calls={f.computation}: {len(f.members)} instructions, "
                         f"{f.kernels_before} kernels -> 1, bytes {f.bytes_before} -> {f.bytes_after}")
            lines.append(f"    members: {', '.join(f.members)}")
            lines.append(f"    outputs: {', '.join(f.outputs)}")
            lines.append(f"    bytes read+written: {f.bytes_read_before}+{f.bytes_written_before} -> "
                         f"{f.bytes_read_after}+{f.bytes_written_after}")
        estimated = self._estimated()
        if estimated:  # priority fusion's decisions, each with the performance model's estimate
            lines.append("")
            lines.append(f"Priority fusion decisions ({len(estimated)}):")
            for e in estimated:
                dup = " (duplicated)" if e.duplicated else ""
                lines.append(f"  {e.producer} -> {e.consumer} => {e.fusion}{dup}: {e.rule}")
        if self.planned:  # only once codegen planned the module (Executable.report(), not --emit report)
            lines.append("")
            lines.append(f"Kernel planner decisions ({len(self.planned)}):")
            for e in self.planned:
                lines.append(f"  {e.producer} -> {e.consumer} [{e.pass_name}/{e.rule}]: {e.reason}")
        lines.append("")
        lines.append(f"Refused candidates ({len(self.refused)}):")
        for e, p in zip(self.refused, self._places()):
            lines.append(f"  {p.producer} -> {e.consumer}{p.where} [{e.pass_name}/{e.rule}]: {e.reason}")
        return "\n".join(lines) + "\n"


def unfused_originals(before: HloModule) -> OriginIndex:
    """Where a fused instruction `m` came from among `before`'s kernel computations:
    `unfused_originals(before).source(m)` (None: a pass made it)."""
    return OriginIndex(inst for comp in kernel_computations(before) for inst in comp.instructions)


def build_report(before: HloModule, after: HloModule, log: FusionLog | None = None) -> FusionReport:
    """Compare `before` (unfused) with `after` (fused) using the decisions in `log` (default:
    `after.fusion_log`)."""
    log = log if log is not None else after.fusion_log or FusionLog()
    originals = unfused_originals(before)
    summaries: list[FusionSummary] = []
    for comp in kernel_computations(after):
        for inst in comp.instructions:
            if inst.opcode != "fusion":
                continue
            fc = inst.fused_computation
            # the root tuple of a multi-output fusion only bundles the outputs (listed apart)
            members = [m for m in fc.instructions
                       if m.opcode != "parameter" and not (m is fc.root and m.opcode == "tuple")]
            kernels = read_before = written_before = 0
            for orig in distinct(originals.source(m) for m in members):
                if orig is not None and launches_kernel(orig):
                    kernels += 1
                    r, w = kernel_bytes(orig)
                    read_before += r
                    written_before += w
            r, w = kernel_bytes(inst)
            summaries.append(FusionSummary(inst.name, inst.attrs.get("kind", ""), fc.name, [m.name for m in members],
                                           [o.name for o in fusion_outputs(inst)], r + w,
                                           read_before + written_before, kernels, read_before, written_before,
                                           r, w))
    history = fusion_history(after, log, originals)
    # One line per refused pair: its last decision (the GPU runs instruction fusion twice, first
    # without duplication; the second pass's reason is the one that stands). A refusal that a
    # later pass overrode (the pair ended up in one kernel after all) is no refused candidate.
    latest: dict[tuple[str, str], EntryView] = {}
    final_pass_ran = "fusion" in log.passes_run
    for view in history.views:
        e = view.entry
        if e.action != "refused" or (e.pass_name == "fusion-no-duplication" and final_pass_ran):
            continue  # provisional: the duplicating pass decided again
        if overridden(history, view):
            continue
        latest.pop((e.producer, e.consumer), None)
        latest[(e.producer, e.consumer)] = view
    refused = [v.entry for v in latest.values()]
    places = [RefusalPlace(history.name_text(v.entry.producer, v.producer_fusion), history.where_text(v.fusion),
                           history.final(v.fusion) if v.fusion is not None else []) for v in latest.values()]
    dup, dup_expensive = duplicated_work(after, originals, target_params(log.target or "gpu"))
    cost = replace(module_cost(after), duplicated_elements=dup, duplicated_expensive_elements=dup_expensive)
    return FusionReport(after.name, module_cost(before), cost, summaries, refused, log.planner_decisions(),
                        places, decisions=list(log.entries))


def fusion_history(after: HloModule, log: FusionLog, originals: OriginIndex) -> FusionHistory:
    """The log of the passes that made `after` replayed against it; an instruction name of the
    log ends up in the kernels of `after` that hold the instructions it is the source of
    (`originals`: OriginIndex of the module the passes saw, or of one it was cloned from)."""
    place = Placement(after)
    by_name: dict[str, list[str]] = {}
    for inst in after.all_instructions():
        if inst.opcode == "parameter" and inst.parent.fusion_instruction is not None:
            continue
        src = originals.source(inst)
        held = by_name.setdefault(src.name if src is not None else inst.name, [])
        held += [k.name for k in place.kernels(inst) if k.name not in held]
    return FusionHistory(log, [f.name for f in place.fusions()], lambda name: by_name.get(name, []))


def overridden(history: FusionHistory, view: EntryView) -> bool:
    """Whether the refusal `view` was overridden: its producer and (one of) its consumer(s)
    share a kernel of the fused module."""
    e = view.entry
    producer = set(history.final_kernels({e.producer}, view.producer_fusion))
    if view.fusion is not None:  # the consumer is the copy in that fusion
        consumers = [set(history.final(view.fusion))]
    else:
        consumers = [set(history.final_kernels({c.strip()}, history_node(view, c.strip())))
                     for c in e.consumer.split(",") if c.strip()]
    return any(producer & c for c in consumers)


def history_node(view: EntryView, name: str) -> LoggedFusion | None:
    """The fusion `name` stood for as a consumer of `view`, if it was one."""
    return next((n for n in view.consumer_fusions if n.name == name), None)


def duplicated_work(after: HloModule, originals: OriginIndex, params: TargetParams) -> tuple[int, int]:
    """(elements recomputed, of which by expensive ops) in `after`: every original instruction
    computed by k > 1 kernels costs (k - 1) times its elements. Counted on the fused module, so
    copies that multi-output fusion merged back into one kernel (and deduplicated) cost nothing."""
    copies: dict[HloInstruction, int] = {}
    for comp in kernel_computations(after):
        for inst in comp.instructions:
            for m in (inst.fused_computation.instructions if inst.opcode == "fusion" else [inst]):
                orig = originals.source(m)
                if orig is not None and launches_kernel(orig) and m.opcode == orig.opcode:
                    copies[orig] = copies.get(orig, 0) + 1
    dup = dup_expensive = 0
    for orig, count in copies.items():
        if count > 1:
            n = (count - 1) * sum(s.element_count() for s in orig.shape.leaves())
            dup += n
            dup_expensive += n if is_expensive(orig, params) else 0
    return dup, dup_expensive
