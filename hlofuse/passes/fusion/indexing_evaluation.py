"""How often a fusion's kernel would emit each of its instructions (XLA's
FusionNodeIndexingEvaluation), and the limit every fusion pass holds a producer to.

An element generator evaluates an instruction once per distinct index it is asked for: an
elementwise user passes its own index on, but a slice, a broadcast, a pad, a reshape (any change
of shape but a transpose's permutation) asks for a new one. So two slices of one value emit its
code twice, and a chain of slice pairs doubles the count at every step: `lax.associative_scan`
over 1,024 steps is ten levels of them, and fused whole (183 instructions in one loop fusion) it
asked the emitter for about 2^20 copies of its first levels, which ran out of memory. XLA's
instruction fusion, fusion merger and priority fusion all refuse a producer whose code the
consumer fusion would emit more than `MAX_DUPLICATED_INDEXING` times; hlofuse's passes ask the
same (`emitted_copies`).

Work: one walk of the fused computation per revision, its sets of indexing users merged along
the way (a set per instruction, at most the fusion's instructions each); a pass run keeps the
analysis of each fusion until the fusion changes (`FusionContext.indexing`).
"""
from __future__ import annotations

from ...hlo.ir import HloInstruction

# FusionNodeIndexingEvaluation::kAllowedCodeDuplication: above it, compile time outweighs the
# saved traffic (XLA's comment: "arbitrarily chosen").
MAX_DUPLICATED_INDEXING = 15


def _indexing(fusion: HloInstruction, memo: dict | None) -> tuple[dict, dict]:
    """(indexing users, emitted counts) of `fusion`'s computation (see `emitted_copies`),
    remembered in `memo` per revision of the computation: priority fusion asks for every
    operand of a fusion after each step that grows it, and the walk is the whole
    computation's (XLA keeps its FusionNodeIndexingEvaluation per fusion likewise)."""
    comp = fusion.fused_computation
    rev = comp.revision
    hit = memo.get(fusion) if memo is not None else None
    if hit is not None and hit[0] == rev:
        return hit[1], hit[2]
    users: dict[HloInstruction, set[HloInstruction]] = {comp.root: {fusion}}
    count: dict[HloInstruction, int] = {fusion: 1}
    for inst in reversed(comp.post_order()):
        if inst.opcode == "parameter":
            continue
        count[inst] = sum(count[u] for u in users.get(inst, ()))
        for op in inst.operands:
            mine = users.setdefault(op, set())
            if inst.opcode == "transpose" or (op.shape.is_array and inst.shape.is_array
                                              and op.shape.dims == inst.shape.dims):
                mine |= users.get(inst, set())
            else:
                mine.add(inst)
    if memo is not None:
        memo[fusion] = (rev, users, count)
    return users, count


def reads_new_index(inst: HloInstruction) -> bool:
    """Whether `inst` asks an operand of rank > 0 for its element at another index than its own
    (any change of shape but a transpose's permutation; a tuple passes each operand's index
    through). A fused computation without such an instruction emits each of its instructions
    once per distinct index of a scalar at most: every count is 1 for its arrays."""
    if inst.opcode in ("transpose", "tuple", "parameter"):
        return False
    dims = tuple(inst.shape.dims) if inst.shape.is_array else None
    return any(op.shape.is_array and op.shape.rank > 0 and tuple(op.shape.dims) != dims for op in inst.operands)


def emitted_copies(fusion: HloInstruction, operand: HloInstruction, memo: dict | None = None) -> int:
    """How many times `fusion`'s kernel would emit the code of `operand` if it were fused in:
    XLA's FusionNodeIndexingEvaluation.EvaluateEmittedInstructions. Every instruction has a set
    of "indexing users" (the instructions whose distinct indices it is evaluated at; the root's
    is the fusion itself, counted once); an operand of the same shape as its user, or of a
    transpose (whose index is only permuted), inherits its user's set, any other operand gets the
    user itself. The count of an instruction is the sum of the counts of its indexing users.
    `memo` (a pass run's, FusionContext.indexing) keeps each fusion's analysis until it changes."""
    comp = fusion.fused_computation
    users, count = _indexing(fusion, memo)
    params = [comp.parameter(i) for i, o in enumerate(fusion.operands) if o is operand]
    return sum(count[u] for p in params for u in users.get(p, ()))


def fused_copies(consumer: HloInstruction, producer: HloInstruction, memo: dict | None = None) -> int:
    """The most times the fusion of `producer` into the fusion `consumer` would emit one
    instruction of `producer`: `emitted_copies` for an instruction; for a fusion (priority
    fusion and the fusion merger fuse fusions), each of its instructions is emitted as often
    as the producer's root, times as often as the producer itself emits it (its own
    `most_emitted`). Chains of slice pairs grown fusion by fusion multiply so."""
    copies = emitted_copies(consumer, producer, memo)
    if producer.opcode == "fusion":
        copies *= max(1, most_emitted(producer, memo)[0])
    return copies


def emitted_counts(fusion: HloInstruction) -> dict[HloInstruction, int]:
    """How many times `fusion`'s kernel emits each instruction of its computation (parameters
    left out; the fusion itself counts once)."""
    _, count = _indexing(fusion, None)
    return {inst: n for inst, n in count.items() if inst is not fusion}


def most_emitted(fusion: HloInstruction, memo: dict | None = None) -> tuple[int, HloInstruction | None]:
    """The largest number of times `fusion`'s kernel emits one of its instructions, and that
    instruction (XLA's MaxCodeDuplicationTooHigh asks the same of a finished fusion)."""
    _, count = _indexing(fusion, memo)
    best, which = 0, None
    for inst, n in count.items():
        if inst is not fusion and n > best:
            best, which = n, inst
    return best, which
