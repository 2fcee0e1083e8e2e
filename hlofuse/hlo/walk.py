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


def first_non_elementwise_use(start, dims: tuple[int, ...], allowed=frozenset()):
    """The first instruction on a path of users from `start` (within its computation) that is
    not an elementwise op of `dims`, or None. Users in `allowed` end a path without being
    checked (a root transpose or reshape an epilogue writes through). A dot's or a
    convolution's epilogue is fusible when this is None: it then reads the result only at
    its own index."""
    comp = start.parent
    stack, seen = [start], set()
    while stack:
        for user in stack.pop().users:
            if user in seen or user.parent is not comp or user in allowed:
                continue
            if not user.info.elementwise or tuple(user.shape.dims) != dims:
                return user
            seen.add(user)
            stack.append(user)
    return None
