"""XLA's ReduceWindowRewriter, its scan half: a cumulative reduce-window (a cumsum, cumprod,
cummax or cummin as JAX lowers them on the CPU) becomes a two-level tree, for the compiled
backends.

JAX writes `jnp.cumsum(x, axis)` as one reduce-window whose window spans the whole axis,
padded by the axis' length less one: every output element folds its own prefix, N(N+1)/2 steps
for an axis of N. A mixture-of-experts layer's slot positions (a cumsum over 4,096 routed
tokens) took 289 ms of its 314 that way, where XLA:CPU, which runs this rewrite, took 22 ms
for the whole layer. With the axis cut into blocks of B = `BASE_LENGTH` (XLA:CPU's 16):

    x (padded with the init to a multiple of B along the axis, split into [.., N/B, B, ..])
    inner = reduce-window over each block (window B, padded B-1): the scan within a block
    totals = inner's last column (the first for a reverse scan)
    outer = exclusive scan of `totals` along the blocks (a reduce-window again: N/B long, so
            the pass runs until none is left longer than B)
    result = reducer(broadcast(outer), inner), reshaped back, the padding sliced off

2N steps and a scan of N/B block totals. Only where the fold may be split: one operand, a
reducer that is one binary op of its two parameters, and an init folded in twice changes
nothing (max, min, and, or whatever it is; add, or, xor with 0; multiply with 1). Float results
differ from the single fold in the last bits (the order of the additions changes), as XLA's
do; the interpreter keeps the reduce-window as written and is the oracle.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


from ..hlo.attributes import Window, WindowDimension
from ..hlo.ir import HloInstruction, HloModule
from ..hlo.reducers import binary_reducer_opcode, init_folds_repeatedly
from ..hlo.shapes import array
from .op_expander import OpExpander, add

# The longest window a scan keeps (XLA:CPU's xla_reduce_window_rewrite_base_length).
BASE_LENGTH = 16

def _reducer_op(inst: HloInstruction) -> str | None:
    """The opcode of `inst`'s reducer when it is that op of its two parameters, else None."""
    comp = inst.attrs.get("to_apply")
    return binary_reducer_opcode(comp) if comp is not None else None


def scan_dimension(inst: HloInstruction) -> tuple[int, bool, bool] | None:
    """(dimension, reverse, exclusive) of a cumulative reduce-window the rewrite takes (module
    docstring), else None."""
    if inst.opcode != "reduce-window" or len(inst.operands) != 2 or not inst.shape.is_array:
        return None
    op = _reducer_op(inst)
    if op is None or not init_folds_repeatedly(op, inst.operands[1]):
        return None
    dims = inst.attrs["window"].dimensions
    x = inst.operands[0].shape
    wide = [d for d, w in enumerate(dims) if w.size != 1 or w.padding_low or w.padding_high or w.stride != 1
            or w.window_dilation != 1 or w.base_dilation != 1 or w.window_reversal]
    if len(wide) != 1:
        return None
    d = wide[0]
    n, w = x.dims[d], dims[d]
    if n <= BASE_LENGTH or w.size != n or w.stride != 1 or w.window_dilation != 1 or w.base_dilation != 1 \
            or w.window_reversal:
        return None
    if w.padding_high == 0 and w.padding_low in (n - 1, n):
        return d, False, w.padding_low == n
    if w.padding_low == 0 and w.padding_high in (n - 1, n):
        return d, True, w.padding_high == n
    return None


def _window(rank: int, d: int, size: int, low: int, high: int) -> Window:
    dims = [WindowDimension() for _ in range(rank)]
    dims[d] = WindowDimension(size=size, padding_low=low, padding_high=high)
    return Window(tuple(dims))


def _slice(comp, x: HloInstruction, d: int, start: int, limit: int) -> HloInstruction:
    dims = list(x.shape.dims)
    dims[d] = limit - start
    starts = [(start if k == d else 0, limit if k == d else n, 1) for k, n in enumerate(x.shape.dims)]
    return add(comp, "slice", array(x.shape.dtype, dims), x, slice=tuple(starts))


def rewrite_scan(inst: HloInstruction) -> HloInstruction:
    """The tree (module docstring) computing cumulative reduce-window `inst`, added before it."""
    comp = inst.parent
    d, reverse, exclusive = scan_dimension(inst)
    x, init = inst.operands
    reducer, op = inst.attrs["to_apply"], _reducer_op(inst)
    dtype, dims, rank = x.shape.dtype, list(x.shape.dims), x.shape.rank
    n = dims[d]
    blocks = -(-n // BASE_LENGTH)
    padded = blocks * BASE_LENGTH
    if padded != n:
        config = tuple((0, padded - n, 0) if k == d else (0, 0, 0) for k in range(rank))
        x = add(comp, "pad", array(dtype, dims[:d] + [padded] + dims[d + 1:]), x, init, padding=config)
    tiled = dims[:d] + [blocks, BASE_LENGTH] + dims[d + 1:]
    x = add(comp, "reshape", array(dtype, tiled), x)
    b = d + 1  # the dimension within a block
    low, high = (0, BASE_LENGTH - 1) if reverse else (BASE_LENGTH - 1, 0)
    within = add(comp, "reduce-window", array(dtype, tiled), x, init,
                 window=_window(rank + 1, b, BASE_LENGTH, low, high), to_apply=reducer)
    column = (0, 1) if reverse else (BASE_LENGTH - 1, BASE_LENGTH)
    totals = _slice(comp, within, b, *column)
    per_block = dims[:d] + [blocks] + dims[d + 1:]
    totals = add(comp, "reshape", array(dtype, per_block), totals)
    # the exclusive scan of the block totals: blocks + 1 long, one end dropped
    low, high = (0, blocks) if reverse else (blocks, 0)
    before = add(comp, "reduce-window", array(dtype, dims[:d] + [blocks + 1] + dims[d + 1:]), totals, init,
                 window=_window(rank, d, blocks, low, high), to_apply=reducer)
    before = _slice(comp, before, d, *((1, blocks + 1) if reverse else (0, blocks)))
    spread = add(comp, "broadcast", array(dtype, tiled), before,
                 dimensions=tuple(k for k in range(rank + 1) if k != b))
    scanned = add(comp, op, array(dtype, tiled), spread, within)
    result = add(comp, "reshape", array(dtype, dims[:d] + [padded] + dims[d + 1:]), scanned)
    if padded != n:
        result = _slice(comp, result, d, 0, n)
    if exclusive:  # the window's extra step: the init alone at the open end
        config = tuple(((0, 1, 0) if reverse else (1, 0, 0)) if k == d else (0, 0, 0) for k in range(rank))
        result = add(comp, "pad", inst.shape, result, init, padding=config)
    return result


@dataclass(frozen=True)
class ReduceWindowRewriter(OpExpander):
    """Every cumulative reduce-window longer than BASE_LENGTH becomes a tree of short ones,
    until none is left (module docstring): the scan of the block totals is itself a
    reduce-window, rewritten by the next round. Work: per scan of N, about log_B(N) rounds of
    a few instructions each."""

    name: ClassVar[str] = "reduce-window-rewriter"

    def matches(self, inst: HloInstruction) -> bool:
        """A cumulative reduce-window the rewrite takes (`scan_dimension`)."""
        return scan_dimension(inst) is not None

    def expand(self, inst: HloInstruction, run: dict) -> HloInstruction:
        """Its tree (`rewrite_scan`)."""
        return rewrite_scan(inst)

    def run(self, module: HloModule) -> bool:
        """Rewrite the scans, round after round; True if there was one."""
        changed = False
        while super().run(module):
            changed = True
        return changed
