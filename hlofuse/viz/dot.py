"""Graphviz DOT text of the drawn graphs: one cluster per computation, one per fusion inside."""
from __future__ import annotations

from .graph import VizGraph, cluster_label, human_bytes
from .svg import EDGE_COLORS, KIND_COLORS, edge_width


def _q(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render_dot(graphs: list[VizGraph], module_name: str) -> str:
    """`digraph` text: nodes labelled opcode/shape/name, fusions as filled clusters coloured by
    kind, edge width by bytes, edges through memory in red."""
    lines = [f"digraph {_q(module_name)} {{",
             "  rankdir=TB; compound=true; newrank=true;",
             '  node [shape=box, style="rounded,filled", fillcolor=white, fontname="monospace", fontsize=10];',
             '  edge [fontname="monospace", fontsize=9];']
    max_bytes = max((e.bytes for g in graphs for e in g.edges), default=0)
    for gi, g in enumerate(graphs):
        lines.append(f"  subgraph {_q(f'cluster_comp_{gi}')} {{")
        lines.append(f"    label={_q(g.name)}; style=dashed; color=\"#9ca3af\";")
        for name, c in g.clusters.items():
            fill, stroke = KIND_COLORS.get(c.kind, ("#f3f4f6", "#4b5563"))
            lines.append(f"    subgraph {_q('cluster_' + c.id)} {{")
            lines.append(f"      label={_q(cluster_label(c))}; style=\"filled,rounded{',bold' if c.multi_output else ''}\"; "
                         f"fillcolor={_q(fill)}; color={_q(stroke)}; fontcolor={_q(stroke)};")
            for nid in c.members:
                lines.append("      " + _node(g, nid))
            lines.append("    }")
        for nid, n in g.nodes.items():
            if n.cluster is None:
                lines.append("    " + _node(g, nid))
        lines.append("  }")
        for e in g.edges:
            attrs = [f"penwidth={edge_width(e.bytes, max_bytes):.2f}", f"color={_q(EDGE_COLORS[e.kind])}",
                     f"tooltip={_q(f'{human_bytes(e.bytes)} ({e.kind})')}"]
            if e.kind == "memory":
                attrs.append(f"label={_q(human_bytes(e.bytes))}")
            if e.kind == "io":
                attrs.append("style=dashed")
            lines.append(f"  {_q(e.src)} -> {_q(e.dst)} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node(g: VizGraph, nid: str) -> str:
    n = g.nodes[nid]
    extra = ""
    if n.opcode == "parameter":
        extra = ', fillcolor="#f3f4f6"' + (', style="rounded,filled,dashed"' if n.cluster else "")
    elif n.opcode == "constant":
        extra = ', fillcolor="#fef9c3"'
    if n.is_root:
        extra += ", penwidth=2"
    label = "\n".join((n.opcode, n.shape, n.name))
    return f"{_q(nid)} [label={_q(label)}, tooltip={_q(n.hlo)}{extra}];"
