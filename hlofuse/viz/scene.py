"""Absolute geometry of a drawn graph: node boxes, cluster boxes and edge polylines.

Each cluster (fusion) is laid out on its own, then placed as one node of the enclosing graph;
edges that enter or leave a cluster run from their real endpoints through the bends the outer
layout gave them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .graph import VizGraph, VizNode, cluster_label
from .layout import Point, layered_layout

NODE_HEIGHT = 48.0
CLUSTER_PAD = 12.0
CLUSTER_LABEL = 22.0
LABEL_CHAR_WIDTH = 6.9  # 11px bold monospace


@dataclass
class Box:
    """A rectangle by its top-left corner and size."""

    x: float
    y: float
    w: float
    h: float

    @property
    def center(self) -> Point:
        """The middle of the box."""
        return (self.x + self.w / 2, self.y + self.h / 2)


@dataclass
class Scene:
    """Where everything of one VizGraph is drawn."""

    graph: VizGraph
    nodes: dict[str, Box] = field(default_factory=dict)
    clusters: dict[str, Box] = field(default_factory=dict)
    edges: list[list[Point]] = field(default_factory=list)  # per graph.edges index
    width: float = 0.0
    height: float = 0.0


def node_size(node: VizNode) -> tuple[float, float]:
    """Box size of a node from its three text lines (opcode, shape, name) in monospace."""
    w = max(len(node.opcode) * 7.4, len(node.shape) * 6.7, len(node.name) * 6.1) + 18
    return (max(w, 64.0), NODE_HEIGHT)


def build_scene(graph: VizGraph) -> Scene:
    """Lay out `graph`: clusters inside out, then the graph with each cluster as one node."""
    scene = Scene(graph)
    sizes = {nid: node_size(n) for nid, n in graph.nodes.items()}
    item = {nid: (n.cluster or nid) for nid, n in graph.nodes.items()}
    inner = {}
    for name, cluster in graph.clusters.items():
        members = set(cluster.members)
        edges = [(e.src, e.dst) for e in graph.edges if e.src in members and e.dst in members]
        params = {nid for nid in cluster.members if graph.nodes[nid].opcode == "parameter"}
        inner[name] = layered_layout(cluster.members, {m: sizes[m] for m in cluster.members}, edges,
                                     pinned_top=params, margin=CLUSTER_PAD)
    order: list[str] = []
    for nid in graph.nodes:
        if item[nid] not in order:
            order.append(item[nid])
    outer_sizes = {it: sizes[it] for it in order if it in graph.nodes and it not in graph.clusters}
    for name, lay in inner.items():
        label_width = len(cluster_label(graph.clusters[name])) * LABEL_CHAR_WIDTH + 20
        outer_sizes[name] = (max(lay.width, label_width), lay.height + CLUSTER_LABEL)
    cross = [k for k, e in enumerate(graph.edges) if item[e.src] != item[e.dst]]
    outer = layered_layout(order, outer_sizes, [(item[graph.edges[k].src], item[graph.edges[k].dst]) for k in cross],
                           margin=20.0)
    for it in order:
        cx, cy = outer.centers[it]
        w, h = outer_sizes[it]
        if it in graph.clusters:
            box = Box(cx - w / 2, cy - h / 2, w, h)
            scene.clusters[it] = box
            lay = inner[it]
            dx = box.x + (w - lay.width) / 2
            dy = box.y + CLUSTER_LABEL
            for m in graph.clusters[it].members:
                mx, my = lay.centers[m]
                mw, mh = sizes[m]
                scene.nodes[m] = Box(dx + mx - mw / 2, dy + my - mh / 2, mw, mh)
        else:
            scene.nodes[it] = Box(cx - w / 2, cy - h / 2, w, h)
    bends: dict[int, list[Point]] = {}
    for j, k in enumerate(cross):
        bends[k] = outer.bends.get(j, [])
    for name, lay in inner.items():
        box = scene.clusters[name]
        dx = box.x + (box.w - lay.width) / 2
        dy = box.y + CLUSTER_LABEL
        members = set(graph.clusters[name].members)
        k_inner = [k for k, e in enumerate(graph.edges) if e.src in members and e.dst in members]
        for j, k in enumerate(k_inner):
            bends[k] = [(x + dx, y + dy) for x, y in lay.bends.get(j, [])]
    for k, e in enumerate(graph.edges):
        s, d = scene.nodes[e.src], scene.nodes[e.dst]
        start = (s.x + s.w / 2, s.y + s.h)
        end = (d.x + d.w / 2, d.y)
        scene.edges.append([start, *bends.get(k, []), end])
    scene.width = outer.width
    scene.height = outer.height
    return scene
