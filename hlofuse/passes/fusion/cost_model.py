"""The fusion cost model: per-target parameters, and bytes/kernels/duplicated work of a module.

Two parameter sets mirror XLA's choices:
  gpu  GpuInstructionFusion + GpuMultiOutputFusion + GpuHorizontalLoopFusion
       (xla/service/gpu/instruction_fusion.cc, gpu_fusible.{h,cc}, multi_output_fusion.cc,
       horizontal_loop_fusion.cc)
  cpu  CpuInstructionFusion (xla/service/cpu/cpu_instruction_fusion.cc); XLA's CPU pipeline has
       no multi-output or horizontal fusion.

The module cost counts, for every kernel (an instruction of a non-fusion computation that
launches work), the bytes it reads (each distinct operand once) and writes (its outputs).
Fusion lowers it by keeping intermediates in registers; duplication raises it when a copied
producer's operands are read by several kernels, which this count sees because each kernel
reads its own operands.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...hlo.attributes import COMPUTATION_ATTRS
from ...hlo.ir import HloComputation, HloInstruction, HloModule

# The most instructions (parameters not counted) one fused kernel may hold: XLA's kMaxIRSize is
# 10,000; hlofuse's lower figure is measured (the reasons: passes/fusion/size_limit.py).
MAX_FUSED_INSTRUCTIONS = 512

# XLA's kMaxOperandsAndOutputsPerFusion (gpu_fusible.h): the most buffers one fused kernel reads
# and writes. The GPU's budget; the CPU's multi-output kernels take it too (cpu_multi_output.py).
MAX_OPERANDS_AND_OUTPUTS_PER_FUSION = 96


@dataclass(frozen=True)
class TargetParams:
    """What one XLA backend decides differently."""

    name: str
    # kMaxOperandsAndOutputsPerFusion (gpu_fusible.h: 96); CPU has no such budget.
    max_operands_and_outputs: int | None
    # GPU: divide/sqrt/rsqrt/exp are cheap in f32/f16 (GpuInstructionFusion::IsExpensive).
    cheap_f32_math: bool
    # A reduce is fused into its consumer only as an "epilogue" of converts/bitcasts (GPU),
    # or like any loop-fusible producer (CPU, which fuses reduce+divide in softmax).
    reduce_epilogue_only: bool
    max_concatenate_operands: int | None  # CPU: kMaxConcatenateArguments = 8
    max_reductions_per_fusion: int | None  # CPU: kMaxReductionsInFusion = 5
    max_unnested_reductions: int | None  # GPU: kMaxUnnestedReductionOutputsPerFusion = 8
    input_fusion_kind: str  # GPU: kInput for reduce heroes; CPU: kLoop always
    multi_output: bool  # GPU multi-output (sibling + producer-consumer) fusion
    horizontal: bool  # GPU horizontal loop fusion
    # Horizontal fusion profitability (horizontal_loop_fusion.cc, IsProfitableFusionCandidate):
    # sliced input fusion / kLoop horizontal fusion limits per candidate.
    horizontal_max_elements: int = 128 * 2048
    horizontal_max_instructions: int = 30
    horizontal_loop_max_elements: int = 8192 * 8192
    horizontal_loop_max_instructions: int = 128
    horizontal_max_batch: int = 32
    horizontal_max_param_bytes: int = 4000
    # An expensive producer is duplicated (into every one of its users, never only some) into
    # at most this many consumers: the duplicated work is bounded to this many evaluations.
    max_expensive_copies: int = 4
    # The most instructions one fused kernel holds (XLA: kMaxIRSize = 10000; hlofuse's lower
    # figure is measured, passes/fusion/size_limit.py); None: unbounded.
    max_fused_instructions: int | None = MAX_FUSED_INSTRUCTIONS
    # Whether reduce-window fuses like data movement, rooting loop fusions and fused into its
    # consumers (XLA:GPU's IsUniversallyLoopFusible; hlofuse's CPU too). False: XLA:CPU's
    # CanBeLoopFused, which leaves window reductions unfused (passes/fusion/window_fusion.py).
    fuse_window_reductions: bool = True


GPU = TargetParams(
    name="gpu",
    max_operands_and_outputs=MAX_OPERANDS_AND_OUTPUTS_PER_FUSION,
    cheap_f32_math=True,
    reduce_epilogue_only=True,
    max_concatenate_operands=None,
    max_reductions_per_fusion=None,
    max_unnested_reductions=8,
    input_fusion_kind="kInput",
    multi_output=True,
    horizontal=True,
)

CPU = TargetParams(
    name="cpu",
    max_operands_and_outputs=None,
    cheap_f32_math=False,
    reduce_epilogue_only=False,
    max_concatenate_operands=8,
    max_reductions_per_fusion=5,
    max_unnested_reductions=None,
    input_fusion_kind="kLoop",
    multi_output=False,
    horizontal=False,
)

TARGETS = {"gpu": GPU, "cpu": CPU}


def target_params(target: str | TargetParams) -> TargetParams:
    """Parameters of `target` ("gpu", "gpu-emulated" and "interpreter" use the GPU set)."""
    if isinstance(target, TargetParams):
        return target
    if target in ("gpu", "gpu-emulated", "interpreter"):
        return GPU
    if target == "cpu":
        return CPU
    raise ValueError(f"unknown fusion target '{target}' (expected 'gpu' or 'cpu')")


# ---- module cost ---------------------------------------------------------------------------

def is_bookkeeping(inst: HloInstruction) -> bool:
    """Whether `inst` only names or regroups buffers: tuples and get-tuple-element are pointer
    bookkeeping, a bitcast reinterprets its operand's buffer."""
    return inst.info.bookkeeping


def launches_kernel(inst: HloInstruction) -> bool:
    """Whether `inst` runs as a kernel of its own (XLA emits no code for these)."""
    # parameters and constants are buffers.
    return not is_bookkeeping(inst) and inst.opcode not in ("parameter", "constant")


def distinct(insts) -> list[HloInstruction]:
    """`insts` without repeats (by identity: instructions hash by identity), in first-seen
    order. O(n): a parameter read by thousands of instructions asks this of its users."""
    return list(dict.fromkeys(insts))


def kernel_bytes(inst: HloInstruction) -> tuple[int, int]:
    """(bytes read, bytes written) by the kernel of `inst`: each distinct operand read once."""
    read = sum(op.shape.byte_size() for op in distinct(inst.operands) if not op.shape.is_token)
    written = inst.shape.byte_size()
    return read, written


@dataclass(frozen=True)
class ModuleCost:
    """Kernels, bytes moved and duplicated work of a module's non-fusion computations."""

    kernels: int
    bytes_read: int
    bytes_written: int
    duplicated_elements: int  # elements recomputed by copies of duplicated producers
    duplicated_expensive_elements: int  # ... of which by expensive ops (exp, log, ...)

    @property
    def bytes_moved(self) -> int:
        """Bytes read plus bytes written."""
        return self.bytes_read + self.bytes_written

    def to_dict(self) -> dict:
        """The counts as a JSON-ready dict."""
        return {
            "kernels": self.kernels,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "bytes_moved": self.bytes_moved,
            "duplicated_elements": self.duplicated_elements,
            "duplicated_expensive_elements": self.duplicated_expensive_elements,
        }


_CALLS = frozenset(COMPUTATION_ATTRS)  # the attributes that name a called computation


def kernel_computations(module: HloModule) -> list[HloComputation]:
    """Computations whose instructions launch kernels: the entry and control-flow bodies.

    A computation called as a function (a map's or reduce's `to_apply`, a fusion's `calls`) is
    inlined element by element, and so is everything it calls in turn (the branches of a
    conditional, the body of a while inside a map's function): XLA's embedded context, which
    callees inherit. Fusing in those would put fusion instructions where only scalar code goes.
    """
    embedded: set[HloComputation] = set()
    stack: list[HloComputation] = []

    def scan(comp: HloComputation) -> None:
        for inst in comp.instructions:
            if inst.opcode == "call":
                continue
            for key in ("to_apply", "select", "scatter", "calls"):
                c = inst.attrs.get(key)
                if c is not None and c not in embedded:
                    embedded.add(c)
                    stack.append(c)

    def close() -> None:  # what an embedded computation calls is embedded too
        while stack:
            for inst in stack.pop().instructions:
                if not _CALLS.isdisjoint(inst.attrs):  # (most call nothing: passed over)
                    for c in inst.called_computations():
                        if c not in embedded:
                            embedded.add(c)
                            stack.append(c)

    # Fused computations last, and only those no fusion instruction scanned calls: an embedded
    # computation's callees are embedded by `close` anyway, so scanning it adds nothing (after
    # fusion the fused computations hold most of the module's instructions).
    fused = []
    for comp in module.computations:
        if comp.is_fusion_computation():
            fused.append(comp)
        else:
            scan(comp)
    close()
    for comp in fused:
        if comp not in embedded:
            scan(comp)
    close()
    return [c for c in module.computations if c not in embedded]


def module_cost(module: HloModule, log=None) -> ModuleCost:
    """The cost of `module` as it stands; `log` (a FusionLog) supplies duplicated work."""
    kernels = read = written = 0
    for comp in kernel_computations(module):
        for inst in comp.instructions:
            if not launches_kernel(inst):
                continue
            kernels += 1
            r, w = kernel_bytes(inst)
            read += r
            written += w
    dup = dup_exp = 0
    if log is not None:
        for e in log.fusions():
            if e.duplicated:
                dup += e.duplicated_elements
                if e.duplicated_expensive:
                    dup_exp += e.duplicated_elements
    return ModuleCost(kernels, read, written, dup, dup_exp)


def duplication_saves_bytes(producer: HloInstruction, users: list[HloInstruction]) -> int:
    """Bytes saved by duplicating `producer` into every one of `users` (negative: it costs).

    Materialized, the producer reads its operands once, writes its output once, and each user
    reads that output. Duplicated into all users, nothing is written; each user reads those of
    the producer's operands it does not read already.
    """
    ops = distinct(producer.operands)
    out = producer.shape.byte_size()
    materialized = sum(o.shape.byte_size() for o in ops) + out + out * len(users)
    duplicated = sum(o.shape.byte_size() for u in users for o in ops if o not in u.operands)  # (identity)
    return materialized - duplicated


def fusion_saves_bytes(producer: HloInstruction, consumer: HloInstruction, duplicate: bool) -> int:
    """Bytes saved by fusing `producer` into `consumer` (negative: fusion costs traffic).

    Unfused, the producer's output is written once and read by the consumer. Fused, that round
    trip disappears, unless the producer is duplicated: then its output is still written for its
    other users and the consumer reads the producer's operands instead.
    """
    out = producer.shape.byte_size()
    if not duplicate:
        return 2 * out  # the intermediate is neither written nor read back
    operands_in = sum(op.shape.byte_size() for op in distinct(producer.operands)
                      if op not in consumer.operands)  # (by identity: hlo/ir.py HloInstruction)
    return out - operands_in
