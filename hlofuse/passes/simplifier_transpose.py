"""Simplifier rules for transposes (XLA's AlgebraicSimplifier::HandleTranspose).

transpose(dot(a, b)) => dot(b, a): a dot's result lists its batch dimensions, then the free
dimensions of its lhs, then those of its rhs; swapping the operands swaps the two free groups,
so a transpose that keeps the batch dimensions among themselves and exchanges the two groups
(each kept in order) is free in the dot (XLA's "Transpose(dot(a,b))->dot(b,a) for any dot").
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
    if perm[nb:nb + n_rhs] != tuple(range(nb + n_lhs, nb + n_lhs + n_rhs)):
        return None
    if perm[nb + n_rhs:] != tuple(range(nb, nb + n_lhs)):
        return None
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
    return new_instruction(inst, "dot", [rhs, lhs], attrs)


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
