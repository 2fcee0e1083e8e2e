"""The order in which column kernels sum a column's rows (kernels/cpu_reduction_windows.py),
written again in numpy as the tests' reference: windows of WINDOW rows counted from the unit's
first row, each window's sum added into a first level of partial sums, every WINDOW of those
into a second level, and so on; at the end the levels, highest first, then the last window.

Every addition is one float addition of x's type, as numpy does it on arrays of that type; a
unit's first window starts from +0 (the init value), every later window and every level from
-0 (the sum's identity)."""
from __future__ import annotations

import numpy as np

WINDOW = 32


def windowed_sum(rows: np.ndarray) -> np.ndarray:
    """The sum over axis 0 of `rows` (a unit's rows, in order) as a column kernel computes it."""
    dtype = rows.dtype
    zero = np.zeros(rows.shape[1:], dtype)
    block, levels = zero.copy(), []
    for n, row in enumerate(rows, 1):
        block = (block + row).astype(dtype)
        span, k = WINDOW, 0
        while n % span == 0:
            if k == len(levels):
                levels.append(np.full(rows.shape[1:], -0.0, dtype))
            lower = block if k == 0 else levels[k - 1]
            levels[k] = (levels[k] + lower).astype(dtype)
            if k == 0:
                block = np.full(rows.shape[1:], -0.0, dtype)
            else:
                levels[k - 1] = np.full(rows.shape[1:], -0.0, dtype)
            span, k = span * WINDOW, k + 1
    total = None
    for level in reversed(levels):
        total = level if total is None else (total + level).astype(dtype)
    return block if total is None else (total + block).astype(dtype)


def sliced_windowed_sums(rows: np.ndarray, bounds: list[tuple[int, int]]) -> np.ndarray:
    """Column sums of 2-D `rows` as a kernel split into slices [lo, hi) of its rows folds them:
    each slice windowed (`windowed_sum`), then the slices' sums added in slice order."""
    total = None
    for lo, hi in bounds:
        s = windowed_sum(rows[lo:hi])
        total = s if total is None else (total + s).astype(rows.dtype)
    return total
