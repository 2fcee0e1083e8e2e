"""Buffer assignment with liveness for one executed computation.

Kernel outputs that are temporaries get offsets in one arena (allocated once per program
and reused by every call, runtime/program.py); a temporary's bytes are reused as soon as its
last reader has run. Values that flow into the computation's result get a fresh allocation
per call (the caller keeps them; the CPU recycles dropped ones, runtime/output_pool.py).
Inputs are never copied.

Aliasing is conservative: a tuple, get-tuple-element or library op (whose result may be a
view of an input) joins its operands' alias class, and a class lives until the last use of
any member; a class that reaches the root is never put in the arena.
"""
from __future__ import annotations

from dataclasses import dataclass, field

ALIGN = 64


@dataclass
class Slot:
    """Where a kernel output leaf lives: `offset` in the arena, or fresh per call (offset None)."""

    nbytes: int
    offset: int | None = None


@dataclass
class Assignment:
    """Arena size and a slot per (step index, output leaf)."""

    arena_bytes: int = 0
    slots: dict[tuple[int, int], Slot] = field(default_factory=dict)
    reused_bytes: int = 0  # bytes served from freed temporaries (a measure of reuse)


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        """The representative of `x`'s class."""
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        """Merge the classes of `a` and `b`."""
        self.parent[self.find(a)] = self.find(b)


def assign_buffers(steps: list, root_step: int) -> Assignment:
    """Assign buffers for `steps`: each has `.operand_steps` (indices of the steps it reads),
    `.aliases_operands` (bool) and `.kernel_leaf_bytes` (list of byte sizes of the kernel
    output leaves it writes, empty for non-kernels)."""
    uf = _UnionFind()
    for i, s in enumerate(steps):
        uf.find(i)
        if s.aliases_operands:
            for j in s.operand_steps:
                uf.union(i, j)
    last_use: dict[int, int] = {}
    for i, s in enumerate(steps):
        last_use.setdefault(uf.find(i), i)
        for j in s.operand_steps:
            c = uf.find(j)
            last_use[c] = max(last_use.get(c, j), i)
    live_out = uf.find(root_step)
    result = Assignment()
    free: list[tuple[int, int]] = []  # (offset, size) blocks
    end = 0
    owned: dict[int, list[tuple[int, int]]] = {}  # class -> blocks it holds
    expiring: dict[int, list[int]] = {}
    for c, i in last_use.items():
        expiring.setdefault(i, []).append(c)
    for i, s in enumerate(steps):
        c = uf.find(i)
        for k, nbytes in enumerate(s.kernel_leaf_bytes):
            if c == live_out:
                result.slots[(i, k)] = Slot(nbytes)
                continue
            size = max(ALIGN, -(-nbytes // ALIGN) * ALIGN)
            best = None
            for n, (off, sz) in enumerate(free):
                if sz >= size and (best is None or sz < free[best][1]):
                    best = n
            if best is not None:
                off, sz = free.pop(best)
                if sz > size:
                    free.append((off + size, sz - size))
                result.reused_bytes += nbytes
            else:
                off = end
                end += size
            owned.setdefault(c, []).append((off, size))
            result.slots[(i, k)] = Slot(nbytes, off)
        # Free after this step's outputs are placed, so no kernel writes over its own inputs.
        for dead in expiring.get(i, []):
            if dead != live_out:
                free.extend(owned.pop(dead, []))
    result.arena_bytes = end
    return result
