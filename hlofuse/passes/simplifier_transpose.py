"""Simplifier rules for transposes (XLA's AlgebraicSimplifier::HandleTranspose).

transpose(dot(a, b)) => dot(b, a): a dot's result lists its batch dimensions, then the free
dimensions of its lhs, then those of its rhs; swapping the operands swaps the two free groups,
so a transpose that keeps the batch dimensions among themselves and exchanges the two groups
(each kept in order) is free in the dot (XLA's "Transpose(dot(a,b))->dot(b,a) for any dot").
One that also reorders the free dimensions within a group (with or without exchanging them)
moves that reordering onto the operand, a transpose of it, where the operands so copied hold no
more elements than the result (hlofuse's own extension: a large result read transposed by every
consumer costs more than a small operand the GEMM packs anyway).
The new dot takes the transpose's shape, layout included, and only a dot the transpose alone
uses is rewritten (another user would need the dot as it is: two dots instead of one).
Every element is the same sum of the same products in the same order: bit for bit.

dot(transpose(a), b) => dot(a, b) with a's dimension numbers (XLA's TransposeFolding, which
XLA:CPU runs for the dots its GEMMs can read transposed, as hlofuse's all can): a transposed
operand's batch and contracting dimensions are dimensions of a, and when the transpose keeps
the free dimensions in their order the result lists them alike. Same products, same sums.

A transpose that moves only dimensions of size 1 keeps the elements in order: a reshape
(XLA's OnlyPermutesDegenerateDims).
"""
from __future__ import annotations

from ..hlo.attributes import Raw
from ..hlo.ir import HloInstruction
from ..hlo.shapes import ArrayShape, Layout
from .simplifier_base import Rule, new_instruction

_DOT_DIMS = ("lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims", "rhs_contracting_dims")


def _swapped_precision(value):
    """operand_precision={lhs,rhs} for the swapped operands."""
    text = str(value).strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    parts = [p.strip() for p in text[1:-1].split(",")]
    if len(parts) != 2:
        return None
    return Raw("{" + parts[1] + "," + parts[0] + "}")


# Users that read a value's elements and nothing of its layout besides (`_reads_logically`).
_LOGICAL_READERS = frozenset({"reduce", "dot", "broadcast", "reshape", "transpose", "slice", "concatenate", "pad",
                              "reduce-window", "dynamic-slice", "gather", "reverse"})


def _reads_logically(user: HloInstruction) -> bool:
    """Whether `user` reads its operands by element only (an elementwise op or `_LOGICAL_READERS`)."""
    return user.info.elementwise or user.opcode in _LOGICAL_READERS


def _in_order(order: tuple[int, ...]) -> bool:
    return order == tuple(range(len(order)))


def _free_dims_ordered(operand: HloInstruction, fixed: tuple[int, ...], order: tuple[int, ...]) -> HloInstruction:
    """`operand` of a dot, its free dimensions (those not in `fixed`) put in `order` (the k-th
    free dimension of the result is the operand's `order[k]`-th) by a transpose that leaves
    every other dimension where it is; `operand` itself when `order` is the identity."""
    if _in_order(order):
        return operand
    free = [d for d in range(operand.shape.rank) if d not in fixed]
    perm = list(range(operand.shape.rank))
    for slot, k in zip(free, order):
        perm[slot] = free[k]
    shape = operand.shape
    dims = tuple(shape.dims[p] for p in perm)
    row_major = Layout(tuple(range(len(dims) - 1, -1, -1)))
    return HloInstruction("transpose", ArrayShape(shape.dtype, dims, layout=row_major), [operand],
                          {"dimensions": tuple(perm)}, name="transpose")


def transpose_of_dot(inst: HloInstruction) -> HloInstruction | None:
    """transpose(dot(a, b)) => dot(b, a) when the transpose only exchanges the free groups."""
    dot = inst.operands[0]
    # a dot ordered after others by control edges is left alone, as the simplifier leaves them
    if dot.opcode != "dot" or len(dot.users) != 1 or dot.is_root() or dot.control_predecessors:
        return None
    if set(dot.attrs) - set(_DOT_DIMS) - {"operand_precision", "metadata"}:
        return None  # sparsity, an algorithm: left alone
    lhs, rhs = dot.operands
    lb, rb, lc, rc = (tuple(int(d) for d in dot.attrs.get(k, ())) for k in _DOT_DIMS)
    perm = tuple(int(p) for p in inst.attrs["dimensions"])
    nb = len(lb)
    n_lhs = lhs.shape.rank - nb - len(lc)
    n_rhs = rhs.shape.rank - nb - len(rc)
    if any(p >= nb for p in perm[:nb]):
        return None
    rhs_order = tuple(p - nb - n_lhs for p in perm[nb:nb + n_rhs])  # rhs free dims, as the result lists them
    lhs_order = tuple(p - nb for p in perm[nb + n_rhs:])
    if sorted(rhs_order) != list(range(n_rhs)) or sorted(lhs_order) != list(range(n_lhs)):
        return None
    if not (_in_order(rhs_order) and _in_order(lhs_order)):
        # A group the transpose also reorders within: its operand is transposed so that its
        # free dimensions come in that order (keras_hub Gemma's scores: dot -> [b,1,q,k,h],
        # read as [b,1,h,k,q]; a loop over the result read it 4 KiB apart per element). Only
        # where the operands so copied hold no more elements than the result does.
        copied = (0 if _in_order(rhs_order) else rhs.shape.element_count()) + \
                 (0 if _in_order(lhs_order) else lhs.shape.element_count())
        if copied > inst.shape.element_count():
            return None
        rhs = _free_dims_ordered(rhs, rb + rc, rhs_order)
        lhs = _free_dims_ordered(lhs, lb + lc, lhs_order)
    attrs: dict = {
        "lhs_batch_dims": tuple(rb[p] for p in perm[:nb]),
        "rhs_batch_dims": tuple(lb[p] for p in perm[:nb]),
        "lhs_contracting_dims": rc,
        "rhs_contracting_dims": lc,
    }
    attrs = {k: v for k, v in attrs.items() if v or k in dot.attrs}
    if "operand_precision" in dot.attrs:
        swapped = _swapped_precision(dot.attrs["operand_precision"])
        if swapped is None:
            return None
        attrs["operand_precision"] = swapped
    if "metadata" in dot.attrs:
        attrs["metadata"] = dot.attrs["metadata"]
    shape = inst.shape
    if not shape.is_row_major() and not inst.is_root() and all(_reads_logically(u) for u in inst.users):
        # A transpose written with its operand's layout (a bitcast for XLA: JAX's einsums emit
        # them) made the new dot write that layout too, and every consumer read it across
        # lines. The layout of a value inside a computation is hlofuse's to choose where its
        # users only read its elements (not a tuple, a call, a loop or the result, whose shapes
        # carry it): row-major, the order the consumers' loops walk.
        shape = ArrayShape(shape.dtype, shape.dims, shape.dynamic, Layout(tuple(range(shape.rank - 1, -1, -1))))
    return new_instruction(inst, "dot", [rhs, lhs], attrs, shape)


def fold_operand_transposes(inst: HloInstruction) -> HloInstruction | None:
    """dot(transpose(a), transpose(b)) => dot(a, b) with the dimension numbers mapped through
    each permutation, for each operand whose transpose keeps its free dimensions in order."""
    if set(inst.attrs) - set(_DOT_DIMS) - {"operand_precision", "metadata"}:
        return None
    attrs = dict(inst.attrs)
    operands = list(inst.operands)
    for side, k in (("lhs", 0), ("rhs", 1)):
        t = operands[k]
        if t.opcode != "transpose":
            continue
        perm = tuple(int(p) for p in t.attrs["dimensions"])
        batch = tuple(int(d) for d in attrs.get(f"{side}_batch_dims", ()))
        contracting = tuple(int(d) for d in attrs.get(f"{side}_contracting_dims", ()))
        free = [perm[d] for d in range(len(perm)) if d not in batch and d not in contracting]
        if free != sorted(free):
            continue  # the free dimensions would come out in another order
        if batch:
            attrs[f"{side}_batch_dims"] = tuple(perm[d] for d in batch)
        if contracting:
            attrs[f"{side}_contracting_dims"] = tuple(perm[d] for d in contracting)
        operands[k] = t.operands[0]
    if operands == list(inst.operands):
        return None
    return new_instruction(inst, "dot", operands, attrs)


def degenerate_transpose(inst: HloInstruction) -> HloInstruction | None:
    """A transpose that moves only size-1 dimensions => reshape."""
    perm = tuple(int(p) for p in inst.attrs["dimensions"])
    dims = inst.shape.dims
    kept = [p for i, p in enumerate(perm) if dims[i] != 1]
    if len(kept) == len(perm) or kept != sorted(kept):
        return None
    return new_instruction(inst, "reshape", [inst.operands[0]], {})


# (opcode, rule) pairs simplifier.py registers
RULES: tuple[tuple[str, Rule], ...] = (
    ("dot", fold_operand_transposes),
    ("transpose", transpose_of_dot),
    ("transpose", degenerate_transpose),
)
