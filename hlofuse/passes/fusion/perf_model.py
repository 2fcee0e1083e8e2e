"""The performance model priority fusion ranks producers by: how long a kernel takes on a device.

A device is data (`Device`): memory bandwidth, arithmetic throughput, the extra cost of an
expensive (transcendental) operation, the fixed cost of launching a kernel, and cache sizes.
Two are described: an H100-class GPU (the default for the GPU target) and this project's CPU
host (an AMD EPYC core pair; the CPU target).

A kernel's time follows XLA's GpuPerformanceModel in outline: the bytes it reads (each distinct
operand once, only the part a slice reads of it) and writes at the device's bandwidth, its
arithmetic at the device's rate, overlapped (the longer of the two plus a small share of the
shorter: XLA's kMemoryComputeParallelism), plus one launch. A producer's work counts once per
element each fused reader asks for: fused under a broadcast that grows it, it is recomputed for
every element of the broadcast (the cost of duplicating work).

`fusion_estimate(producer, consumers)` compares running the producer as its own kernel with
fusing it into every consumer, and says why in words (`Estimate.text`): "fusing saves 1.9 us:
12.0 MB less traffic, 1 launch; duplicating costs 0.2 us". The figures are estimates of an
idealised device, for ranking fusions, not predictions of measured times.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...hlo.ir import HloInstruction
from ...hlo.opcodes import op_info
from .cost_model import distinct, launches_kernel

# XLA's GpuPerformanceModelBase::kMemoryComputeParallelism: memory and compute overlap, but
# not perfectly; the shorter of the two adds this share of itself.
_OVERLAP_LEFT = 0.05


@dataclass(frozen=True)
class Device:
    """What a kernel's time depends on, for one device (all rates per second)."""

    name: str
    memory_bandwidth: float  # bytes/s from main memory (HBM on a GPU, DRAM on a CPU)
    flop_rate: float  # simple elementwise operations per second (f32, all cores or SMs)
    expensive_op_cost: float  # an expensive op (exp, log, tanh, divide...) in simple operations
    launch_overhead: float  # seconds to start one kernel
    l1_bytes: int  # per core / per SM
    l2_bytes: int  # whole device (GPU), per core (CPU)
    l3_bytes: int = 0  # last-level cache (CPU); 0: none


# An H100 SXM: 3.35 TB/s HBM3, 67 TFLOP/s f32 (non-tensor-core), special functions at a quarter
# of the FMA rate, about 1 us per launch (XLA's kKernelLaunchOverhead), 256 KB L1 per SM, 50 MB L2.
H100 = Device("H100 SXM (HBM3)", memory_bandwidth=3.35e12, flop_rate=6.7e13, expensive_op_cost=4.0,
              launch_overhead=1e-6, l1_bytes=256 * 1024, l2_bytes=50 * 1024 * 1024)

# This machine's CPU (lscpu: AMD EPYC, 2 cores, 48 KB L1d and 1 MB L2 per core, 32 MB L3):
# about 20 GB/s from DRAM over both cores, 2 cores x 2.5 GHz x 8-wide f32 vectors, an expensive
# op (a polynomial exp/log) about 20 simple ones, about 2 us to start a kernel on the native
# driver's threads (codegen/driver.py: a GOMP_parallel region per kernel).
HOST_CPU = Device("host CPU (AMD EPYC, 2 cores)", memory_bandwidth=2.0e10, flop_rate=4.0e10, expensive_op_cost=20.0,
                  launch_overhead=2e-6, l1_bytes=48 * 1024, l2_bytes=1024 * 1024, l3_bytes=32 * 1024 * 1024)

DEVICES = {"gpu": H100, "cpu": HOST_CPU}


def device_for(target: str) -> Device:
    """The device the model assumes for a fusion target ("gpu" or "cpu")."""
    return DEVICES["cpu" if target == "cpu" else "gpu"]


# ---- what one kernel does -------------------------------------------------------------------

def _elements(inst: HloInstruction) -> int:
    return sum(s.element_count() for s in inst.shape.leaves())


def op_work(inst: HloInstruction, device: Device) -> float:
    """Simple operations `inst` performs once per call (a reduce: one per input element)."""
    if inst.opcode in ("parameter", "constant", "tuple", "get-tuple-element", "bitcast"):
        return 0.0
    info = op_info(inst.opcode)
    per = device.expensive_op_cost if info.expensive else 1.0
    if inst.opcode in ("reduce", "reduce-window"):
        return per * sum(op.shape.element_count() for op in inst.operands if op.shape.is_array)
    return per * _elements(inst)


def _fused_work(fusion: HloInstruction, device: Device) -> float:
    """Operations of a fused computation, each instruction weighted by how often it is emitted
    (an instruction under a growing broadcast is computed once per element of the broadcast)."""
    comp = fusion.fused_computation
    demand: dict[HloInstruction, float] = {comp.root: 1.0}
    total = 0.0
    for inst in reversed(comp.post_order()):
        factor = demand.get(inst, 1.0)
        total += factor * op_work(inst, device)
        for op in inst.operands:
            grow = 1.0
            if inst.opcode == "broadcast" and op.shape.is_array and inst.shape.is_array:
                grow = inst.shape.element_count() / max(1, op.shape.element_count())
            demand[op] = max(demand.get(op, 0.0), factor * grow)
    return total


def work(inst: HloInstruction, device: Device) -> float:
    """Simple operations the kernel of `inst` performs."""
    if inst.opcode == "fusion":
        return _fused_work(inst, device)
    return op_work(inst, device)


def _read_of(kernel: HloInstruction, index: int) -> int:
    """Bytes `kernel` reads of its operand `index`: all of it, unless it is only sliced."""
    op = kernel.operands[index]
    full = op.shape.byte_size() if not op.shape.is_token else 0
    if kernel.opcode != "fusion":
        if kernel.opcode in ("slice", "dynamic-slice") and index == 0:
            return min(full, kernel.shape.byte_size())
        return full
    param = kernel.fused_computation.parameter(index)
    readers = param.users
    if readers and all(r.opcode in ("slice", "dynamic-slice") and r.operands[0] is param for r in readers):
        return min(full, sum(r.shape.byte_size() for r in readers))
    return full


def kernel_traffic(kernel: HloInstruction) -> tuple[int, int]:
    """(bytes read, bytes written) by the kernel of `kernel`."""
    seen: set[HloInstruction] = set()
    read = 0
    for i, op in enumerate(kernel.operands):
        if op in seen:
            continue
        seen.add(op)
        read += _read_of(kernel, i)
    return read, kernel.shape.byte_size()


def kernel_time(read: float, written: float, ops: float, device: Device) -> float:
    """Seconds for a kernel moving `read + written` bytes and doing `ops` simple operations."""
    memory = (read + written) / device.memory_bandwidth
    compute = ops / device.flop_rate
    return max(memory, compute) + _OVERLAP_LEFT * min(memory, compute) + device.launch_overhead


def instruction_time(inst: HloInstruction, device: Device) -> float:
    """Seconds for `inst` run as its own kernel (0 for what launches none: a constant, a
    parameter, a bitcast or tuple bookkeeping)."""
    if not launches_kernel(inst):
        return 0.0
    r, w = kernel_traffic(inst)
    return kernel_time(r, w, work(inst, device), device)


class KernelFacts:
    """`work` and `kernel_traffic` of each kernel on one device, remembered for one pass run.

    Priority fusion prices a producer against all of its consumers, and re-prices the operands
    of every fusion it grows: each price walked each consumer's whole fused computation and
    read every operand, so a fusion of s instructions was walked again for each of its
    operands after each step (haiku's ResNet-18 step on the GPU: 32,000 walks). A fact is
    kept with what it was computed from -- the fused computation's `revision` (which changes
    with any instruction added or removed, the fusion passes' only edits) and the operand
    list -- and recomputed when either changed, so each fusion is walked once per change."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self._work: dict[HloInstruction, tuple] = {}
        self._traffic: dict[HloInstruction, tuple] = {}

    @staticmethod
    def _revision(inst: HloInstruction):
        return inst.fused_computation.revision if inst.opcode == "fusion" else None

    def work(self, inst: HloInstruction) -> float:
        """`work(inst, device)`, remembered per revision of a fusion's computation."""
        if inst.opcode != "fusion":
            return op_work(inst, self.device)
        rev = self._revision(inst)
        hit = self._work.get(inst)
        if hit is not None and hit[0] == rev:
            return hit[1]
        value = _fused_work(inst, self.device)
        self._work[inst] = (rev, value)
        return value

    def traffic(self, inst: HloInstruction) -> tuple[int, int]:
        """`kernel_traffic(inst)`, remembered per operand list (and fused computation)."""
        # (the operands and their shapes by identity: a multi-output fusion is given a new shape)
        rev, held = self._revision(inst), (inst.shape, *inst.operands, *(o.shape for o in inst.operands))
        hit = self._traffic.get(inst)
        if hit is not None and hit[0] == rev and len(hit[1]) == len(held) and all(a is b for a, b in zip(hit[1], held)):
            return hit[2]
        value = kernel_traffic(inst)
        self._traffic[inst] = (rev, held, value)
        return value

    def instruction_time(self, inst: HloInstruction) -> float:
        """`instruction_time(inst, device)` from the remembered facts."""
        if not launches_kernel(inst):
            return 0.0
        r, w = self.traffic(inst)
        return kernel_time(r, w, self.work(inst), self.device)


# ---- fusing a producer into all of its consumers -------------------------------------------

def _demand_factor(producer: HloInstruction, consumer: HloInstruction) -> float:
    """How many times, per element of `producer`, `consumer` asks for it (1: once each)."""
    pe = max(1, _elements(producer))
    if consumer.opcode != "fusion":
        if consumer.opcode == "broadcast" and consumer.shape.is_array:
            return max(1.0, consumer.shape.element_count() / pe)
        return 1.0
    factor = 1.0
    for i, op in enumerate(consumer.operands):
        if op is not producer:
            continue
        for r in consumer.fused_computation.parameter(i).users:
            if r.opcode == "broadcast" and r.shape.is_array:
                factor = max(factor, r.shape.element_count() / pe)
    return factor


@dataclass(frozen=True)
class Estimate:
    """The model's comparison of a producer unfused and fused into all of its consumers."""

    time_unfused: float  # seconds: the producer's kernel and its consumers' kernels
    time_fused: float  # seconds: the consumers' kernels with the producer computed inside
    bytes_saved: int  # traffic the fusion removes (negative: adds)
    launches_saved: int
    duplication_cost: float  # seconds of recomputed producer work in the fused kernels

    @property
    def saving(self) -> float:
        """Seconds fusing saves (negative: it costs); the priority of the producer."""
        return self.time_unfused - self.time_fused

    @property
    def text(self) -> str:
        """The estimate in words, for the report and `explain`."""
        traffic = f"{_bytes(abs(self.bytes_saved))} {'less' if self.bytes_saved >= 0 else 'more'} traffic"
        n = self.launches_saved
        launches = f"{abs(n)} launch{'es' if abs(n) != 1 else ''}" + (" more" if n < 0 else "")
        verb = "saves" if self.saving >= 0 else "costs"
        out = f"fusing {verb} {_us(abs(self.saving))}: {traffic}, {launches}"
        if self.duplication_cost > 0:
            out += f"; duplicating costs {_us(self.duplication_cost)}"
        return out


def _bytes(n: int) -> str:
    if n >= 100_000:
        return f"{n / 1e6:.1f} MB"
    return f"{n / 1e3:.1f} KB" if n >= 100 else f"{n} B"


def _us(seconds: float) -> str:
    us = seconds * 1e6
    if us < 0.01:
        return f"{us * 1e3:.2g} ns"
    return f"{us:.2g} us" if us < 10 else f"{us:.0f} us"


def fusion_estimate(producer: HloInstruction, consumers: list[HloInstruction], device: Device,
                    keeps_producer: bool = False, facts: KernelFacts | None = None) -> Estimate:
    """The model's estimate for fusing `producer` into every one of `consumers`: all of its
    users, or (`keeps_producer`) all but some that still read it from memory (bitcasts), so
    its own kernel stays. `facts` (of the same device) remembers the kernels' work and traffic
    across calls of one pass run."""
    facts = facts if facts is not None else KernelFacts(device)
    p_read, p_written = facts.traffic(producer)
    p_work = facts.work(producer)
    unfused = facts.instruction_time(producer)
    fused = unfused if keeps_producer else 0.0
    launches = 1 if launches_kernel(producer) and not keeps_producer else 0
    bytes_unfused = p_read + p_written if launches_kernel(producer) else 0
    bytes_fused = bytes_unfused if keeps_producer else 0
    dup_work = 0.0
    p_ops = distinct(producer.operands)
    for c in consumers:
        c_read, c_written = facts.traffic(c)
        unfused += facts.instruction_time(c)
        if launches_kernel(c):
            bytes_unfused += c_read + c_written
        else:  # fused into, a bitcast becomes a kernel: one launch more
            launches -= 1
        # fused: the consumer no longer reads the producer's result; it reads the producer's
        # operands it does not read already, and computes the producer's work per element asked
        own = sum(_read_of(c, i) for i, op in enumerate(c.operands)
                  if op is producer and c.operands.index(op) == i)
        extra = sum(op.shape.byte_size() for op in p_ops if not op.shape.is_token
                    and not any(op is o for o in c.operands))
        read = c_read - own + min(extra, p_read) if p_read else c_read - own
        factor = _demand_factor(producer, c)
        ops = facts.work(c) + p_work * factor
        dup_work += p_work * factor
        fused += kernel_time(read, c_written, ops, device)
        bytes_fused += read + c_written
    if not keeps_producer:
        dup_work -= p_work  # once is not duplication
    return Estimate(unfused, fused, int(bytes_unfused - bytes_fused), launches,
                    max(0.0, dup_work) / device.flop_rate)
