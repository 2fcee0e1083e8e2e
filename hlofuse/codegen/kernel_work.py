"""How much work a kernel does per call, and the LLVM level that work is worth.

Every kernel used to be compiled with the O3 pipeline and the code generator at its
aggressive level. For a kernel that touches a few thousand elements (a training step's bias and
scale gradients and the optimizer updates of small parameters, scalar bookkeeping, small
reshapes and transposes) that costs LLVM 5-20 ms (a vector body interleaved several times, a
vector epilogue, a scalar remainder, then instruction selection over all of it) to make a call
of a microsecond or less slightly faster. Such a kernel is compiled at llvm_pool.SMALL_KERNEL
instead: a cheap middle end and code generator (the pipeline and the figures are in
codegen/llvm_pool.py and docs/compile_time.md, "Small kernels at a small level").

A kernel's work is the larger of two estimates of its one-thread time: the driver's thread
rule's (codegen/region_cost.kernel_ns: its kind, work units and transcendental ops) and the
elements it touches (every element of its parameters and outputs) at region_cost.ELEMENT_NS.
The second is needed: a reduction's work units count its outputs, not what it reads. The
combine stage of a reduction split across cores is the exception: it shares the partial
stage's computation but reads only the partial results, so it counts those
(`kernel_elements_touched`; counted as the computation's, every combine stage was estimated at
its whole reduction's time). A kernel that updates a window of an operand in place counts
the whole operand: an overestimate, which only keeps it at O3. Only a kernel that runs
once per execution of the program is a candidate: a kernel of a while loop's body or condition
(or of any computation a library step runs, such as a sort's comparator) runs an unknown number
of times per call, so its per-call time says nothing of its share of the program's.

The per-kernel threshold is not enough on its own: a program made only of small kernels (a
small jitted function) runs in microseconds, and there scalar code is the run time itself (the
small workloads of benchmarks/workloads.py ran 1.0-1.8x slower with every kernel small: a
scalar exp, tanh or log is 10-50x a vector lane's). So the small kernels of a program share a
budget (`small_kernels`): each one's estimated extra time as scalar code
(`small_level_cost_ns`) is charged against SMALL_SHARE of the program's estimated call (every
kernel's `kernel_work_ns`, and CALL_OVERHEAD_NS, what a call costs besides its kernels), the
cheapest first, and the kernels past the budget stay at O3.

A kernel whose run time is a library call (a GEMM through BLAS or oneDNN's sgemm, custom
"gemm"; a oneDNN convolution or matmul primitive, "onednn_conv" and "onednn_matmul") is judged
by its own code instead (`library_elements`): the loops it runs around the call (a GEMM's
epilogue over its result, the per-feature operands a oneDNN kernel computes before the call),
not the library's multiply-adds, which its LLVM level does not touch. At O3 such a kernel cost
4-18 ms of LLVM (2-7 ms at the small level), most of it for a wrapper (unit bookkeeping, a call
sequence, a short per-feature loop) whose speed no run notices: O3 and the small level's
middle end give a GEMM without an epilogue the same IR. Such a kernel is a candidate when its
own work is under SMALL_KERNEL_NS, and its estimated cost at the small level is its own loops'
(a GEMM without an epilogue: nothing). Where its cost is also within SMALL_SHARE of its own
call's estimated time, it is small wherever it runs, a while loop's body included (the one
exception to running once): every call is then slowed by at most that share of itself. A GEMM's
epilogue over a large result stays at O3: as scalar code GPT-2's ran 1.49x slower
(docs/compile_time.md, "Library kernels judged by their own code").

Nothing here changes what a kernel computes beyond the order LLVM may pick for reassociable
float reductions (the emitters allow it, `Target.reassociate_reductions`): both levels are
compared with the interpreter in tests/codegen/test_kernel_work.py and
test_kernel_work_library.py.
"""
from __future__ import annotations

from . import llvm_pool
from ..hlo.ir import HloComputation
from .kernels.args import output_leaves
from .kernels.cpu_gemm import epilogue_elements
from .kernels.onednn_kernels import calls_primitive, own_elements
from .region_cost import ELEMENT_NS, TRANSCENDENTAL_NS, kernel_ns, transcendentals

# A kernel estimated to take less than this on one thread (`kernel_work_ns`) is compiled at
# llvm_pool.SMALL_KERNEL when it runs once per execution. Chosen so that the slower code costs
# well under 0.5% of every model's run time (benchmarks/small_level_ab.py: the steps running
# the small kernels timed by the driver in both programs, one thread, load 4-5): at 2,000 ns
# 0.04-0.17% of a model's run, at 5,000 ns 0.15-0.23%, at 10,000 ns 0.16-0.67% (haiku's
# ResNet-18 step, MobileNetV2 0.6%), at 20,000 ns 7.3% (haiku's step). docs/compile_time.md,
# "Small kernels at a small level", has the LLVM time saved and the run time cost per model.
SMALL_KERNEL_NS = 2_000.0


def elements_touched(comp: HloComputation) -> int:
    """Array elements a kernel computing `comp` reads or writes at most: every element of its
    parameters' leaves and of its output leaves."""
    params = sum(leaf.element_count() for p in comp.parameters for leaf in p.shape.leaves())
    return params + sum(leaf.shape.element_count() for leaf in output_leaves(comp))


# The small kernels of a program may cost at most this share of its estimated call
# (`small_kernels`), by `small_level_cost_ns`'s estimate.
SMALL_SHARE = 0.0025
# What every call of a program costs besides its kernels' work, counted in its estimated call:
# the caller's entry, binding the arguments, allocating and returning the outputs
# (benchmarks/call_overhead.py: 21.8 us a call of a one-kernel program from numpy arrays on the
# 2-core Zen 1 host, load 0.6; half of it here, for faster hosts). A program of a few small
# kernels runs in that time whatever its kernels' level: without it, its budget was a share of
# nanoseconds of work, and every kernel of a small jitted function was compiled at O3 (20-25 ms
# of LLVM each on that host) to save a share of a call it cannot measure.
CALL_OVERHEAD_NS = 10_000.0
# What scalar code at the small level costs over O3's vector code, per element a kernel computes
# and per transcendental op on it. Fitted on the small workloads of benchmarks/workloads.py
# (every kernel small, one thread): the five-function chain over 64 elements ran 3.0 us slower
# (estimate 3.3), the depthwise convolution 3.5 (5.2), attention 1.7 (4.2), layer norm 1.8
# (8.5); over the models' small kernels the estimate is 2-3x what the driver's timers measured
# (haiku's ResNet-18 step 128 us against about 40), so the budget errs on the side of O3.
SCALAR_ELEMENT_NS = 0.3
SCALAR_TRANSCENDENTAL_NS = 10.0


def kernel_work_ns(kernel) -> float:
    """Estimated one-thread nanoseconds of one call of `kernel` (a KernelPlan): the larger of
    region_cost.kernel_ns (elements, multiply-adds or reduced elements by kind, transcendental
    ops per element) and its elements touched at region_cost.ELEMENT_NS."""
    touched = kernel_elements_touched(kernel) if kernel.comp is not None else 0
    return max(kernel_ns(kernel), touched * ELEMENT_NS)


def kernel_elements_touched(kernel) -> int:
    """Array elements `kernel` (a KernelPlan) reads or writes at most: `elements_touched` of its
    computation, except for the combine stage of a reduction split across cores
    (codegen/planning.py), which shares its computation with the partial stage but reads only
    the partial results (`parts` per output of each reduced value, its scratch), writes its
    outputs, and may read, for its epilogue over the reduced outputs, parameters of at most their
    size (per-channel scales, running statistics); it never reads the reduction's input. Counted
    as the whole computation's, haiku's ResNet-18 step's 48 combine stages of 16 partial sums
    over 64-512 channels were each estimated at its 26-105 us reduction and compiled at O3."""
    if kernel.stage != "combine":
        return elements_touched(kernel.comp)
    outputs = output_leaves(kernel.comp)
    written = sum(outputs[k].shape.element_count() for k in kernel.outputs)
    reduced = max(int(kernel.units), 1)  # the combine's units: one per reduced output element
    epilogue_operands = sum(leaf.element_count() for p in kernel.comp.parameters for leaf in p.shape.leaves()
                            if leaf.element_count() <= reduced)
    return len(kernel.scratch) * int(kernel.parts) * reduced + written + epilogue_operands


# Whether kernels that call a library are judged by their own code (`library_elements`); False
# judges them by their whole work as every other kernel (for A/B measurements:
# benchmarks/small_level_ab.py --library).
LIBRARY_KERNELS = True


def library_elements(kernel) -> int | None:
    """For a kernel whose run time is a library call: the elements its own loops compute per
    call (a GEMM's epilogue, cpu_gemm.epilogue_elements; a oneDNN kernel's per-feature operands,
    onednn_kernels.own_elements), which is all of its code whose speed its LLVM level decides.
    None for any other kernel (its own code is its run time), and for every kernel when
    LIBRARY_KERNELS is off."""
    if not LIBRARY_KERNELS:
        return None
    if kernel.custom == "gemm":
        return epilogue_elements(kernel)
    if calls_primitive(kernel):
        return own_elements(kernel)
    return None


def own_work_ns(kernel) -> float:
    """Estimated one-thread ns of one call of `kernel`'s own code: for a library kernel its own
    loops' elements at ELEMENT_NS plus TRANSCENDENTAL_NS per transcendental op of its
    computation (an upper bound: not every one runs in those loops), else `kernel_work_ns`."""
    elements = library_elements(kernel)
    if elements is None:
        return kernel_work_ns(kernel)
    return elements * (ELEMENT_NS + TRANSCENDENTAL_NS * transcendentals(kernel.comp))


def small_level_cost_ns(kernel) -> float:
    """Estimated extra one-thread ns of one call of `kernel` compiled at the small level rather
    than O3: its elements (work units x elements per unit; a library kernel's own loops'
    elements, `library_elements`) at SCALAR_ELEMENT_NS plus SCALAR_TRANSCENDENTAL_NS for each
    transcendental op on each."""
    elements = library_elements(kernel)
    if elements is None:
        elements = max(int(kernel.units), 1) * max(int(kernel.unit_elements), 1)
    return elements * (SCALAR_ELEMENT_NS + SCALAR_TRANSCENDENTAL_NS * transcendentals(kernel.comp))


def small_anywhere(kernel) -> bool:
    """Whether library kernel `kernel` may be compiled at the small level however often it runs:
    its own work is under SMALL_KERNEL_NS and its cost at the small level within SMALL_SHARE of
    its call's estimated time (region_cost.kernel_ns: the library's multiply-adds), so no call
    of it is slowed by more than that share of itself. False for any other kernel."""
    return (library_elements(kernel) is not None and own_work_ns(kernel) < SMALL_KERNEL_NS
            and small_level_cost_ns(kernel) <= SMALL_SHARE * kernel_ns(kernel))


def small_kernels(planner, entry) -> set[int]:
    """The ids of the kernels of `planner` (a codegen/schedule.Planner that planned computation
    `entry`) to compile at llvm_pool.SMALL_KERNEL: the library kernels that are small anywhere
    (`small_anywhere`) that do not run once, and of those that run once per execution
    (`once_kernels`) with an estimated time of their own code (`own_work_ns`) under
    SMALL_KERNEL_NS, cheapest first by `small_level_cost_ns` while their summed cost stays
    within SMALL_SHARE of the program's estimated call: CALL_OVERHEAD_NS and the estimated work
    of all its kernels (each counted once, a loop's too)."""
    once = once_kernels(planner, entry)
    budget = SMALL_SHARE * (CALL_OVERHEAD_NS + sum(kernel_work_ns(k) for k in planner.kernels))
    candidates = [k for k in planner.kernels if id(k) in once and own_work_ns(k) < SMALL_KERNEL_NS]
    chosen = {id(k) for k in planner.kernels if id(k) not in once and small_anywhere(k)}
    spent = 0.0
    for k in sorted(candidates, key=small_level_cost_ns):
        spent += small_level_cost_ns(k)
        if spent > budget:
            break
        chosen.add(id(k))
    return chosen


def kernel_level(small: bool) -> int:
    """The LLVM speed level of a kernel: llvm_pool.SMALL_KERNEL where `small` (it is one of
    `small_kernels`), else O3."""
    return llvm_pool.SMALL_KERNEL if small else 3


def once_kernels(planner, entry) -> set[int]:
    """The ids of the kernels of `planner` (a codegen/schedule.Planner that planned computation
    `entry`) that run at most once per execution of the program: those of `entry`'s plan and of
    the plans it runs as calls (a fusion run as a call, a `call` or a `conditional`'s branches),
    transitively. A while loop's body and condition, and the computations any other library step
    runs, are left out: they may run many times per execution."""
    once: set[int] = set()
    seen: set = set()
    stack = [entry]
    while stack:
        comp = stack.pop()
        if comp in seen or comp not in planner.plans:
            continue
        seen.add(comp)
        for step in planner.plans[comp].steps:
            once.update(id(k) for k in step.kernels or ())
            if step.kind == "call":
                stack.append(step.inst.fused_computation)
            elif step.kind == "library" and step.inst.opcode in ("call", "conditional"):
                stack.extend(step.inst.called_computations())
    return once
