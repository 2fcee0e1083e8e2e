"""Codegen for the host CPU: plan the fused module, emit the distinct kernels into LLVM modules
(a few small kernels to a module, `kernel_groups`), optimize each for the host and compile it
to an object file.

    code = compile_cpu(fused_module, cache_dir=None)   # a CpuCode (codegen/program.py)
    code.objects, code.symbols, code.llvm_ir(), code.asm()

Planning is pure Python and cheap (codegen/schedule.py, shared with the GPU): every executed
computation becomes steps; a fusion, or a fusible op left unfused, becomes kernels of the
shared kernel planner (codegen/planning.py), a small dot a sequential kernel. Kernels with the
same structural text (codegen/kernel_key.py) are compiled once and share one function, named
after their cache key; each distinct kernel's object code is cached in memory and on disk by
that key (codegen/cache.py), so a module changed in one place recompiles only what changed.
Elementwise loop kernels are first put in a size-free form (codegen/generic_kernels.py), so one
structure compiles once whatever its arrays' sizes.
runtime/cpu_executor.py loads the objects and runs the schedule.
"""
from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterator

import llvmlite.binding as llvm
from llvmlite import ir

from ..emitters.cpu.target import CpuTarget, optimized_module
from ..emitters.llvm_text import module_text
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..passes.fusion.decisions import module_log
from . import llvm_pool
from .cache import CompileCache, cache_key, memory_cache
from .driver import compile_driver
from .generic_kernels import generic_kernels, shared_levels
from .kernel_key import kernel_text
from .kernel_work import kernel_level, small_kernels
from .kernels.args import output_leaves
from .kernels.cpu_gemm import dot_computation, emit_gemm_kernel, plan_dot, runs_dot_fusion
from .kernels.cpu_custom import CUSTOM_KERNEL_EMITTERS, custom_computation, plan_custom, runs_custom_fusion
from .kernels.cpu_loop import emit_loop_kernel
from .kernels.cpu_dus import emit_dus_kernel, plan_dus
from .kernels.cpu_reduction import emit_reduction_kernel
from .kernels.cpu_scatter import emit_scatter_kernel, plan_scatter
from .kernels.cpu_row import emit_row_kernel
from .kernels.cpu_skeleton import CpuKernelSkeleton
from .kernels.onednn_kernels import calls_primitive
from .native_plan import NativeProgram
from .planning import KernelPlan, plan_fusion, sequential_dot
from .program import Program
from .row_fusion import RowFusion
from .schedule import Planner, symbol_name
from .shared_expressions import find_shared_expression, record_shared, share_candidate, share_expression


class CpuPlanner(Planner):
    """Plans kernels with the shared kernel planner; a small dot becomes a sequential kernel.

    A reduction kernel may also write an expression that a later fusion then reads
    (codegen/shared_expressions.py); each such decision is recorded in `log` (the fused
    module's fusion log) when one is given."""

    backend = "CPU"

    def __init__(self, lenient: bool = False, log=None) -> None:
        super().__init__(lenient)
        self.log = log  # passes/fusion/decisions.FusionLog, or None
        self._candidates: dict[HloInstruction, object] = {}  # inst -> ShareCandidate
        self.shared: list = []  # shapes of buffers one kernel step writes and a later one reads
        self.shared_outputs: dict[HloInstruction, list[int]] = {}  # inst -> shared buffers appended to its outputs
        self.shared_inputs: dict[HloInstruction, list[int]] = {}  # inst -> shared buffers appended to its inputs
        self.rows = RowFusion(log)  # softmax-like chains as one row kernel (codegen/row_fusion.py)

    def in_place_kernels(self, comp: HloComputation, name: str) -> tuple[list[KernelPlan], dict[int, int]] | None:
        """In-place dynamic-update-slice or scatter kernels for `comp` (kernels/cpu_dus.py,
        kernels/cpu_scatter.py), or None."""
        return plan_dus(comp, name) or plan_scatter(comp, name)

    def dedicated_kernel(self, inst: HloInstruction) -> HloComputation | None:
        """A sequential dot kernel for a dot small enough not to go to BLAS, a GEMM kernel's
        computation for a larger one (kernels/cpu_gemm.py)."""
        if inst.opcode == "dot":
            return sequential_dot(inst) or dot_computation(inst)
        return custom_computation(inst)  # conv, select-and-scatter

    def runs_fusion(self, comp: HloComputation) -> bool:
        """A dot with its epilogue (kOutput) runs as a GEMM kernel, a small one inlined."""
        return runs_dot_fusion(comp) or runs_custom_fusion(comp)  # or a convolution with its epilogue

    def kernel_calls(self, comp: HloComputation, inst: HloInstruction) -> tuple[list[KernelPlan], list]:
        """Kernels and temporaries computing fused computation `comp` for instruction `inst`."""
        name = self.kernel_name(inst)
        if (dot := plan_dot(comp, name)) is not None:  # GEMM + epilogue, or an inlined small dot
            self.kernels.extend(dot[0])
            return dot
        if (custom := plan_custom(comp, name)) is not None:  # conv, select-and-scatter, sort, topk (kernels/cpu_custom.py)
            self.kernels.extend(custom[0])
            return custom
        rows = self.rows.plan(comp, inst, name, fixed=set(self.shared_outputs))
        if rows is not None:
            kernel, merged = rows
            self.rows.absorb(merged, self.kernels)
            for m in merged:
                self._candidates.pop(m, None)
            self.kernels.append(kernel)
            self.rows.record(inst, kernel.comp, [kernel], [])
            return self.rows.steps[inst].kernels, []
        shared = self._reuse_expression(comp, inst, name)
        if shared is not None:
            self.rows.record(inst, comp, *shared)
            return shared
        kernels, temps = plan_fusion(comp, name, inst.operands)
        self.kernels.extend(kernels)
        cand = share_candidate(comp, inst, name, kernels, temps)
        if cand is not None:
            self._candidates[inst] = cand
        self.rows.record(inst, comp, kernels, temps)
        return kernels, temps

    def _reuse_expression(self, comp: HloComputation, inst: HloInstruction, name: str):
        """Kernels reading an expression an operand's reduction kernel also writes (see
        shared_expressions.share_candidate), or None."""
        for op in inst.operands:
            cand = self._candidates.get(op)
            if cand is None:
                continue
            expr = find_shared_expression(comp, inst, cand)
            if expr is None:
                continue
            old = list(cand.kernels)
            planned = share_expression(cand, comp, expr, name)
            if planned is None:
                continue
            del self._candidates[op]
            self.kernels[:] = [k for k in self.kernels if all(k is not o for o in old)] + cand.kernels
            sid = len(self.shared)
            self.shared.append(expr.shape)
            self.shared_outputs.setdefault(op, []).append(sid)
            self.shared_inputs[inst] = [sid]
            if self.log is not None:
                record_shared(self.log, cand, inst, expr)
            kernels, temps = planned
            self.kernels.extend(kernels)
            return kernels, temps
        return None


def kernel_symbol(key: str) -> str:
    """The function name of the kernel compiled under cache key `key` (the same in every
    program, so its object file is shared by every program with that kernel)."""
    return "hlofuse_kernel_" + key


def speed_level(kernel: KernelPlan, small: bool = False) -> int:
    """The LLVM speed level of `kernel` (codegen/kernel_work.kernel_level): llvm_pool.SMALL_KERNEL
    (a cheap pipeline and code generator) for one of the program's kernels whose run time is
    negligible (`small`: kernel_work.small_kernels chose it), else O3. `kernel` is for
    benchmarks/compile_time.py, which swaps in a rule that picks the level by kernel kind.

    O3 for every other kernel, as measured (`benchmarks/compile_time.py --opt-levels`, one
    thread, interleaved medians, load ~4 on 2 cores): O2 runs column reductions 2.3x slower and
    the flax MNIST CNN's convolutions 1.26x slower, ties elsewhere (loops, row reductions,
    softmax, attention, scatter: 0.93-1.06x), and saves an inconsistent 0-35% of LLVM's time
    (ResNet-50's convolutions 35%, MobileNetV2's none). Over 408 distinct kernels of eight
    models O2 saved 10% of LLVM's CPU time (direct convolutions 22%, loops 7%); XLA:CPU's
    pipeline, O3 without the SLP vectorizer, saved nothing (docs/compile_time.md, "How XLA:CPU
    runs LLVM")."""
    return kernel_level(small)


# Emitters of custom kernels (KernelPlan.custom names one): each fills a CPU kernel skeleton.
# Modules that plan such kernels register their emitter here when imported.
CUSTOM_EMITTERS: dict[str, Callable[[CpuKernelSkeleton, KernelPlan], None]] = {}
CUSTOM_EMITTERS["dus"] = emit_dus_kernel  # in-place dynamic-update-slice windows
CUSTOM_EMITTERS["scatter"] = emit_scatter_kernel
CUSTOM_EMITTERS.update(CUSTOM_KERNEL_EMITTERS)  # conv, select_and_scatter (codegen/kernels/cpu_custom.py)
CUSTOM_EMITTERS["gemm"] = emit_gemm_kernel  # dots through BLAS with their epilogue (kernels/cpu_gemm.py)
CUSTOM_EMITTERS["row"] = emit_row_kernel  # softmax-like chains (codegen/row_fusion.py)


def emit_kernel(mod: ir.Module, kernel: KernelPlan, target, name: str) -> None:
    """Emit `kernel` into `mod` as function `name`."""
    skel = CpuKernelSkeleton(mod, target, name, kernel.comp, len(output_leaves(kernel.comp)), len(kernel.scratch))
    if kernel.custom is not None:
        CUSTOM_EMITTERS[kernel.custom](skel, kernel)
    elif kernel.group is not None:
        emit_reduction_kernel(skel, kernel.comp, kernel.group, kernel.stage, kernel.parts)
    else:
        emit_loop_kernel(skel, kernel.comp, kernel.outputs)


def _new_module(name: str, target) -> ir.Module:
    mod = ir.Module(name=symbol_name(name))
    mod.triple = target.triple
    mod.data_layout = target.data_layout
    return mod


def emit_module(name: str, kernels: list[KernelPlan], target) -> ir.Module:
    """One LLVM module (llvmlite.ir) named after module `name` with every kernel of `kernels`
    under its own name (for inspection: compilation emits a module per distinct kernel)."""
    mod = _new_module(name, target)
    for k in kernels:
        emit_kernel(mod, k, target, k.name)
    return mod


def emit_kernel_module(kernel: KernelPlan, target, name: str) -> ir.Module:
    """An LLVM module holding `kernel` alone, as function `name`."""
    mod = _new_module(name, target)
    emit_kernel(mod, kernel, target, name)
    return mod


def optimize_module(mod: ir.Module) -> llvm.ModuleRef:
    """`mod` parsed, verified and optimized at O3 for the host."""
    return optimized_module(str(mod))


@dataclass(eq=False)
class KernelObject:
    """A distinct kernel of a program: its cache key, the function its object defines, the
    program's kernels that run it, its optimization level and its object code (the object file of
    the group it was compiled in, `kernel_groups`: the same bytes for every kernel of a group)."""

    key: str
    symbol: str
    kernels: list[KernelPlan]
    speed_level: int
    object_code: bytes = field(default=b"", repr=False)
    cached: bool = False  # the object came from the memory or the disk cache


@dataclass(eq=False)
class CpuCode(Program):
    """A fused module compiled for the host CPU: its schedule, kernels and their object code
    (an object file per group of distinct kernels)."""

    objects: list[KernelObject] = field(default_factory=list)
    symbols: dict[str, str] = field(default_factory=dict)  # kernel name -> function symbol
    timings: dict[str, float] = field(default_factory=dict)  # stage -> seconds (see compile_cpu)
    native: NativeProgram | None = None  # the schedule as the native driver runs it
    driver_object: bytes = field(default=b"", repr=False)  # the driver's object code
    _llvm_ir: str | None = None
    _small: set[int] | None = None  # kernel_work.small_kernels, for `kernel_level` before compiling

    @property
    def cache_hit(self) -> bool:
        """Whether every kernel's object code came from the memory or disk cache."""
        return all(o.cached for o in self.objects)

    @property
    def compiled_count(self) -> int:
        """How many distinct kernels LLVM compiled for this program (not found in a cache)."""
        return sum(not o.cached for o in self.objects)

    def llvm_ir(self) -> str:
        """The optimized LLVM IR of every kernel, under the kernels' names, as one module
        (re-emitted and optimized on request, at each kernel's level)."""
        if self._llvm_ir is None:
            self._llvm_ir = str(self._linked(self.kernels))
        return self._llvm_ir

    def asm(self) -> str:
        """Host assembly of the program: each level's kernels at that level's code generator
        (llvm_pool.codegen_level), as compiled."""
        by_level: dict[int, list[KernelPlan]] = {}
        for k in self.kernels:
            by_level.setdefault(self.kernel_level(k), []).append(k)
        return "".join(llvm_pool.target_machine(llvm_pool.codegen_level(level)).emit_assembly(self._linked(ks))
                       for level, ks in sorted(by_level.items()))

    def kernel_level(self, kernel: KernelPlan) -> int:
        """The speed level `kernel` is compiled at (its distinct kernel's, once compiled)."""
        for o in self.objects:
            if any(k is kernel for k in o.kernels):
                return o.speed_level
        if self._small is None:
            self._small = small_kernels(self.planner, self.module.entry)
        return speed_level(kernel, id(kernel) in self._small)

    def _linked(self, kernels: list[KernelPlan]) -> llvm.ModuleRef:
        """`kernels` emitted and optimized each at its level, linked into one module."""
        target = CpuTarget()
        linked = llvm.parse_assembly(str(_new_module(self.module.name, target)))
        for k in kernels:
            linked.link_in(llvm_pool.optimized_kernel(str(emit_kernel_module(k, target, k.name)), self.kernel_level(k)))
        return linked


def distinct_kernels(kernels: list[KernelPlan], target, small: Collection[int] = frozenset()) -> list[KernelObject]:
    """The program's kernels grouped by cache key (structurally identical kernels share one).
    `small`: the ids of the kernels to compile at the small level (kernel_work.small_kernels,
    `speed_level`); by default none. The key holds the level's tag (llvm_pool.level_tag), so
    one kernel at two levels is two distinct kernels."""
    fingerprint = target.fingerprint()
    found: dict[str, KernelObject] = {}
    for k in kernels:
        level = speed_level(k, id(k) in small)
        key = cache_key(llvm_pool.level_tag(level) + "\n" + kernel_text(k), fingerprint)
        obj = found.get(key)
        if obj is None:
            obj = found[key] = KernelObject(key, kernel_symbol(key), [], level)
        obj.kernels.append(k)
    return list(found.values())


# Kernels are compiled in groups: consecutive missing kernels of one speed level share an LLVM
# module, and so one object file, until it holds `group_kernels` kernels or GROUP_INSTRUCTIONS
# emitted instructions (a large kernel closes its group; the convolutions are 300-3,000). What
# a group saves is LLVM's work per module and per pass run over a module, 1-3 ms per kernel:
# LLVM CPU seconds of the distinct kernels other than direct convolutions, one module each
# against groups of 8 (load 4-5): haiku's ResNet-18 step 3.36 -> 3.13 (203 kernels),
# MobileNetV2 0.44 -> 0.37 (38), GPT-2 0.24 -> 0.22 (15). One module for everything was slower
# on haiku's step (3.14 against 3.05: passes whose time grows faster than the module).
GROUP_KERNELS = 8
GROUP_INSTRUCTIONS = 1500
# Groups per LLVM lane at least, where there are kernels enough: the lanes compile groups in
# parallel (codegen/llvm_pool.py), and a few groups per lane let the slow ones (convolutions)
# run beside several fast ones instead of one lane finishing long after the other.
GROUPS_PER_LANE = 4


def group_kernels(missing: int, lanes: int) -> int:
    """The most kernels a group of `missing` kernels compiled on `lanes` lanes holds: GROUP_KERNELS,
    fewer where that would leave under GROUPS_PER_LANE groups per lane (a small module's seven
    kernels in one group were one lane's work, the other lane idle). One lane: GROUP_KERNELS."""
    if lanes <= 1:
        return GROUP_KERNELS
    return max(1, min(GROUP_KERNELS, -(-missing // (lanes * GROUPS_PER_LANE))))


def _emitted_instructions(fn: ir.Function) -> int:
    """Instructions of llvmlite function `fn` as emitted (before LLVM's optimization)."""
    return sum(len(block.instructions) for block in fn.blocks)


def kernel_groups(objects: list[KernelObject], target,
                  limit: int = GROUP_KERNELS) -> Iterator[tuple[list[KernelObject], ir.Module]]:
    """`objects` emitted into modules of at most `limit` kernels (`group_kernels`) and about
    GROUP_INSTRUCTIONS instructions, in order, each kernel as the function its object defines
    (`KernelObject.symbol`); a group holds kernels of one speed level. Yields each group's
    kernels and module as soon as the group is full, so LLVM starts on it while the next is
    emitted.

    A kernel that calls a oneDNN primitive is a group of its own: the primitive's function is
    defined by the program that holds the kernel when it loads, and a cached group object is
    loaded whole by any program that uses one of its kernels (the kernel cache is keyed per
    kernel), so a group mate of such a kernel would bring an undefined call into programs
    without that primitive (found: equinox's attention block failed to load with
    UnresolvedSymbolError from a cache that other models had filled)."""
    members: list[KernelObject] = []
    mod, size = None, 0
    for i, o in enumerate(objects):
        if mod is None:
            mod, size = _new_module(o.symbol, target), 0
        emit_kernel(mod, o.kernels[0], target, o.symbol)
        size += _emitted_instructions(mod.get_global(o.symbol))
        members.append(o)
        nxt = objects[i + 1] if i + 1 < len(objects) else None
        if (nxt is None or nxt.speed_level != o.speed_level or len(members) >= limit
                or size >= GROUP_INSTRUCTIONS or calls_primitive(o.kernels[0])
                or calls_primitive(nxt.kernels[0])):
            # handed over without a reference kept here while suspended: once the caller has
            # printed it and let it go, the collection of the youngest generation it makes
            # then frees it (kept, it survived into an older generation as garbage: haiku's
            # 27 groups left 190,000 objects for a later, slower collection)
            handed, mod = [mod], None
            yield members, handed.pop()
            members = []


def compile_objects(objects: list[KernelObject], target, timings: dict[str, float], lanes: llvm_pool.Lanes,
                    compiled: Callable[[list[KernelObject]], None] | None = None) -> None:
    """Compile `objects` to object code on `lanes` in groups (`kernel_groups`: the kernels of a
    group share one object file, which defines each one's function), LLVM's work overlapped
    with the emission of the next groups: this thread emits and prints a group's module while
    the lane threads optimize and compile the ones before it in parallel (codegen/llvm_pool.py:
    each group in an LLVM context of its own; the same bytes on any lane, results in
    `objects`' order; groups sized by `group_kernels` for the lanes' count). A
    group whose compilation raises raises here, the first such in `objects`' order. Adds the
    stages' seconds to `timings`. `compiled(members)` is called with each group as its object
    arrives (in order), while the groups after it are still compiling: what it does (storing
    the objects in the caches) then leaves the compile's tail; its time counts as `cache`."""
    emission = emission_cpu = opt = codegen = 0.0
    futures = []
    t0, c0 = time.perf_counter(), time.thread_time()
    for members, mod in kernel_groups(objects, target, group_kernels(len(objects), lanes.count)):
        text = module_text(mod)
        del mod  # (its IR objects are cycles: freed by the collection below, not now)
        if not gc.isenabled():  # paused (collector_paused): free the groups printed so far
            gc.collect(0)
        emission += time.perf_counter() - t0
        emission_cpu += time.thread_time() - c0
        futures.append((members, lanes.compile(text, members[0].speed_level)))
        t0, c0 = time.perf_counter(), time.thread_time()
    t0 = time.perf_counter()
    handled = 0.0
    for members, f in futures:
        object_code, t_opt, t_codegen = f.result()
        for o in members:
            o.object_code = object_code
        opt += t_opt
        codegen += t_codegen
        if compiled is not None:
            t1 = time.perf_counter()
            compiled(members)
            handled += time.perf_counter() - t1
    waited = time.perf_counter() - t0 - handled
    for stage, seconds in (("emission", emission), ("emission cpu", emission_cpu), ("llvm optimization", opt),
                           ("code generation", codegen), ("llvm wait", waited), ("cache", handled)):
        timings[stage] = timings.get(stage, 0.0) + seconds


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the block (where it was running), then one
    collection of the youngest generation. Emission makes LLVM IR objects by the hundred
    thousand (llvmlite's instructions, blocks and functions point at their parents: cycles), and
    each collection they triggered also walked the older objects, the HLO graphs among them:
    half of the emission's time (haiku's ResNet-18 step: 213 kernels emitted and printed in
    0.66 CPU-s, 0.33 s with the collector paused). What is made in the block is in the youngest
    generation, so collecting that one frees the printed modules without walking the rest:
    `compile_objects` does after each group (the memory held stays a group's), and this at the
    end (the driver's)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(0)


def compile_cpu(fused_module: HloModule, cache_dir=None, log=None, cache: bool = True) -> CpuCode:
    """Plan `fused_module` and compile each distinct kernel to a host object file, from the
    memory or disk cache (`cache_dir`, none if None) when possible; `cache=False` bypasses both.
    The kernel planner's decisions go to `log`, by default the fused module's fusion log
    (passes/fusion/decisions.module_log). `CpuCode.timings` gets the seconds of planning,
    cache look-ups, the kernels' emission (LLVM IR built and printed: `emission` the calling
    thread's wall time, `emission cpu` its CPU time; they differ by the time the driver's
    thread held the GIL), LLVM optimization and code generation (their sums over kernels),
    the wall time spent waiting for LLVM after emission, and the driver's: `driver` its
    thread's CPU time (its IR and, on the thread lane, its LLVM work), `driver wall` the span
    from its start to its object, which runs beside the kernels and mostly waits.

    The collector is paused throughout (`collector_paused`): planning makes the kernels'
    computations (clones of fused instructions: cycles) and every collection they triggered
    walked the fused module too; haiku's ResNet-18 step planned in 0.34 and 0.15 CPU-s with
    it running, 0.12 paused (load 10)."""
    with collector_paused():
        return _compile_cpu(fused_module, cache_dir, log, cache)


def plan_cpu(fused_module: HloModule, planner: CpuPlanner) -> CpuCode:
    """The program's kernels as they are compiled, none compiled yet: planned by `planner`,
    each kernel's speed level chosen (kernel_work.small_kernels, which reads the kernels' own
    sizes), then the elementwise kernels put in their size-free form (generic_kernels) at one
    level per structure. compile_cpu and `hlofuse compile --dump-dir` (dump.py) both plan so."""
    code = CpuCode(fused_module, planner)
    planner.plan(fused_module.entry)  # and every computation the entry runs
    small = small_kernels(planner, fused_module.entry)
    code._small = shared_levels(generic_kernels(code.kernels, CpuTarget()), small)
    return code


def _compile_cpu(fused_module: HloModule, cache_dir, log, cache: bool) -> CpuCode:
    """`compile_cpu`'s work, the collector paused."""
    start = time.perf_counter()
    planner = CpuPlanner(log=log if log is not None else module_log(fused_module))
    code = plan_cpu(fused_module, planner)
    target = CpuTarget()
    code.objects = distinct_kernels(code.kernels, target, code._small)
    code.symbols = {k.name: o.symbol for o in code.objects for k in o.kernels}
    now = time.perf_counter()
    code.timings["planning"] = now - start
    disk = CompileCache(cache_dir) if cache and cache_dir is not None else None
    missing, stored = [], False
    for o in code.objects:
        obj = memory_cache.get(o.key) if cache else None
        if obj is not None and disk is not None and not disk.has(o.key):
            disk.store(o.key, obj)  # compiled in this process before, for another directory
            stored = True
        if obj is None and disk is not None:
            obj = disk.load(o.key)
            if obj is not None:
                memory_cache[o.key] = obj
        if obj is None:
            missing.append(o)
        else:
            o.object_code, o.cached = obj, True
    code.timings["cache"] = time.perf_counter() - now
    code.native = NativeProgram(planner, fused_module.entry)
    def keep(members: list[KernelObject]) -> None:  # a group's object, while later groups compile
        for o in members:
            if cache:
                memory_cache[o.key] = o.object_code
            if disk is not None:
                disk.store(o.key, o.object_code)

    with llvm_pool.Lanes(len(missing)) as lanes:
        # the driver is emitted and compiled beside the kernels, not after them
        driver = lanes.run(compile_driver, code.native, target, cache, disk, lanes.compile_here)
        compile_objects(missing, target, code.timings, lanes, keep)
        code.driver_object, driver_cached, code.timings["driver wall"], code.timings["driver"] = driver.result()
    if disk is not None and (stored or missing or not driver_cached):
        disk.evict()
    return code
