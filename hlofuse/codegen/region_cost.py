"""What a parallel region must carry to pay for itself: the driver's thread rule.

The driver (codegen/driver.py) runs a kernel on several threads by opening a libgomp parallel
region (`GOMP_parallel`). hlofuse's libgomp workers sleep as soon as they wait
(GOMP_SPINCOUNT=0, runtime/openmp_env.py: spinning cost 2-30x on a busy machine), so every
region pays a futex wake-up of each worker it uses: REGION_NS of wall time on an idle machine,
and on a busy one (no idle core to wake) some 10 us of CPU for no gain. So a kernel gets n
threads only when each thread's share of the kernel's one-thread time is at least REGION_NS:

    threads = min(available threads, units, one-thread time // REGION_NS)

Two threads therefore need a kernel of 2 x REGION_NS, which is where splitting breaks even on
an idle machine (T/2 + REGION_NS = T). The available threads are those of the call: the idle
cores of the moment (runtime/cpu_threads.py IdleThreads), since on a busy machine the second
thread of a region waits for a time slice and the caller for it.

The one-thread time is estimated from the kernel's work, by kernel kind, with per-element
costs measured on this machine kind (AMD EPYC znver5 in a VM, 2 cores, f32; one thread, CPU
time, arrays of 1-4 MB that sit in L3, as a kernel's inputs do when the step before wrote them;
`benchmarks/region_cost.py` measures them again):

| work | cost | measured |
|---|---|---|
| loop kernel, per output element | ELEMENT_NS | x*0.5+0.5 and 1.5/(x+1.5): 0.10-0.12 ns |
| each transcendental op, per element | TRANSCENDENTAL_NS | exp 0.20, tanh 0.23, logistic 0.24 ns a kernel, less the element |
| reduction, per input element | REDUCED_ELEMENT_NS | row sums of 256: 0.025-0.036 ns |
| GEMM (BLAS), per multiply-add | MULTIPLY_ADD_NS (f32), GEMM_MULTIPLY_ADD_NS | [m,128]x[128,128], m 256-512: oneDNN sgemm 0.0081-0.0083 ns; OpenBLAS dgemm 0.034-0.035, cgemm 0.066-0.069, zgemm 0.127-0.138 |
| direct convolution, per multiply-add | CONV_MULTIPLY_ADD_NS | depthwise 3x3: 0.057 ns |

A division is not a transcendental here: 1.5/(x+1.5) costs what x*0.5+0.5 does (memory, not
the divider, bounds it). The cost of a kernel kind not in the table (sort, scatter, rng ...)
is its `unit_elements` at ELEMENT_NS, as the driver counted it before this model.

Nothing here depends on the thread count at run time: the cap is a constant of the driver's
text (so its object code caches), and a work unit is always computed whole by one thread, so
no rule here changes a result's bits.
"""
from __future__ import annotations

from ..hlo.opcodes import OPS

# A kernel of at least this one-thread time keeps its threads on a busy machine (more runnable
# tasks than cores), where a call's kernels otherwise run on the idle cores only (runtime/
# cpu_threads.py IdleThreads): there the second thread waits for a time slice, 1.6-9 ms a call
# (median; gelu_tanh at load 4-11, benchmarks/thread_split.py), and takes chunks once it runs,
# so a kernel twice the typical wait still finishes sooner split. In one process at load 9-10,
# kernels held to the idle cores against two threads: the transcendental chain (one 4.4 ms
# kernel by this model) 1.42x slower, lstm_cell (8.9 ms dots) 1.10x; gelu_tanh (1.4 ms) 1.03x,
# softmax 0.49x, shared_producer 0.66x (docs/native_runtime.md).
BUSY_REGION_NS = 4_000_000.0

# The wall time one parallel region costs on an idle machine: libgomp wakes a sleeping worker
# (futex) and waits for it at the region's end. Measured on this machine kind, idle (load
# 0.3-1.2), as a tanh loop kernel's time on one thread and on two: 32,768 elements 7.9 us and
# 46.5 us, 262,144 elements 48 and 58 us (a region of 35-42 us); benchmarks/region_cost.py.
REGION_NS = 40_000.0

ELEMENT_NS = 0.10
TRANSCENDENTAL_NS = 0.12
REDUCED_ELEMENT_NS = 0.035
MULTIPLY_ADD_NS = 0.0083
# A GEMM's multiply-add by the type of its dot's result (f64 and complex through OpenBLAS;
# bf16, f16 and f32 through f32 BLAS).
GEMM_MULTIPLY_ADD_NS = {"f32": MULTIPLY_ADD_NS, "f64": 0.034, "c64": 0.067, "c128": 0.13}
# hlofuse's direct convolution loop (cpu_conv.py), per multiply-add: a depthwise 3x3 over
# [8,112,112,96] (MobileNetV2's, 87 M multiply-adds) took 4.9 ms of CPU on one thread.
CONV_MULTIPLY_ADD_NS = 0.05

# Kernels whose `unit_elements` count multiply-adds rather than elements: GEMMs (priced by
# their type) and convolutions.
_GEMM_KERNELS = {"gemm", "conv_gemm", "onednn_conv"}
# Elementwise ops costing a transcendental function's evaluation (the registry's expensive
# elementwise ops, less division and remainder: see the module's doc).
_NOT_TRANSCENDENTAL = {"divide", "remainder"}


def is_transcendental(opcode: str) -> bool:
    """Whether an elementwise `opcode` costs TRANSCENDENTAL_NS per element (exp, tanh, log ...)."""
    info = OPS.get(opcode)
    return info is not None and info.elementwise and info.expensive and opcode not in _NOT_TRANSCENDENTAL


def transcendentals(comp) -> int:
    """Transcendental instructions of a kernel's computation (each costs once per element)."""
    return sum(1 for inst in comp.instructions if is_transcendental(inst.opcode)) if comp is not None else 0


def kernel_ns(kernel) -> float:
    """Estimated one-thread time of `kernel` (a KernelPlan: units, unit_elements, custom, group,
    comp), in nanoseconds."""
    work = max(int(kernel.units), 0) * max(int(kernel.unit_elements), 1)
    if kernel.custom in _GEMM_KERNELS:
        return work * multiply_add_ns(_dot_type(kernel.comp))
    if kernel.custom == "conv":
        return work * CONV_MULTIPLY_ADD_NS
    per = REDUCED_ELEMENT_NS if kernel.group is not None else ELEMENT_NS
    return work * (per + TRANSCENDENTAL_NS * transcendentals(kernel.comp))


def region_threads(kernel) -> int:
    """The most threads `kernel` may use: one per REGION_NS of its one-thread time, at most one
    per work unit, at least one (the driver takes the smaller of this and the threads it has)."""
    units = max(int(kernel.units), 1)
    return max(1, min(units, int(kernel_ns(kernel) // REGION_NS)))


def keeps_threads_when_busy(kernel) -> bool:
    """Whether `kernel` is long enough (BUSY_REGION_NS of one-thread time) to split over the
    process's threads even while other work keeps the cores busy."""
    return kernel_ns(kernel) >= BUSY_REGION_NS


def multiply_add_ns(dtype: str) -> float:
    """One-thread ns of a GEMM's multiply-add whose result has type `dtype` (f32's for a type
    computed in f32: bf16, f16)."""
    return GEMM_MULTIPLY_ADD_NS.get(dtype, MULTIPLY_ADD_NS)


def _dot_type(comp) -> str:
    """The result type of the first dot or convolution of a GEMM kernel's computation."""
    for inst in comp.instructions if comp is not None else ():
        if inst.opcode in ("dot", "convolution") and inst.shape.is_array:
            return inst.shape.dtype.name
    return "f32"


def min_multiply_adds_per_thread(dtype: str = "f32") -> int:
    """The multiply-adds of a GEMM of type `dtype` that one thread's share must reach:
    REGION_NS of BLAS work (gemm_partition cuts no unit smaller, since the rule above would not
    give it a thread)."""
    return int(REGION_NS / multiply_add_ns(dtype))
