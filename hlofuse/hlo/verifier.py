"""The HLO verifier: structural checks of modules and computations, then every
instruction's declared shape against the shape inferred by the registry's shape rules.

`verify(module)` and `verify_computation(comp)` return None or raise VerifierError naming
the instruction, its computation and the reason.
"""
from __future__ import annotations

from .errors import VerifierError
from .ir import HloComputation, HloInstruction, HloModule
from .opcodes import is_known, op_info
from .shape_inference import infer_shape, shapes_compatible
from .source_locations import located

__all__ = ["verify", "verify_computation", "verify_instruction"]


def _fail(comp: HloComputation, reason: str, inst: HloInstruction | None = None) -> None:
    if inst is None:
        raise VerifierError(f"computation {comp.name}: {reason}")
    raise VerifierError(reason, instruction=inst.name, computation=comp.name)


def verify(module: HloModule) -> None:
    """Check a whole module: an entry, unique computation names, each computation, and that
    called computations belong to the module. An error at an instruction of a module parsed
    from text points at where it was written (hlo/source_locations.py)."""
    try:
        _verify(module)
    except VerifierError as e:
        raise located(module, e) from None


def _verify(module: HloModule) -> None:
    if module.entry is None:
        raise VerifierError(f"module {module.name} has no entry computation")
    if module.entry not in module.computations:
        raise VerifierError(f"module {module.name}: entry computation {module.entry.name} is not in the module")
    names: set[str] = set()
    for comp in module.computations:
        if comp.name in names:
            raise VerifierError(f"module {module.name} has two computations named {comp.name}")
        names.add(comp.name)
    members = set(module.computations)
    for comp in module.computations:
        for inst in comp.instructions:
            for callee in inst.called_computations():
                if callee not in members:
                    _fail(comp, f"calls computation {callee.name}, which is not in the module", inst)
    _check_call_graph_acyclic(module)
    for comp in module.computations:
        verify_computation(comp)
    _check_unique_instruction_names(module)
    _check_fusion_back_pointers(module)


def _check_call_graph_acyclic(module: HloModule) -> None:
    """No computation calls itself, directly or through others: HLO has no recursion (XLA's
    parser cannot even name a computation before it is defined), and every pass that inlines
    or walks callees would run forever (found by the HLO mutation fuzzer, seed 30: the call
    inliner never finished). Depth first with colours and an explicit stack; the error names
    the cycle."""
    state: dict[HloComputation, int] = {}  # 1: on the current path, 2: done
    for start in module.computations:
        if start in state:
            continue
        state[start] = 1
        path = [start]
        stack = [iter([c for i in start.instructions for c in i.called_computations()])]
        while stack:
            callee = next(stack[-1], None)
            if callee is None:
                stack.pop()
                state[path.pop()] = 2
                continue
            seen = state.get(callee)
            if seen == 1:
                cycle = path[path.index(callee):] + [callee]
                _fail(path[-1], "the call graph has a cycle: " + " -> ".join(c.name for c in cycle)
                      + " (HLO computations cannot be recursive)")
            if seen is None:
                state[callee] = 1
                path.append(callee)
                stack.append(iter([c for i in callee.instructions for c in i.called_computations()]))


def _check_unique_instruction_names(module: HloModule) -> None:
    """Instruction names are unique in the whole module, as in XLA (passes make new names
    from them, and the printed module must parse back to the same graph)."""
    where: dict[str, HloComputation] = {}
    for comp in module.computations:
        for inst in comp.instructions:
            first = where.setdefault(inst.name, comp)
            if first is not comp:
                _fail(comp, f"the name is also used in computation {first.name} (instruction names must be "
                            f"unique in the module)", inst)


def _check_fusion_back_pointers(module: HloModule) -> None:
    """A fused computation belongs to one fusion: it points back at the fusion instruction
    (which is in the module and calls it) and nothing else calls it."""
    callers: dict[HloComputation, list[HloInstruction]] = {}
    for comp in module.computations:
        for inst in comp.instructions:
            for callee in inst.called_computations():
                callers.setdefault(callee, []).append(inst)
    for comp in module.computations:
        owner = comp.fusion_instruction
        if owner is None:
            continue
        if owner.parent is None or owner.parent.parent is not module or owner not in owner.parent.instructions:
            _fail(comp, f"its fusion instruction {owner.name} is not in the module")
        if owner.opcode != "fusion" or owner.attrs.get("calls") is not comp:
            _fail(comp, f"its fusion instruction {owner.name} does not call it")
        others = [i for i in callers.get(comp, []) if i is not owner]
        if others:
            _fail(comp, f"the fused computation of {owner.name} is also called by {others[0].name} "
                        f"(in {others[0].parent.name})")
        if comp is module.entry:
            _fail(comp, "the entry computation cannot be a fused computation")


def verify_computation(comp: HloComputation) -> None:
    """Check one computation: root, membership, operand/user consistency, unique names,
    parameter numbering, acyclicity, then each instruction (operand count and shape)."""
    if comp.root is None:
        _fail(comp, "has no root instruction")
    members = set(comp.instructions)
    if comp.root not in members:
        _fail(comp, f"root {comp.root.name} is not an instruction of the computation")
    _check_graph(comp, members)
    _check_parameters(comp)
    _check_acyclic(comp)
    for inst in comp.instructions:
        verify_instruction(inst)


def _check_graph(comp: HloComputation, members: set[HloInstruction]) -> None:
    names: set[str] = set()
    for inst in comp.instructions:
        if inst.name in names:
            _fail(comp, "the name is used twice in the computation", inst)
        names.add(inst.name)
        if inst.parent is not comp:
            _fail(comp, "its parent is not the computation that lists it", inst)
        for k, op in enumerate(inst.operands):
            if op not in members:
                where = op.parent.name if op.parent is not None else "no computation"
                _fail(comp, f"operand {k} ({op.name}) belongs to {where}, not to {comp.name}", inst)
            if inst not in op.users:  # O(1): users are a set (hlo/users.py)
                _fail(comp, f"operand {k} ({op.name}) does not list it as a user", inst)
        for user in inst.users:
            if user not in members:
                _fail(comp, f"user {user.name} is not in the computation", inst)
            if inst not in user.operands:  # (by identity: hlo/ir.py HloInstruction)
                _fail(comp, f"user {user.name} does not have it as an operand", inst)
        for pred in inst.control_predecessors:
            if pred not in members:
                _fail(comp, f"control predecessor {pred.name} is not in the computation", inst)


def _check_parameters(comp: HloComputation) -> None:
    params = [i for i in comp.instructions if i.opcode == "parameter"]
    numbers = sorted(p.parameter_number for p in params)
    if numbers != list(range(len(params))):
        _fail(comp, f"parameter numbers {numbers} must be 0..{len(params) - 1}, each once")
    for p in params:
        if p.operands:
            _fail(comp, "a parameter takes no operands", p)


def _check_acyclic(comp: HloComputation) -> None:
    """Kahn's algorithm over operand and control edges; whatever is left lies on a cycle."""
    preds = {i: set(i.operands + i.control_predecessors) for i in comp.instructions}
    users: dict[HloInstruction, list[HloInstruction]] = {i: [] for i in comp.instructions}
    for i in comp.instructions:
        for p in preds[i]:
            users[p].append(i)
    indegree = {k: len(v) for k, v in preds.items()}
    ready = [k for k, d in indegree.items() if d == 0]
    done = 0
    while ready:
        k = ready.pop()
        done += 1
        for u in users[k]:
            indegree[u] -= 1
            if indegree[u] == 0:
                ready.append(u)
    if done != len(comp.instructions):
        on_cycle = [i for i in comp.instructions if indegree[i] > 0]
        _fail(comp, "lies on a cycle of operand/control edges with "
                    + ", ".join(i.name for i in on_cycle[:5]), on_cycle[0])


def verify_instruction(inst: HloInstruction) -> None:
    """Check the opcode is known, the operand count matches the registry's arity, and the
    declared shape equals the inferred one (layouts ignored)."""
    comp_name = inst.parent.name if inst.parent is not None else None
    if not is_known(inst.opcode):
        raise VerifierError(f"unknown opcode '{inst.opcode}'", instruction=inst.name, computation=comp_name)
    info = op_info(inst.opcode)
    if not info.is_variadic and len(inst.operands) != info.arity:
        raise VerifierError(f"{inst.opcode} takes {info.arity} operand{'s' if info.arity != 1 else ''}, "
                            f"has {len(inst.operands)}", instruction=inst.name, computation=comp_name)
    inferred = infer_shape(inst)
    if not shapes_compatible(inst.shape, inferred):
        raise VerifierError(
            f"{inst.opcode}: declared shape {inst.shape.to_text(with_layout=False)} differs from the inferred shape "
            f"{inferred.to_text(with_layout=False)}",
            instruction=inst.name, computation=comp_name,
        )
