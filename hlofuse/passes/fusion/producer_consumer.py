"""XLA's ShouldFuse for producer-consumer fusion: pure rules `(producer, consumer, ctx) -> Decision`.

Each rule mirrors one XLA check and refuses with a stable key and a sentence naming both
instructions; a target's checks are a tuple of rules asked in order (`FusionDecision::All`):
`CPU_RULES` (CpuInstructionFusion::ShouldFuse), `GPU_RULES` (GpuInstructionFusion::ShouldFuse
with IsProducerConsumerFusible and FusionFitsInBudget). A rule reads the graph and the
`FusionContext` (the target's parameters, whether the pass may duplicate, the pre-pass's verdicts
on expensive producers, the caches) and changes neither.

A refusal inside a consumer fusion names the instructions that read the producer there, each by
the instruction it duplicates when it is a duplicated copy (`FusionContext.source_name`), so the
same refused pair reads the same however often the growing fusion around the reader, or a copy
of it, is revisited.
"""
from __future__ import annotations

from typing import Callable

from ...hlo.ir import HloInstruction
from .context import FusionContext
from .decisions import Decision
from .fusibility import (
    combined_operands, creates_heavy_computation, is_always_duplicable, is_expensive, is_input_fusible_reduction,
    is_input_fusible_scatter, is_loop_fusible_as_consumer, is_loop_fusible_as_producer, is_multi_output,
    is_physically_transposing,
    not_fusible_reason, reduction_count, reduction_is_contiguous,
)
from .conv_fusion import conv_into_consumer, duplicate_keeps_conv_epilogue, into_conv_fusion, is_conv_output_fusion
from .dot_fusion import dot_into_consumer, into_dot_fusion, is_dot_output_fusion
from .fusion_utils import reader_names
from .in_place import in_place, scatter_input
from .indexing_evaluation import MAX_DUPLICATED_INDEXING, fused_copies
from .size_limit import too_large
from .window_fusion import window_reduction

refuse = Decision.refuse
refuse_later = Decision.refuse_later
ALLOW = Decision.allow()

Rule = Callable[[HloInstruction, HloInstruction, FusionContext], Decision]


def _is_scalar_constant(inst: HloInstruction) -> bool:
    return inst.opcode == "constant" and inst.shape.is_array and inst.shape.element_count() == 1


def would_duplicate(producer: HloInstruction, consumer: HloInstruction) -> bool:
    """Whether fusing `producer` into `consumer` leaves the producer behind for others."""
    users = producer.users  # (a set: hlo/users.py)
    return len(users) > (consumer in users) or producer.is_root()


def _is_reduce_intermediate(inst: HloInstruction) -> bool:
    """XLA's IsReduceIntermediate: a single-operand, single-user convert/bitcast epilogue op."""
    if len(inst.operands) > 1 or len(inst.users) > 1:
        return False
    if inst.opcode in ("bitcast", "bitcast-convert", "convert"):
        return True
    if inst.opcode == "reshape":
        a, b = inst.operands[0].shape, inst.shape
        return [d for d in a.dims if d != 1] == [d for d in b.dims if d != 1]
    return False


def _minor_dim_concatenate(inst: HloInstruction) -> bool:
    """CPU: a concatenate along the minor dimension with enough bytes is better left a memcpy."""
    shape = inst.shape
    if shape.rank <= 1:
        return False
    dim = inst.attrs.get("dimensions", (0,))[0]
    minor = shape.layout.minor_to_major[0] if shape.layout is not None else shape.rank - 1
    dim_bytes = shape.dims[dim] * shape.dtype.byte_size
    return dim == minor and dim_bytes >= 64 and shape.byte_size() >= 2048


def _consumer_label(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> str:
    """`consumer`'s name, or for a fusion "READERS (in FUSION)" naming who reads `producer`."""
    readers, fusion = reader_names(producer, consumer, ctx)
    return f"{readers} (in {fusion})" if fusion else readers


# ---- the rules, each named after the XLA check it mirrors --------------------------------------

def producer_is_fusion(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """Instruction fusion fuses no fusion into a consumer (the merger and multi-output do)."""
    if producer.opcode == "fusion":
        return refuse("producer-is-fusion",
                      f"{producer.name} is a fusion, which {ctx.params.name.upper()} instruction fusion does not "
                      f"fuse into {_consumer_label(producer, consumer, ctx)} (the fusion merger and "
                      f"multi-output fusion decide)")
    return ALLOW


def reuse(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """An expensive producer is not fused into a consumer that reads its elements several times."""
    if producer.opcode != "fusion" and is_expensive(producer, ctx.params) and producer in ctx.reused_by(consumer):
        return refuse_later("expensive-reused",
                            lambda: f"producer {producer.name} is expensive and "
                                    f"{_consumer_label(producer, consumer, ctx)} reads each of its elements "
                                    f"several times")
    return ALLOW


def transposing_into_reduce(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """GPU: a physically transposing producer would uncoalesce a reduction's reads."""
    if is_input_fusible_reduction(consumer) and is_physically_transposing(producer):
        return refuse("transpose-into-reduce", f"fusing transposing producer {producer.name} into reduction "
                                               f"{consumer.name} would break read coalescing")
    return ALLOW


def producer_fusible(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """IsLoopFusibleAsProducer; on the CPU a dot may also be output-fused (dot_fusion.py)."""
    if producer.opcode == "convolution" and ctx.params.name == "cpu":  # epilogue fusion (conv_fusion.py)
        return conv_into_consumer(producer, consumer)
    if producer.opcode == "dot" and ctx.params.name == "cpu":
        return dot_into_consumer(producer, consumer)
    if not is_loop_fusible_as_producer(producer):
        def why() -> str:
            readers = reader_names(producer, consumer, ctx)[0].split(", ")
            verb = "reads" if len(readers) == 1 else "read"
            return f"{not_fusible_reason(producer)}; {' and '.join(readers)} {verb} it from memory"
        return refuse_later("producer-not-fusible", why)
    return ALLOW


def reduce_epilogue(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """GPU: a contiguous reduction only takes a convert/bitcast epilogue."""
    p, c = producer.name, consumer.name
    if producer.opcode == "reduce" and ctx.params.reduce_epilogue_only and reduction_is_contiguous(producer):
        members = ([i for i in consumer.fused_computation.instructions if i.opcode != "parameter"]
                   if consumer.opcode == "fusion" else [consumer])
        if not all(_is_reduce_intermediate(m) for m in members):
            return refuse("reduce-epilogue",
                          f"reduction {p} can only be fused into a convert/bitcast epilogue, not into {c}")
        if len(producer.users) > 1:
            return refuse("reduce-epilogue", f"reduction {p} has several users; its epilogue fusion needs one")
    return ALLOW


def consumer_fusible(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """The consumer can root a loop or input fusion (or is one)."""
    c = consumer.name
    if is_input_fusible_scatter(consumer) or is_input_fusible_scatter(producer):
        return scatter_input(producer, consumer, ctx)  # the indices' and updates' producers (in_place.py)
    if consumer.opcode == "fusion":
        if is_conv_output_fusion(consumer) and ctx.params.name == "cpu":
            return into_conv_fusion(producer, consumer)
        if consumer.attrs.get("kind") in ("kLoop", "kInput"):
            return ALLOW
        if is_dot_output_fusion(consumer) and ctx.params.name == "cpu":
            return into_dot_fusion(producer, consumer)
        return refuse("consumer-not-fusible", f"consumer {c} is a {consumer.attrs.get('kind')} fusion")
    if not is_loop_fusible_as_consumer(consumer):
        return refuse("consumer-not-fusible",
                      f"consumer {c} ('{consumer.opcode}') cannot be the root of a loop or input fusion")
    return ALLOW


def multi_output_producer(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """A multi-output fusion is never a producer."""
    if is_multi_output(producer):
        return refuse("producer-multi-output", f"producer {producer.name} is a multi-output fusion")
    return ALLOW


def gpu_constant(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """GPU: non-scalar constants stay buffers; scalar ones only join existing fusions."""
    p, c = producer.name, consumer.name
    if producer.opcode == "constant":
        if not _is_scalar_constant(producer):
            return refuse("constant", f"non-scalar constant {p} stays a global buffer, not fused into {c}")
        if consumer.opcode != "fusion":
            return refuse("constant", f"scalar constant {p} is only fused into an existing fusion, not into {c}")
    return ALLOW


def cpu_constant(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """CPU: non-scalar constants are not fused."""
    if producer.opcode == "constant" and not _is_scalar_constant(producer):
        return refuse("constant", f"non-scalar constant {producer.name} is not fused into {consumer.name}")
    return ALLOW


def scalar_constant(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """CPU: a scalar constant only joins an existing fusion."""
    if producer.opcode == "constant" and consumer.opcode != "fusion":
        return refuse("constant", f"scalar constant {producer.name} is only fused into an existing fusion, "
                                  f"not into {consumer.name}")
    return ALLOW


def heavy(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """A heavy reduction is not recomputed per re-read element."""
    if creates_heavy_computation(producer, consumer):
        return refuse("heavy-computation", f"fusing {producer.name} into {consumer.name} would recompute a "
                                           f"heavy reduction for each re-read element")
    return ALLOW


def base(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """InstructionFusion::ShouldFuse: the root stays; duplication is cheap, allowed, or judged."""
    p = producer.name
    if producer.is_root():
        return refuse("root", f"producer {p} is the root of {producer.parent.name}; its value must be materialized")
    if would_duplicate(producer, consumer) and not is_always_duplicable(producer):
        # (the readers are named only in a refusal: most duplicated pairs are allowed)
        if not ctx.may_duplicate:
            return refuse_later("no-duplication", lambda: f"fusing {p} into {_readers_text(producer, consumer, ctx)} "
                                                          f"would duplicate it and this pass may not duplicate")
        if is_expensive(producer, ctx.params):
            verdict = ctx.verdict(producer)
            if verdict is not None:
                return verdict
            return refuse_later("expensive-duplicate",
                                lambda: f"producer {p} is expensive and has {len(producer.users)} users; fusing it "
                                        f"into {_readers_text(producer, consumer, ctx)} would compute it twice")
    return ALLOW


def _readers_text(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> str:
    """The instructions reading `producer` in `consumer`, as a refusal names them ("a and b")."""
    return " and ".join(reader_names(producer, consumer, ctx)[0].split(", "))


def conv_epilogue_copy(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """CPU, the duplication decision's last word: a copy of a cheap producer must not give the
    convolution whose epilogue it ends a second user (conv_fusion.duplicate_keeps_conv_epilogue).
    Asked after every other check, so a consumer that could not take the producer anyway says why."""
    if ctx.may_duplicate and would_duplicate(producer, consumer) and not is_always_duplicable(producer):
        return duplicate_keeps_conv_epilogue(producer, lambda: _readers_text(producer, consumer, ctx), ctx.params)
    return ALLOW


def _width_changing_bitcast(inst: HloInstruction, opcodes: tuple[str, ...]) -> bool:
    # a plain bitcast may change the element type too (s8[3,5,2] -> s16[3,5]: XLA's
    # DoNotFuseBitWidthChangingBitcast)
    if inst.opcode not in opcodes or not inst.shape.is_array:
        return False
    if not inst.operands[0].shape.is_array:
        return False
    return inst.operands[0].shape.dtype.byte_size != inst.shape.dtype.byte_size


def bitcast_width(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """GPU: a bitcast-convert or bitcast that changes the element width (f32 -> u8[4]) changes
    the shape's rank and indexing; XLA:GPU fuses it neither as producer nor as consumer (issue
    16, rule 7; priority_fusion_test DoNotFuseBitWidthChangingBitcast). XLA:CPU fuses such a
    bitcast-convert (CanBeLoopFused takes every elementwise op; jax's convert_types module
    shows `convert_bitcast-convert_fusion`s), and so does hlofuse's CPU, whose elemental
    bitcast-convert splits or joins the pieces; a plain bitcast that changes the width stays
    out there, its element generator being a reshape's."""
    opcodes = ("bitcast-convert", "bitcast") if ctx.params.name != "cpu" else ("bitcast",)
    for inst in (producer, consumer):
        if _width_changing_bitcast(inst, opcodes):
            src, dst = inst.operands[0].shape.dtype.name, inst.shape.dtype.name
            return refuse("bitcast-width", f"{inst.opcode} {inst.name} changes the element width ({src} -> "
                                           f"{dst}); {producer.name} is not fused into {consumer.name}")
    return ALLOW


def cpu_concatenate(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """CPU: wide or large minor-dimension concatenates stay unfused."""
    limit = ctx.params.max_concatenate_operands
    for inst in (producer, consumer):
        if inst.opcode == "concatenate" and (
                (limit is not None and len(inst.operands) > limit) or _minor_dim_concatenate(inst)):
            why = (f"{len(inst.operands)} > {limit} operands" if limit is not None
                   and len(inst.operands) > limit else "a large minor-dimension concatenate")
            return refuse("concatenate", f"concatenate {inst.name} is better unfused on the CPU ({why}); "
                                         f"{producer.name} is not fused into {consumer.name}")
    return ALLOW


def cpu_reductions(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """CPU: at most `max_reductions_per_fusion` reductions in one fusion."""
    limit = ctx.params.max_reductions_per_fusion
    if limit is not None and consumer.opcode == "fusion" and producer.opcode == "reduce":
        n = reduction_count(consumer)
        if n > limit:
            return refuse("too-many-reductions", f"too many reductions: fusion {consumer.name} already holds "
                                                 f"{n} > {limit}; {producer.name} is not fused into it")
    return ALLOW


def budget(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """GPU: FusionFitsInBudget (unnested reductions, operands and outputs)."""
    p = producer.name
    limit = ctx.params.max_unnested_reductions
    added = reduction_count(producer, unnested_only=True) if limit is not None else 0
    if added:
        n = reduction_count(consumer, unnested_only=True) + added
        if n > limit:
            return refuse("budget", f"reduction budget exceeded: {n} > {limit} unnested reductions "
                                    f"(fusing {p} into {_consumer_label(producer, consumer, ctx)})")
    most = ctx.params.max_operands_and_outputs
    if most is None:
        return ALLOW
    operands = combined_operands(consumer, producer)
    if len(operands) <= len(consumer.operands):
        return ALLOW
    outputs = len(consumer.shape.leaves()) + len(producer.shape.leaves())
    total = len(operands) + outputs
    if total > most:
        where = _consumer_label(producer, consumer, ctx)
        return refuse("budget", f"operand budget exceeded: {total} > {most} (fusing {p} into {where} "
                                f"needs {len(operands)} operands + {outputs} outputs)")
    return ALLOW


def code_duplication(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> Decision:
    """The consumer fusion would emit the producer's code more than MAX_DUPLICATED_INDEXING
    times, once per distinct index it is read at (CpuInstructionFusion and GpuInstructionFusion's
    "Code duplication too high": indexing_evaluation.py). A broadcast is always fused (XLA's
    exception: materializing it costs more), and its operand is then judged by its copies; so is
    a scalar constant, a literal in every copy (no code: it would otherwise be a buffer)."""
    if consumer.opcode != "fusion" or producer.opcode == "broadcast" or _is_scalar_constant(producer):
        return ALLOW
    if not ctx.reads_new_index(consumer) and (producer.opcode != "fusion" or not ctx.reads_new_index(producer)):
        return ALLOW  # every array of both is emitted once per index (a chain of elementwise ops)
    copies = fused_copies(consumer, producer, ctx.indexing)
    if copies > MAX_DUPLICATED_INDEXING:
        return refuse("duplicated-indexing", f"{_consumer_label(producer, consumer, ctx)} would emit "
                                             f"code of {producer.name} {copies} times, once per distinct index "
                                             f"it is read at (at most {MAX_DUPLICATED_INDEXING})")
    return ALLOW


# The checks of each target, in XLA's order.
# (window_reduction, hlofuse's, is asked after producer_fusible: window_fusion.py)
CPU_RULES: tuple[Rule, ...] = (cpu_constant, producer_fusible, window_reduction, bitcast_width, cpu_concatenate,
                               reuse, base, cpu_reductions,
                               scalar_constant, producer_is_fusion, consumer_fusible, code_duplication, too_large,
                               in_place, conv_epilogue_copy)
GPU_RULES: tuple[Rule, ...] = (producer_is_fusion, reuse, transposing_into_reduce, producer_fusible,
                               window_reduction, bitcast_width, reduce_epilogue, consumer_fusible,
                               multi_output_producer, gpu_constant, heavy, base, budget, code_duplication,
                               too_large, in_place)


def rules_for(ctx: FusionContext) -> tuple[Rule, ...]:
    """The checks of the context's target."""
    return CPU_RULES if ctx.params.name == "cpu" else GPU_RULES


def should_fuse(consumer: HloInstruction, index: int, ctx: FusionContext) -> Decision:
    """Whether operand `index` of `consumer` may be fused into it, with the reason when not."""
    producer = consumer.operands[index]
    for rule in rules_for(ctx):
        d = rule(producer, consumer, ctx)
        if d is not ALLOW and not d:  # (most rules answer the shared ALLOW: no __bool__ call)
            return d
    return ALLOW


def choose_kind(producer: HloInstruction, consumer: HloInstruction, ctx: FusionContext) -> str:
    """kInput for a reduction hero on the GPU, kOutput for a dot and its epilogue (CPU,
    dot_fusion.py), kLoop otherwise (XLA's ChooseFusionKind)."""
    if producer.opcode == "convolution" or is_conv_output_fusion(consumer):  # CPU only (conv_into_consumer)
        return "kOutput"
    if producer.opcode == "dot" or is_dot_output_fusion(consumer):
        return "kOutput"
    if ctx.params.input_fusion_kind == "kInput" and is_input_fusible_reduction(consumer):
        return "kInput"
    if is_input_fusible_scatter(consumer):  # both targets: the scatter kernel reads fused inputs
        return "kInput"
    return "kLoop"
