"""`hlofuse explain`: why an instruction is (or is not) in the same kernel as another.

The module is optimized for the target as `hlofuse compile` does, in two steps: the passes before
fusion, then the fusion passes on a clone of that module, so every instruction of the fused module
traces back (`HloInstruction.origin`) to the instruction of the pre-fusion module it came from,
whatever its name. Any name the tool or the fusion report prints is accepted (explain_names.py).

The answer leads with one sentence: whether the two run in one kernel, and if not, the decision
that kept them apart. Then where each ended up, and only the decisions on the path between them
in the graph the fusion passes saw (the producer -> consumer chain connecting them; for siblings
the path through their common operand): the fusion log replayed against the fused module
(passes/fusion/placement.py) says which decision was about which edge, whatever the fusions
were called at the time. Each refusal rule comes with the change to the module that would allow
the fusion (explain_hints.py).
"""
from __future__ import annotations

from collections import deque

import networkx as nx

from .explain_hints import HINTS
from .explain_names import Names, Subject, kernel_text, kernels_text
from .hlo.errors import HloError
from .hlo.ir import HloComputation, HloInstruction, HloModule
from .passes.fusion.decisions import FusionLog, LogEntry
from .passes.fusion.fusibility import is_loop_fusible_as_consumer, is_loop_fusible_as_producer
from .passes.fusion.placement import EntryView

__all__ = ["HINTS", "Explainer", "explain"]


class Explainer:
    """Answers `explain` questions about one module and target (the compile is done once)."""

    def __init__(self, module: HloModule, target: str, algorithm: str | None = None) -> None:
        from .compiler import fuse, optimize

        self.module = module
        self.target = target
        # The fusion passes see the module after the simplifier, CSE and DCE: paths, users and
        # the names in the log are those of that module. Fusing a clone of it is what
        # `optimize(module, target)` does in one go.
        self.pre, _ = optimize(module, target, fusion=False)
        self.fused, _ = fuse(self.pre, target, algorithm=algorithm)
        self.log: FusionLog = self.fused.fusion_log or FusionLog()
        self.names = Names(module, self.pre, self.fused, self.log)
        self.history = self.names.history
        self._graphs: dict[HloComputation, nx.DiGraph] = {}

    def explain(self, names: list[str]) -> str:
        """The answer for one or two names (HloError for an unknown name)."""
        if not 1 <= len(names) <= 2:
            raise HloError(f"explain takes one or two instruction names, not {len(names)}")
        self.names.check(names, self.module.name)
        return self.one(names[0]) if len(names) == 1 else self.pair(names[0], names[1])

    # ---- decisions about edges ----------------------------------------------------------------
    def graph(self, comp: HloComputation) -> nx.DiGraph:
        """Operand -> user edges of `comp` (of the pre-fusion module), by name."""
        g = self._graphs.get(comp)
        if g is None:
            g = self._graphs[comp] = comp.to_graph()
        return g

    def edge_views(self, u: str, v: str) -> list[EntryView]:
        """Log entries deciding about the edge u -> v: u was (in) the producer and v (in) the
        consumer when the entry was written, and the edge ran between the two (not inside either:
        a decision about two fusions that both hold u and v already is not about that edge)."""
        return [w for w in self.history.views if _about(w, u, v)]

    def entry_text(self, view: EntryView) -> str:
        """The entry as the log prints it, with a fusion merged away later named with where it went."""
        e = view.entry
        if e.action == "fused":
            dup = " (duplicated)" if e.duplicated else ""
            # priority fusion's entries carry the performance model's estimate
            why = f": {e.rule}" if e.pass_name == "priority-fusion" and e.rule else ""
            return (f"[{e.pass_name}] fused {self.history.name_text(e.producer, view.producer_fusion)} into "
                    f"{e.consumer} -> {self.history.name_text(e.fusion, view.fusion)}{dup}{why}")
        return (f"[{e.pass_name}] refused {self.history.name_text(e.producer, view.producer_fusion)} -> "
                f"{e.consumer}{self.history.where_text(view.fusion)}: {e.reason} [{e.rule}]")

    def listing(self, views: list[EntryView], indent: str = "  ") -> list[str]:
        """Distinct entries in log order, a repeat counted."""
        counts: dict[str, int] = {}
        for w in views:
            text = self.entry_text(w)
            counts[text] = counts.get(text, 0) + 1
        return [f"{indent}{t}" + (f" (x{n})" if n > 1 else "") for t, n in counts.items()]

    def hint(self, e: LogEntry) -> str | None:
        """What would allow the refused fusion `e`."""
        rule = e.rule
        producer = self.names.before.get(e.producer)
        if rule == "not-fusible-into-all-users" and producer is not None and not is_loop_fusible_as_producer(producer):
            rule = "producer-not-fusible"  # the users cannot fuse it because nothing can
        text = HINTS.get(rule)
        return text.format(p=e.producer, c=e.consumer) if text else None

    def hints(self, views: list[EntryView]) -> list[str]:
        """The hints of the refusals among `views`, once each."""
        found = [h for w in views if w.entry.action == "refused" for h in [self.hint(w.entry)] if h]
        return ["", "What would allow it:"] + [f"  - {h}" for h in dict.fromkeys(found)] if found else []

    def unconsidered(self, u: str, v: str) -> str:
        """Why no pass decided about u -> v."""
        iu, iv = self.names.before[u], self.names.before[v]
        why = []
        if not is_loop_fusible_as_producer(iu):
            why.append(f"{u} ('{iu.opcode}') cannot be fused into a consumer")
        if not is_loop_fusible_as_consumer(iv):
            why.append(f"{v} ('{iv.opcode}') cannot root a loop or input fusion")
        if not why:
            return f"no fusion pass recorded a decision about {u} -> {v}"
        return f"no fusion pass considered {u} -> {v}: " + "; ".join(why)

    def crosses(self, u: str, v: str) -> bool:
        """Whether no kernel computes both u and v."""
        ku = self.names.kernels_of(self.names.before[u])
        kv = self.names.kernels_of(self.names.before[v])
        return not set(ku) & set(kv)

    # ---- paths --------------------------------------------------------------------------------
    def path(self, a: Subject, b: Subject, within: set[str] | None = None) -> tuple[list[str], bool]:
        """The shortest chain of the pre-fusion graph from one of a's instructions to one of b's:
        directed (either way) if there is one, else through common operands or users
        (restricted to `within` first when given). ([], False) when none."""
        comp = a.sources[0].parent
        g = self.graph(comp)
        sa = [s.name for s in a.sources if s.parent is comp]
        sb = [s.name for s in b.sources if s.parent is comp]
        for starts, goals in ((sa, sb), (sb, sa)):
            p = _bfs(g, starts, set(goals), directed=True)
            if p:
                return (p if starts is sa else p[::-1]), True
        for allowed in ([within] if within else []) + [None]:
            p = _bfs(g, sa, set(sb), directed=False, allowed=allowed)
            if p:
                return p, False
        return [], False

    def oriented(self, u: str, v: str, comp: HloComputation) -> tuple[str, str]:
        """(producer, consumer) of the edge between u and v."""
        return (u, v) if self.graph(comp).has_edge(u, v) else (v, u)

    # ---- the answers --------------------------------------------------------------------------
    def one(self, name: str) -> str:
        """Where `name` ended up, and the decisions about its edges."""
        s = self.names.resolve(name)
        if s.kernels:
            head = f"{name} runs in {', '.join(kernel_text(k) for k in s.kernels)}"
            head += " (duplicated)" if len(s.kernels) > 1 and s.kind == "instruction" else ""
        else:
            head = f"{name} runs in no kernel ({self.names.no_kernel_why(s)})"
        lines = [head + ".", "", *s.lines]
        views = self.incident(s)
        lines += ["", f"Decisions about {name}'s edges ({len(views)}):"]
        lines += self.listing(views) or ["  none: no fusion pass decided about them"]
        lines += self.hints(views)
        return "\n".join(lines) + "\n"

    def incident(self, s: Subject) -> list[EntryView]:
        """The entries about edges into or out of `s` (a kernel: its boundary)."""
        inside = {x.name for x in s.sources}
        edges = set()
        for src in s.sources:
            for op in src.operands:
                edges.add((op.name, src.name))
            for user in src.users:
                edges.add((src.name, user.name))
        if s.kind in ("kernel", "intermediate"):
            edges = {(u, v) for u, v in edges if (u in inside) != (v in inside)}
        return [w for w in self.history.views if any(_about(w, u, v) for u, v in edges)
                or (s.node is not None and s.node in (w.producer_fusion, w.fusion))]

    def pair(self, a: str, b: str) -> str:
        """Whether `a` and `b` share a kernel, the deciding rule, and the decisions between them."""
        sa, sb = self.names.resolve(a), self.names.resolve(b)
        shared = [k for k in sa.kernels if k in sb.kernels]
        body: list[str] = []
        if a == b:
            where = (f"which runs in {kernels_text(sa.kernels, self.names.no_kernel_why(sa))}" if not shared
                     else f"in the same kernel, {kernel_text(shared[0])}")
            head = f"{a} and {b} are the same instruction, {where}"
        elif shared:
            also = f" (together also in {', '.join(k.name for k in shared[1:])})" if len(shared) > 1 else ""
            head = f"{a} and {b} are in the same kernel, {kernel_text(shared[0])}{also}"
            body = self.together(sa, sb, shared)
        else:
            deciding, body = self.apart(sa, sb)
            head = (f"{a} and {b} run in different kernels: {a} in "
                    f"{kernels_text(sa.kernels, self.names.no_kernel_why(sa))}, {b} in "
                    f"{kernels_text(sb.kernels, self.names.no_kernel_why(sb))}; {deciding}")
        lines = [head + ".", "", *sa.lines, *([] if a == b else sb.lines)]
        if sa.sources and sb.sources and set(sa.sources) & set(sb.sources) and a != b:
            common = ", ".join(x.name for x in sa.sources if x in sb.sources)
            lines.append(f"Both stand for {common} (one instruction before fusion, or a fusion and its member).")
        return "\n".join(lines + ([""] + body if body else [])) + "\n"

    def together(self, sa: Subject, sb: Subject, shared: list[HloInstruction]) -> list[str]:
        """How two instructions came to share a kernel: the decisions on the path between them."""
        if not sa.sources or not sb.sources or set(sa.sources) & set(sb.sources):
            return []
        comp = sa.sources[0].parent
        within = {x.name for x in comp.instructions if set(self.names.kernels_of(x)) & set(shared)}
        path, _ = self.path(sa, sb, within)
        if not path:
            return []
        lines = [f"How they got there, along {' -> '.join(path)}:"]
        for u, v in zip(path, path[1:]):
            p, c = self.oriented(u, v, comp)
            views = self.edge_views(p, c)
            lines.append(f"  {p} -> {c}:")
            lines += self.listing(views, "    ") or [f"    {self.unconsidered(p, c)}"]
        return lines

    def apart(self, sa: Subject, sb: Subject) -> tuple[str, list[str]]:
        """(the deciding reason in a clause, the explanation) for two subjects in different kernels."""
        for s in (sa, sb):
            if not s.kernels:
                return f"{s.name} runs in no kernel ({self.names.no_kernel_why(s)})", []
        if not sa.sources or not sb.sources:
            made = sa if not sa.sources else sb
            return f"{made.name} was made by the fusion passes, no decision is about it", []
        ca, cb = sa.sources[0].parent, sb.sources[0].parent
        if ca is not cb:
            return (f"they are in different computations ({ca.name}, {cb.name}); fusion only combines "
                    "instructions of one computation"), []
        path, directed = self.path(sa, sb)
        if directed:
            return self.producer_consumer(path)
        common = sorted({o.name for x in sa.sources for o in x.operands}
                        & {o.name for x in sb.sources for o in x.operands})
        if common:
            return self.siblings(sa, sb, common, path)
        return self.unrelated(sa, sb)

    def producer_consumer(self, path: list[str]) -> tuple[str, list[str]]:
        """The deciding refusal on a producer -> consumer path, and the decisions along it."""
        p, c = path[0], path[-1]
        prod = self.names.before[p]
        size = prod.shape.byte_size()
        lines = [f"{p} is an operand of {c}." if len(path) == 2 else f"{p} reaches {c} through {' -> '.join(path)}.",
                 f"Numbers: {p} is {prod.shape.to_text(with_layout=False)} = {size} bytes, written to memory "
                 f"and read back ({2 * size} bytes of traffic a fusion would save); it has {len(prod.users)} "
                 f"user(s): {', '.join(u.name for u in prod.users)}."]
        deciding = ""
        refusals: list[EntryView] = []
        for u, v in zip(path, path[1:]):
            views = self.edge_views(u, v)
            crossing = self.crosses(u, v)
            label = "crosses kernels" if crossing else "inside one kernel"
            lines += ["", f"Edge {u} -> {v} ({label}):"]
            lines += self.listing(views) or [f"  {self.unconsidered(u, v)}"]
            if crossing:
                refusals += [w for w in views if w.entry.action == "refused"]
                stands = _deciding(views, u, v)
                if not deciding:
                    deciding = (f"the deciding refusal was [{stands.entry.pass_name}/{stands.entry.rule}] "
                                f"'{stands.entry.reason}'" if stands else self.unconsidered(u, v))
        if not deciding:
            dup = [n for n in path if len(self.names.kernels_of(self.names.before[n])) > 1]
            deciding = (f"no edge between them crosses kernels: {', '.join(dup)} run(s) in both (duplicated)"
                        if dup else "no refusal separates them")
        if len(path) > 2:
            middle = ", ".join(path[1:-1])
            lines += ["", f"Reachability: a kernel holding {p} and {c} but not {middle} would have to send "
                          f"{p}'s value out to {path[1]} and take {path[-2]}'s result back in: a cycle. They "
                          "share a kernel only if the instructions on the path fuse with them."]
        return deciding, lines + self.hints(refusals)

    def pair_views(self, sa: Subject, sb: Subject) -> list[EntryView]:
        """Entries with one subject on each side (sibling and horizontal decisions)."""
        na, nb = {x.name for x in sa.sources}, {x.name for x in sb.sources}
        return [w for w in self.history.views
                if (w.producer & na and w.consumer & nb) or (w.producer & nb and w.consumer & na)]

    def siblings(self, sa: Subject, sb: Subject, common: list[str], path: list[str]) -> tuple[str, list[str]]:
        """Two instructions reading a common operand, neither depending on the other."""
        a, b = sa.name, sb.name
        lines = [f"{a} and {b} are siblings: both read {', '.join(common)} and neither depends on the other."]
        views = [w for w in self.pair_views(sa, sb)
                 if w.entry.pass_name.startswith("multi-output") or w.entry.pass_name == "sibling-fusion"]
        lines += self.listing(views) or ["  no sibling fusion decision was recorded"]
        refused = [w for w in views if w.entry.action == "refused"]
        if self.target == "cpu" and not refused:
            # the CPU's sibling fusion pairs only kernels that stay one CPU kernel, silently
            lines.append("On the CPU (whose XLA pipeline has no multi-output fusion) hlofuse's sibling fusion "
                         "merges only two reductions of one input or two plain loops over the same dimensions; "
                         "these are not such a pair.")
        deciding = (f"the deciding refusal was [{refused[-1].entry.pass_name}/{refused[-1].entry.rule}] "
                    f"'{refused[-1].entry.reason}'" if refused
                    else "on the CPU only two reductions or two plain loops of the same dimensions share a "
                         "kernel as siblings" if self.target == "cpu"
                    else "multi-output fusion recorded no decision about them as siblings")
        return deciding, lines + self.hints(refused)

    def unrelated(self, sa: Subject, sb: Subject) -> tuple[str, list[str]]:
        """Two instructions with no data dependence and no common operand."""
        lines = [f"{sa.name} and {sb.name} have no data dependence and no common operand."]
        if self.target == "cpu":
            lines.append("Only horizontal fusion (GPU) puts unrelated instructions in one kernel; the CPU has none.")
            return "unrelated instructions share a kernel only by horizontal fusion, which the CPU has not", lines
        views = [w for w in self.pair_views(sa, sb) if w.entry.pass_name.startswith("horizontal")]
        lines.append("Only horizontal fusion could put them in one kernel:" if not views else "Horizontal fusion:")
        lines += self.listing(views) or ["  it made no decision about them"]
        refused = [w for w in views if w.entry.action == "refused"]
        deciding = (f"the deciding refusal was [{refused[-1].entry.pass_name}/{refused[-1].entry.rule}] "
                    f"'{refused[-1].entry.reason}'" if refused
                    else "they are unrelated and horizontal fusion did not group them")
        return deciding, lines


def _about(view: EntryView, u: str, v: str) -> bool:
    """Whether the entry `view` decided about the edge u -> v (see `Explainer.edge_views`)."""
    return u in view.producer and v in view.consumer and v not in view.producer and u not in view.consumer


def _deciding(views: list[EntryView], u: str, v: str) -> EntryView | None:
    """The refusal that stands for the edge u -> v: the last one naming u and v themselves
    (instruction fusion's own decision), else the last one about fusions holding them."""
    refused = [w for w in views if w.entry.action == "refused"]
    exact = [w for w in refused if w.entry.producer == u and v in [c.strip() for c in w.entry.consumer.split(",")]]
    return (exact or refused or [None])[-1]


def _bfs(g: nx.DiGraph, starts: list[str], goals: set[str], directed: bool,
         allowed: set[str] | None = None) -> list[str]:
    """The shortest path (by edges) from any of `starts` to any of `goals` in `g`, following
    edges forwards (`directed`) or both ways, through `allowed` nodes only (None: any)."""
    prev: dict[str, str | None] = {s: None for s in starts}
    queue = deque(starts)
    while queue:
        n = queue.popleft()
        if n in goals and prev[n] is not None:  # a start that is a goal is the caller's case
            out = [n]
            while prev[out[-1]] is not None:
                out.append(prev[out[-1]])
            return out[::-1]
        nexts = list(g.successors(n)) + ([] if directed else list(g.predecessors(n)))
        for m in nexts:
            if m not in prev and (allowed is None or m in allowed or m in goals):
                prev[m] = n
                queue.append(m)
    return []


def explain(module: HloModule, instruction_names: list[str], target: str = "cpu", algorithm: str | None = None) -> str:
    """Why the named instruction(s) of `module` are (or are not) in the same kernel after
    `hlofuse compile --target target`: one name gives where it ended up and the decisions about
    its edges; two names compare them. Any name the tool or the fusion report prints is
    accepted; unknown names raise HloError with close matches."""
    names = list(instruction_names)
    if not 1 <= len(names) <= 2:
        raise HloError(f"explain takes one or two instruction names, not {len(names)}")
    return Explainer(module, target, algorithm).explain(names)
