"""`hlofuse explain`: why an instruction is (or is not) in the same kernel as another.

The module is optimized for the target as `hlofuse compile` does, in two steps: the passes before
fusion, then the fusion passes on a clone of that module, so every instruction of the fused module
traces back (`HloInstruction.origin`) to the instruction of the pre-fusion module it came from,
whatever its name. The answer comes from where each instruction ended up in the fused module and from the fusion passes' decision log (every
fuse/refuse with its rule and its reason), plus the structure of the original graph: whether
one instruction feeds the other directly, through a path of other instructions (a kernel that
held both ends but not the middle would be a cycle), through a common operand (siblings), or
not at all. Each refusal rule comes with the change to the module that would allow the fusion.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

import networkx as nx

from .hlo.errors import HloError
from .hlo.ir import HloInstruction, HloModule, OriginIndex
from .passes.fusion.cost_model import kernel_computations, launches_kernel
from .passes.fusion.decisions import FusionLog, LogEntry
from .passes.fusion.fusibility import is_loop_fusible_as_consumer, is_loop_fusible_as_producer

# What would let a refused fusion happen, per refusal rule ({p}: producer, {c}: consumer).
HINTS = {
    "producer-not-fusible": "{p} cannot be fused into a consumer: only elementwise and data-movement producers "
                            "can (a reduction only roots an input fusion; dot, convolution, sort, custom calls "
                            "never fuse). Computing its value with such ops would let it fuse.",
    "consumer-not-fusible": "{c} cannot root a fusion; a fusible consumer (elementwise or reduce) would.",
    "not-fusible-into-all-users": "{p} feeds a user that cannot fuse it, so fusing it elsewhere would recompute it "
                                  "and add traffic. Giving {p} only fusible users (or one user) allows the fusion.",
    "no-duplication": "this pass never duplicates a producer with several users; a later pass (with duplication "
                      "or multi-output fusion) decides again. A single user of {p} avoids the duplication.",
    "expensive-duplicate": "{p} is expensive, so it is duplicated into its users only when every one of them can "
                           "fuse it (and only into a few): make every user of {p} fusible (an output, library "
                           "call or re-reading consumer keeps it in memory), or give it fewer users.",
    "expensive-reused": "{c} reads each element of {p} several times, so fusing would recompute the expensive {p} "
                        "per read. Materialising {p} once (as now) is cheaper; a cheaper {p} would fuse.",
    "heavy-computation": "fusing would recompute a heavy computation per output element of {c}; reduce the reuse "
                         "(e.g. broadcast after, not before, the expensive part).",
    "budget": "the fused kernel would exceed the target's operand/output or reduction budget; fewer distinct "
              "inputs (or splitting the work) keeps it within budget.",
    "cycle": "a path leaves the fusion and comes back into it; fuse the instructions on that path too, or remove "
             "the dependence through them.",
    "root": "{p} is the computation's root (its value must be materialised as the output).",
    "constant": "large constants stay buffers and scalar constants only join existing fusions; nothing to change.",
    "reduce-epilogue": "on the GPU only converts/bitcasts fuse after a reduction (its epilogue); {c} is not one. "
                       "A single user of the reduction that is a convert/bitcast would fuse.",
    "transpose-into-reduce": "a physically transposing {p} feeding a reduction makes the reduction uncoalesced; "
                             "change the layout so the transpose is a bitcast.",
    "producer-is-fusion": "GPU instruction fusion does not fuse fusions into consumers; the fusion merger and "
                          "multi-output fusion may still merge them.",
    "producer-multi-output": "{p} is a multi-output fusion; its outputs are read by their users from memory.",
    "concatenate": "the CPU keeps wide or multiply-used concatenates unfused; fewer operands or a single user "
                   "would let it fuse.",
    "too-many-reductions": "the CPU limits reductions per fusion; split the reductions over several computations.",
    "different-loop-shapes": "the two would iterate over different shapes; make their output shapes (or reduction "
                             "input shapes) agree.",
    "incompatible-reductions": "the reductions reduce different dimensions or shapes; align them to fuse.",
    "sibling": "{p} cannot take part in sibling (multi-output) fusion.",
    "dynamic-update-slice": "in-place dynamic-update-slice roots cannot share a multi-output fusion.",
    "consumer-not-mof-root": "{c} cannot root a multi-output fusion.",
    "transposing": "a physically transposing producer is not fused into multi-output fusions; a bitcast "
                   "transpose (layout change) would be.",
    "unprofitable": "the multi-output fusion would move more bytes than it saves.",
    "user-not-fusion": "the fusion merger only merges into users that are all loop or input fusions; make every "
                       "user of {p} fusible.",
    "more-bytes": "merging would make the users read more bytes than the merge saves.",
    "not-launch-bound": "horizontal fusion only groups small kernels whose cost is the launch; {p} is big enough.",
    "layout": "horizontal fusion needs row-major layouts.",
    "shared-parameter": "horizontally fused kernels may not share a parameter; give them distinct inputs.",
}


@dataclass
class Place:
    """Where (a copy of) an original instruction ended up."""

    kernel: HloInstruction  # a fusion, or the instruction itself when it is unfused
    member: HloInstruction  # the instruction in the fused module
    origin: str = ""  # the name asked about

    @property
    def fused(self) -> bool:
        """Whether the instruction ran inside a fusion kernel."""
        return self.kernel.opcode == "fusion"

    def describe(self) -> str:
        """One line saying where the instruction ended up."""
        if not self.fused:
            k = self.kernel
            if k.opcode == "parameter":
                return f"{k.name}: an input buffer of {k.parent.name} (no kernel)"
            if not launches_kernel(k):
                return f"{k.name}: a '{k.opcode}' (a buffer or bookkeeping, no kernel)"
            return f"{k.name}: not fused, a kernel of its own"
        k = self.kernel
        copy = f" as {self.member.name}" if self.member.name != self.origin else ""
        return f"fusion {k.name} (kind={k.attrs.get('kind')}, calls={k.fused_computation.name}){copy}"


def _entry_text(e: LogEntry, count: int) -> str:
    times = f" (x{count})" if count > 1 else ""
    return e.to_text() + times


class _Explainer:
    def __init__(self, module: HloModule, target: str) -> None:
        from .compiler import fuse, optimize

        self.module = module
        self.target = target
        # The fusion passes see the module after the simplifier, CSE and DCE: paths, users and
        # the names in the log are those of that module. Fusing a clone of it is what
        # `optimize(module, target)` does in one go.
        self.pre, _ = optimize(module, target, fusion=False)
        self.fused, _ = fuse(self.pre, target)
        self.log: FusionLog = self.fused.fusion_log or FusionLog()
        self.original = {i.name: i for i in module.all_instructions()}
        self.before = {i.name: i for i in self.pre.all_instructions()}
        self.after = {i.name: i for i in self.fused.all_instructions()}
        self._places: dict[str, list[Place]] | None = None

    # ---- names -----------------------------------------------------------------------------
    def check(self, names: list[str]) -> None:
        unknown = [n for n in names if n not in self.original and n not in self.after]
        if not unknown:
            return
        pool = sorted(set(self.original) | set(self.after))
        parts = []
        for n in unknown:
            close = difflib.get_close_matches(n, pool, n=5, cutoff=0.5)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            parts.append(f"'{n}'{hint}")
        raise HloError(f"module {self.module.name} has no instruction named {'; no '.join(parts)}")

    # ---- placement -------------------------------------------------------------------------
    def places(self, name: str) -> list[Place]:
        """Every kernel holding `name` (or a copy of it) in the fused module."""
        if self._places is None:
            self._places = {}
            known = set(self.before)
            origins = OriginIndex(self.pre.all_instructions())
            for comp in kernel_computations(self.fused):
                for inst in comp.instructions:
                    if inst.opcode != "fusion":
                        self._places.setdefault(inst.name, []).append(Place(inst, inst, inst.name))
                        continue
                    if inst.name not in known:  # asking about the fusion itself
                        self._places.setdefault(inst.name, []).append(Place(inst, inst, inst.name))
                    for m in inst.fused_computation.instructions:
                        source = origins.source(m) if m.opcode != "parameter" else None
                        if source is not None:
                            self._places.setdefault(source.name, []).append(Place(inst, m, source.name))
        return self._places.get(name, [])

    def where(self, name: str) -> list[str]:
        inst = self.before.get(name) or self.after.get(name) or self.original[name]
        head = f"{name} ({inst.opcode} {inst.shape.to_text(with_layout=False)})"
        places = self.places(name)
        if places:
            if len(places) == 1:
                return [f"{head} ended up in {places[0].describe()}"]
            return [f"{head} ended up in {len(places)} kernels (duplicated):"] + [f"  {p.describe()}" for p in places]
        return [f"{head} {self.missing(name)}"]

    def missing(self, name: str) -> str:
        inst = self.before.get(name)
        if inst is None:
            return "is not in the module any more: the simplifier, CSE or DCE removed or replaced it before fusion"
        comp = inst.parent
        if not any(c is comp for c in kernel_computations(self.pre)):
            callers = [i for i in self.pre.all_instructions() if comp in i.called_computations()]
            by = f" called by {', '.join(c.name for c in callers)}" if callers else ""
            return (f"is in computation {comp.name}{by}: it is part of its caller's work "
                    f"(e.g. a reduction's combiner), not a kernel of its own")
        return "is not in the fused module: DCE removed it after fusion (its value is unused)"

    def kernels(self, name: str) -> set[str]:
        return {p.kernel.name for p in self.places(name)}

    def shared_fusions(self, a: str, b: str) -> list[str]:
        """Fusions holding (copies of) both `a` and `b`."""
        return sorted(k for k in self.kernels(a) & self.kernels(b) if self.after[k].opcode == "fusion")

    # ---- decisions -------------------------------------------------------------------------
    def aliases(self, name: str) -> set[str]:
        """`name` and every fusion it became part of (in log order: fusions merging on)."""
        names = {name}
        for e in self.log:
            if e.action == "fused" and (e.producer in names or e.consumer in names) and e.fusion:
                names.add(e.fusion)
        return names

    def decisions(self, producers: set[str], consumers: set[str] | None = None) -> list[tuple[LogEntry, int]]:
        """Distinct entries with a producer in `producers` (and a consumer in `consumers`, or
        with `consumers` None: entries naming any of `producers` on either side)."""
        seen: dict[tuple, list] = {}
        for e in self.log:
            cons = {c.strip() for c in e.consumer.split(",")}
            if consumers is None:
                hit = e.producer in producers or bool(cons & producers)
            else:
                hit = e.producer in producers and bool(cons & consumers)
            if hit:
                key = (e.pass_name, e.action, e.producer, e.consumer, e.rule, e.reason, e.fusion)
                seen.setdefault(key, [e, 0])[1] += 1
        return [(e, n) for e, n in seen.values()]

    def hint(self, e: LogEntry) -> str | None:
        rule = e.rule
        producer = self.before.get(e.producer)
        if rule == "not-fusible-into-all-users" and producer is not None and not is_loop_fusible_as_producer(producer):
            rule = "producer-not-fusible"  # the users cannot fuse it because nothing can
        text = HINTS.get(rule)
        return text.format(p=e.producer, c=e.consumer) if text else None

    # ---- the answers -----------------------------------------------------------------------
    def one(self, name: str) -> str:
        lines = [f"explain {name} (target {self.target})", ""] + self.where(name)
        direct = self.decisions({name})
        lines += ["", f"Decisions about {name} ({len(direct)}):"]
        lines += [f"  {_entry_text(e, n)}" for e, n in direct] or ["  none: no fusion pass considered it"]
        fusions = self.aliases(name) - {name}
        later = [(e, n) for e, n in self.decisions(fusions) if (e, n) not in direct and e.producer != name]
        if later:
            lines += ["", f"Decisions about the fusions it joined ({', '.join(sorted(fusions))}):"]
            lines += [f"  {_entry_text(e, n)}" for e, n in later]
        hints = {h for e, _ in direct if e.action == "refused" for h in [self.hint(e)] if h}
        if hints:
            lines += ["", "What would allow the refused fusions:"] + [f"  - {h}" for h in sorted(hints)]
        return "\n".join(lines) + "\n"

    def pair(self, a: str, b: str) -> str:
        lines = [f"explain {a} {b} (target {self.target})", ""] + self.where(a) + self.where(b) + [""]
        shared = self.shared_fusions(a, b)
        if a == b:
            return "\n".join(lines + ["They are the same instruction."]) + "\n"
        if shared:
            lines.append(f"Same kernel: {a} and {b} are both in {', '.join(shared)}.")
            lines += ["", "How they got there:"]
            involved = self.decisions(self.aliases(a) | self.aliases(b))
            lines += [f"  {_entry_text(e, n)}" for e, n in involved if e.action == "fused"]
            return "\n".join(lines) + "\n"
        lines.append(f"Different kernels: {a} is in {self._kernel_list(a)}, {b} in {self._kernel_list(b)}.")
        lines.append("")
        lines += self.relation(a, b)
        return "\n".join(lines) + "\n"

    def _kernel_list(self, name: str) -> str:
        ks = sorted(self.kernels(name))
        return ", ".join(ks) if ks else "no kernel"

    def relation(self, a: str, b: str) -> list[str]:
        ia, ib = self.before.get(a), self.before.get(b)
        if ia is None or ib is None:
            gone = [n for n in (a, b) if n not in self.before and n in self.original]
            if gone:
                return [f"{', '.join(gone)} did not reach the fusion passes (removed before fusion)."]
            return ["(one of them is a fusion of the optimized module; explain its members instead)"]
        if ia.parent is not ib.parent:
            return [f"{a} is in computation {ia.parent.name} and {b} in {ib.parent.name}: fusion only "
                    "combines instructions of one computation."]
        g = ia.parent.to_graph()
        for p, c in ((a, b), (b, a)):
            if nx.has_path(g, p, c):
                return self.producer_consumer(p, c, nx.shortest_path(g, p, c))
        common = sorted({o.name for o in ia.operands} & {o.name for o in ib.operands})
        if common:
            return self.siblings(a, b, common)
        return self.unrelated(a, b)

    def producer_consumer(self, p: str, c: str, path: list[str]) -> list[str]:
        prod = self.before[p]
        users = prod.users
        lines = []
        if len(path) == 2:
            lines.append(f"{p} is an operand of {c}.")
        else:
            lines.append(f"{p} reaches {c} through {' -> '.join(path)}.")
        size = prod.shape.byte_size()
        lines.append(f"Numbers: {p} is {prod.shape.to_text(with_layout=False)} = {size} bytes, written to memory "
                     f"and read back ({2 * size} bytes of traffic a fusion would save); it has {len(users)} "
                     f"user(s): {', '.join(u.name for u in users)}.")
        hints: list[str] = []
        for u, v in zip(path, path[1:]):
            if self.shared_fusions(u, v):
                continue
            found = self.decisions(self.aliases(u), self.aliases(v))
            lines.append("")
            lines.append(f"Edge {u} -> {v} crosses kernels ({self._kernel_list(u)} -> {self._kernel_list(v)}):")
            if found:
                lines += [f"  {_entry_text(e, n)}" for e, n in found]
                hints += [h for e, _ in found if e.action == "refused" for h in [self.hint(e)] if h]
            else:
                lines.append("  " + self.unconsidered(u, v))
        if len(path) > 2:
            middle = ", ".join(path[1:-1])
            lines += ["", f"Reachability: a kernel holding {p} and {c} but not {middle} would have to send "
                          f"{p}'s value out to {path[1]} and take {path[-2]}'s result back in: a cycle. They "
                          "share a kernel only if the instructions on the path fuse with them."]
        if hints:
            lines += ["", "What would allow it:"] + [f"  - {h}" for h in dict.fromkeys(hints)]
        return lines

    def unconsidered(self, u: str, v: str) -> str:
        iu, iv = self.before[u], self.before[v]
        why = []
        if not is_loop_fusible_as_producer(iu):
            why.append(f"{u} ('{iu.opcode}') cannot be fused into a consumer")
        if not is_loop_fusible_as_consumer(iv):
            why.append(f"{v} ('{iv.opcode}') cannot root a loop or input fusion")
        if not why:
            return "no fusion pass recorded a decision for this pair (it was visited as part of another fusion)"
        return "no fusion pass considered the pair: " + "; ".join(why) + "."

    def siblings(self, a: str, b: str, common: list[str]) -> list[str]:
        lines = [f"{a} and {b} are siblings: both read {', '.join(common)} and neither depends on the other."]
        if self.target == "cpu":
            lines.append("XLA's CPU pipeline has no multi-output (sibling) fusion, so siblings never share a "
                         "kernel there; on --target gpu they may.")
            return lines
        found = self.decisions(self.aliases(a), self.aliases(b)) + self.decisions(self.aliases(b), self.aliases(a))
        lines += [f"  {_entry_text(e, n)}" for e, n in found] or ["  no sibling fusion decision was recorded"]
        hints = [h for e, _ in found if e.action == "refused" for h in [self.hint(e)] if h]
        if hints:
            lines += ["", "What would allow it:"] + [f"  - {h}" for h in dict.fromkeys(hints)]
        return lines

    def unrelated(self, a: str, b: str) -> list[str]:
        lines = [f"{a} and {b} have no data dependence and no common operand."]
        if self.target == "cpu":
            lines.append("Only horizontal fusion (GPU) puts unrelated instructions in one kernel; the CPU has none.")
            return lines
        found = self.decisions(self.aliases(a) | self.aliases(b))
        horiz = [(e, n) for e, n in found if e.pass_name.startswith("horizontal")]
        lines.append("Only horizontal fusion could put them in one kernel:" if not horiz else "Horizontal fusion:")
        lines += [f"  {_entry_text(e, n)}" for e, n in horiz] or ["  it made no decision about them"]
        return lines


def explain(module: HloModule, instruction_names: list[str], target: str = "cpu") -> str:
    """Why the named instruction(s) of `module` are (or are not) in the same kernel after
    `hlofuse compile --target target`: one name gives where it ended up and every decision about
    it; two names compare them. Unknown names raise HloError with close matches."""
    names = list(instruction_names)
    if not 1 <= len(names) <= 2:
        raise HloError(f"explain takes one or two instruction names, not {len(names)}")
    ex = _Explainer(module, target)
    ex.check(names)
    return ex.one(names[0]) if len(names) == 1 else ex.pair(names[0], names[1])
