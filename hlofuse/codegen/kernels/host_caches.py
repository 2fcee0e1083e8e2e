"""The host's cache sizes, as the kernels' cost rules ask for them.

Read once from /sys/devices/system/cpu/cpu0/cache (Linux); a host that does not describe its
caches gets common sizes. The reduction kernels ask whether an input comes from memory (it
exceeds L3: reduction_groups.ReductionGroup.block_columns), the row kernels whether a row fits L2
(cpu_row.row_budget_bytes) and whether their rows come from memory.
"""
from __future__ import annotations

import functools
import glob
import os

# Used when the host does not say (no /sys cache description): common L2 (per core) and L3 sizes.
DEFAULT_L2_BYTES = 256 << 10
DEFAULT_L3_BYTES = 8 << 20


@functools.cache
def cache_bytes(level: int) -> int | None:
    """The size in bytes of cpu0's level-`level` cache (unified or data), or None when the host
    does not describe it."""
    for d in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(os.path.join(d, "level")) as f:
                found = f.read().strip()
            with open(os.path.join(d, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(d, "size")) as f:
                size = f.read().strip()
        except OSError:
            continue
        if found != str(level) or kind not in ("Unified", "Data"):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:].upper(), 1)
        digits = size[:-1] if scale != 1 else size
        if digits.isdigit():
            return int(digits) * scale
    return None


def l2_cache_bytes() -> int:
    """The L2 cache size of cpu0 in bytes, or DEFAULT_L2_BYTES when the host does not say."""
    return cache_bytes(2) or DEFAULT_L2_BYTES


def l3_cache_bytes() -> int:
    """The L3 cache size of cpu0 in bytes (shared by its cores), or DEFAULT_L3_BYTES."""
    return cache_bytes(3) or DEFAULT_L3_BYTES
