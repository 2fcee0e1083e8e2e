"""Scatter to dynamic-update-slice: XLA's rewrite of a scatter that only overwrites whole windows
at constant indices (as `x.at[..., 0].set(v)` lowers) into dynamic-update-slice(s).

A scatter qualifies when it has one operand, its combiner returns the update (assignment), its
indices are a constant, it has no batching dimensions and at most `max_windows` index vectors.
Each window that lies inside the operand becomes

    dynamic-update-slice(operand, reshape(slice of the update at that position), starts...)

in scatter order (a later window overwrites an earlier one, as assignment does); a window
outside the operand is skipped, as scatter skips it. The result fuses as a dynamic-update-slice
(in place, over the window only: codegen/kernels/cpu_dus.py), which is what XLA:CPU's optimized
HLO of an image normalisation does. The rule is ported from XLA's behaviour, not its code.

Then the dynamic-update-slices at constant starts are simplified (passes/dus_rules.py): slices
of them that read only the operand or only the update read that directly, and an update of
the window next to (or covering) the one its operand wrote becomes one update of both, so
channel assignments in a row are one dynamic-update-slice, one loop kernel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..hlo.dtypes import S32
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..hlo.shapes import array
from .dus_rules import merged_update, slice_of_update
from .pass_base import HloPass
from .rewrite import Rewriter
from .simplifier_base import new_scalar_constant


def _is_assignment(comp: HloComputation) -> bool:
    """Whether the combiner is f(old, new) = new."""
    params = comp.parameters
    return len(params) == 2 and comp.root is next(p for p in params if p.parameter_number == 1)


def _windows(scatter: HloInstruction, max_windows: int) -> list[tuple[list[int], list[int]]] | None:
    """(operand start per dimension, update position per update dimension) of every window of
    `scatter` that lies inside its operand, in scatter order; None when it does not qualify."""
    a = scatter.attrs
    if len(scatter.operands) != 3 or not _is_assignment(a["to_apply"]):
        return None
    operand, indices, update = scatter.operands
    if indices.opcode != "constant" or indices.literal is None or a.get("input_batching_dims") or a.get("scatter_indices_batching_dims"):
        return None
    wdims = [int(d) for d in a.get("update_window_dims", ())]
    inserted = [int(d) for d in a.get("inserted_window_dims", ())]
    to_operand = [int(d) for d in a.get("scatter_dims_to_operand_dims", ())]
    ivd = int(a["index_vector_dim"])
    op_dims, upd_dims = list(operand.shape.dims), list(update.shape.dims)
    sdims = [d for d in range(len(upd_dims)) if d not in wdims]
    positions = math.prod(upd_dims[d] for d in sdims)
    if positions > max_windows or 0 in upd_dims:
        return None
    idx = np.asarray(indices.literal).astype(np.int64)
    if ivd == idx.ndim:
        idx = idx[..., None]
    idx = np.moveaxis(idx, ivd, -1).reshape(-1, idx.shape[ivd] if ivd < idx.ndim else 1)
    window_op_dims = [d for d in range(len(op_dims)) if d not in inserted]
    sizes = [1] * len(op_dims)
    for od, ud in zip(window_op_dims, wdims):
        sizes[od] = upd_dims[ud]
    out = []
    for p, vector in enumerate(idx):
        starts = [0] * len(op_dims)
        for k, od in enumerate(to_operand):
            starts[od] = int(vector[k])
        if all(0 <= s <= n - w for s, n, w in zip(starts, op_dims, sizes)):
            pos = list(np.unravel_index(p, [upd_dims[d] for d in sdims])) if sdims else []
            out.append((starts, [int(v) for v in pos]))
    return out


def _window_update(scatter: HloInstruction, pos: list[int]) -> HloInstruction:
    """The update of one window, shaped like the operand window (size 1 where inserted)."""
    a = scatter.attrs
    operand, _indices, update = scatter.operands
    upd_dims = list(update.shape.dims)
    wdims = [int(d) for d in a.get("update_window_dims", ())]
    sdims = [d for d in range(len(upd_dims)) if d not in wdims]
    x = update
    if any(upd_dims[d] != 1 for d in sdims):
        spec = [(0, n, 1) for n in upd_dims]
        for d, v in zip(sdims, pos):
            spec[d] = (v, v + 1, 1)
        x = HloInstruction("slice", array(update.shape.dtype, [hi - lo for lo, hi, _ in spec]), [x],
                           {"slice": spec}, name="slice")
    inserted = [int(d) for d in a.get("inserted_window_dims", ())]
    window_op_dims = [d for d in range(operand.shape.rank) if d not in inserted]
    dims = [1] * operand.shape.rank
    for od, ud in zip(window_op_dims, wdims):
        dims[od] = upd_dims[ud]
    # Window dimensions keep their order and the others have size 1, so a reshape keeps the
    # elements in place.
    return HloInstruction("reshape", array(update.shape.dtype, dims), [x], name="reshape")


@dataclass(frozen=True)
class ScatterToDynamicUpdateSlice(HloPass):
    """Rewrite assignment scatters at constant indices into dynamic-update-slices."""

    max_windows: int = 8
    name: ClassVar[str] = "scatter-simplifier"

    def run(self, module: HloModule) -> bool:
        """Rewrite every qualifying scatter; True if any was."""
        changed = False
        for comp in module.computations_post_order():
            rewriter = Rewriter(comp)
            for inst in list(comp.instructions):
                if inst.opcode != "scatter" or inst.shape.is_tuple:
                    continue
                windows = _windows(inst, self.max_windows)
                if windows is None:
                    continue
                value = inst.operands[0]
                for starts, pos in windows:
                    update = _window_update(inst, pos)
                    value = HloInstruction("dynamic-update-slice", inst.shape,
                                           [value, update, *(new_scalar_constant(S32, s) for s in starts)],
                                           name="dynamic-update-slice")
                rewriter.replace(inst, value)
                changed = True
            rewriter.finish()
            while _simplify_updates(comp):
                changed = True
        return changed


def _simplify_updates(comp: HloComputation) -> bool:
    """One sweep of the dynamic-update-slice rules over `comp`; True if any applied."""
    rewriter = Rewriter(comp)
    changed = False
    for inst in list(comp.instructions):  # slices first: they release their operand's users
        if inst.opcode == "slice" and inst.operands[0].opcode == "dynamic-update-slice":
            new = slice_of_update(inst)
            if new is not None:
                rewriter.replace(inst, new)
                changed = True
    for inst in list(comp.instructions):
        if inst.opcode == "dynamic-update-slice" and inst.operands[0].opcode == inst.opcode:
            new = merged_update(inst)
            if new is not None:
                rewriter.replace(inst, new)
                changed = True
                break  # the replaced pair's users changed: the next sweep sees them afresh
    rewriter.finish()
    return changed
