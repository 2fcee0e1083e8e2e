"""XLA's in-place fusion rule (InstructionFusion::ShouldFuseInPlaceOp), for both targets.

A dynamic-update-slice or scatter (or a fusion rooted at one) writes its result into its
operand's buffer when that operand dies there, writing only the updated elements. Fusing a
producer that also reads that buffer would then read elements the consumer already overwrote,
so such producers stay out - except a slice or dynamic-slice of exactly the updated window,
read element for element before it is written (XLA's one safe case). A consumer that reads
the buffer through a second operand is refused too, and two in-place updates are kept apart.
codegen/kernels/cpu_dus.py emits the in-place kernels these fusions become.

A scatter roots an input fusion of the producers of its indices and updates (XLA's
CanEmitInputFusedScatter, `scatter_input`): never of its updated operand, nor of a producer
that reads that operand's buffer (elementwise or not: the kernel writes the buffer at
positions the indices choose, in the same pass that reads the updates), and a scatter is never
a producer. codegen/kernels/cpu_scatter.py reads the fused indices and updates through the
element generators.
"""
from __future__ import annotations

from ...hlo.ir import HloInstruction
from ...hlo.literals import constant_int
from .context import FusionContext
from .decisions import Decision
from .fusibility import fusion_outputs, is_input_fusible_scatter, members

refuse = Decision.refuse
ALLOW = Decision.allow()


def in_place_operands(inst: HloInstruction) -> list[int]:
    """XLA's GetInPlaceInputOutputPairs, by operand number: the operands whose buffer `inst`'s
    result reuses - operand 0 of a dynamic-update-slice, the updated operands of a scatter, and
    for a fusion the operands behind the parameters its dynamic-update-slice or scatter roots
    update."""
    if inst.opcode == "dynamic-update-slice":
        return [0]
    if inst.opcode == "scatter":
        return list(range((len(inst.operands) - 1) // 2))
    if inst.opcode != "fusion":
        return []
    found: list[int] = []
    for root in fusion_outputs(inst):
        for k in in_place_operands(root) if root.opcode != "fusion" else []:
            op = root.operands[k]
            if op.opcode == "parameter" and op.parameter_number not in found:
                found.append(op.parameter_number)
    return found


def _single(inst: HloInstruction, pred) -> HloInstruction | None:
    """XLA's ExtractInstruction: `inst` or the one member of its fusion satisfying `pred`."""
    if pred(inst):
        return inst
    hits = [m for m in members(inst) if pred(m)] if inst.opcode == "fusion" else []
    return hits[0] if len(hits) == 1 else None


def _outer(fusion: HloInstruction, operand: HloInstruction) -> HloInstruction:
    """The instruction outside `fusion` that parameter `operand` of it stands for."""
    if fusion.opcode == "fusion" and operand.opcode == "parameter" and operand.parent is fusion.fused_computation:
        return fusion.operands[operand.parameter_number]
    return operand


def _same_order(inst: HloInstruction) -> bool:
    """Elementwise, or a reshape/bitcast that only adds or drops size-1 dimensions (element i of
    the result is element i of the operand). XLA counts only elementwise ops; its algebraic
    simplifier has already moved such reshapes out of the way, which hlofuse's has not."""
    if inst.info.elementwise:
        return True
    if inst.opcode in ("reshape", "bitcast") and inst.shape.is_array:
        a = [d for d in inst.operands[0].shape.dims if d != 1]
        return a == [d for d in inst.shape.dims if d != 1]
    return False


def _slice_reads_window_only(producer: HloInstruction, consumer: HloInstruction, dus: HloInstruction) -> bool:
    """XLA's IsSafeToFuseSliceIntoDusFusion: inside `consumer`, what reads `producer` reaches the
    dynamic-update-slice through element-preserving ops only."""
    if consumer.opcode != "fusion":
        return True
    comp = consumer.fused_computation
    stack = [comp.parameter(i) for i, op in enumerate(consumer.operands) if op is producer]
    seen: set[HloInstruction] = set()
    while stack:
        inst = stack.pop()
        if inst in seen:
            continue
        seen.add(inst)
        if inst is not dus and inst.opcode != "parameter" and not _same_order(inst):
            return False
        if inst is not dus:
            stack.extend(inst.users)
    return True


def _window_read(producer: HloInstruction, consumer: HloInstruction) -> str:
    """"" when non-elementwise `producer` reads exactly the window that the consumer's
    dynamic-update-slice writes (a slice at its constant starts, or a dynamic-slice at its
    start operands), else why not: XLA's one safe case of reading an in-place buffer."""
    dus = _single(consumer, lambda i: i.opcode == "dynamic-update-slice")
    reader = _single(producer, lambda i: i.opcode != "fusion" and not i.info.elementwise
                     and i.opcode != "parameter" and not _same_order(i))
    if dus is None or reader is None or tuple(reader.shape.dims) != tuple(dus.operands[1].shape.dims):
        return "the consumer is not a dynamic-update-slice or the producer has several non-elementwise ops"
    starts = [_outer(consumer, s) for s in dus.operands[2:]]
    if reader.opcode == "slice":
        spec = reader.attrs["slice"]
        if any(constant_int(s) != lo or stride != 1 for s, (lo, _hi, stride) in zip(starts, spec)):
            return "the slice and the dynamic-update-slice start at different indices"
    elif reader.opcode == "dynamic-slice":
        for s, r in zip(starts, (_outer(producer, o) for o in reader.operands[1:])):
            a, b = constant_int(s), constant_int(r)
            if a != b or (a is None and s is not r):
                return "the dynamic-slice and the dynamic-update-slice start at different indices"
    else:
        return f"{reader.name} ({reader.opcode}) reads the buffer other than at the updated window"
    if not _slice_reads_window_only(producer, consumer, dus):
        return "another non-elementwise op inside the fusion would read the buffer"
    return ""


def in_place(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """XLA's ShouldFuseInPlaceOp: a consumer that writes into an operand's buffer (a
    dynamic-update-slice or scatter, or a fusion rooted at one) takes no second use of that
    buffer, and no non-elementwise producer reading it (it would read elements the consumer
    already overwrote), except a slice of exactly the updated window. Also keeps two in-place
    updates apart: a producer that itself updates in place is not fused into one."""
    p, c = producer.name, consumer.name
    for k in in_place_operands(consumer):
        buf = consumer.operands[k]
        if any(i != k and op is buf for i, op in enumerate(consumer.operands)):
            return refuse("in-place", f"{c} updates {buf.name} in place and also reads it as another operand; "
                                      f"{p} is not fused into it")
        if in_place_operands(producer) or any(in_place_operands(m) for m in members(producer)):
            return refuse("in-place", f"{p} and {c} both update a buffer in place; they stay apart")
        if not producer.info.elementwise and any(op is buf for op in producer.operands):
            why = _window_read(producer, consumer)
            if why:
                return refuse("in-place", f"{c} updates {buf.name} in place and {p} reads it: {why}")
    return ALLOW


def scatter_input(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext | None = None) -> Decision:
    """XLA's CanEmitInputFusedScatter: the producers of a scatter's indices and updates fuse into
    it (an input fusion rooted at the scatter); its updated operands, producers reading them,
    and fusing a scatter into its own consumers are refused."""
    p, c = producer.name, consumer.name
    if is_input_fusible_scatter(producer):
        return refuse("scatter-output", f"{p} is a scatter; nothing fuses into the output of a scatter ({c})")
    if not is_input_fusible_scatter(consumer):
        return ALLOW
    for k in in_place_operands(consumer):
        buf = consumer.operands[k]
        if buf is producer:
            return refuse("scatter-operand", f"{p} is the operand {c} updates in place; only the producers of "
                                             f"its indices and updates fuse into a scatter")
        if any(op is buf for op in producer.operands):
            return refuse("scatter-operand", f"{p} reads {buf.name}, which {c} updates in place; the scatter "
                                             f"would overwrite elements {p} still has to read")
    return ALLOW
