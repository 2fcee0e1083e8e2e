"""Operands of a pad or a concatenate evaluated under a branch, only where they are read, when
they are expensive to compute.

A pad's element generator is `select(in_bounds, operand[clamped index], padding value)` and a
concatenate's a select among every operand read at a clamped index: every operand is computed
for every element, and LLVM vectorizes the selects. That is right for operands that are
loads or a few instructions, but an operand that is a long computation is then computed where
its value is thrown away. The down-sweep of JAX's `lax.associative_scan` (a Mamba-style
selective scan, benchmarks/model_zoo_more.py) interleaves its levels with interior-padded pads
and concatenates, ten levels deep: one fused kernel computed every level's both sides for each
of its 8.4M elements, 230 ms where XLA:CPU, whose pad and concatenate emitters branch
(`EmitElementalPad`, `EmitElementalConcatenate`), took 96 ms for the whole layer.

So where an operand's computation holds at least HEAVY_OPERAND arithmetic instructions
(`operand_weight`: data movement and parameters count nothing), the rule evaluates each
operand in a block of its own, entered only for the elements it gives, and joins them with a
phi (`branch_chain`); the values are the same. A pad does so only where at least
PADDED_SHARE of its elements are padding (an interior pad's half): a thin border, as before a
max pool, wastes little by speculating and keeps its vector code (keras ResNet-50, whose stem
pool pads a batch norm and ReLU by one element a side: 1.033x its time with that pad branched,
31 interleaved rounds, the same bits). Nested branches are bounded
(MAX_BRANCH_DEPTH): each one's operand is evaluated by a nested call of the emitter, and
beyond the bound the rules keep their selects.
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from ..hlo.ir import HloInstruction
from ..hlo.walk import post_order

# Arithmetic instructions an operand's computation must hold to be evaluated under a branch.
HEAVY_OPERAND = 8
# The share of a pad's elements that must be padding for its operand to be branched.
PADDED_SHARE = 0.25
# Branches nested in one element's evaluation at most (each is a nested call of the emitter).
MAX_BRANCH_DEPTH = 24
# Off: every pad and concatenate keeps its selects (a switch for A/B measurements).
BRANCHED_OPERANDS = True
_CAP = 64  # weights are counted up to here (a tree count: shared operands count per use)


def operand_weight(em, inst: HloInstruction) -> int:
    """The arithmetic instructions computing `inst` in its computation (a tree count up to
    _CAP), remembered per emitter."""
    weights = em.weights
    known = weights.get(inst)
    if known is not None:
        return known
    for node in post_order([inst], lambda n: [o for o in n.operands if o not in weights]):
        info = node.info  # data movement, bookkeeping and leaves (parameters, constants) compute nothing
        own = 0 if info.kind == "data" or info.bookkeeping or info.arity == 0 else 1
        weights[node] = min(_CAP, own + sum(weights[o] for o in node.operands))
    return weights[inst]


def branches(em, operands: list[HloInstruction]) -> bool:
    """Whether a pad or concatenate over `operands` evaluates them under branches."""
    return BRANCHED_OPERANDS and em.branch_depth < MAX_BRANCH_DEPTH and any(operand_weight(em, o) >= HEAVY_OPERAND for o in operands)


def pad_branches(em, inst: HloInstruction) -> bool:
    """Whether pad `inst` evaluates its operand under a branch (`branches`, and at least
    PADDED_SHARE of its elements padding)."""
    inside, total = inst.operands[0].shape.element_count(), inst.shape.element_count()
    return total > 0 and 1 - inside / total >= PADDED_SHARE and branches(em, inst.operands[:1])


def branch_chain(em, cases: list[tuple[ir.Value | None, Callable[[], ir.Value]]]) -> ir.Value:
    """The value of the first case whose condition holds (the last case's is None: otherwise),
    each case's value computed in a block entered only when it is taken."""
    assert cases and cases[-1][0] is None, "the last case is the otherwise case"
    b = em.b
    merge = b.append_basic_block("sel.merge")
    incoming = []
    em.branch_depth += 1
    try:
        for k, (cond, value) in enumerate(cases):
            if cond is not None:
                taken, other = b.append_basic_block(f"sel.{k}"), b.append_basic_block(f"sel.{k}.else")
                b.cbranch(cond, taken, other)
                b.position_at_end(taken)
            v = value()
            incoming.append((v, b.block))
            b.branch(merge)
            if cond is not None:
                b.position_at_end(other)
            else:
                break
    finally:
        em.branch_depth -= 1
    b.position_at_end(merge)
    phi = b.phi(incoming[0][0].type, name="sel")
    for v, block in incoming:
        phi.add_incoming(v, block)
    return phi
