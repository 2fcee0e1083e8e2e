"""Python's cyclic garbage collector paused while a compiler stage builds and rewrites a graph.

HLO graphs are cycles (an instruction lists its users, each user lists it as an operand), and a
pass allocates many short-lived objects; every full collection walks the whole heap, and their
number grows with the allocations, so on a large module the collector's time grows faster than
the module: measured on a 40,000-instruction chain, the pass pipeline took 5.4 s of CPU with the
collector and 3.5 s without (8 full collections). Paused, the garbage a stage leaves is collected
by the next collection after it, as usual; reference counting frees the rest at once.
"""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block (if it was on) and restore it after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
