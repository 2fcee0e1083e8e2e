"""Which kernels the CPU's multi-output fusion may merge (beyond XLA:CPU, which has none).

A CPU kernel is one of a few kinds (codegen/planning.py): a loop nest over one output shape,
a reduction, or a library/custom kernel (GEMM, convolution, sort, scatter, in-place update).
Two kernels may share one only when the result is still one kernel of one of those kinds, so
that the bytes the cost model saves are bytes the CPU really stops moving:

  * two reductions of the same input dimensions (sum(x) and sum(x*x)): one pass over x;
  * a reduction and a *plain loop* whose outputs have the reduction's input dimensions
    (t * a, t + b and sum(t) over rows of t): the reduction kernel computes the loop's outputs
    at each input index it folds (its `extras`, codegen/kernels/reduction_groups.py), so the
    common operand is read, and what both compute from it is computed, once;
  * two *plain loops* writing outputs of exactly the same dimensions (exp(x) and x*x): one
    loop nest (the CPU loop kernel writes every output of a multi-output fusion from one loop
    when their dimensions are equal, codegen/kernels/cpu_loop.py), which reads the common
    operand once. Equal element counts are not enough here, unlike XLA:GPU's one linear index:
    the CPU planner gives outputs of different dimensions separate loop kernels, which would
    each read the operand again.

A plain loop that several kernels read (or the root) may also be computed inside one of them,
a plain loop fusion over the same dimensions that reads it only element by element, as an extra
output (producer-consumer multi-output fusion): its own kernel goes, with its write and that
consumer's read of it; each element is still computed once, and the other users read the output.

A plain loop is a kLoop fusion (or one fusible instruction) of elementwise and data-movement
instructions only: no reduce (the planner gives a reduce used inside a loop a kernel of its
own) and no dynamic-update-slice (an in-place kernel). Merging never duplicates work: each
output is computed once, and instructions both siblings computed (a producer duplicated into
both) are computed once in the merged kernel. XLA's operand budget for a multi-output fusion
(kMaxOperandsAndOutputsPerFusion) bounds the merged kernel's buffers, as on the GPU.
"""
from __future__ import annotations

from typing import Callable

from ...hlo.ir import HloInstruction
from .cost_model import MAX_OPERANDS_AND_OUTPUTS_PER_FUSION
from .decisions import Decision
from .fusibility import fusion_outputs, is_multi_output, members, reduce_hero

refuse = Decision.refuse
_OK = Decision.allow()

# The most buffers one multi-output kernel reads and writes. XLA:CPU has no multi-output fusion
# and so no such figure; the GPU's (XLA's kMaxOperandsAndOutputsPerFusion) bounds the CPU's
# merged kernels too (each buffer is a pointer argument and a stream).
CPU_MAX_OPERANDS_AND_OUTPUTS = MAX_OPERANDS_AND_OUTPUTS_PER_FUSION

# The rule name of a pair the CPU does not merge because of what the two kernels are (a
# reduction and a loop, a library call): the target's policy, not logged per pair.
KINDS_RULE = "cpu-sibling-kernel-kinds"


def is_plain_loop(inst: HloInstruction) -> bool:
    """Whether `inst` is (or fuses into) one CPU loop kernel: a kLoop fusion or a fusible
    instruction computing only elementwise and data-movement instructions, with no reduce and
    no dynamic-update-slice."""
    if inst.opcode == "fusion":
        if inst.attrs.get("kind") != "kLoop":
            return False
        body = members(inst)
    else:
        if inst.opcode == "parameter" or inst.info.bookkeeping:
            return False
        body = [inst]
    return all(i.info.fusion == "yes" and i.opcode != "dynamic-update-slice" for i in body)


def loop_dims(inst: HloInstruction) -> tuple[int, ...] | None:
    """The dimensions of a plain loop's outputs when they are all equal, else None."""
    outputs = fusion_outputs(inst)
    if any(not o.shape.is_array for o in outputs):
        return None
    dims = {tuple(o.shape.dims) for o in outputs}
    return next(iter(dims)) if len(dims) == 1 else None


def cpu_sibling_rule(a: HloInstruction, b: HloInstruction, parent: HloInstruction,
                     loop_siblings: bool = True,
                     plain: Callable[[HloInstruction], bool] = is_plain_loop) -> Decision:
    """The CPU's condition on siblings `a` and `b` (both reading `parent`): both reductions
    (their shapes are checked by the common rules), or both plain loops over the same
    dimensions (module doc; not with `loop_siblings` false). `plain` is `is_plain_loop` or a
    memo of it (context.FusionContext.plain_loop)."""
    ra, rb = reduce_hero(a) is not None, reduce_hero(b) is not None
    if ra and rb:
        return _OK
    if ra != rb and loop_siblings:
        reduction, loop = (a, b) if ra else (b, a)
        if plain(loop):
            return _loop_as_extras(loop, reduction)
    if ra or rb or not loop_siblings or not plain(a) or not plain(b):
        return refuse(KINDS_RULE,
                      f"on the CPU only two reductions or two plain loops share a kernel; {a.name} and "
                      f"{b.name} would not be one CPU kernel")
    da, db = loop_dims(a), loop_dims(b)
    if da is None or db is None or da != db:
        return refuse("cpu-loop-dims",
                      f"{a.name} and {b.name} write outputs of different dimensions "
                      f"({list(da) if da else 'several'} vs {list(db) if db else 'several'}); the CPU "
                      f"would give them separate loops, each reading {parent.name} again")
    return _OK


def reduce_signatures(inst: HloInstruction) -> set[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(input dimensions, reduced dimensions) of every reduce `inst` computes (itself, or in its
    fused computation)."""
    insts = inst.fused_computation.instructions if inst.opcode == "fusion" else [inst]
    return {(tuple(i.operands[0].shape.dims), tuple(sorted(i.attrs["dimensions"])))
            for i in insts if i.opcode == "reduce"}


def reduce_input_dims(inst: HloInstruction) -> tuple[int, ...] | None:
    """The input dimensions of the reduces `inst` computes (itself or in its fused computation)
    when they are all equal, else None."""
    dims = {input_dims for input_dims, _ in reduce_signatures(inst)}
    return next(iter(dims)) if len(dims) == 1 else None


def _loop_as_extras(loop: HloInstruction, reduction: HloInstruction) -> Decision:
    """Whether plain loop `loop` can be computed inside `reduction`'s kernel as extra outputs:
    its outputs all have the input dimensions of every reduce of `reduction` (the kernel loops
    over exactly those indices, each once)."""
    dims, rdims = loop_dims(loop), reduce_input_dims(reduction)
    if dims is None or rdims is None or dims != rdims:
        return refuse("cpu-loop-dims",
                      f"{loop.name} writes {list(dims) if dims else 'several shapes'}, not the input "
                      f"dimensions of {reduction.name}'s reduces "
                      f"({list(rdims) if rdims else 'several'}): the reduction kernel cannot compute it")
    return _OK


def _folds_at_input_index(user: HloInstruction, value: HloInstruction, dims: tuple[int, ...]) -> bool:
    """Whether `user` is a reduce over input dimensions `dims` that reads `value` only as an
    input (not as an init value): it reads each element once, at the kernel's input index."""
    if user.opcode != "reduce" or tuple(user.operands[0].shape.dims) != dims:
        return False
    half = len(user.operands) // 2
    return all(op is not value for op in user.operands[half:])


# ---- producer-consumer -------------------------------------------------------------------

def cpu_producer_consumer_rule(producer: HloInstruction, consumer: HloInstruction,
                               plain: Callable[[HloInstruction], bool] = is_plain_loop) -> Decision:
    """Whether plain loop `producer` may be computed inside `consumer` (as an extra output when
    others read it too): `consumer` a plain loop over the producer's dimensions, or a reduction
    fusion whose reduces all have the producer's dimensions as input dimensions (its kernel
    loops over those indices, each once), and `consumer` reads it only elementwise at its own
    index, so each element of the producer is computed once, in the consumer's loop, and never
    read back from memory by it. `plain`: as in `cpu_sibling_rule`."""
    # what the two kernels are first: a KINDS_RULE refusal is the target's policy, not logged
    reduction = consumer.opcode == "fusion" and reduce_hero(consumer) is not None
    if not reduction and (not plain(consumer) or (consumer.opcode != "fusion" and not consumer.info.elementwise)):
        return refuse(KINDS_RULE, f"{consumer.name} is not a plain loop fusion, reduction fusion or elementwise "
                                  f"instruction")
    if not producer.shape.is_array or not plain(producer):
        return refuse(KINDS_RULE, f"{producer.name} is not a plain loop")
    if producer.opcode == "fusion" and is_multi_output(producer):
        return refuse("producer-multi-output", f"producer {producer.name} is a multi-output fusion")
    # a reduction kernel loops over its reduces' input indices, each once (`_loop_as_extras`)
    dims = reduce_input_dims(consumer) if reduction else loop_dims(consumer)
    if consumer.opcode != "fusion":  # elementwise: reads the producer at its own index
        return _OK if dims == tuple(producer.shape.dims) else refuse(
            "cpu-loop-dims", f"{producer.name} and {consumer.name} are not one CPU loop")
    if dims != tuple(producer.shape.dims):
        return refuse("cpu-loop-dims",
                      f"{producer.name} ({list(producer.shape.dims)}) and {consumer.name} "
                      f"({list(dims) if dims else 'several shapes'}) are not one CPU loop")
    comp = consumer.fused_computation
    for i, op in enumerate(consumer.operands):
        if op is not producer:
            continue
        param = comp.parameter(i)
        for u in param.users:
            if reduction and _folds_at_input_index(u, param, dims):
                continue
            if not u.info.elementwise or tuple(u.shape.dims) != dims:
                return refuse("cpu-reread",
                              f"{consumer.name} reads {producer.name} through {u.name} ('{u.opcode}'), not "
                              f"element by element: as its extra output {producer.name} would be computed "
                              f"again for the elements {u.name} reads")
    return _OK
