"""A layered (Sugiyama-style) layout of a directed acyclic graph, clusters included.

1. Layers: networkx's topological generations; every node is then moved down to just above
   its first user (as late as possible) so values do not stretch edges across the page.
2. Edges spanning several layers get a dummy node per crossed layer (their bends).
3. Order within layers: barycenter sweeps down and up, keeping the order with the fewest
   crossings seen.
4. x coordinates: each node pulled towards the mean of its neighbours, then pushed apart to
   keep the order and the spacing.

Clusters are laid out inside out: each fusion's instructions first, then the fusion is one big
node of the graph around it, so a cluster's box never overlaps another node.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

Point = tuple[float, float]

LAYER_GAP = 46.0
NODE_GAP = 18.0
DUMMY_WIDTH = 6.0
SWEEPS = 6
MAX_COUNTED = 1500  # above this many nodes with edges, keep the last sweep instead of counting


@dataclass
class Layout:
    """Centres of the nodes, bends of the edges (by edge index) and the overall size."""

    centers: dict[str, Point] = field(default_factory=dict)
    bends: dict[int, list[Point]] = field(default_factory=dict)
    width: float = 0.0
    height: float = 0.0


def _layers(nodes: list[str], edges: list[tuple[str, str]], pinned_top: set[str]) -> dict[str, int]:
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    layer: dict[str, int] = {}
    for k, generation in enumerate(nx.topological_generations(g)):
        for n in generation:
            layer[n] = k
    # As late as possible: a value is drawn just above its first user (a broadcast of a
    # constant used at the bottom is not drawn at the top with a long edge down).
    for n in reversed(list(nx.topological_sort(g))):
        succ = list(g.successors(n))
        if succ and n not in pinned_top:
            layer[n] = max(layer[n], min(layer[s] for s in succ) - 1)
    low = min(layer.values(), default=0)
    return {n: k - low for n, k in layer.items()}


def _crossings(order: list[list[str]], adj_down: dict[str, list[str]]) -> int:
    """Edge crossings between adjacent layers (quadratic per layer pair: fine for the sizes drawn)."""
    total = 0
    for upper, lower in zip(order, order[1:]):
        pos = {n: i for i, n in enumerate(lower)}
        pairs = [(i, pos[v]) for i, u in enumerate(upper) for v in adj_down.get(u, []) if v in pos]
        pairs.sort()
        for a in range(len(pairs)):
            for b in range(a + 1, len(pairs)):
                if pairs[a][0] < pairs[b][0] and pairs[a][1] > pairs[b][1]:
                    total += 1
    return total


def _order(layers: list[list[str]], down: dict[str, list[str]], up: dict[str, list[str]]) -> list[list[str]]:
    order = [list(layer) for layer in layers]
    best = [list(layer) for layer in order]
    best_cost = _crossings(order, down) if len(down) <= MAX_COUNTED else 0
    for sweep in range(SWEEPS):
        rng = range(1, len(order)) if sweep % 2 == 0 else range(len(order) - 2, -1, -1)
        for k in rng:
            ref = order[k - 1] if sweep % 2 == 0 else order[k + 1]
            nbrs = up if sweep % 2 == 0 else down
            pos = {n: i for i, n in enumerate(ref)}
            current = {n: i for i, n in enumerate(order[k])}

            def bary(n: str) -> float:
                ps = [pos[m] for m in nbrs.get(n, []) if m in pos]
                return sum(ps) / len(ps) if ps else current[n] * len(ref) / max(len(order[k]), 1)

            order[k].sort(key=lambda n: (bary(n), current[n]))
        cost = _crossings(order, down) if len(down) <= MAX_COUNTED else best_cost - 1
        if cost < best_cost:
            best, best_cost = [list(layer) for layer in order], cost
    return best


def _place_row(row: list[str], desired: dict[str, float], width: dict[str, float]) -> dict[str, float]:
    def sep(a: str, b: str) -> float:
        return (width[a] + width[b]) / 2 + NODE_GAP

    right: list[float] = []
    for i, n in enumerate(row):
        x = desired[n]
        right.append(x if i == 0 else max(x, right[-1] + sep(row[i - 1], n)))
    left: list[float] = [0.0] * len(row)
    for i in range(len(row) - 1, -1, -1):
        x = desired[row[i]]
        left[i] = x if i == len(row) - 1 else min(x, left[i + 1] - sep(row[i], row[i + 1]))
    xs = [(a + b) / 2 for a, b in zip(left, right)]
    for i in range(1, len(row)):
        xs[i] = max(xs[i], xs[i - 1] + sep(row[i - 1], row[i]))
    return dict(zip(row, xs))


def layered_layout(nodes: list[str], sizes: dict[str, tuple[float, float]], edges: list[tuple[str, str]],
                   pinned_top: set[str] = frozenset(), margin: float = 10.0) -> Layout:
    """Lay out `nodes` (ids, in a stable preferred order) of the given (width, height) sizes
    connected by `edges` (src, dst); nodes in `pinned_top` stay in the first layer."""
    if not nodes:
        return Layout(width=2 * margin, height=2 * margin)
    layer = _layers(nodes, edges, pinned_top)
    size = dict(sizes)
    down: dict[str, list[str]] = {}
    up: dict[str, list[str]] = {}
    chains: dict[int, list[str]] = {}
    for k, (u, v) in enumerate(edges):
        chain = [u]
        for step in range(layer[u] + 1, layer[v]):
            d = f"\0dummy{k}.{step}"
            layer[d] = step
            size[d] = (DUMMY_WIDTH, 0.0)
            chain.append(d)
        chain.append(v)
        chains[k] = chain[1:-1]
        for a, b in zip(chain, chain[1:]):
            down.setdefault(a, []).append(b)
            up.setdefault(b, []).append(a)
    rank = {n: i for i, n in enumerate(nodes)}
    depth = max(layer.values()) + 1
    rows: list[list[str]] = [[] for _ in range(depth)]
    for n in sorted(layer, key=lambda n: (rank.get(n, len(rank)), n)):
        rows[layer[n]].append(n)
    rows = _order(rows, down, up)

    width = {n: size[n][0] for n in layer}
    x: dict[str, float] = {}
    for row in rows:
        cursor = 0.0
        for n in row:
            x[n] = cursor + width[n] / 2
            cursor += width[n] + NODE_GAP
    for sweep in range(4):
        seq = rows if sweep % 2 == 0 else rows[::-1]
        nbrs = up if sweep % 2 == 0 else down
        for row in seq:
            desired = {}
            for n in row:
                ns = nbrs.get(n, []) or down.get(n, []) or up.get(n, [])
                desired[n] = sum(x[m] for m in ns) / len(ns) if ns else x[n]
            x.update(_place_row(row, desired, width))

    heights = [max((size[n][1] for n in row), default=0.0) for row in rows]
    y: dict[str, float] = {}
    span: dict[str, tuple[float, float]] = {}
    top = margin
    for row, h in zip(rows, heights):
        for n in row:
            y[n] = top + h / 2
            span[n] = (top, top + h)
        top += h + LAYER_GAP
    shift = margin - min(x[n] - width[n] / 2 for n in layer)
    out = Layout()
    for n in nodes:
        out.centers[n] = (x[n] + shift, y[n])
    for k, chain in chains.items():
        # a bend runs straight down its whole layer, so it passes tall clusters beside them
        out.bends[k] = [(x[d] + shift, yy) for d in chain for yy in span[d]]
    out.width = max(x[n] + shift + width[n] / 2 for n in layer) + margin
    out.height = top - LAYER_GAP + margin
    return out
