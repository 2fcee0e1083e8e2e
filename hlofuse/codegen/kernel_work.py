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
The second is needed: a reduction's work units count its outputs, not what it reads (equinox's
MLP step has combine stages of 2,048 x 16 outputs over a large input, estimated at 1.1 us by
the first and run in 200-750 us). A kernel that updates a window of an operand in place counts
the whole operand: an overestimate, which only keeps it at O3. Only a kernel that runs
once per execution of the program is a candidate: a kernel of a while loop's body or condition
(or of any computation a library step runs, such as a sort's comparator) runs an unknown number
of times per call, so its per-call time says nothing of its share of the program's.

The per-kernel threshold is not enough on its own: a program made only of small kernels (a
small jitted function) runs in microseconds, and there scalar code is the run time itself (the
small workloads of benchmarks/workloads.py ran 1.0-1.8x slower with every kernel small: a
scalar exp, tanh or log is 10-50x a vector lane's). So the small kernels of a program share a
budget (`small_kernels`): each one's estimated extra time as scalar code
(`small_level_cost_ns`) is charged against SMALL_SHARE of the program's estimated work (every
kernel's `kernel_work_ns`), the cheapest first, and the kernels past the budget stay at O3.

Nothing here changes what a kernel computes beyond the order LLVM may pick for reassociable
float reductions (the emitters allow it, `Target.reassociate_reductions`): both levels are
compared with the interpreter in tests/codegen/test_kernel_work.py.
"""
from __future__ import annotations

from . import llvm_pool
from ..hlo.ir import HloComputation
from .kernels.args import output_leaves
from .region_cost import ELEMENT_NS, kernel_ns, transcendentals

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


# The small kernels of a program may cost at most this share of its estimated work
# (`small_kernels`), by `small_level_cost_ns`'s estimate.
SMALL_SHARE = 0.0025
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
    touched = elements_touched(kernel.comp) if kernel.comp is not None else 0
    return max(kernel_ns(kernel), touched * ELEMENT_NS)


def small_level_cost_ns(kernel) -> float:
    """Estimated extra one-thread ns of one call of `kernel` compiled at the small level rather
    than O3: its elements (work units x elements per unit) at SCALAR_ELEMENT_NS plus
    SCALAR_TRANSCENDENTAL_NS for each transcendental op on each."""
    elements = max(int(kernel.units), 1) * max(int(kernel.unit_elements), 1)
    return elements * (SCALAR_ELEMENT_NS + SCALAR_TRANSCENDENTAL_NS * transcendentals(kernel.comp))


def small_kernels(planner, entry) -> set[int]:
    """The ids of the kernels of `planner` (a codegen/schedule.Planner that planned computation
    `entry`) to compile at llvm_pool.SMALL_KERNEL: those that run once per execution
    (`once_kernels`) with an estimated time under SMALL_KERNEL_NS, cheapest first by
    `small_level_cost_ns` while their summed cost stays within SMALL_SHARE of the estimated work
    of all the program's kernels (each counted once, a loop's too)."""
    once = once_kernels(planner, entry)
    budget = SMALL_SHARE * sum(kernel_work_ns(k) for k in planner.kernels)
    candidates = [k for k in planner.kernels if id(k) in once and kernel_work_ns(k) < SMALL_KERNEL_NS]
    chosen: set[int] = set()
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
