"""The graph a fused module is drawn as: nodes, fusion clusters and byte-weighted edges.

Every computation that launches kernels (the entry, control-flow bodies) is one `VizGraph`.
Its instructions are nodes, except `fusion` instructions, which become clusters holding the
instructions of their fused computation (parameters included: a fusion parameter is where the
kernel reads memory). An edge inside a cluster is a value kept in registers ("fused"); an edge
between kernels is a value written to memory by one kernel and read back by another
("memory", the traffic fusion exists to remove); the rest are reads of the module's
parameters and constants and the bookkeeping of tuples ("io"). A node's `origin` is the
instruction of the unfused module it came from, found through provenance
(`HloInstruction.origin`, hlo/ir.py: OriginIndex), not through its name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..hlo.origin import OriginIndex
from ..hlo.parse_attributes import encode_attribute
from ..hlo.printer import instruction_to_text
from ..passes.fusion.cost_model import is_bookkeeping, kernel_bytes, kernel_computations, launches_kernel
from ..passes.fusion.decisions import FusionLog, LogEntry


@dataclass
class VizNode:
    """One instruction drawn as a box."""

    id: str
    name: str
    opcode: str
    shape: str
    computation: str
    cluster: str | None  # name of the fusion it belongs to
    origin: str | None  # name of the instruction of the unfused module it came from
    bytes: int
    hlo: str
    attrs: dict[str, str]
    decisions: list[dict]
    is_root: bool = False


@dataclass
class VizCluster:
    """One fusion instruction drawn as a coloured box around its fused instructions."""

    id: str
    name: str
    kind: str
    computation: str  # the fused computation
    multi_output: bool
    members: list[str]  # node ids
    bytes_read: int
    bytes_written: int
    hlo: str
    decisions: list[dict]


@dataclass
class VizEdge:
    """A value flowing from `src` to `dst` (node ids), `bytes` wide."""

    src: str
    dst: str
    bytes: int
    kind: str  # "fused" | "memory" | "io"


@dataclass
class VizGraph:
    """One drawn computation."""

    name: str
    nodes: dict[str, VizNode] = field(default_factory=dict)
    clusters: dict[str, VizCluster] = field(default_factory=dict)
    edges: list[VizEdge] = field(default_factory=list)


def node_id(name: str) -> str:
    """A DOM/DOT-safe id for an instruction name (unique as names are unique in a module)."""
    return "n-" + re.sub(r"[^A-Za-z0-9_.-]", lambda m: f"_{ord(m.group()):x}_", name)


def cluster_id(name: str) -> str:
    """A DOM/DOT-safe id for a fusion cluster."""
    return "c-" + node_id(name)[2:]




def human_bytes(n: int) -> str:
    """`n` bytes as B, KiB, MiB or GiB with one decimal."""
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def cluster_label(c: VizCluster) -> str:
    """`fusion.1 · kLoop · multi-output · reads 9.0 KiB, writes 4.0 KiB`."""
    parts = [c.name, c.kind or "fusion"]
    if c.multi_output:
        parts.append("multi-output")
    parts.append(f"reads {human_bytes(c.bytes_read)}, writes {human_bytes(c.bytes_written)}")
    return " · ".join(parts)


def _entry_key(e: LogEntry) -> tuple:
    return (e.pass_name, e.action, e.producer, e.consumer, e.rule, e.reason, e.fusion)


def _names_of(e: LogEntry) -> set[str]:
    """The instruction names a log entry is about: producer, consumers, resulting fusion."""
    return {e.producer, *(c.strip() for c in e.consumer.split(","))} | ({e.fusion} if e.fusion else set())


def decision_index(log: FusionLog | None) -> dict[str, list[int]]:
    """Name -> the positions (ascending) of the log entries about it (`decisions_about`'s
    `index`: one pass over the log for a whole graph instead of one per node)."""
    index: dict[str, list[int]] = {}
    for k, e in enumerate(log or []):
        for name in _names_of(e):
            index.setdefault(name, []).append(k)
    return index


def decisions_about(log: FusionLog | None, names: set[str],
                    index: dict[str, list[int]] | None = None) -> list[dict]:
    """Distinct log entries whose producer, consumer or resulting fusion is in `names`, in
    order, each with how many times the pass took it (`count`). With `index`
    (`decision_index(log)`) only the entries about `names` are looked at."""
    out: dict[tuple, dict] = {}
    entries: Iterable[LogEntry] = log or []
    if index is not None and log is not None:
        entries = [log.entries[k] for k in sorted({k for n in names for k in index.get(n, ())})]
    for e in entries:
        if names & _names_of(e):
            key = _entry_key(e)
            if key in out:
                out[key]["count"] += 1
            else:
                d = e.to_dict()
                d["count"] = 1
                out[key] = d
    return list(out.values())


def _attrs_text(inst: HloInstruction) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in inst.attrs.items():
        try:
            out[key] = encode_attribute(key, value)
        except Exception:  # an attribute the encoder does not know: show it as Python sees it
            out[key] = str(value)
    if inst.opcode == "parameter":
        out["parameter_number"] = str(inst.parameter_number)
    return out


def _short_shape(inst: HloInstruction) -> str:
    return inst.shape.to_text(with_layout=False)


def _materialized(inst: HloInstruction) -> bool:
    """Whether the value of `inst` was written to memory by a kernel (not a module input)."""
    seen: set[HloInstruction] = set()
    stack = [inst]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if is_bookkeeping(i):  # an edge through it carries no new traffic
            stack.extend(i.operands)
        elif launches_kernel(i):
            return True
    return False


class _Builder:
    def __init__(self, before: HloModule, log: FusionLog | None) -> None:
        # `inst` of the fused module came from `self.origins.source(inst)` of `before`: itself,
        # a fused clone or a duplicated copy of it; None when a pass made it (a fusion, a fused
        # parameter, a folded constant ...)
        self.origins = OriginIndex(before.all_instructions())
        self.log = log
        self.index = decision_index(log)  # for every node's decisions (decisions_about)

    def node(self, inst: HloInstruction, graph: VizGraph, cluster: str | None) -> VizNode:
        source = self.origins.source(inst)
        origin = source.name if source is not None else None
        names = {inst.name} | ({origin} if origin else set())
        node = VizNode(
            id=node_id(inst.name), name=inst.name, opcode=inst.opcode, shape=_short_shape(inst),
            computation=inst.parent.name if inst.parent else "", cluster=cluster, origin=origin,
            bytes=inst.shape.byte_size(), hlo=instruction_to_text(inst), attrs=_attrs_text(inst),
            decisions=decisions_about(self.log, names, self.index) if inst.opcode != "parameter" or cluster is None else [],
            is_root=inst.is_root(),
        )
        graph.nodes[node.id] = node
        return node

    def fusion(self, inst: HloInstruction, graph: VizGraph) -> None:
        fc = inst.fused_computation
        ids = [self.node(m, graph, inst.name).id for m in fc.instructions]
        r, w = kernel_bytes(inst)
        graph.clusters[inst.name] = VizCluster(
            id=cluster_id(inst.name), name=inst.name, kind=str(inst.attrs.get("kind", "")), computation=fc.name,
            multi_output=fc.root.opcode == "tuple", members=ids, bytes_read=r, bytes_written=w,
            hlo=instruction_to_text(inst), decisions=decisions_about(self.log, {inst.name}, self.index))
        for m in fc.instructions:
            for op in m.operands:
                graph.edges.append(VizEdge(node_id(op.name), node_id(m.name), op.shape.byte_size(), "fused"))

    def graph(self, comp: HloComputation) -> VizGraph:
        g = VizGraph(comp.name)
        for inst in comp.instructions:
            if inst.opcode == "fusion":
                self.fusion(inst, g)
            else:
                self.node(inst, g, None)
        for inst in comp.instructions:
            for k, op in enumerate(inst.operands):
                src = op.fused_computation.root if op.opcode == "fusion" else op
                if inst.opcode == "fusion":
                    dst = inst.fused_computation.parameter(k)
                    reads = True
                else:
                    dst = inst
                    reads = launches_kernel(inst)
                kind = "memory" if reads and _materialized(op) else "io"
                g.edges.append(VizEdge(node_id(src.name), node_id(dst.name), op.shape.byte_size(), kind))
        return g


def build_graphs(before: HloModule, fused: HloModule, log: FusionLog | None = None) -> list[VizGraph]:
    """The drawn graphs of `fused` (entry first), with decisions from `log` (default: the
    module's `fusion_log`) and origins looked up in the unfused `before` (which `fused`
    descends from, through `HloModule.clone`)."""
    log = log if log is not None else fused.fusion_log
    builder = _Builder(before, log)
    comps = kernel_computations(fused)
    comps.sort(key=lambda c: 0 if c is fused.entry else 1)
    return [builder.graph(c) for c in comps]
