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


def instruction_post_order(comp) -> list:
    """The instructions of HloComputation `comp`, each after its operands and control
    predecessors in `comp`: `post_order` from each instruction in list order, children the
    operands then the control predecessors (those of another computation passed over).
    Written out, not `post_order` with a children function: every pass and fusion's sorting
    walks computations so, and the call per node and the list it built were most of the
    walk's time."""
    order: list = []
    seen: set = set()
    for root in comp.instructions:
        if root in seen:
            continue
        seen.add(root)
        control = root.control_predecessors
        stack = [(root, iter(root.operands + control if control else root.operands))]
        while stack:
            node, it = stack[-1]
            for nxt in it:
                if nxt not in seen and nxt.parent is comp:
                    seen.add(nxt)
                    control = nxt.control_predecessors
                    stack.append((nxt, iter(nxt.operands + control if control else nxt.operands)))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def in_post_order(comp) -> bool:
    """Whether each instruction of `comp`'s list comes after its operands and control
    predecessors in `comp`. Such a list is its own `instruction_post_order` (the walk from
    each instruction finds its children visited already, so adds it alone), and this check
    costs less than the walk: sorting a list that is in order (most that passes sort) is
    then free."""
    seen: set = set()
    for inst in comp.instructions:
        for o in inst.operands:
            if o not in seen and o.parent is comp:
                return False
        control = inst.control_predecessors
        if control:
            for o in control:
                if o not in seen and o.parent is comp:
                    return False
        seen.add(inst)
    return True


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
