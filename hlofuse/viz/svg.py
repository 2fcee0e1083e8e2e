"""SVG drawing of a laid-out graph (standalone: it carries its own style, no script)."""
from __future__ import annotations

import math
from html import escape

from .graph import VizGraph, cluster_label, human_bytes
from .layout import Point
from .scene import CLUSTER_LABEL, Scene

# fill, stroke of a fusion cluster by kind
KIND_COLORS = {
    "kLoop": ("#dbeafe", "#2563eb"),
    "kInput": ("#ffedd5", "#ea580c"),
    "kOutput": ("#dcfce7", "#16a34a"),
    "kCustom": ("#f3e8ff", "#9333ea"),
}
EDGE_COLORS = {"fused": "#4b5563", "memory": "#dc2626", "io": "#9ca3af"}
MAX_EDGE_WIDTH = 7.0

STYLE = """
.hf-graph text { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.hf-graph .node text.op { font-size: 12px; font-weight: bold; fill: #111827; }
.hf-graph .node text.shape { font-size: 11px; fill: #374151; }
.hf-graph .node text.name { font-size: 10px; fill: #6b7280; }
.hf-graph .cluster text { font-size: 11px; font-weight: bold; }
.hf-graph .edge { fill: none; }
"""


def _path(points: list[Point]) -> str:
    (x0, y0), rest = points[0], points[1:]
    parts = [f"M{x0:.1f},{y0:.1f}"]
    for x1, y1 in rest:
        my = (y0 + y1) / 2
        parts.append(f"C{x0:.1f},{my:.1f} {x1:.1f},{my:.1f} {x1:.1f},{y1:.1f}")
        x0, y0 = x1, y1
    return " ".join(parts)


def edge_width(nbytes: int, max_bytes: int) -> float:
    """Line width of an edge carrying `nbytes` (square root scale up to MAX_EDGE_WIDTH)."""
    if max_bytes <= 0:
        return 1.0
    return 1.0 + (MAX_EDGE_WIDTH - 1.0) * math.sqrt(max(nbytes, 0) / max_bytes)


def _node_style(node) -> tuple[str, str, str]:
    if node.opcode == "parameter":
        return ("#f3f4f6", "#6b7280", "4 2" if node.cluster else "")
    if node.opcode == "constant":
        return ("#fef9c3", "#a16207", "")
    return ("#ffffff", "#111827", "")


def render_svg(scene: Scene, svg_id: str = "graph", standalone: bool = True) -> str:
    """The SVG of `scene`: clusters, then edges, then nodes; each element carries `data-name`."""
    g: VizGraph = scene.graph
    w, h = math.ceil(scene.width), math.ceil(scene.height)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="hf-graph" id="{escape(svg_id)}" '
           f'data-computation="{escape(g.name)}" width="{w}" height="{h}" viewBox="0 0 {w} {h}">']
    if standalone:
        out.append(f"<style>{STYLE}</style>")
    out.append("<defs>")
    for kind, color in EDGE_COLORS.items():
        out.append(f'<marker id="{escape(svg_id)}-arrow-{kind}" viewBox="0 0 10 10" refX="10" refY="5" '
                   f'markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" orient="auto">'
                   f'<path d="M0,0 L10,5 L0,10 z" fill="{color}"/></marker>')
    out.append("</defs>")
    out.append(f'<rect width="{w}" height="{h}" fill="#ffffff"/>')
    for name, box in scene.clusters.items():
        c = g.clusters[name]
        fill, stroke = KIND_COLORS.get(c.kind, ("#f3f4f6", "#4b5563"))
        out.append(f'<g class="cluster" id="{c.id}" data-name="{escape(name)}" data-kind="{escape(c.kind)}" '
                   f'data-multi-output="{str(c.multi_output).lower()}"><title>{escape(cluster_label(c))}</title>')
        out.append(f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.w:.1f}" height="{box.h:.1f}" rx="8" '
                   f'fill="{fill}" stroke="{stroke}" stroke-width="{2.5 if c.multi_output else 1.5}"/>')
        if c.multi_output:  # a double border marks a multi-output fusion
            out.append(f'<rect x="{box.x + 4:.1f}" y="{box.y + 4:.1f}" width="{box.w - 8:.1f}" '
                       f'height="{box.h - 8:.1f}" rx="6" fill="none" stroke="{stroke}" stroke-width="1"/>')
        out.append(f'<text x="{box.x + 10:.1f}" y="{box.y + CLUSTER_LABEL - 7:.1f}" fill="{stroke}">'
                   f'{escape(cluster_label(c))}</text></g>')
    max_bytes = max((e.bytes for e in g.edges), default=0)
    for e, points in zip(g.edges, scene.edges):
        src, dst = g.nodes[e.src].name, g.nodes[e.dst].name
        color = EDGE_COLORS[e.kind]
        label = f"{src} -> {dst}: {human_bytes(e.bytes)} ({'through memory' if e.kind == 'memory' else e.kind})"
        dash = ' stroke-dasharray="5 3"' if e.kind == "io" else ""
        out.append(f'<path class="edge edge-{e.kind}" data-src="{escape(src)}" data-dst="{escape(dst)}" '
                   f'data-bytes="{e.bytes}" d="{_path(points)}" stroke="{color}" '
                   f'stroke-width="{edge_width(e.bytes, max_bytes):.2f}"{dash} '
                   f'marker-end="url(#{escape(svg_id)}-arrow-{e.kind})"><title>{escape(label)}</title></path>')
    for nid, box in scene.nodes.items():
        n = g.nodes[nid]
        fill, stroke, dash = _node_style(n)
        cx = box.x + box.w / 2
        title = f"{n.name} = {n.opcode} {n.shape}" + (f" (in {n.cluster})" if n.cluster else "")
        in_cluster = f' data-cluster="{escape(n.cluster)}"' if n.cluster else ""
        dashes = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<g class="node" id="{nid}" data-name="{escape(n.name)}" data-opcode="{escape(n.opcode)}"'
                   f'{in_cluster}><title>{escape(title)}</title>')
        out.append(f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.w:.1f}" height="{box.h:.1f}" rx="4" '
                   f'fill="{fill}" stroke="{stroke}" stroke-width="{2 if n.is_root else 1}"{dashes}/>')
        for cls, text, dy in (("op", n.opcode, 15), ("shape", n.shape, 29), ("name", n.name, 42)):
            out.append(f'<text class="{cls}" x="{cx:.1f}" y="{box.y + dy:.1f}" text-anchor="middle">{escape(text)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)
