"""Which instructions fuse, and how: the one place that reads the op registry for fusion.

The registry row gives the facts (`fusion`: yes/root/producer/never, `expensive` and its
shape-dependent `expensive_rule`, `never_fused_why`, `side_effecting`, `elementwise`, `kind`);
this module combines them into XLA's rules (InstructionFusion::IsExpensive, gpu_fusible.cc).
"""
from __future__ import annotations

from typing import Iterator

from ...hlo.ir import HloInstruction
from ...hlo.opcodes import op_info
from .cost_model import TargetParams


# ---- expensiveness --------------------------------------------------------------------------

def is_expensive(inst: HloInstruction, params: TargetParams) -> bool:
    """XLA's IsExpensive for `params`' target: not worth recomputing in several consumers."""
    info = op_info(inst.opcode)
    if info.expensive_rule is not None and inst.shape.is_array:
        return info.expensive_rule(inst, params)  # XLA's shape- and target-dependent cases
    return info.expensive


def is_always_duplicable(inst: HloInstruction) -> bool:
    """XLA's IsAlwaysDuplicable: broadcasts and widening converts get cheaper when duplicated."""
    if inst.opcode == "broadcast":
        return True
    return (inst.opcode == "convert" and inst.operands[0].shape.byte_size() < inst.shape.byte_size())


# ---- what may fuse --------------------------------------------------------------------------

def is_fusible(inst: HloInstruction) -> bool:
    """May take part in fusion at all (registry `fusion` field, no side effects)."""
    info = op_info(inst.opcode)
    if inst.opcode == "fusion":
        return True
    if info.side_effecting or info.fusion == "never" or inst.opcode == "parameter":
        return False
    return not inst.control_predecessors


def is_loop_fusion(inst: HloInstruction) -> bool:
    """Whether `inst` is a kLoop fusion."""
    return inst.opcode == "fusion" and inst.attrs.get("kind") == "kLoop"


def _universally_loop_fusible(inst: HloInstruction) -> bool:
    """XLA's IsUniversallyLoopFusible: elementwise with operands, or fusible data movement."""
    if is_loop_fusion(inst):
        return True
    info = op_info(inst.opcode)
    if info.fusion != "yes" or info.side_effecting:
        return False
    if info.elementwise:
        return len(inst.operands) > 0
    if info.kind == "reduce":  # reduce-window (a reduce only roots: fusion "root"); one input
        return inst.shape.is_array
    return info.kind == "data" and len(inst.operands) > 0


def is_loop_fusible_as_producer(inst: HloInstruction) -> bool:
    """May be fused into a consumer (constants included; non-variadic reduces)."""
    if not is_fusible(inst):
        return False
    info = op_info(inst.opcode)
    if _universally_loop_fusible(inst):
        return True
    if inst.opcode == "constant" or (info.kind == "data" and info.arity == 0 and info.fusion == "yes"):
        return True  # constants and iota
    return info.fusion == "root" and inst.shape.is_array  # non-variadic reduce


def is_input_fusible_scatter(inst: HloInstruction) -> bool:
    """XLA's IsInputFusibleScatter: a scatter, or an input fusion rooted at one."""
    if inst.opcode == "fusion":
        return inst.attrs.get("kind") == "kInput" and inst.fused_computation.root.opcode == "scatter"
    return inst.opcode == "scatter" and not inst.control_predecessors


def is_loop_fusible_as_consumer(inst: HloInstruction) -> bool:
    """May become (or already is) the root of a loop or input fusion (a scatter roots an input
    fusion of its index and update producers: passes/fusion/in_place.py `scatter_input`)."""
    if is_input_fusible_scatter(inst):
        return True
    if not is_fusible(inst):
        return False
    return _universally_loop_fusible(inst) or op_info(inst.opcode).fusion == "root"


def not_fusible_reason(inst: HloInstruction) -> str:
    """Why `inst` cannot be fused into a consumer, as "NAME is a ..., which ..." (short, for reasons)."""
    info = op_info(inst.opcode)
    if inst.opcode == "fusion":
        return f"{inst.name} is a {inst.attrs.get('kind')} fusion, which is not fused into loop fusions"
    if info.side_effecting:
        return f"{inst.name} is a {inst.opcode}, which has side effects and never fuses"
    if inst.control_predecessors:
        return f"{inst.name} has control predecessors, which pin it outside fusions"
    if info.never_fused_why:  # XLA's reason, where more specific than the row's category
        return f"{inst.name} is {info.never_fused_why}"
    if info.kind == "control":
        return f"{inst.name} is a {inst.opcode} (control flow), which never fuses"
    if info.fusion == "root":
        return f"{inst.name} is a variadic {inst.opcode}, which only roots a fusion of its own"
    if info.fusion == "never":
        return f"{inst.name} is a {inst.opcode}, which never fuses"
    return f"{inst.name} is a {inst.opcode}, which is not loop-fusible"


def is_multi_output(inst: HloInstruction) -> bool:
    """Whether `inst` is a fusion with a tuple root (several outputs)."""
    return inst.opcode == "fusion" and inst.fused_computation.root.opcode == "tuple"


def fusion_outputs(inst: HloInstruction) -> list[HloInstruction]:
    """The values a fusible produces: the root tuple's operands of a multi-output fusion."""
    if inst.opcode != "fusion":
        return [inst]
    root = inst.fused_computation.root
    return list(root.operands) if root.opcode == "tuple" else [root]


def members(inst: HloInstruction) -> list[HloInstruction]:
    """Instructions a fusible computes (parameters of a fusion excluded)."""
    if inst.opcode != "fusion":
        return [inst]
    return [i for i in inst.fused_computation.instructions if i.opcode != "parameter"]


def combined_operands(a: HloInstruction, b: HloInstruction) -> list[HloInstruction]:
    """The distinct operands of one kernel computing both `a` and `b` (neither reads the other)."""
    operands: list[HloInstruction] = []
    seen = {a, b}  # (instructions hash by identity)
    for op in (*a.operands, *b.operands):
        if op not in seen:
            seen.add(op)
            operands.append(op)
    return operands


# ---- reductions -----------------------------------------------------------------------------

def _physical_order(shape) -> list[int]:
    """Dimensions major to minor."""
    if shape.layout is not None:
        return list(reversed(shape.layout.minor_to_major))
    return list(range(shape.rank))


def reduction_is_contiguous(reduce: HloInstruction) -> bool:
    """XLA's IsReductionFromOrToContiguousDimensions (unnested reduction), on layouts.

    True when the reduced dimensions, or the kept ones, form one block of physically adjacent
    dimensions (row and column reductions), ignoring dimensions of size 1.
    """
    operand = reduce.operands[0].shape
    reduced = set(reduce.attrs.get("dimensions", ()))
    order = [d for d in _physical_order(operand) if operand.dims[d] != 1]
    if not order or not (reduced & set(order)):
        return False
    flags = [d in reduced for d in order]
    blocks = sum(1 for i, f in enumerate(flags) if f and (i == 0 or not flags[i - 1]))
    kept_blocks = sum(1 for i, f in enumerate(flags) if not f and (i == 0 or flags[i - 1]))
    return blocks == 1 or kept_blocks <= 1


def reduction_count(inst: HloInstruction, unnested_only: bool = False) -> int:
    """How many reduces `inst` computes (only the contiguous, unnested ones if `unnested_only`)."""
    return sum(1 for m in members(inst)
               if m.opcode == "reduce" and (not unnested_only or reduction_is_contiguous(m)))


def reduce_hero(inst: HloInstruction) -> HloInstruction | None:
    """The reduce that leads `inst`'s kernel: `inst` itself, or a reduce among a fusion's outputs."""
    for out in fusion_outputs(inst):
        if out.opcode == "reduce":
            return out
    return None


def is_input_fusible_reduction(inst: HloInstruction) -> bool:
    """XLA's IsInputFusibleReduction: a reduce, or a fusion with a reduce among its roots."""
    return reduce_hero(inst) is not None


# ---- access patterns ------------------------------------------------------------------------

def transpose_is_bitcast(inst: HloInstruction) -> bool:
    """A transpose that only moves size-1 dimensions keeps the physical order."""
    perm = inst.attrs.get("dimensions", ())
    dims = inst.operands[0].shape.dims
    moved = [p for p in perm if dims[p] != 1]
    return moved == sorted(moved)


def is_physically_transposing(inst: HloInstruction) -> bool:
    """XLA's IsPhysicallyTransposing: a copy that changes layout or a real transpose."""
    if inst.opcode == "fusion":
        return any(is_physically_transposing(m) for m in members(inst))
    if inst.opcode == "copy":
        a, b = inst.operands[0].shape, inst.shape
        return a.is_array and b.is_array and a.layout != b.layout
    return inst.opcode == "transpose" and not transpose_is_bitcast(inst)


def reads_elements_multiple_times(inst: HloInstruction) -> bool:
    """XLA's IfFusedReadsElementsMultipleTimes: broadcast/gather that grow, overlapping windows."""
    if inst.opcode in ("broadcast", "gather"):
        return inst.shape.element_count() > inst.operands[0].shape.element_count()
    if inst.opcode == "reduce-window":
        return any(d.size > d.stride for d in inst.attrs["window"].dimensions)
    return False


def is_expensive_to_repeat(inst: HloInstruction) -> bool:
    """XLA's IsExpensiveToRepeat: reductions that read many inputs per output (> 10)."""
    if inst.opcode == "reduce" and not reduction_is_contiguous(inst):
        ratio = inst.operands[0].shape.element_count() // max(1, inst.shape.leaves()[0].element_count())
        return ratio > 10
    if inst.opcode == "reduce-window":
        ratio = 1
        for d in inst.attrs["window"].dimensions:
            ratio *= d.size
        return ratio > 10
    return False


def creates_heavy_computation(producer: HloInstruction, consumer: HloInstruction) -> bool:
    """XLA's CreatesHeavyComputation: a heavy producer under a consumer that re-reads elements."""
    if not any(is_expensive_to_repeat(m) for m in members(producer)):
        return False
    if consumer.opcode != "fusion":
        return reads_elements_multiple_times(consumer)
    for i, op in enumerate(consumer.operands):
        if op is producer and any(reads_elements_multiple_times(cur)
                                  for cur in _reached_from(consumer.fused_computation.parameter(i))):
            return True
    return False


def _reached_from(start: HloInstruction) -> Iterator[HloInstruction]:
    """`start` and every instruction that (transitively) uses it, each once."""
    stack, seen = [start], set()
    while stack:
        cur = stack.pop()
        if cur in seen:
            continue
        seen.add(cur)
        yield cur
        stack.extend(cur.users)


def _true_rank(shape) -> int:
    return sum(1 for d in shape.dims if d != 1) if shape.is_array else 0


def effectively_at_most_unary(inst: HloInstruction) -> bool:
    """XLA's EffectivelyAtMostUnary: at most one operand as large (true rank) as the output."""
    out_rank = max((_true_rank(s) for s in inst.shape.leaves()), default=0)
    big = 0
    for op in inst.operands:
        if op.opcode in ("broadcast", "iota"):
            continue
        if op.opcode == "constant" and op.shape.is_array and op.shape.element_count() == 1:
            continue
        if op.shape.is_array and _true_rank(op.shape) >= out_rank:
            big += 1
    return big <= 1


def _reuses_directly(inst: HloInstruction, operand_index: int) -> bool:
    if inst.opcode == "broadcast":
        # XLA's OperandElementUse: a broadcast is not elementwise, so it always counts as
        # reusing its operand, even when it does not grow it (issue 16, rule 2)
        return True
    if inst.opcode == "gather" and operand_index == 0:
        return reads_elements_multiple_times(inst)
    if inst.opcode in ("reduce-window", "dot", "convolution"):
        return True
    return False


def reuses_operand_elements(consumer: HloInstruction, operand_index: int) -> bool:
    """Whether `consumer` reads an element of operand `operand_index` more than once."""
    if consumer.opcode != "fusion":
        return _reuses_directly(consumer, operand_index)
    for cur in _reached_from(consumer.fused_computation.parameter(operand_index)):
        for user in cur.users:
            idx = next(i for i, o in enumerate(user.operands) if o is cur)
            if _reuses_directly(user, idx):
                return True
    return False


def fused_operands_reused(fusion: HloInstruction) -> list[HloInstruction]:
    """The operands of `fusion` whose elements it reads more than once (reuses_operand_elements
    for every operand in one walk): an instruction's elements are re-read if a user reads them
    several times or a user's own elements are re-read, decided users first."""
    comp = fusion.fused_computation
    reread: dict[HloInstruction, bool] = {}
    for inst in reversed(comp.post_order()):
        flag = False
        for user in inst.users:
            idx = next(i for i, o in enumerate(user.operands) if o is inst)
            if reread.get(user, False) or _reuses_directly(user, idx):
                flag = True
                break
        reread[inst] = flag
    return [fusion.operands[p.parameter_number] for p in comp.parameters if reread.get(p, False)]
