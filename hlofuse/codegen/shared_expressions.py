"""Sharing a reduce's input with a later fusion (a decision of the kernel planner).

Softmax-like chains fuse into a reduction fusion A = reduce(E(x, m)) and a loop fusion
B = G(E(x, m), A) that recomputes the same elementwise expression E (exp(x - max) in softmax).
When E contains an expensive op, A's reduction kernel also writes E's values to a buffer
(an extra output visited by the same loop) and B reads them instead of recomputing E: the
values are those B would compute, so results are unchanged; XLA:CPU materializes E too.
The CPU planner (codegen/cpu.py) takes this decision and records it in the fused module's
fusion log (`record_shared`), so the fusion report shows it beside the fusion passes'.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..hlo.ir import HloComputation, HloInstruction
from .planning import KernelPlan, plan_fusion, rebuild

_IGNORED_ATTRS = frozenset({"metadata", "backend_config", "frontend_attributes", "sharding"})


def _structural_keys(comp: HloComputation, outer_operands: list) -> dict[HloInstruction, tuple]:
    """A key per instruction of fused computation `comp` (called with `outer_operands`) such
    that equal keys compute equal values: parameters are keyed by the outer operand they read."""
    keys: dict[HloInstruction, tuple] = {}
    for inst in comp.post_order():
        if inst.opcode == "parameter":
            key: tuple = ("parameter", outer_operands[inst.parameter_number])
        else:
            attrs = tuple(sorted((k, v if isinstance(v, HloComputation) else repr(v))
                                 for k, v in inst.attrs.items() if k not in _IGNORED_ATTRS))
            lit = inst.literal
            literal = None if lit is None else (repr(getattr(lit, "dtype", None)), repr(getattr(lit, "shape", None)),
                                                lit.tobytes() if hasattr(lit, "tobytes") else inst)
            key = (inst.opcode, repr(inst.shape), attrs, literal, tuple(keys[o] for o in inst.operands))
        keys[inst] = key
    return keys


def _has_expensive_elementwise(inst: HloInstruction) -> bool:
    return any(i.info.elementwise and i.info.expensive for i in _instructions_under(inst))


@dataclass
class ShareCandidate:
    """A fusion planned as one reduction kernel whose (single, non-variadic) reduce reads an
    expensive elementwise expression `expr` that a later fusion may reuse."""

    inst: HloInstruction  # the fusion (or wrapped) instruction of the executed computation
    comp: HloComputation
    name: str
    kernels: list  # the step's kernel list (replaced in place when shared)
    temps: list
    expr: HloInstruction
    key: tuple


def share_candidate(comp: HloComputation, inst: HloInstruction, name: str, kernels: list,
                    temps: list) -> ShareCandidate | None:
    """`comp`'s sharing candidate when it is planned as a single row or column reduction kernel
    with one non-variadic reduce over an expression with an expensive elementwise op."""
    if len(kernels) != 1 or kernels[0].group is None or kernels[0].stage != "single":
        return None
    heroes = kernels[0].group.heroes
    if len(heroes) != 1 or len(heroes[0].operands) != 2:
        return None
    expr = heroes[0].operands[0]
    if expr.opcode == "parameter" or not _has_expensive_elementwise(expr):
        return None
    keys = _structural_keys(comp, list(inst.operands))
    if expr not in keys:  # planned from a rewritten copy (tree_reduction_rewrite): no sharing
        return None
    return ShareCandidate(inst, comp, name, kernels, temps, expr, keys[expr])


def find_shared_expression(comp: HloComputation, inst: HloInstruction, cand: ShareCandidate) -> HloInstruction | None:
    """The instruction of `comp` (fused computation of `inst`) computing candidate's expression."""
    keys = _structural_keys(comp, list(inst.operands))
    for i in comp.instructions:
        if i is not comp.root and keys.get(i) == cand.key:
            return i
    return None


def with_extra_output(comp: HloComputation, extra: HloInstruction, name: str) -> HloComputation:
    """A copy of `comp` whose result is the tuple (comp's result, `extra`'s value): its output
    leaves are comp's, then `extra`'s."""
    from ..hlo.shapes import TupleShape

    root = HloInstruction("tuple", TupleShape((comp.root.shape, extra.shape)), [comp.root, extra], name="shared.tuple")
    try:
        return rebuild(comp, root, [], name)
    finally:
        root.detach_operands()


def share_expression(cand: ShareCandidate, comp: HloComputation, expr: HloInstruction,
                     name: str) -> tuple[list[KernelPlan], list] | None:
    """Re-plan candidate `cand` to also write `cand.expr` (as output leaf after its own leaves),
    and plan `comp` reading `expr` from a new parameter numbered after its parameters; returns
    the kernels and temporaries of `comp`, or None (nothing changed) when either plan is not
    as expected. The candidate's kernel and temporary lists are updated in place."""
    widened = with_extra_output(cand.comp, cand.expr, f"{cand.comp.name}.shared")
    a_kernels, a_temps = plan_fusion(widened, cand.name)
    if len(a_kernels) != 1 or a_kernels[0].group is None or len(a_kernels[0].outputs) != len(cand.kernels[0].outputs) + 1:
        return None
    reader = rebuild(comp, comp.root, [expr], f"{comp.name}.reads_shared")
    kernels, temps = plan_fusion(reader, name)
    cand.kernels[:] = a_kernels
    cand.temps[:] = a_temps
    return kernels, temps


def record_shared(log, cand: ShareCandidate, reader: HloInstruction, expr: HloInstruction) -> None:
    """Record in fusion log `log` (passes/fusion/decisions.FusionLog) that the reduction kernel
    of `cand.inst` also writes its expression `cand.expr`, which `reader` reads (as `expr`)
    instead of recomputing it."""
    ops = sorted({i.opcode for i in _instructions_under(cand.expr) if i.info.elementwise and i.info.expensive})
    reason = (f"the reduction kernel of {cand.inst.name} also writes {cand.expr.name} "
              f"({cand.expr.shape}), which {reader.name} reads instead of recomputing it as {expr.name}: "
              f"it contains expensive {', '.join(ops)}, and one write and read cost less than computing it twice")
    log.planned("kernel-planner", cand.inst.name, reader.name, "shared-expression", reason)


def _instructions_under(inst: HloInstruction) -> list[HloInstruction]:
    """`inst` and every instruction it depends on (within its computation)."""
    out, stack, seen = [], [inst], set()
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        out.append(i)
        stack.extend(i.operands)
    return out
