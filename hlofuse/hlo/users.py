"""The users of an instruction: an insertion-ordered set with the read API of a list.

`HloInstruction.users` was a list. Removing one user from the middle of a long list (a
parameter read at every step of a 10,000-step chain) scans it, and fusion does that thousands
of times per module, so the passes grew faster than the module. `Users` is a dict whose keys
are the users (the values are unused): insertion, removal and membership take O(1), and a dict
keeps its keys in insertion order, which is exactly the order the list had, because

- an instruction is among `op`'s users at most once (the invariant `HloInstruction.append_operand`
  states), so the list never held a repeat;
- the list appended a new user at its end (a dict inserts a new key at its end) and removed a
  user keeping the others in their order (so does deleting a key); a user removed and added
  again goes to the end in both.

Fusion decisions, printing and kernel order iterate over users, so that order is part of every
result; tests/hlo/test_users.py checks the order against a list kept beside it.

Reading it as a list works: iteration, `len`, truth, `in` (now O(1)), indexing (positional:
`[0]` and `[-1]` take O(1), any other index or slice builds a list), `==` against a list or
another `Users` (order matters, as for lists), `+` with a list (gives a list). Editing it:
`append` (adds a user not there yet; one already there keeps its place) and `remove` (raises
ValueError when absent, as list.remove does). It pickles and copies as the dict it is.
"""
from __future__ import annotations

from typing import Any, Iterable


class Users(dict):
    """The distinct instructions reading one instruction, in the order they started to."""

    __slots__ = ()

    # dict.setdefault(user) inserts `user` at the end when absent and leaves it where it is
    # otherwise: a list's append for a user that is not there yet, at the speed of C (building
    # a module appends once per operand edge).
    append = dict.setdefault

    @classmethod
    def of(cls, insts: Iterable[Any]) -> "Users":
        """A `Users` holding `insts` in their order (a repeat keeps its first place)."""
        return cls.fromkeys(insts)

    def remove(self, inst: Any) -> None:
        """Remove `inst`; ValueError if it is not a user (list.remove's contract)."""
        try:
            del self[inst]
        except KeyError:
            raise ValueError(f"{getattr(inst, 'name', inst)} is not a user") from None

    def __getitem__(self, index: int | slice) -> Any:
        """The user at position `index` (a list's indexing, not a dict's look-up by key)."""
        if isinstance(index, int) and self:
            if index == 0:
                return next(iter(self))
            if index == -1:
                return next(reversed(self))
        return list(self)[index]  # raises IndexError as a list does

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, Users)):
            return len(self) == len(other) and all(a is b or a == b for a, b in zip(self, other))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def __add__(self, other: Iterable[Any]) -> list:
        return list(self) + list(other)

    def __radd__(self, other: Iterable[Any]) -> list:
        return list(other) + list(self)

    def __repr__(self) -> str:
        return f"Users({list(self)!r})"
