"""Graph walks without recursion: the one depth-first post order every walk of the IR uses
(instructions by operands, computations by callees, element generators by operands), so no
module depth reaches Python's recursion limit."""
from __future__ import annotations

from typing import Callable, Hashable, Iterable, TypeVar

Node = TypeVar("Node", bound=Hashable)


def post_order(roots: Iterable[Node], children: Callable[[Node], Iterable[Node]],
               seen: set | None = None) -> list[Node]:
    """Every node reachable from `roots` through `children`, each after all of its children
    (depth first, roots and children in the order given), with an explicit stack. Nodes in
    `seen` (updated in place) are neither visited nor returned."""
    seen = set() if seen is None else seen
    order: list[Node] = []
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(children(root)))]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                order.append(node)
            elif nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, iter(children(nxt))))
    return order
