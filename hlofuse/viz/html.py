"""One self-contained HTML page: the SVG graphs, a legend, a summary and a details panel.

Nothing is loaded from the network: the style and the script are inline, and the data the
details panel shows (attributes, fusion decisions with their reasons) is an inline JSON block.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from html import escape

from .graph import VizGraph, human_bytes
from .scene import build_scene
from .svg import EDGE_COLORS, KIND_COLORS, STYLE, render_svg

PAGE_STYLE = """
body { margin: 0; font-family: system-ui, sans-serif; color: #111827; background: #f9fafb; }
header { padding: 12px 20px; background: #111827; color: #f9fafb; }
header h1 { margin: 0 0 4px 0; font-size: 18px; }
header p { margin: 2px 0; font-size: 13px; color: #d1d5db; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; padding: 8px 20px; margin-right: 360px; font-size: 12px;
          background: #fff; border-bottom: 1px solid #e5e7eb; }
.legend span.sw { display: inline-block; width: 14px; height: 10px; margin-right: 4px; vertical-align: middle;
                  border: 1.5px solid; border-radius: 2px; }
.legend span.ln { display: inline-block; width: 22px; height: 0; margin-right: 4px; vertical-align: middle;
                  border-top: 3px solid; }
main { margin-right: 380px; padding: 10px 20px; }
section h2 { font-size: 14px; font-weight: 600; margin: 14px 0 6px 0; }
.canvas { overflow: auto; background: #fff; border: 1px solid #e5e7eb; border-radius: 6px; }
#details { position: fixed; top: 0; right: 0; width: 360px; height: 100%; overflow: auto; box-sizing: border-box;
           padding: 14px; background: #fff; border-left: 1px solid #e5e7eb; font-size: 12px; }
#details h3 { margin: 0 0 6px 0; font-size: 15px; font-family: ui-monospace, monospace; }
#details pre { white-space: pre-wrap; word-break: break-all; background: #f3f4f6; padding: 6px; border-radius: 4px; }
#details table { border-collapse: collapse; width: 100%; }
#details td { border-bottom: 1px solid #f3f4f6; padding: 2px 4px; vertical-align: top;
              font-family: ui-monospace, monospace; word-break: break-all; }
#details li { margin-bottom: 6px; }
#details .fused { color: #15803d; } #details .refused { color: #b91c1c; }
g.node, g.cluster { cursor: pointer; }
g.node:hover rect, g.node.selected rect { stroke: #f59e0b; stroke-width: 3; }
g.cluster.selected > rect:first-of-type { stroke-width: 4; }
#find.missing { outline: 2px solid #dc2626; }
svg.focus path.edge { stroke-opacity: 0.25; }
svg.focus path.edge.hl { stroke-opacity: 1; }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("hlofuse-data").textContent);
  var panel = document.getElementById("details");
  var pinned = null;
  function add(parent, tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    parent.appendChild(e);
    return e;
  }
  function decisions(list) {
    add(panel, "h4", "Fusion decisions (" + list.length + ")");
    if (!list.length) { add(panel, "p", "No fusion pass decided anything about it."); return; }
    var ul = add(panel, "ul");
    list.forEach(function (d) {
      var times = d.count > 1 ? " (x" + d.count + ")" : "";
      var text = d.action === "fused"
        ? "[" + d.pass_name + "] fused " + d.producer + " into " + d.consumer + " -> " + d.fusion +
          (d.duplicated ? " (duplicated)" : "") + (d.rule ? " [" + d.rule + "]" : "")
        : "[" + d.pass_name + "] refused " + d.producer + " -> " + d.consumer + ": " + d.reason + " [" + d.rule + "]";
      add(ul, "li", text + times, d.action);
    });
  }
  function table(rows) {
    var t = add(panel, "table");
    rows.forEach(function (r) { var tr = add(t, "tr"); add(tr, "td", r[0]); add(tr, "td", r[1]); });
  }
  function showNode(name) {
    var n = data.nodes[name];
    panel.textContent = "";
    add(panel, "h3", n.name);
    var rows = [["opcode", n.opcode], ["shape", n.shape], ["bytes", String(n.bytes)],
                ["computation", n.computation]];
    if (n.cluster) rows.push(["fusion", n.cluster]);
    if (n.origin && n.origin !== n.name) rows.push(["copy of", n.origin]);
    Object.keys(n.attrs).forEach(function (k) { rows.push([k, n.attrs[k]]); });
    table(rows);
    add(panel, "h4", "HLO");
    add(panel, "pre", n.hlo);
    decisions(n.decisions);
  }
  function showCluster(name) {
    var c = data.clusters[name];
    panel.textContent = "";
    add(panel, "h3", c.name);
    table([["kind", c.kind], ["multi-output", String(c.multi_output)], ["calls", c.computation],
           ["instructions", String(c.members.length)], ["bytes read", String(c.bytes_read)],
           ["bytes written", String(c.bytes_written)]]);
    add(panel, "h4", "HLO");
    add(panel, "pre", c.hlo);
    decisions(c.decisions);
  }
  function show(g) {
    var name = g.getAttribute("data-name");
    if (g.classList.contains("cluster")) showCluster(name); else showNode(name);
  }
  function select(g) {
    document.querySelectorAll(".selected").forEach(function (e) { e.classList.remove("selected"); });
    document.querySelectorAll("path.edge.hl").forEach(function (e) { e.classList.remove("hl"); });
    document.querySelectorAll("svg.focus").forEach(function (e) { e.classList.remove("focus"); });
    if (!g) return;
    g.classList.add("selected");
    if (!g.classList.contains("node")) return;
    var name = g.getAttribute("data-name");
    var svg = g.ownerSVGElement;
    svg.classList.add("focus");
    svg.querySelectorAll("path.edge").forEach(function (e) {
      if (e.getAttribute("data-src") === name || e.getAttribute("data-dst") === name) e.classList.add("hl");
    });
  }
  document.querySelectorAll("g.node, g.cluster").forEach(function (g) {
    g.addEventListener("mouseenter", function () { if (!pinned) show(g); });
    g.addEventListener("click", function (ev) {
      ev.stopPropagation();
      pinned = (pinned === g) ? null : g;
      select(pinned);
      show(g);
    });
  });
  document.addEventListener("click", function () { pinned = null; select(null); });
  var find = document.getElementById("find");
  find.addEventListener("change", function () {
    var g = document.querySelector('g[data-name="' + CSS.escape(find.value.trim()) + '"]');
    find.classList.toggle("missing", !g);
    if (!g) return;
    pinned = g;
    select(g);
    show(g);
    g.scrollIntoView({block: "center", inline: "center"});
  });
  document.body.setAttribute("data-ready", "true");
})();
"""


def _json_for_script(obj) -> str:
    # "</script" would end the script element early and "<!--" open a comment in it: no "<"
    # at all (JSON's \u003c escape reads back as the same character).
    return json.dumps(obj, separators=(",", ":")).replace("<", "\\u003c")


def _legend() -> str:
    items = []
    for kind, (fill, stroke) in KIND_COLORS.items():
        items.append(f'<span><span class="sw" style="background:{fill};border-color:{stroke}"></span>{kind} fusion</span>')
    items.append('<span><span class="sw" style="background:#fff;border-color:#2563eb;border-style:double;'
                 'border-width:4px"></span>multi-output fusion</span>')
    words = {"fused": "value in registers (inside a fusion)", "memory": "intermediate through memory (not fused)",
             "io": "read of an input / output bookkeeping"}
    for kind, color in EDGE_COLORS.items():
        style = "dashed" if kind == "io" else "solid"
        items.append(f'<span><span class="ln" style="border-top-color:{color};border-top-style:{style}"></span>'
                     f'{words[kind]}</span>')
    items.append("<span>line width: bytes carried</span>")
    return '<div class="legend">' + "".join(items) + "</div>"


def render_html(graphs: list[VizGraph], module_name: str, summary: list[str]) -> str:
    """The page for `graphs` (entry first) with `summary` lines under the title."""
    nodes, clusters, sections = {}, {}, []
    for i, g in enumerate(graphs):
        for n in g.nodes.values():
            nodes[n.name] = asdict(n)
        for c in g.clusters.values():
            clusters[c.name] = asdict(c)
        svg = render_svg(build_scene(g), svg_id=f"graph{i}", standalone=False)
        sections.append(f'<section><h2>computation {escape(g.name)}</h2><div class="canvas">{svg}</div></section>')
    info = "".join(f"<p>{escape(line)}</p>" for line in summary)
    options = "".join(f'<option value="{escape(name)}">' for name in [*nodes, *clusters])
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>hlofuse: {escape(module_name)}</title>",
        f"<style>{PAGE_STYLE}{STYLE}</style></head><body>",
        f"<header><h1>Fusion graph of {escape(module_name)}</h1>{info}</header>",
        _legend(),
        '<div class="legend"><label>find instruction or fusion: <input id="find" list="names" size="28"></label>'
        f'<datalist id="names">{options}</datalist></div>',
        "<main>", *sections, "</main>",
        '<aside id="details"><h3>Details</h3><p>Hover over an instruction or a fusion to see its attributes and '
        "the fusion decisions about it; click to keep it.</p></aside>",
        f'<script type="application/json" id="hlofuse-data">{_json_for_script({"nodes": nodes, "clusters": clusters})}</script>',
        f"<script>{SCRIPT}</script>",
        "</body></html>",
    ]) + "\n"


def summary_lines(before, after, log) -> list[str]:
    """Kernels and bytes before and after fusion, from the fusion report."""
    from ..passes.fusion.report import build_report

    r = build_report(before, after, log)
    b, a = r.before, r.after
    return [f"kernels {b.kernels} -> {a.kernels}; bytes moved {human_bytes(b.bytes_moved)} -> "
            f"{human_bytes(a.bytes_moved)}; {len(r.fusions)} fusions, {len(r.refused)} refused candidates"]
