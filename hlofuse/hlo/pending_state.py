"""HLO objects whose state is read later: the hooks the HLO classes (hlo/ir.py) install so that
an object read from a compile cache entry can stay a shell until first used.

    class HloInstruction:
        __getattr__ = read_pending      # a missing attribute: read the pending state, retry
        __getstate__ = state_to_copy    # copy / pickle: never copy a shell

codegen/module_cache.py makes the shells (a dict holding only PENDING_STATE) on a cache hit.
"""
from __future__ import annotations

from typing import Any

# An HLO object read from a compile cache entry whose state is still unread holds only this key,
# the function that reads its entry's states (codegen/module_cache.py: a cache hit reads the few
# objects running the program needs; the rest of the fused module waits for its first use).
PENDING_STATE = "_pending_state"


def read_pending(obj: Any, name: str) -> Any:
    """`__getattr__` of the HLO classes (called only when `name` is not found): the attribute
    after reading `obj`'s pending state, if it has one."""
    read = obj.__dict__.get(PENDING_STATE)
    if read is None:
        raise AttributeError(f"{type(obj).__name__!r} object has no attribute {name!r}")
    read()  # replaces the dict of every pending object of its entry, this one's included
    if PENDING_STATE in obj.__dict__:
        raise AttributeError(f"{type(obj).__name__!r} object read from a compile cache entry has no state")
    return getattr(obj, name)


def state_to_copy(obj: Any) -> dict:
    """`__getstate__` of the HLO classes (copy, deepcopy, pickle): the object's dict, its
    pending state read first (`PENDING_STATE`), so a copy is never a shell."""
    read = obj.__dict__.get(PENDING_STATE)
    if read is not None:
        read()
    return obj.__dict__
