"""The names `hlofuse explain` accepts, and what each one stands for after fusion.

Every name the tool or the fusion report prints is accepted back:

* an instruction of the module the fusion passes saw (the optimized, unfused module): itself,
  wherever its copies ended up (a duplicated instruction runs in several kernels);
* a fused copy (`add.9.1`, the copy of `add.9` in `fusion`): that copy, in its fusion;
* a fusion of the fused module (`fusion.3`): that kernel;
* a fused computation's parameter: the fusion operand it reads;
* an instruction the fusion passes made (a get-tuple-element of a multi-output fusion);
* a fusion of the log that a later pass merged away (`fusion.2`): where it ended up;
* an instruction of the user's module that the passes before fusion removed.

Anything else is an error listing the closest names.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from .hlo.errors import HloError
from .hlo.ir import HloComputation, HloInstruction, HloModule
from .hlo.origin import OriginIndex
from .passes.fusion.cost_model import kernel_computations, launches_kernel
from .passes.fusion.decisions import FusionLog
from .passes.fusion.placement import FusionHistory, LoggedFusion, Placement
from .passes.fusion.report import fusion_history


@dataclass(eq=False)
class Subject:
    """What a name stands for (see the module docstring for the kinds)."""

    name: str
    kind: str  # instruction, copy, kernel, parameter, made, intermediate, removed, unused, embedded
    kernels: tuple[HloInstruction, ...]  # the kernels of the fused module it runs in
    sources: list[HloInstruction] = field(default_factory=list)  # its instructions before fusion
    lines: list[str] = field(default_factory=list)  # where it ended up, for the reader
    node: LoggedFusion | None = None  # kind intermediate: the fusion of the log


def kernel_text(k: HloInstruction) -> str:
    """`fusion.3 (kLoop)`, or `dot.1 (an unfused dot)`."""
    return f"{k.name} ({k.attrs.get('kind')})" if k.opcode == "fusion" else f"{k.name} (an unfused {k.opcode})"


def kernels_text(kernels: tuple[HloInstruction, ...], why_none: str) -> str:
    """Where something runs, in a few words."""
    if not kernels:
        return f"no kernel ({why_none})"
    if len(kernels) == 1:
        return kernels[0].name
    return f"{len(kernels)} kernels ({', '.join(k.name for k in kernels)})"


class Names:
    """Resolves names against the pre-fusion module `pre`, the fused module `fused` (fused from a
    clone of `pre`), the fusion log and the user's module `original`."""

    def __init__(self, original: HloModule, pre: HloModule, fused: HloModule, log: FusionLog) -> None:
        self.pre, self.fused = pre, fused
        self.place = Placement(fused)
        self.origins = OriginIndex(pre.all_instructions())
        self.history: FusionHistory = fusion_history(fused, log, self.origins)
        self.original = {i.name: i for i in original.all_instructions()}
        self.before = {i.name: i for i in pre.all_instructions()}
        self.after = {i.name: i for i in fused.all_instructions()}
        self.pre_kernel_comps: set[HloComputation] = set(kernel_computations(pre))
        self.copies: dict[HloInstruction, list[HloInstruction]] = {}
        for m in fused.all_instructions():
            if m.opcode == "parameter" and m.parent.fusion_instruction is not None:
                continue
            src = self.origins.source(m)
            if src is not None:
                self.copies.setdefault(src, []).append(m)
        self.pre_callers: dict[HloComputation, list[HloInstruction]] = {}
        for inst in pre.all_instructions():
            for comp in inst.called_computations():
                self.pre_callers.setdefault(comp, []).append(inst)
        self._cache: dict[str, Subject] = {}

    # ---- facts about instructions of the pre-fusion module -------------------------------------
    def kernels_of(self, pre_inst: HloInstruction) -> tuple[HloInstruction, ...]:
        """The kernels of the fused module computing (a copy of) `pre_inst`."""
        out: list[HloInstruction] = []
        for m in self.copies.get(pre_inst, []):
            out += [k for k in self.place.kernels(m) if k not in out]
        return tuple(out)

    def top_level(self, pre_inst: HloInstruction) -> list[HloInstruction]:
        """`pre_inst` itself, or for an instruction of a called computation (a combiner) the
        instructions of kernel computations that call it."""
        seen: list[HloInstruction] = []
        stack = [pre_inst]
        while stack:
            inst = stack.pop()
            if inst.parent in self.pre_kernel_comps or inst.parent is None:
                if inst not in seen:
                    seen.append(inst)
                continue
            stack += self.pre_callers.get(inst.parent, [])
        return seen

    # ---- names ---------------------------------------------------------------------------------
    def pool(self) -> set[str]:
        """Every name that resolves."""
        return (set(self.original) | set(self.before) | set(self.after)
                | {n.name for n in self.history.fusions} | {c.name for c in self.fused.computations})

    def check(self, names: list[str], module_name: str) -> None:
        """Raise HloError naming the unknown names of `names` with their closest matches."""
        pool = self.pool()
        unknown = [n for n in names if n not in pool]
        if not unknown:
            return
        parts = []
        for n in unknown:
            close = difflib.get_close_matches(n, sorted(pool), n=5, cutoff=0.5)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            parts.append(f"'{n}'{hint}")
        raise HloError(f"module {module_name} has no instruction named {'; no '.join(parts)}")

    def resolve(self, name: str) -> Subject:
        """What `name` stands for (`check` it first)."""
        found = self._cache.get(name)
        if found is None:
            found = self._cache[name] = self._resolve(name)
        return found

    def _resolve(self, name: str) -> Subject:
        pre = self.before.get(name)
        if pre is not None:
            return self._instruction(name, pre)
        m = self.after.get(name)
        if m is not None:
            return self._fused(name, m)
        node = self.history.intermediate(name)
        if node is not None:
            return self._intermediate(name, node)
        comp = next((c for c in self.fused.computations if c.name == name), None)
        if comp is not None:
            return self._computation(name, comp)
        inst = self.original[name]
        return Subject(name, "removed", (), [], [
            f"{name} ({_sig(inst)}) was removed before fusion: the simplifier, CSE or DCE removed or replaced "
            "it before fusion, so no fusion pass saw it"])

    def _instruction(self, name: str, pre: HloInstruction) -> Subject:
        head = f"{name} ({_sig(pre)})"
        kernels = self.kernels_of(pre)
        if pre.parent not in self.pre_kernel_comps:
            callers = self.top_level(pre)
            by = f" called by {', '.join(c.name for c in self.pre_callers.get(pre.parent, []))}"
            return Subject(name, "embedded", kernels, callers, [
                f"{head} is in computation {pre.parent.name}{by}: it is part of its caller's work (e.g. a "
                f"reduction's combiner), not a kernel of its own; it runs in {kernels_text(kernels, 'unused')}"])
        copies = self.copies.get(pre, [])
        if not copies:
            return Subject(name, "unused", (), [pre], [
                f"{head} was removed after fusion: DCE removed it (its value is unused)"])
        places = [(k, m) for m in copies for k in self.place.kernels(m)] or [(m, m) for m in copies]
        if len(places) == 1:
            lines = [f"{head} ended up in {self.describe(*places[0], name)}"]
        else:
            lines = [f"{head} ended up in {len(places)} kernels (duplicated):"]
            lines += [f"  {self.describe(k, m, name)}" for k, m in places]
        return Subject(name, "instruction", kernels, [pre], lines)

    def _fused(self, name: str, m: HloInstruction) -> Subject:
        kernels = self.place.kernels(m)
        fusion = m.parent.fusion_instruction
        if m.opcode == "fusion" and fusion is None:
            members = [x for x in m.fused_computation.instructions if x.opcode != "parameter"]
            sources = [s for s in dict.fromkeys(self.origins.source(x) for x in members) if s is not None]
            return Subject(name, "kernel", kernels, self.top_level_all(sources), [
                f"{name} is a fusion kernel (kind={m.attrs.get('kind')}, calls={m.fused_computation.name}) "
                f"of {len(members)} instructions: {', '.join(x.name for x in members)}"])
        if m.opcode == "parameter" and fusion is not None:
            operand = fusion.operands[m.parameter_number]
            sub = self.resolve(operand.name)
            return Subject(name, "parameter", sub.kernels, sub.sources, [
                f"{name} is parameter {m.parameter_number} of {fusion.name}'s fused computation "
                f"{m.parent.name}: it reads {operand.name}, computed outside the fusion"] + sub.lines)
        src = self.origins.source(m)
        if src is not None:
            return Subject(name, "copy", kernels, self.top_level(src), [
                f"{name} ({_sig(m)}) is a copy of {src.name} made by fusion; it ended up in "
                f"{self.describe(kernels[0] if kernels else m, m, src.name)}"])
        return Subject(name, "made", kernels, [], [
            f"{name} ({_sig(m)}) was made by the fusion passes (it is no copy of an instruction before "
            f"fusion); it runs in {kernels_text(kernels, 'a buffer or bookkeeping')}"])

    def _computation(self, name: str, comp: HloComputation) -> Subject:
        if comp.fusion_instruction is not None:
            sub = self.resolve(comp.fusion_instruction.name)
            return Subject(name, "kernel", sub.kernels, sub.sources,
                           [f"{name} is the computation that fusion {comp.fusion_instruction.name} calls"] + sub.lines)
        callers = self.place.callers.get(comp, [])
        if not callers:
            return Subject(name, "computation", (), [], [f"{name} is a computation of the module, called by no "
                                                         "instruction (the entry computation runs every kernel)"])
        kernels: list[HloInstruction] = []
        for c in callers:
            kernels += [k for k in self.place.kernels(c) if k not in kernels]
        sources = self.top_level_all([s for s in (self.origins.source(c) for c in callers) if s is not None])
        return Subject(name, "computation", tuple(kernels), sources, [
            f"{name} is a computation called by {', '.join(c.name for c in callers)}; it runs in "
            f"{kernels_text(tuple(kernels), 'its callers run in none')}"])

    def _intermediate(self, name: str, node: LoggedFusion) -> Subject:
        finals = self.history.final(node)
        kernels = tuple(self.after[f] for f in finals)
        members = sorted(node.members)
        sources = self.top_level_all([self.before[n] for n in members if n in self.before])
        made = f"made by [{node.pass_name}]" if node.pass_name else "named by the log"
        merged = "; ".join(f"[{self.history.views[i].entry.pass_name}] merged it into {t.name}" for t, i in node.into)
        where = (f"so it ended up in {', '.join(kernel_text(k) for k in kernels)}" if kernels
                 else "and it ended up in no kernel")
        return Subject(name, "intermediate", kernels, sources, [
            f"{name} was a fusion during compilation, {made} (holding {', '.join(members)}); "
            f"{merged or 'it was replaced'}, {where}"], node)

    def top_level_all(self, insts: list[HloInstruction]) -> list[HloInstruction]:
        """`top_level` of each, without repeats."""
        out: list[HloInstruction] = []
        for i in insts:
            out += [t for t in self.top_level(i) if t not in out]
        return out

    def describe(self, kernel: HloInstruction, member: HloInstruction, asked: str) -> str:
        """Where one copy `member` of `asked` runs: its kernel (`kernel`; `member` itself when
        it runs in none)."""
        if kernel.opcode != "fusion":
            if kernel.opcode == "parameter":
                return f"{kernel.name}: an input buffer of {kernel.parent.name} (no kernel)"
            if not launches_kernel(kernel):
                return f"{kernel.name}: a '{kernel.opcode}' (a buffer or bookkeeping, no kernel)"
            return f"{kernel.name}: not fused, a kernel of its own"
        copy = f" as {member.name}" if member.name != asked else ""
        return f"fusion {kernel.name} (kind={kernel.attrs.get('kind')}, calls={kernel.fused_computation.name}){copy}"

    def no_kernel_why(self, s: Subject) -> str:
        """Why `s` runs in no kernel, in a few words."""
        if s.kind == "removed":
            return "removed before fusion"
        if s.kind == "unused":
            return "removed after fusion, unused"
        inst = s.sources[0] if s.sources else self.after.get(s.name)
        if inst is not None and inst.opcode == "parameter":
            return "an input buffer"
        if inst is not None and inst.opcode == "constant":
            return "a constant buffer"
        return "a buffer or bookkeeping"


def _sig(inst: HloInstruction) -> str:
    return f"{inst.opcode} {inst.shape.to_text(with_layout=False)}"
