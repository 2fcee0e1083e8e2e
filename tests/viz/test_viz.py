"""The fusion graph: its model, layout, SVG, DOT and HTML (rendered in headless Chromium)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import hlofuse
from hlofuse.compiler import optimize
from hlofuse.hlo.errors import HloError
from hlofuse.viz import build_graphs, render, render_svg_file
from hlofuse.viz.html import _json_for_script
from hlofuse.viz.layout import layered_layout
from hlofuse.viz.scene import build_scene
from repo_paths import REPO

ROOT = REPO
EXAMPLES = ROOT / "examples"
SVG_NS = "{http://www.w3.org/2000/svg}"
CHROMIUM = "/usr/bin/chromium"


def _compiled(example: str, target: str):
    module = hlofuse.load(str(EXAMPLES / example))
    fused, _ = optimize(module, target)
    return module, fused


@pytest.fixture(scope="module")
def lstm_cpu():
    return _compiled("lstm_cell.hlo", "cpu")


@pytest.fixture(scope="module")
def softmax_gpu():
    return _compiled("softmax.hlo", "gpu")


def _drawn_instructions(fused) -> set[str]:
    """Every instruction of the entry computation and of the fusions it calls."""
    names = set()
    for inst in fused.entry.instructions:
        names.add(inst.name) if inst.opcode != "fusion" else names.update(
            m.name for m in inst.fused_computation.instructions)
    return names


def _svgs(html: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", html, flags=re.S)]


def _data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="hlofuse-data">(.*?)</script>', html, flags=re.S)
    return json.loads(m.group(1))


# ---- the graph model -----------------------------------------------------------------------
def test_graph_edges_classified(lstm_cpu):
    module, fused = lstm_cpu
    (g,) = build_graphs(module, fused)
    by_name = {n.name: n for n in g.nodes.values()}
    kinds = {(by_name_of(g, e.src), by_name_of(g, e.dst)): e for e in g.edges}
    # CPU fuses the LSTM's elementwise tail into two loop fusions; the dots stay library calls,
    # so their f32[8,512] results are written and read back: 8*512*4 bytes through memory.
    mem = [e for e in g.edges if e.kind == "memory"]
    dot_reads = [e for e in mem if by_name_of(g, e.src).startswith("dot_general")]
    assert dot_reads and all(e.bytes == 8 * 512 * 4 for e in dot_reads)
    assert all(by_name[by_name_of(g, e.dst)].opcode == "parameter" for e in dot_reads)
    # inside a fusion, values stay in registers
    e = kinds[("neg.3", "exp.3")]
    assert e.kind == "fused" and e.bytes == 8 * 128 * 4
    # a read of an entry parameter is input traffic, not an unfused intermediate
    assert kinds[("x.1", "dot_general.2")].kind == "io"
    assert len(g.clusters) == sum(1 for i in fused.entry.instructions if i.opcode == "fusion")


def by_name_of(g, node_id: str) -> str:
    return g.nodes[node_id].name


def test_graph_decisions_and_origins(lstm_cpu):
    module, fused = lstm_cpu
    (g,) = build_graphs(module, fused)
    nodes = {n.name: n for n in g.nodes.values()}
    # add.9 is duplicated into both fusions by instruction fusion (XLA:CPU's passes; the CPU's
    # multi-output fusion then merges the two): the copy knows where it came from
    (xla_g,) = build_graphs(module, optimize(module, "cpu", passes="call-inliner,fusion")[0])
    copies = [n for n in xla_g.nodes.values() if n.origin == "add.9"]
    assert len(copies) == 2 and {n.cluster for n in copies} == set(xla_g.clusters)
    (merged,) = [n for n in nodes.values() if n.origin == "add.9"]  # computed once in the merged kernel
    assert merged.cluster in g.clusters
    fused_tanh = [d for d in nodes["tanh.3"].decisions if d["action"] == "fused"]
    assert fused_tanh and fused_tanh[0]["consumer"] == "mul.5"
    dot = nodes["dot_general.2"]
    assert dot.cluster is None
    assert any(d["action"] == "refused" and d["rule"] for d in dot.decisions)
    assert all(d["count"] >= 1 for d in dot.decisions)


# ---- layout --------------------------------------------------------------------------------
def test_layered_layout_edges_point_down_and_rows_do_not_overlap():
    nodes = ["a", "b", "c", "d", "e"]
    edges = [("a", "c"), ("b", "c"), ("c", "d"), ("a", "e"), ("d", "e"), ("b", "e")]
    sizes = {n: (40.0 + 10 * i, 20.0) for i, n in enumerate(nodes)}
    lay = layered_layout(nodes, sizes, edges)
    for u, v in edges:
        assert lay.centers[u][1] < lay.centers[v][1]
    for u in nodes:
        for v in nodes:
            if u < v and lay.centers[u][1] == lay.centers[v][1]:
                gap = abs(lay.centers[u][0] - lay.centers[v][0]) - (sizes[u][0] + sizes[v][0]) / 2
                assert gap > 0
    # a -> e spans three layers: its bends run down the two layers in between
    k = edges.index(("a", "e"))
    assert len(lay.bends[k]) == 4
    xs = [x for x, _ in lay.centers.values()]
    assert min(x - sizes[n][0] / 2 for n, (x, _) in lay.centers.items()) >= 10 - 1e-9
    assert max(xs) <= lay.width


def test_clusters_do_not_overlap_other_nodes(lstm_cpu, softmax_gpu):
    for module, fused in (lstm_cpu, softmax_gpu):
        for g in build_graphs(module, fused):
            scene = build_scene(g)
            for name, box in scene.clusters.items():
                members = set(g.clusters[name].members)
                for nid, nb in scene.nodes.items():
                    inside = (box.x <= nb.x and nb.x + nb.w <= box.x + box.w and
                              box.y <= nb.y and nb.y + nb.h <= box.y + box.h)
                    overlaps = not (nb.x + nb.w <= box.x or box.x + box.w <= nb.x or
                                    nb.y + nb.h <= box.y or box.y + box.h <= nb.y)
                    assert inside if nid in members else not overlaps, (name, nid)


# ---- SVG and HTML --------------------------------------------------------------------------
def test_html_svg_has_every_instruction_cluster_and_edge(lstm_cpu):
    module, fused = lstm_cpu
    html = render(module, fused, "html")
    (svg,) = _svgs(html)
    nodes = {g.get("data-name"): g for g in svg.iter(f"{SVG_NS}g") if g.get("class") == "node"}
    assert set(nodes) == _drawn_instructions(fused)
    for name, g in nodes.items():
        texts = [t.text for t in g.iter(f"{SVG_NS}text")]
        inst = next(i for i in fused.all_instructions() if i.name == name)
        assert texts[0] == inst.opcode and texts[1] == inst.shape.to_text(with_layout=False)
    clusters = [g for g in svg.iter(f"{SVG_NS}g") if g.get("class") == "cluster"]
    fusions = {i.name: i for i in fused.entry.instructions if i.opcode == "fusion"}
    assert {c.get("data-name") for c in clusters} == set(fusions)
    for c in clusters:
        assert c.get("data-kind") == fusions[c.get("data-name")].attrs["kind"]
    edges = [p for p in svg.iter(f"{SVG_NS}path") if "edge" in (p.get("class") or "")]
    total = sum(len(i.operands) for i in fused.entry.instructions) + sum(
        len(m.operands) for f in fusions.values() for m in f.fused_computation.instructions)
    assert len(edges) == total
    widths = sorted((int(p.get("data-bytes")), float(p.get("stroke-width"))) for p in edges)
    for (b1, w1), (b2, w2) in zip(widths, widths[1:]):
        assert w1 <= w2 + 1e-9 if b1 < b2 else True
    memory = [p for p in edges if "edge-memory" in p.get("class")]
    assert memory and all(p.get("stroke") == "#dc2626" for p in memory)
    data = _data(html)
    assert set(data["nodes"]) == set(nodes) and set(data["clusters"]) == set(fusions)
    assert "kernels" in html and "<script src" not in html and "http://" not in html.replace(
        "http://www.w3.org/2000/svg", "")


def _clusters(module, fused) -> dict:
    (svg,) = _svgs(render(module, fused, "html"))
    return {c.get("data-name"): c for c in svg.iter(f"{SVG_NS}g") if c.get("class") == "cluster"}


def test_html_marks_multi_output_and_input_fusions(softmax_gpu):
    # softmax on the GPU: its reductions are input fusions
    assert "kInput" in {c.get("data-kind") for c in _clusters(*softmax_gpu).values()}
    # the LSTM cell on the GPU: its two outputs come from one multi-output fusion (two frames)
    clusters = _clusters(*_compiled("lstm_cell.hlo", "gpu"))
    multi = [c for c in clusters.values() if c.get("data-multi-output") == "true"]
    assert multi and all(len(c.findall(f"{SVG_NS}rect")) == 2 for c in multi)


def test_json_block_cannot_end_the_script():
    text = _json_for_script({"a": "</script><script>alert(1)</script>", "b": "<!-- x"})
    assert "</" not in text and "<!--" not in text
    assert json.loads(text) == {"a": "</script><script>alert(1)</script>", "b": "<!-- x"}


def test_standalone_svg_is_valid_xml(lstm_cpu):
    module, fused = lstm_cpu
    svg = ET.fromstring(render_svg_file(module, fused))
    assert svg.tag == f"{SVG_NS}svg" and svg.find(f"{SVG_NS}style") is not None


# ---- DOT -----------------------------------------------------------------------------------
def test_dot_has_clusters_nodes_and_weighted_edges(lstm_cpu):
    module, fused = lstm_cpu
    dot = render(module, fused, "dot")
    assert dot.startswith('digraph "jit_lstm_cell" {') and dot.rstrip().endswith("}")
    assert dot.count("{") == dot.count("}")
    for name in _drawn_instructions(fused):
        assert f'"n-{name}" [label=' in dot
    for inst in fused.entry.instructions:
        if inst.opcode == "fusion":
            assert f'subgraph "cluster_c-{inst.name}"' in dot
    assert re.search(r'"n-dot_general.2" -> "n-param[^"]*" \[penwidth=[0-9.]+, color="#dc2626"', dot)
    if shutil.which("dot"):
        subprocess.run(["dot", "-Tsvg"], input=dot, text=True, check=True, capture_output=True)


def test_render_rejects_unknown_format(lstm_cpu):
    with pytest.raises(HloError, match="unknown graph format 'png'"):
        render(*lstm_cpu, "png")


def test_cli_emit_html_and_dot(tmp_path):
    from hlofuse.cli import main

    out = tmp_path / "g.html"
    assert main(["compile", str(EXAMPLES / "softmax.hlo"), "--target", "gpu", "--emit", "html", "-o", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    out = tmp_path / "g.dot"
    assert main(["compile", str(EXAMPLES / "softmax.hlo"), "--emit", "dot", "-o", str(out)]) == 0
    assert out.read_text().startswith("digraph")


# ---- the page in a browser -----------------------------------------------------------------
def _chromium_dom(path: Path) -> tuple[str, str]:
    profile = tempfile.mkdtemp(prefix="hlofuse-chromium-")
    try:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--dump-dom", path.as_uri()],
            capture_output=True, text=True, timeout=90)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    return proc.stdout, proc.stderr


# After the page's own script, click one element the way a user would.
_CLICK = """<script>
document.querySelector('g[data-name="%s"]').dispatchEvent(new MouseEvent("click", {bubbles: true}));
</script></body>"""


# ... or type a name into the find box.
_FIND = """<script>
var find = document.getElementById("find");
find.value = "%s";
find.dispatchEvent(new Event("change"));
</script></body>"""


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs headless Chromium (apt-get install chromium)")
@pytest.mark.parametrize("example,target,click,shown", [
    ("lstm_cell.hlo", "cpu", "tanh.3", "[fusion] fused tanh.3 into mul.5 -> fusion"),
    ("softmax.hlo", "gpu", "fusion.3", "kInput"),
    ("softmax.hlo", "gpu", "find:exp.1", "exponential"),
])
def test_page_renders_in_chromium_without_script_errors(tmp_path, example, target, click, shown):
    module, fused = _compiled(example, target)
    page = tmp_path / "graph.html"
    script = _FIND % click[5:] if click.startswith("find:") else _CLICK % click
    page.write_text(render(module, fused, "html").replace("</body>", script))
    click = click.removeprefix("find:")
    dom, log = _chromium_dom(page)
    console = [line for line in log.splitlines() if "CONSOLE" in line]
    assert not console, console
    assert "Uncaught" not in log
    assert re.search(r'<body[^>]*data-ready="true"', dom), "the page script did not run to its end"
    present = set(re.findall(r'<g class="node( selected)?" id="[^"]*" data-name="([^"]*)"', dom))
    assert {name for _, name in present} == _drawn_instructions(fused)
    details = re.search(r'<aside id="details">(.*?)</aside>', dom, flags=re.S).group(1)
    assert f"<h3>{click}</h3>" in details and shown in details.replace("&gt;", ">")


# ---- --dump-dir ----------------------------------------------------------------------------
def test_dump_dir_has_every_pass_in_order_then_graph_and_report(tmp_path):
    import hlofuse.cli
    from hlofuse.compiler import fusion_target
    from hlofuse.passes.pipeline import standard_pipeline

    dump = tmp_path / "dump"
    assert hlofuse.cli.main(["compile", str(EXAMPLES / "lstm_cell.hlo"), "--dump-dir", str(dump)]) == 0
    files = sorted(os.listdir(dump))
    passes = [p.name for p in standard_pipeline(target=fusion_target("cpu")).passes]
    hlo = files[:len(passes) + 1]  # then the report, kernels, graph and index (tests/test_dump_dir.py)
    expected = ["0000.jit_lstm_cell.before_optimizations.hlo"] + [
        f"{k:04d}.jit_lstm_cell.{name}.hlo" for k, name in enumerate(passes, start=1)]
    assert hlo == expected
    # each dump is the module after that pass: parseable, and the last one is what compile prints
    last = hlofuse.parse_hlo((dump / hlo[-1]).read_text())
    module = hlofuse.load(str(EXAMPLES / "lstm_cell.hlo"))
    fused, _ = optimize(module, "cpu")
    assert last.to_text() == fused.to_text()
    report = json.loads((dump / next(f for f in files if f.endswith(".fusion_report.json"))).read_text())
    assert report["after"]["kernels"] < report["before"]["kernels"]
    html = (dump / next(f for f in files if f.endswith(".fusion_graph.html"))).read_text()
    assert {g.get("data-name") for g in _svgs(html)[0].iter(f"{SVG_NS}g")
            if g.get("class") == "node"} == _drawn_instructions(fused)


def test_control_flow_bodies_are_drawn_as_their_own_graphs():
    from hlofuse.passes.fusion.cost_model import kernel_computations

    module, fused = _compiled("../testdata/jax/scan_cumulative.hlo", "cpu")
    comps = kernel_computations(fused)
    assert len(comps) > 1  # the entry and the while loop's body and condition
    svgs = _svgs(render(module, fused, "html"))
    assert sorted(s.get("data-computation") for s in svgs) == sorted(c.name for c in comps)
    for svg in svgs:
        comp = next(c for c in comps if c.name == svg.get("data-computation"))
        expected = set()
        for inst in comp.instructions:
            expected.update([inst.name] if inst.opcode != "fusion" else
                            [m.name for m in inst.fused_computation.instructions])
        drawn = {g.get("data-name") for g in svg.iter(f"{SVG_NS}g") if g.get("class") == "node"}
        assert drawn == expected


def test_human_bytes_and_cluster_labels_fit():
    from hlofuse.viz.graph import human_bytes

    assert [human_bytes(n) for n in (0, 1023, 1024, 1536 * 1024, 3 << 30)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 MiB", "3.0 GiB"]
    module, fused = _compiled("softmax.hlo", "gpu")
    (svg,) = _svgs(render(module, fused, "html"))
    for c in svg.iter(f"{SVG_NS}g"):
        if c.get("class") == "cluster":
            rect, label = c.find(f"{SVG_NS}rect"), c.find(f"{SVG_NS}text")
            assert len(label.text) * 6.9 + 10 <= float(rect.get("width"))
