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

from ...hlo.ir import HloInstruction, HloModule, OriginIndex
from .cost_model import (
    ModuleCost, TargetParams, distinct, kernel_bytes, kernel_computations, launches_kernel, module_cost,
    target_params,
)
from .decisions import FusionLog, LogEntry
from .fusibility import fusion_outputs, is_expensive

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
class FusionReport:
    """Fusions with their savings, module totals before and after, and refused candidates."""

    module: str
    before: ModuleCost
    after: ModuleCost
    fusions: list[FusionSummary] = field(default_factory=list)
    refused: list[LogEntry] = field(default_factory=list)
    planned: list[LogEntry] = field(default_factory=list)  # the kernel planner's decisions (codegen)

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
        }

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
        if self.planned:  # only once codegen planned the module (Executable.report(), not --emit report)
            lines.append("")
            lines.append(f"Kernel planner decisions ({len(self.planned)}):")
            for e in self.planned:
                lines.append(f"  {e.producer} -> {e.consumer} [{e.pass_name}/{e.rule}]: {e.reason}")
        lines.append("")
        lines.append(f"Refused candidates ({len(self.refused)}):")
        for e in self.refused:
            where = f" (in {e.fusion})" if e.fusion else ""
            lines.append(f"  {e.producer} -> {e.consumer}{where} [{e.pass_name}/{e.rule}]: {e.reason}")
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
    # A consumer that became a fusion is known by the fusion's name afterwards.
    alias = {e.consumer: e.fusion for e in log.fusions()}
    fused_pairs = {(e.producer, e.fusion) for e in log.fusions()}
    # One line per refused pair: its last decision (the GPU runs instruction fusion twice, first
    # without duplication; the second pass's reason is the one that stands).
    latest: dict[tuple[str, str], LogEntry] = {}
    final_pass_ran = "fusion" in log.passes_run
    for e in log.refusals():
        if (e.producer, e.fusion or alias.get(e.consumer, e.consumer)) in fused_pairs:
            continue
        if e.pass_name == "fusion-no-duplication" and final_pass_ran:
            continue  # provisional: the duplicating pass decided again
        latest.pop((e.producer, e.consumer), None)
        latest[(e.producer, e.consumer)] = e
    refused = list(latest.values())
    dup, dup_expensive = duplicated_work(after, originals, target_params(log.target or "gpu"))
    cost = replace(module_cost(after), duplicated_elements=dup, duplicated_expensive_elements=dup_expensive)
    return FusionReport(after.name, module_cost(before), cost, summaries, refused, log.planner_decisions())


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
