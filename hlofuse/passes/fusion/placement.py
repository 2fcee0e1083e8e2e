"""Where things ended up after fusion: kernels of the fused module, and the fusion log replayed.

Two questions the report and `hlofuse explain` both ask:

* `Placement(fused)`: which kernel(s) of the fused module an instruction runs in. A top-level
  instruction is its own kernel (or none: parameters, constants, tuples, bitcasts); a fused
  instruction runs in its fusion, except a fused parameter, which reads its fusion's operand (so
  it runs wherever that operand runs); an instruction of a called computation (a reduction's
  combiner) runs in the kernels of the instructions calling it.
* `FusionHistory(log, fused)`: the log names instructions as they were when the decision was
  taken, and fusions that later passes merged away (`fusion.2`, merged into `fusion.1` by the
  fusion merger) are in no module at the end. The history replays the log in order and keeps,
  for every fusion it mentions, what it held at each decision and which fusions of the final
  module it ended up in. A name can be reused (a fusion merged away frees its name, a later
  fusion may take it), so each name stands for a sequence of fusions over the log.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from ...hlo.ir import HloComputation, HloInstruction, HloModule
from .cost_model import kernel_computations, launches_kernel
from .decisions import FusionLog, LogEntry


class Placement:
    """The kernel(s) each instruction of a fused module runs in."""

    def __init__(self, fused: HloModule) -> None:
        self.module = fused
        self.kernel_comps: set[HloComputation] = set(kernel_computations(fused))
        self.callers: dict[HloComputation, list[HloInstruction]] = {}
        for inst in fused.all_instructions():
            for comp in inst.called_computations():
                self.callers.setdefault(comp, []).append(inst)
        self._cache: dict[HloInstruction, tuple[HloInstruction, ...]] = {}

    def kernels(self, inst: HloInstruction) -> tuple[HloInstruction, ...]:
        """The kernel instructions (fusions or unfused top-level instructions) `inst` runs in,
        in module order; empty when it runs in none (an input buffer, a tuple)."""
        found = self._cache.get(inst)
        if found is None:
            self._cache[inst] = ()  # a called computation calling itself stops here
            found = self._cache[inst] = self._kernels(inst)
        return found

    def _kernels(self, inst: HloInstruction) -> tuple[HloInstruction, ...]:
        comp = inst.parent
        fusion = comp.fusion_instruction if comp is not None else None
        if fusion is not None:
            if inst.opcode == "parameter":  # the fusion's operand, computed elsewhere
                return self.kernels(fusion.operands[inst.parameter_number])
            return self.kernels(fusion)
        if comp in self.kernel_comps:
            return (inst,) if inst.opcode == "fusion" or launches_kernel(inst) else ()
        out: list[HloInstruction] = []
        for caller in self.callers.get(comp, []):
            out += [k for k in self.kernels(caller) if k not in out]
        return tuple(out)

    def fusions(self) -> list[HloInstruction]:
        """The fusion kernels of the module, in order."""
        return [i for c in kernel_computations(self.module) for i in c.instructions if i.opcode == "fusion"]


@dataclass(eq=False)
class LoggedFusion:
    """One fusion the log mentions, from the decision that made it on."""

    name: str
    made_by: int  # index of the log entry that made it (-1: it existed before the first entry)
    pass_name: str = ""
    members: set[str] = field(default_factory=set)  # instruction names it held (grows)
    into: list[tuple["LoggedFusion", int]] = field(default_factory=list)  # (fusion, entry) it merged into
    absorbed: list[tuple[str, int]] = field(default_factory=list)  # (name, entry) that joined it


@dataclass
class EntryView:
    """One log entry with its names resolved at the time it was written."""

    index: int
    entry: LogEntry
    producer: set[str]  # instruction names the producer stood for then (its members, if a fusion)
    consumer: set[str]  # likewise for the consumer(s)
    producer_fusion: LoggedFusion | None
    consumer_fusions: list[LoggedFusion]
    fusion: LoggedFusion | None  # the entry's `fusion` (result, or the one holding the consumer)


class FusionHistory:
    """The fusion log replayed against the fused module (see the module docstring).

    `final_of(name)` says where a plain instruction name ended up (a callback, since that comes
    from the fused module's provenance, not from the log)."""

    def __init__(self, log: FusionLog | Iterable[LogEntry], final_fusion_names: Iterable[str],
                 final_of: Callable[[str], list[str]]) -> None:
        self.final_names = set(final_fusion_names)
        self.final_of = final_of
        self.views: list[EntryView] = []
        self.fusions: list[LoggedFusion] = []
        self.current: dict[str, LoggedFusion] = {}
        for i, e in enumerate(log):
            if e.action != "planned":
                self._replay(i, e)

    # ---- replay -------------------------------------------------------------------------------
    def _node(self, name: str) -> LoggedFusion | None:
        return self.current.get(name)

    def _members(self, name: str) -> set[str]:
        node = self._node(name)
        return set(node.members) if node is not None else {name}

    def _new(self, name: str, index: int, pass_name: str) -> LoggedFusion:
        node = LoggedFusion(name, index, pass_name)
        self.fusions.append(node)
        self.current[name] = node
        return node

    def _replay(self, i: int, e: LogEntry) -> None:
        consumers = [c.strip() for c in e.consumer.split(",") if c.strip()]
        producer_node = self._node(e.producer)
        producer = self._members(e.producer)
        consumer = set().union(*(self._members(c) for c in consumers)) if consumers else set()
        consumer_nodes = [n for n in (self._node(c) for c in consumers) if n is not None]
        if e.action != "fused":
            held = self._node(e.fusion) if e.fusion else None
            if held is None and e.fusion:  # a fusion first met holding the consumer
                held = self._new(e.fusion, -1, "")
                held.members |= consumer
            self.views.append(EntryView(i, e, producer, consumer, producer_node, consumer_nodes, held))
            return
        cname = consumers[0] if consumers else ""
        result = self._node(e.fusion) if e.fusion in (e.producer, cname) else None
        if result is None:
            result = self._new(e.fusion, i, e.pass_name)
        for name, node, stays in ((e.producer, producer_node, e.duplicated), (cname, self._node(cname), False)):
            if not name or name == e.fusion:
                continue
            result.absorbed.append((name, i))
            if node is not None and node is not result:
                result.members |= node.members
                node.into.append((result, i))
                if not stays and self.current.get(name) is node:
                    del self.current[name]
            else:
                result.members.add(name)
        self.views.append(EntryView(i, e, producer, consumer, producer_node, consumer_nodes, result))

    # ---- answers ------------------------------------------------------------------------------
    def is_final(self, node: LoggedFusion) -> bool:
        """Whether `node` is a fusion of the fused module (still current under its name)."""
        return self.current.get(node.name) is node and node.name in self.final_names

    def final(self, node: LoggedFusion) -> list[str]:
        """The fusions of the fused module `node` ended up in (itself, if it is one)."""
        out: list[str] = []
        stack, seen = [node], set()  # LoggedFusion is eq=False: it hashes by identity
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if self.is_final(n):
                out.append(n.name)
            stack += [t for t, _ in reversed(n.into)]
        return sorted(set(out), key=out.index)

    def intermediate(self, name: str) -> LoggedFusion | None:
        """The last fusion named `name` in the log that is not in the fused module, if any."""
        for node in reversed(self.fusions):
            if node.name == name and not self.is_final(node):
                return node
        return None

    def final_kernels(self, names: set[str], node: LoggedFusion | None) -> list[str]:
        """Where what an entry named (`names`, or the fusion `node`) ended up."""
        if node is not None:
            return self.final(node)
        out: list[str] = []
        for n in sorted(names):
            out += [k for k in self.final_of(n) if k not in out]
        return out

    def where_text(self, node: LoggedFusion | None) -> str:
        """' (in F)' for the fusion an entry names; when F was later merged away, also the
        fusion(s) of the fused module it ended up in."""
        if node is None:
            return ""
        if self.is_final(node):
            return f" (in {node.name})"
        finals = self.final(node)
        since = f", since merged into {', '.join(finals)}" if finals else ", which is in no kernel at the end"
        return f" (in {node.name}{since})"

    def name_text(self, name: str, node: LoggedFusion | None) -> str:
        """`name`, with where it ended up when it was a fusion merged away later."""
        if node is None or self.is_final(node):
            return name
        finals = self.final(node)
        return f"{name} (merged into {', '.join(finals)} later)" if finals else name
