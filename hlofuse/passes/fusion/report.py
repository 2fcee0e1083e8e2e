"""The fusion report: what was fused, what it saves, and what was refused and why.

`build_report(before, after, log)` compares the module before and after the fusion passes;
`FusionReport.to_text()` is what `hlofuse compile --emit report` prints and `.to_dict()` is
what `Executable.report()` returns (JSON-able).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...hlo.ir import HloInstruction, HloModule
from .cost_model import ModuleCost, kernel_bytes, kernel_computations, launches_kernel, module_cost
from .decisions import FusionLog, LogEntry
from .fusibility import fusion_outputs

_SUFFIX = re.compile(r"^(.*)\.\d+$")


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

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class FusionReport:
    """Fusions with their savings, module totals before and after, and refused candidates."""

    module: str
    before: ModuleCost
    after: ModuleCost
    fusions: list[FusionSummary] = field(default_factory=list)
    refused: list[LogEntry] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "module": self.module,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "fusions": [f.to_dict() for f in self.fusions],
            "refused": [{"producer": e.producer, "consumer": e.consumer, "pass": e.pass_name,
                         "rule": e.rule, "reason": e.reason} for e in self.refused],
        }

    def to_text(self) -> str:
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
        lines.append("")
        lines.append(f"Refused candidates ({len(self.refused)}):")
        for e in self.refused:
            lines.append(f"  {e.producer} -> {e.consumer} [{e.pass_name}/{e.rule}]: {e.reason}")
        return "\n".join(lines) + "\n"


def _original(name: str, before: dict[str, HloInstruction]) -> HloInstruction | None:
    """The instruction of the unfused module a fused member came from (copies carry `.N`)."""
    while True:
        if name in before:
            return before[name]
        m = _SUFFIX.match(name)
        if not m:
            return None
        name = m.group(1)


def build_report(before: HloModule, after: HloModule, log: FusionLog | None = None) -> FusionReport:
    """Compare `before` (unfused) with `after` (fused) using the decisions in `log`."""
    log = log if log is not None else getattr(after, "fusion_log", None) or FusionLog()
    originals: dict[str, HloInstruction] = {}
    for comp in kernel_computations(before):
        for inst in comp.instructions:
            originals[inst.name] = inst
    summaries: list[FusionSummary] = []
    for comp in kernel_computations(after):
        for inst in comp.instructions:
            if inst.opcode != "fusion":
                continue
            fc = inst.fused_computation
            members = [m.name for m in fc.instructions if m.opcode != "parameter"]
            kernels = bytes_before = 0
            for name in members:
                orig = _original(name, originals)
                if orig is not None and launches_kernel(orig):
                    kernels += 1
                    r, w = kernel_bytes(orig)
                    bytes_before += r + w
            r, w = kernel_bytes(inst)
            summaries.append(FusionSummary(inst.name, inst.attrs.get("kind", ""), fc.name, members,
                                           [o.name for o in fusion_outputs(inst)], r + w, bytes_before, kernels))
    # A consumer that became a fusion is known by the fusion's name afterwards.
    alias = {e.consumer: e.fusion for e in log.fusions()}
    fused_pairs = {(e.producer, e.fusion) for e in log.fusions()}
    refused: list[LogEntry] = []
    seen: set[tuple[str, str, str]] = set()
    for e in log.refusals():
        key = (e.producer, e.consumer, e.rule)
        if key in seen or (e.producer, alias.get(e.consumer, e.consumer)) in fused_pairs:
            continue
        seen.add(key)
        refused.append(e)
    return FusionReport(after.name, module_cost(before), module_cost(after, log), summaries, refused)
