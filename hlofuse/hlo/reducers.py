"""What a reduction's reducer computation is, for the rewrites that split a fold into pieces
(codegen's partial reductions, codegen/kernels/reduction_groups.slices_keep_init; the scan
rewrite, passes/reduce_window_rewriter.py): which one op of its two parameters it applies, and
whether its init may then be folded in once per piece without changing the result.
"""
from __future__ import annotations

import numpy as np

from .ir import HloComputation, HloInstruction

# Reducers for which folding the init value into every piece changes nothing, whatever the
# init: max(max(i, a), max(i, b)) is max(i, a, b); `and` and `or` likewise.
IDEMPOTENT_REDUCERS = frozenset({"maximum", "minimum", "and", "or"})
# The identity of the other reducers that may be split: only an init equal to it may be folded
# into every piece.
IDENTITIES = {"add": 0.0, "multiply": 1.0, "xor": 0.0}


def binary_reducer_opcode(comp: HloComputation) -> str | None:
    """The opcode of reducer `comp` when it is exactly that op of its two parameters (`add(a,
    b)`, `maximum(a, b)`), else None."""
    root = comp.root
    if root is None or len(comp.parameters) != 2 or len(comp.instructions) != 3 or len(root.operands) != 2:
        return None
    return root.opcode if set(root.operands) == set(comp.parameters) else None


def init_folds_repeatedly(opcode: str | None, init: HloInstruction) -> bool:
    """Whether a fold by binary reducer `opcode` keeps its result when `init` is folded into
    each of several pieces: the reducer is idempotent, or `init` is a rank-0 constant equal to
    its identity."""
    if opcode in IDEMPOTENT_REDUCERS:
        return True
    if opcode not in IDENTITIES or init.opcode != "constant" or init.shape.dims or init.literal is None:
        return False
    return float(np.asarray(init.literal).reshape(())) == IDENTITIES[opcode]
