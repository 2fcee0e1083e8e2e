"""CPU output (epilogue) fusion of convolutions: a convolution fused into its elementwise
consumers (kOutput), run as one conv kernel that applies the epilogue to each position's
accumulators before storing them (codegen/kernels/cpu_conv.py): bias add, activation,
residual add, scale and convert write the result once instead of re-reading it.

XLA:CPU does not fuse convolutions (Eigen computes them into a buffer); this goes beyond it.
Asked by the producer-consumer rules (producer_consumer.py):
- `conv_into_consumer`: may convolution `producer` fuse into `consumer`? Only when it has no
  other user (a convolution is never duplicated), its types are the kernel's (real or integer,
  not pred), and every read of it on every path to the fusion's root is an elementwise op of
  its dimensions, so the epilogue reads each result element once, at its own index.
- `into_conv_fusion`: may a producer join a kOutput convolution fusion? Not one the convolution
  reads (the kernel reads its operands from memory at computed addresses), and not a
  reduction or another heavy op (an epilogue would recompute it per element).
Asked by the duplication decision (producer_consumer.conv_epilogue_copy, CPU_RULES' last check):
- `duplicate_keeps_conv_epilogue`: may a cheap producer with several users be copied into one
  of them? Not when it ends the elementwise chain a convolution's epilogue would compute and
  another user reads it from memory anyway (a convolution, a tuple), so it is written either way.
  Instruction fusion visits consumers root first, so a shared `bn(conv)` (keras MobileNetV2's
  projection + batch norm, read by the next convolution and by a later residual add) was copied
  into the residual add's kernel before the convolution was visited; the copy gave the
  convolution a second user, which cost it the whole epilogue (`conv-output-users`): the
  convolution wrote its result, a loop kernel recomputed the chain for the next convolution and
  the copy recomputed it again. Refused, the chain joins the convolution's kernel and every user
  reads its result: one kernel and a write and read of the result fewer (MobileNetV2: 131 -> 126
  kernels; ResNet-50, whose block outputs cascaded copies through every residual add: 124 -> 112
  kernels, 331 -> 246 MB moved). Where every user could fuse the chain, the copies write the
  convolution's result instead of the chain's (as many bytes, as many kernels) and stay: the
  haiku ResNet-18 step's relu-gradient selects, taken as epilogues instead, ran 6% slower.
"""
from __future__ import annotations

from typing import Callable

from ...hlo.ir import HloInstruction
from ...hlo.walk import first_non_elementwise_use
from .cost_model import TargetParams, distinct
from .decisions import Decision
from .fusibility import is_expensive, is_loop_fusible_as_consumer
from .fusion_utils import operand_index

refuse = Decision.refuse
ALLOW = Decision.allow()


def is_conv_output_fusion(inst: HloInstruction) -> bool:
    """Whether `inst` is a kOutput fusion holding a convolution."""
    return (inst.opcode == "fusion" and inst.attrs.get("kind") == "kOutput"
            and any(i.opcode == "convolution" for i in inst.fused_computation.instructions))


def conv_into_consumer(producer: HloInstruction, consumer: HloInstruction) -> Decision:
    """CPU: may convolution `producer` be output-fused into `consumer`? (see the module doc)"""
    p, c = producer.name, consumer.name
    types = [producer.shape.dtype] + [op.shape.dtype for op in producer.operands]
    if any(t.is_complex or t.is_pred for t in types):
        return refuse("conv-output-type", f"convolution {p} of {producer.shape.dtype.name} runs as a library call; "
                                          f"{c} reads its result from memory")
    if len(producer.users) != 1:
        return refuse("conv-output-users", f"convolution {p} has {len(producer.users)} users; fusing it into {c} "
                                           f"would compute it twice")
    dims = tuple(producer.shape.dims)
    if not consumer.shape.is_array or tuple(consumer.shape.dims) != dims:
        return refuse("conv-output-shape", f"{c} does not produce one array of convolution {p}'s dimensions, so it "
                                           f"cannot be its epilogue")
    if consumer.opcode != "fusion":
        if not consumer.info.elementwise:
            return refuse("conv-output-elementwise", f"{c} ('{consumer.opcode}') is not elementwise, so it cannot "
                                                     f"be convolution {p}'s epilogue")
        return ALLOW
    if consumer.attrs.get("kind") != "kLoop":
        return refuse("conv-output-kind", f"{c} is a {consumer.attrs.get('kind')} fusion, not an elementwise loop")
    comp = consumer.fused_computation
    held = [i.name for i in comp.instructions if not i.info.fits_an_epilogue]
    if held:
        return refuse("conv-output-epilogue", f"fusion {c} holds {', '.join(held)}, which an epilogue of "
                                              f"convolution {p} would recompute per element")
    bad = first_non_elementwise_use(comp.parameter(operand_index(consumer, producer)), dims)
    if bad is not None:
        return refuse("conv-output-elementwise", f"{bad.name} (in {c}) reads convolution {p} other than elementwise at "
                                                 f"its own index, so the fusion cannot be its epilogue")
    return ALLOW


def into_conv_fusion(producer: HloInstruction, consumer: HloInstruction) -> Decision:
    """CPU: may `producer` join kOutput convolution fusion `consumer`? (see the module doc)"""
    if not producer.info.fits_an_epilogue:
        return refuse("conv-output-producer", f"{producer.name} ('{producer.opcode}') is not fused into output "
                                              f"fusion {consumer.name}")
    comp = consumer.fused_computation
    param = comp.parameter(operand_index(consumer, producer))
    if any(u.opcode == "convolution" for u in param.users):
        return refuse("conv-output-operand", f"the convolution in {consumer.name} reads {producer.name}; the conv "
                                             f"kernel reads its operands from memory, so {producer.name} is not fused")
    return ALLOW


def _epilogue_convolution(producer: HloInstruction, params: TargetParams) -> list[HloInstruction]:
    """The convolution whose epilogue `producer` would end, with the chain between them
    (convolution first, `producer` last), or [] when there is none.

    Walks `producer`'s operands down through instructions that a copy of `producer` would drag
    into the copy's fusion as well: a non-fusion instruction whose only user is the instruction
    above, cheap (the pass copies it too; an expensive one is judged on its own and stops the
    walk), elementwise, epilogue-fit and of `producer`'s dimensions. It ends at a convolution
    whose only user is the chain and which `conv_into_consumer` would fuse into it. Only
    single-user instructions are walked, so each instruction is walked from one multi-user
    producer at most."""
    if (producer.opcode == "fusion" or not producer.shape.is_array or not producer.info.elementwise
            or not producer.info.fits_an_epilogue):
        return []
    dims = tuple(producer.shape.dims)
    below: dict[HloInstruction, HloInstruction] = {}  # instruction -> its user on the chain
    stack = [producer]
    while stack:
        inst = stack.pop()
        for op in distinct(inst.operands):
            if op in below or op.users != [inst] or op.is_root():
                continue
            if op.opcode == "convolution":
                if conv_into_consumer(op, inst):
                    chain = [op, inst]
                    while chain[-1] is not producer:
                        chain.append(below[chain[-1]])
                    return chain
                continue
            if (op.opcode != "fusion" and op.shape.is_array and tuple(op.shape.dims) == dims
                    and op.info.elementwise and op.info.fits_an_epilogue and not is_expensive(op, params)):
                below[op] = inst
                stack.append(op)
    return []


def _read_from_memory(producer: HloInstruction) -> str | None:
    """The name of a user of `producer` that reads it from memory whatever the fusion passes do
    (a convolution, dot, tuple or other op that roots no loop fusion, or a convolution fusion
    whose convolution reads it), or `producer`'s own when it is the root; None if every user
    could fuse it."""
    if producer.is_root():
        return f"{producer.parent.name}'s root"
    for user in list(producer.users):
        if user.opcode == "fusion":
            if is_conv_output_fusion(user) and not into_conv_fusion(producer, user):
                return user.name
        elif not is_loop_fusible_as_consumer(user):
            return user.name
    return None


def duplicate_keeps_conv_epilogue(producer: HloInstruction, consumer: str | Callable[[], str],
                                  params: TargetParams) -> Decision:
    """CPU: may `producer`, which has users besides `consumer` (named as the log names it, or a
    function giving that name: called only for a refusal, as nearly every pair is allowed), be
    copied into it without costing a convolution its epilogue? Refused only where the copy saves
    nothing: another user reads `producer` from memory anyway, so it is written either way.
    Where every user could fuse it, the copies (XLA's choice) write the convolution's result
    instead of `producer`'s, as many bytes; kept so. (see the module doc)"""
    chain = _epilogue_convolution(producer, params)
    if not chain:
        return ALLOW
    reader = _read_from_memory(producer)
    if reader is None:
        return ALLOW
    if callable(consumer):
        consumer = consumer()
    conv, p = chain[0].name, producer.name
    return refuse("conv-epilogue-duplicate",
                  f"copying {p} into {consumer} would give convolution {conv} a second user and cost it its "
                  f"epilogue ({' -> '.join(i.name for i in chain)}), and {reader} reads {p} from memory "
                  f"anyway; {consumer} reads it too, written once by {conv}'s kernel")
