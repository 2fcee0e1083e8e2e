"""Provenance across modules: from an instruction of a derived module back to the instruction
of the module it was derived from (the rules are hlo/ir.py's module docstring, "Provenance")."""
from __future__ import annotations

from typing import Iterable

from .ir import HloInstruction


class OriginIndex:
    """Maps instructions of a module derived from another (`before`) back to `before`'s.

    Derived means: `HloModule.clone` and passes, in either direction: the passes ran on a clone
    of `before` (the compiler), or on `before`'s source while `before` is a clone kept aside.
    `source(inst)` follows `inst`'s origin links until it meets an instruction of `before` (or
    one that an instruction of `before` was copied from, however many module clones back);
    None when a pass made `inst`."""

    def __init__(self, before: Iterable[HloInstruction]) -> None:
        insts = list(before)
        self._members: set[HloInstruction] = set(insts)
        # every instruction a member was copied from, directly or through module clones (in
        # order: of two copies of one instruction, the first answers)
        self._by_origin: dict[HloInstruction, HloInstruction] = {}
        for inst in insts:
            link = inst.origin
            while link is not None and link not in self._by_origin:
                self._by_origin[link] = inst
                link = link.origin

    def source(self, inst: HloInstruction) -> "HloInstruction | None":
        """The instruction of `before` that `inst` is, copies or was copied from; None if none."""
        link: HloInstruction | None = inst
        while link is not None:
            if link in self._members:
                return link
            found = self._by_origin.get(link)
            if found is not None:
                return found
            link = link.origin
        return None
