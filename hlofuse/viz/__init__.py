"""Seeing fusion: the fused module as a graph, in HTML (inline SVG, no network) or DOT.

    render(module, fused, "html")  -> one self-contained page
    render(module, fused, "dot")   -> Graphviz text
    render_svg_file(module, fused) -> the entry computation's graph as a standalone SVG

`module` is the module before the passes (to know where fused copies came from), `fused` the
module after them, made from a clone of it (`HloModule.clone`, as `compile` and `optimize` do):
each fused instruction is traced back through its `origin`; `fused.fusion_log` supplies the
decisions shown for each instruction.
"""
from __future__ import annotations

from ..hlo.errors import HloError
from ..hlo.ir import HloModule
from .dot import render_dot
from .graph import VizCluster, VizEdge, VizGraph, VizNode, build_graphs, node_id
from .html import render_html, summary_lines
from .scene import build_scene
from .svg import render_svg

FORMATS = ("html", "dot")


def render(module: HloModule, fused_module: HloModule, fmt: str = "html") -> str:
    """The graph of `fused_module` as "html" or "dot" text."""
    if fmt not in FORMATS:
        raise HloError(f"unknown graph format '{fmt}'; expected one of {', '.join(FORMATS)}")
    log = fused_module.fusion_log
    graphs = build_graphs(module, fused_module, log)
    if fmt == "dot":
        return render_dot(graphs, fused_module.name)
    return render_html(graphs, fused_module.name, summary_lines(module, fused_module, log))


def render_svg_file(module: HloModule, fused_module: HloModule) -> str:
    """The entry computation's graph as a standalone SVG document (for pictures)."""
    graphs = build_graphs(module, fused_module)
    return render_svg(build_scene(graphs[0]), svg_id="graph", standalone=True) + "\n"


__all__ = ["FORMATS", "VizCluster", "VizEdge", "VizGraph", "VizNode", "build_graphs", "node_id", "render",
           "render_svg_file"]
