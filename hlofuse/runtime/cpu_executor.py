"""The CPU executable: load the object code codegen made for a fused module, and run it.

    program = CpuProgram.compile(fused_module, cache_dir=None)
    outputs = program.run([x, y])          # entry result flattened depth-first
    program.profile([x, y], runs=10)       # per-step times (hlofuse run --profile)
    program.llvm_ir(), program.asm(), program.compile_seconds

codegen/cpu.py plans the module (every executed computation becomes steps; fusions become
kernels), compiles each distinct kernel to an object file (cached per kernel in memory and on
disk) and the schedule itself to a native driver (codegen/driver.py). Here the objects are
loaded into one engine and a run is one call of the driver (runtime/native_driver.py): kernels,
while loops, conditionals and copies run in compiled code, kernels split over libgomp's threads
(runtime/cpu_threads.py). Library ops with no compiled code yet run their numpy rules through a
callback; the computations those rules call (a sort's comparator ...) run in the step
interpreter (runtime/program.py), whose kernel steps call the same compiled kernels on one thread.
"""
from __future__ import annotations

import ctypes
import functools
import threading
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..codegen.cpu import CpuCode, compile_cpu
from ..codegen.kernels.onednn_kernels import primitive_descriptions
from ..codegen.planning import KernelPlan
from ..codegen.schedule import ComputationPlan, Step
from ..hlo.ir import HloModule
from .cpu_threads import register_openmp
from .io import check_arguments, data_address
from .jit import JitModule
from .native_driver import NativeDriver
from .onednn_primitives import register_primitives
from .output_pool import OutputPool
from .program import ProgramBase, flatten, owned_outputs, unflatten

@dataclass(eq=False)
class LoadedKernel:
    """A kernel of a loaded program: its plan (codegen's) and the address of its function in
    the loaded object code. The driver calls kernels by address; only the step interpreter
    calls them from Python, through `fn`, a ctypes function made on first use (making one per
    kernel at load time was a third of loading a cached 200-kernel program)."""

    plan: KernelPlan
    address: int
    _fn: Callable | None = None

    @property
    def fn(self) -> Callable:
        """The kernel as a ctypes function: (pointers..., first unit, end unit) -> None."""
        if self._fn is None:
            proto = _prototype(self.plan.pointer_count)
            self._fn = proto(self.address)
        return self._fn


@functools.lru_cache(maxsize=None)
def _prototype(pointers: int) -> type:
    """The ctypes type of a kernel taking `pointers` buffer pointers and a unit range."""
    return ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * pointers), ctypes.c_int64, ctypes.c_int64)


class CpuProgram(ProgramBase):
    """A fused module compiled for the host CPU (`code`), loaded and ready to run."""

    def __init__(self, code: CpuCode) -> None:
        super().__init__(code)
        self.compile_seconds = 0.0
        self._jit = None
        self.loaded: dict[str, LoadedKernel] = {}  # kernel name -> its function
        self._outputs = OutputPool()
        self._shared: list[np.ndarray] | None = None
        self._runtimes: dict[tuple[ComputationPlan, int], _StepRuntime] = {}
        self.driver: NativeDriver | None = None
        self.primitives: list = []  # oneDNN primitive descriptions (module cache entries keep them)
        # The arenas and the output pool are per program: runs of one program are serialized.
        self._run_lock = threading.Lock()

    # ---- compilation -----------------------------------------------------------------------
    @classmethod
    def compile(cls, fused_module: HloModule, cache_dir=None, cache: bool = True) -> "CpuProgram":
        """Compile `fused_module` (codegen/cpu.py; each kernel's object code from the memory
        cache, or the disk cache in `cache_dir`, when possible; `cache=False` bypasses both) and
        load it. `code.timings` gets the stages' seconds, loading included."""
        start = time.perf_counter()
        prog = cls(compile_cpu(fused_module, cache_dir, cache=cache))
        loading = time.perf_counter()
        prog._load()
        prog.code.timings["loading"] = time.perf_counter() - loading
        prog.compile_seconds = time.perf_counter() - start
        return prog

    @classmethod
    def load(cls, code: CpuCode, primitives: list | None = None) -> "CpuProgram":
        """Load code compiled before (a module cache entry, compiler.py): no compilation.
        `primitives`: the oneDNN primitive descriptions of its compile (`self.primitives`),
        or None to derive them from the kernels again (which reads their computations)."""
        start = time.perf_counter()
        prog = cls(code)
        prog._load(primitives)
        prog.code.timings["loading"] = time.perf_counter() - start
        return prog

    @property
    def cache_hit(self) -> bool:
        """Whether every kernel's object code came from the memory or disk cache."""
        return self.code.cache_hit

    def _load(self, primitives: list | None = None) -> None:
        """Load every distinct kernel's object into one engine; each kernel calls its
        object's function (structurally identical kernels share one)."""
        register_openmp()  # the driver calls GOMP_parallel: resolvable before it loads
        # oneDNN convolution and matmul kernels read their primitive's handles: created now, per process
        if primitives is None:
            primitives = primitive_descriptions(self._planner.kernels)
        self.primitives = primitives
        # oneDNN makes the primitives on a thread while LLVM links the objects (both outside
        # the GIL); the kernels read their handle blocks only once `made()` has returned
        made = register_primitives(self.primitives, background=True)
        try:
            self._jit = JitModule(objects=[o.object_code for o in self.code.objects] + [self.code.driver_object])
        finally:
            made()
        addresses = {o.symbol: self._jit.address(o.symbol) for o in self.code.objects}
        by_name = {}
        for k in self._planner.kernels:
            by_name[k.name] = addresses[self.code.symbols[k.name]]
            self.loaded[k.name] = LoadedKernel(k, by_name[k.name])
        self.driver = NativeDriver(self.code.native, self._jit.address("hlofuse_plan_0"), by_name, self)

    def llvm_ir(self) -> str:
        """The optimized LLVM IR of the program (re-emitted if the object came from the cache)."""
        return self.code.llvm_ir()

    def asm(self) -> str:
        """Host assembly of the program."""
        return self.code.asm()

    # ---- execution -------------------------------------------------------------------------
    def run(self, args: list) -> list[np.ndarray]:
        """Run on numpy arrays (one per entry parameter); the entry result flattened, in fresh
        arrays the caller owns."""
        checked = self.driver.fast_checked(args)
        if checked is None:
            checked = check_arguments(self.module, args)
        with self._run_lock:
            return self.driver.run(checked)

    def run_interpreted(self, args: list) -> list[np.ndarray]:
        """Run through the step interpreter instead of the driver (the same kernels, called
        from Python one by one, on one thread): a second path to check the driver against."""
        checked = check_arguments(self.module, args)
        with self._run_lock:
            result = self._execute(self._entry, checked)
        return owned_outputs(result, checked)

    def profile(self, args: list, runs: int = 10):
        """Run `runs` times with per-step timers (runtime/native_driver.py `profile`)."""
        checked = check_arguments(self.module, args)
        with self._run_lock:
            return self.driver.profile(checked, runs)

    def _run_kernels(self, plan: ComputationPlan, i: int, step: Step, ops: list):
        """Run the kernels of step `i` (outputs in the arena or the output pool)."""
        rt = self._runtimes.get((plan, i))
        if rt is None:
            rt = self._runtimes[(plan, i)] = _StepRuntime(self, plan, i, step)
        leaves = flatten(tuple(ops)) if rt.tuple_operands else ops
        if not all(type(x) is np.ndarray and x.flags.c_contiguous for x in leaves):
            leaves = [np.ascontiguousarray(x) for x in leaves]  # kept alive until the kernels ran
        addrs = [data_address(x) for x in leaves]
        addrs += rt.shared_in
        outs = list(rt.fixed_outs)
        for k, (dims, dtype) in rt.pooled:
            outs[k] = o = self._outputs.empty(dims, dtype)
            rt.out_addrs[k] = data_address(o)
        addrs += rt.out_addrs
        for k, i in step.inplace.items():  # kernels that write only part of an output
            np.copyto(outs[k], leaves[i].reshape(outs[k].shape))
        for k, index in zip(rt.kernels, rt.arg_index):
            _launch(k, [addrs[j] if j >= 0 else rt.fixed[~j] for j in index])
        return unflatten(step.inst.shape, outs)

    def _shared_buffers(self) -> list[np.ndarray]:
        """The buffers of expressions shared between kernel steps (allocated once)."""
        if self._shared is None:
            self._shared = [np.empty(s.dims, s.dtype.numpy) for s in self._planner.shared]
        return self._shared


class _StepRuntime:
    """What a kernel step needs on every run, computed on its first: its loaded kernels, arena
    views and the temporaries (both persistent: runs of a program are serialized), the shared
    buffers, and for every kernel where each argument comes from.

    Argument addresses per run are [inputs..., shared inputs..., outputs..., shared outputs...];
    `arg_index` holds an index into that list, or ~j for `fixed[j]` (a temporary)."""

    def __init__(self, prog: CpuProgram, plan: ComputationPlan, i: int, step: Step) -> None:
        planner = prog._planner
        self.kernels = [prog.loaded[k.name] for k in step.kernels]
        shared = prog._shared_buffers() if planner.shared else []
        self.tuple_operands = any(op.shape.is_tuple for op in step.inst.operands)
        self.shared_in = [shared[s].ctypes.data for s in planner.shared_inputs.get(step.inst, ())]
        self.fixed_outs: list = []
        self.pooled: list = []
        self.out_addrs: list[int] = []
        for k, shape in enumerate(step.leaf_shapes):
            slot = plan.assignment.slots[(i, k)]
            if slot.offset is None:
                self.fixed_outs.append(None)
                self.pooled.append((k, (tuple(shape.dims), shape.dtype.numpy)))
                self.out_addrs.append(0)
            else:
                view = prog.arena_view(plan, slot, shape)
                self.fixed_outs.append(view)
                self.out_addrs.append(view.ctypes.data)
        self.out_addrs += [shared[s].ctypes.data for s in planner.shared_outputs.get(step.inst, ())]
        self.temps = [np.empty(t.dims, t.dtype.numpy) for t in step.temps]
        self.fixed = [t.ctypes.data for t in self.temps]
        n_in = sum(1 for _ in _leaf_shapes(step.inst.operands)) + len(self.shared_in)
        base = {"in": 0, "out": n_in}
        self.arg_index = [[base[kind] + n if kind != "tmp" else ~n for kind, n in k.inputs + k.results + k.scratch]
                          for k in step.kernels]


def _leaf_shapes(operands):
    for op in operands:
        yield from (op.shape.leaves() if op.shape.is_tuple else [op.shape])


def _launch(k: LoadedKernel, ptrs: list[int]) -> None:
    """Call kernel `k` over all its units on this thread (the step interpreter's path)."""
    if k.plan.units > 0:
        k.fn(*ptrs, 0, k.plan.units)
