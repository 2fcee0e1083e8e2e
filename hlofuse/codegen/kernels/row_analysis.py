"""What a row kernel computes (kernels/cpu_row.py): the analysis of a fused computation into rows.

`row_layout` finds the rows (the leading, kept dimensions of the reduces' inputs), the levels of
reduces folded per loop over a row, and the outputs (of the rows' dimensions, or one value per
row), or says in a sentence why the computation is not a row kernel; `reused_values` finds the
values the last reduction loop computes that the output loop would compute again. Shared by
the planner (codegen/row_fusion.py, through cpu_row) and the emitter (cpu_row.emit_row_kernel).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...hlo.ir import HloComputation, HloInstruction
from .args import output_leaves
from .reduction_groups import is_order_sensitive_reduce


@dataclass(frozen=True)
class RowLayout:
    """How a row kernel computes a fused computation: rows are the leading `kept` dimensions
    of `in_dims`, a row the trailing ones; `levels` are the reduces folded per row loop;
    `row_outputs` output leaves of dimensions `in_dims`, `per_row_outputs` of the kept ones."""

    in_dims: tuple[int, ...]
    kept: int
    levels: tuple[tuple[HloInstruction, ...], ...]
    row_outputs: tuple[int, ...]
    per_row_outputs: tuple[int, ...]
    row_bytes: int  # bytes of every parameter leaf's row (the working set kept in cache)

    @property
    def rows(self) -> int:
        """Number of rows (work units)."""
        return math.prod(self.in_dims[:self.kept])

    @property
    def row_elements(self) -> int:
        """Elements per row."""
        return math.prod(self.in_dims[self.kept:])

    @property
    def passes(self) -> int:
        """Loops over each row: one per level of reduces, one for the outputs."""
        return len(self.levels) + (1 if self.row_outputs else 0)


def _reduces(comp: HloComputation) -> list[HloInstruction]:
    return [i for i in comp.post_order() if i.opcode == "reduce"]


def _bitcast_is_reshape(inst: HloInstruction) -> bool:
    def m2m(shape):
        layout = shape.layout
        return tuple(layout.minor_to_major) if layout is not None else tuple(range(shape.rank - 1, -1, -1))

    op = inst.operands[0].shape
    return (inst.shape.is_array and op.is_array and m2m(inst.shape) == tuple(range(inst.shape.rank - 1, -1, -1))
            and m2m(op) == tuple(range(op.rank - 1, -1, -1)))


def _row_strides(comp: HloComputation, rows: int, row_elements: int, reduces: list[HloInstruction]) -> str | None:
    """Check that every value depending on a reduce reads it at the current row only.

    Each such instruction Y is given a row stride s: when the kernel computes row r, Y is read
    only at linear indices r*s .. r*s+s-1 (a D-shaped value has s = row length, a reduce s = 1).
    Elementwise ops, reshapes (row-major: the linear index is kept) and broadcasts that put
    their operand in the leading dimensions (the operand's linear index is Y's divided by the
    trailing dimensions' size) pass a stride down; a reduce must be reached with s = 1, so its
    value is the current row's. Anything else that reads a reduce refuses (a reason is returned)."""
    reaches: set[HloInstruction] = set()
    for i in comp.post_order():
        if i.opcode == "reduce" or any(o in reaches for o in i.operands):
            reaches.add(i)
    stride: dict[HloInstruction, int] = {}
    work: list[tuple[HloInstruction, int]] = []
    for k, leaf in enumerate(output_leaves(comp)):
        n = leaf.shape.element_count()
        if leaf.inst in reaches:
            work.append((leaf.inst, n // rows if rows and n % rows == 0 else -1))
    for r in reduces:
        work.append((r.operands[0], row_elements))
        for init in r.operands[len(r.operands) // 2:]:
            if init in reaches:
                return f"the init value of {r.name} depends on a reduce"
    while work:
        inst, s = work.pop()
        if inst not in reaches:
            continue
        if s < 0:
            return f"{inst.name} ({inst.shape}) is not a whole number of values per row"
        if inst in stride:
            if stride[inst] != s:
                return f"{inst.name} is read at two different row strides ({stride[inst]} and {s})"
            continue
        stride[inst] = s
        if inst.shape.is_array and inst.shape.element_count() != rows * s:
            return f"{inst.name} ({inst.shape}) does not have {s} values per row"
        op = inst.opcode
        if op == "reduce":
            if s != 1:
                return f"{inst.name} is read {s} elements per row, not at its own row"
            continue
        if inst.info.elementwise or op in ("reshape", "copy", "get-tuple-element") or (
                op == "bitcast" and _bitcast_is_reshape(inst)) or (
                op == "transpose" and tuple(inst.attrs["dimensions"]) == tuple(range(inst.shape.rank))):
            if op == "get-tuple-element" and inst.operands[0].opcode != "reduce":
                return f"{inst.name} reads a tuple that is not a reduce"
            work.extend((o, s) for o in inst.operands)
            continue
        if op == "broadcast":
            dims = tuple(inst.attrs.get("dimensions", ()))
            m = len(dims)
            trailing = math.prod(inst.shape.dims[m:])
            if dims != tuple(range(m)) or s % trailing:
                return (f"{inst.name} broadcasts a reduced value along dimensions {list(dims)} of "
                        f"{inst.shape}, not back along the reduced (trailing) dimensions")
            work.append((inst.operands[0], s // trailing))
            continue
        return f"{inst.name} ('{op}') reads a reduce in a way a row kernel cannot follow"
    return None


def row_layout(comp: HloComputation) -> RowLayout | str:
    """How a row kernel computes `comp`, or a sentence saying why it cannot."""
    reduces = _reduces(comp)
    if not reduces:
        return "it has no reduce"
    first = reduces[0]
    in_dims = tuple(first.operands[0].shape.dims)
    for r in reduces:
        if is_order_sensitive_reduce(r):
            return (f"{r.name} reduces into {r.shape.dtype}, whose order (XLA:CPU's tree) is part of "
                    f"its result")
        for x in r.operands[:len(r.operands) // 2]:
            if tuple(x.shape.dims) != in_dims:
                return f"its reduces read inputs of different dimensions ({first.name}, {r.name})"
        rdims = sorted(int(d) for d in r.attrs["dimensions"])
        if not rdims or rdims != list(range(len(in_dims) - len(rdims), len(in_dims))):
            return f"{r.name} reduces dimensions {rdims} of {list(in_dims)}, not the trailing (row) ones"
        if tuple(sorted(int(d) for d in first.attrs["dimensions"])) != tuple(rdims):
            return f"{first.name} and {r.name} reduce different dimensions"
    kept = len(in_dims) - len(first.attrs["dimensions"])
    if kept == 0:
        return "it reduces every dimension (one row: nothing to share across cores)"
    rows, row_elements = math.prod(in_dims[:kept]), math.prod(in_dims[kept:])
    reason = _row_strides(comp, rows, row_elements, reduces)
    if reason is not None:
        return reason
    row_out, per_row = [], []
    for k, leaf in enumerate(output_leaves(comp)):
        dims = tuple(leaf.shape.dims)
        if dims == in_dims:
            row_out.append(k)
        elif leaf.shape.element_count() == rows:  # one value per row ([rows] or [rows, 1])
            per_row.append(k)
        else:
            return f"output {k} ({leaf.shape}) has neither the rows' dimensions nor one value per row"
    # Levels: a reduce goes one level after the deepest reduce its input reads.
    level: dict[HloInstruction, int] = {}
    depth: dict[HloInstruction, int] = {}
    for i in comp.post_order():
        d = max((depth[o] for o in i.operands), default=0)
        if i.opcode == "reduce":
            level[i] = d
            d += 1
        depth[i] = d
    levels = tuple(tuple(r for r in reduces if level[r] == n) for n in range(max(level.values()) + 1))
    row_bytes = sum(p.shape.dtype.byte_size * row_elements for p in comp.parameters
                    if p.shape.is_array and p.shape.element_count() == rows * row_elements)
    return RowLayout(in_dims, kept, levels, tuple(row_out), tuple(per_row), row_bytes)


def _cone(inst: HloInstruction, stop: frozenset = frozenset()) -> set[HloInstruction]:
    """`inst` and every instruction it is computed from, not looking past those in `stop`."""
    found, stack = set(), [inst]
    while stack:
        i = stack.pop()
        if i not in found:
            found.add(i)
            if i not in stop:
                stack.extend(i.operands)
    return found


def reused_values(comp: HloComputation, layout: RowLayout) -> dict[int, HloInstruction]:
    """Values the last reduction loop computes that the output loop would compute again
    (softmax's exp(x - max), summed and then divided; codegen/row_fusion.py merges the copies
    XLA's fusions made of it, so it is one instruction here): per row output leaf k, the
    instruction whose value the reduction loop stores in output k's row (or a row buffer,
    cpu_row.buffers_kept_values) and the output loop reads back, instead of evaluating it
    twice. The value has the rows' dimensions and output
    k's type (so the buffer holds it exactly), lies in the cones of a last-level reduce's input
    and of the output, does not depend on that level's reduces, and has in its cone an
    elementwise op of the rows' dimensions that XLA calls expensive (exp, log, tanh ...: a
    per-row divide does not count); the latest such in post order."""
    if not layout.levels or not layout.row_outputs:
        return {}
    last = layout.levels[-1]
    reduces = frozenset(r for lvl in layout.levels for r in lvl)
    folded: set[HloInstruction] = set()
    for r in last:
        for x in r.operands[:len(r.operands) // 2]:
            folded |= _cone(x)
    after_last = set(last)
    order = comp.post_order()
    for i in order:
        if any(o in after_last for o in i.operands):
            after_last.add(i)
    leaves = output_leaves(comp)
    kept: dict[int, HloInstruction] = {}
    taken: set[HloInstruction] = set()
    for k in layout.row_outputs:
        leaf = leaves[k]
        if leaf.path:
            continue
        # The output loop reads the reduces' accumulators, not their inputs.
        shared = _cone(leaf.inst, stop=reduces) & folded
        for i in reversed(order):
            if (i in shared and i not in after_last and i not in taken and i.opcode not in ("parameter", "constant")
                    and i.shape.is_array and tuple(i.shape.dims) == layout.in_dims
                    and i.shape.dtype == leaf.shape.dtype and i is not leaf.inst
                    and any(c.info.elementwise and c.info.expensive and c.shape.is_array
                            and tuple(c.shape.dims) == layout.in_dims for c in _cone(i, stop=reduces))):
                kept[k] = i
                taken.add(i)
                break
    return kept
