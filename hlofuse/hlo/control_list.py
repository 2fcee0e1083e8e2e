"""The list type of `HloInstruction.control_predecessors`: a list that counts its edits.

Removing an instruction must drop it from the control predecessors of every instruction that
names it, and instructions keep no list of control successors. A computation therefore keeps the
instructions that have control predecessors (`HloComputation.control_holders`), valid while no
control list anywhere has changed since it was built: `edits()` is that count. Control edges
are rare (most modules have none), so the set is built once per computation and removal costs
O(its size), not a walk of the computation per removed instruction (which made fusion of a long
chain quadratic).
"""
from __future__ import annotations

from typing import Any, Iterable

_edits = [0]  # a one-element list: bumped in place by every change to any control list


def edits() -> int:
    """How many changes all control lists have seen so far (for cache keys)."""
    return _edits[0]


def bump() -> None:
    """Record a change made to a control list behind its back (a reassignment)."""
    _edits[0] += 1


class ControlList(list):
    """A list of control predecessors whose mutators record that they ran."""

    __slots__ = ()

    # (no __init__ of its own: list's, in C, takes the items; every instruction makes one)

    def append(self, item: Any) -> None:
        """list.append, counted."""
        list.append(self, item)
        bump()

    def extend(self, items: Iterable[Any]) -> None:
        """list.extend, counted."""
        list.extend(self, items)
        bump()

    def insert(self, index: int, item: Any) -> None:
        """list.insert, counted."""
        list.insert(self, index, item)
        bump()

    def remove(self, item: Any) -> None:
        """list.remove, counted."""
        list.remove(self, item)
        bump()

    def pop(self, index: int = -1) -> Any:
        """list.pop, counted."""
        bump()
        return list.pop(self, index)

    def clear(self) -> None:
        """list.clear, counted."""
        list.clear(self)
        bump()

    def __setitem__(self, index, value) -> None:
        """list.__setitem__, counted."""
        list.__setitem__(self, index, value)
        bump()

    def __delitem__(self, index) -> None:
        """list.__delitem__, counted."""
        list.__delitem__(self, index)
        bump()

    def __iadd__(self, items: Iterable[Any]) -> "ControlList":
        """list.__iadd__, counted."""
        list.extend(self, items)
        bump()
        return self
