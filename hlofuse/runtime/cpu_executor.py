"""The CPU executable: plan the fused module, emit ONE LLVM module of kernels, JIT it, run.

    program = CpuProgram.compile(fused_module, cache_dir=None)
    outputs = program.run([x, y])          # entry result flattened depth-first
    program.llvm_ir(), program.asm(), program.compile_seconds

Planning is pure Python and cheap: every executed computation (the entry, while bodies,
branches, called computations) becomes a list of steps; a fusion, or a fusible op left
unfused (wrapped into a one-instruction computation), becomes kernel calls; other ops run
as library rules (runtime/library_ops.py). Kernels are then emitted with the shared emitters
into one module, optimized at O3 for the host, compiled to an object file (cached on disk
by fingerprint) and loaded. A kernel's outer range of work units is split over a thread
pool; ctypes releases the GIL during the call.
"""
from __future__ import annotations

import ctypes
import os
import re
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..emitters import elemental  # noqa: F401  (registers the element generators)
from ..hlo.errors import InputError, UnsupportedError
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from . import library_ops, library_rng  # noqa: F401  (register the library rules)
from .buffers import Assignment, OutputPool, assign_buffers
from .compile_cache import CompileCache, cache_key
from .cpu_threads import available_cores, fit_blas_threads, thread_pool
from .kernel_planning import KernelPlan, plan_fusion, sequential_dot

_PARALLEL_MIN_ELEMENTS = 1 << 15
_memory_cache: dict[str, bytes] = {}


@dataclass
class Step:
    """One instruction of an executed computation and how it runs."""
    inst: HloInstruction
    kind: str  # param | const | tuple | gte | kernel | library
    operand_steps: list[int] = field(default_factory=list)
    kernels: list[KernelPlan] = field(default_factory=list)
    leaf_shapes: list = field(default_factory=list)  # output leaves (kernel steps)
    temps: list = field(default_factory=list)  # shapes of temporaries between its kernels

    @property
    def aliases_operands(self) -> bool:
        """Whether the value may share buffers with its operands."""
        return self.kind in ("tuple", "gte", "library", "call")

    @property
    def kernel_leaf_bytes(self) -> list[int]:
        """Byte sizes of the output leaves a kernel step writes."""
        if self.kind != "kernel":
            return []
        return [s.element_count() * s.dtype.byte_size for s in self.leaf_shapes]


def _wrap(inst: HloInstruction) -> HloComputation:
    """A computation holding a copy of `inst` applied to fresh parameters (an unfused fusible op)."""
    comp = HloComputation(f"wrapped.{inst.name}")
    params = []
    for i, op in enumerate(inst.operands):
        p = HloInstruction("parameter", op.shape, name=f"param_{i}")
        p.parameter_number = i
        params.append(comp.add_instruction(p))
    root = comp.add_instruction(inst.clone(operands=params))
    comp.root = root
    return comp


def _emittable(comp: HloComputation) -> bool:
    """Whether every instruction of a fused computation has an element generator."""
    return all(i.opcode == "parameter" or i.info.elemental is not None for i in comp.instructions)


def _symbol(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


class _Planner:
    """Turns executed computations into steps and collects the kernels to emit."""

    def __init__(self) -> None:
        self.plans: dict[int, _ComputationPlan] = {}
        self.kernels: list[KernelPlan] = []

    def plan(self, comp: HloComputation) -> "_ComputationPlan":
        """The (memoized) plan of computation `comp`."""
        p = self.plans.get(id(comp))
        if p is None:
            p = _ComputationPlan(comp, self)
            self.plans[id(comp)] = p
        return p

    def kernel_calls(self, comp: HloComputation, inst: HloInstruction) -> tuple[list[KernelPlan], list]:
        """Kernels and temporaries computing fused computation `comp` for instruction `inst`."""
        kernels, temps = plan_fusion(comp, f"k{len(self.kernels)}_{_symbol(inst.name)}")
        self.kernels.extend(kernels)
        return kernels, temps


class _ComputationPlan:
    """The steps executing one computation, and its buffer assignment."""

    def __init__(self, comp: HloComputation, planner: _Planner) -> None:
        self.comp = comp
        self.steps: list[Step] = []
        index: dict[int, int] = {}
        for inst in comp.post_order():
            step = self._step(inst, planner)
            step.operand_steps = [index[id(op)] for op in inst.operands]
            index[id(inst)] = len(self.steps)
            self.steps.append(step)
        self.root_step = index[id(comp.root)]
        self.assignment: Assignment = assign_buffers(self.steps, self.root_step)
        self._arena: np.ndarray | None = None

    def _step(self, inst: HloInstruction, planner: _Planner) -> Step:
        op = inst.opcode
        if op == "parameter":
            return Step(inst, "param")
        if op == "constant":
            return Step(inst, "const")
        if op == "tuple":
            return Step(inst, "tuple")
        if op == "get-tuple-element":
            return Step(inst, "gte")
        if op == "fusion":
            comp = inst.fused_computation
            if not _emittable(comp):
                # e.g. XLA's kOutput/kCustom fusions around a dot: run the fused computation
                # like a call, its fusible parts as kernels.
                planner.plan(comp)
                return Step(inst, "call")
        elif inst.info.elemental is not None:
            comp = _wrap(inst)
        elif op == "dot" and (dot_comp := sequential_dot(inst)) is not None:
            comp = dot_comp
        elif inst.info.library is not None:
            for callee in inst.called_computations():
                planner.plan(callee)
            return Step(inst, "library")
        else:
            reason = inst.info.unsupported.get("library") or inst.info.unsupported.get("elemental") or "not implemented"
            raise UnsupportedError(f"the CPU backend cannot run {op} instruction {inst.name}: {reason}")
        from ..emitters.loop_emitter import output_leaves

        step = Step(inst, "kernel", leaf_shapes=[leaf.shape for leaf in output_leaves(comp)])
        step.kernels, step.temps = planner.kernel_calls(comp, inst)
        return step

    def arena(self) -> np.ndarray:
        """This plan's arena of temporaries (allocated once)."""
        if self._arena is None:
            self._arena = np.empty(max(self.assignment.arena_bytes, 1), np.uint8)
        return self._arena


def _flatten(value) -> list:
    if isinstance(value, tuple):
        out = []
        for v in value:
            out.extend(_flatten(v))
        return out
    return [value]


def _unflatten(shape, leaves: list):
    # No recursive closure here: its reference cycle would keep the output arrays alive
    # until the cyclic GC runs, defeating the output pool.
    return _build(shape, iter(leaves))


def _build(shape, it):
    if shape.is_tuple:
        return tuple(_build(e, it) for e in shape.elements)
    return next(it)


class CpuProgram:
    """A fused module compiled for the host CPU."""

    def __init__(self, module: HloModule) -> None:
        self.module = module
        self.compile_seconds = 0.0
        self._planner = _Planner()
        self._entry = self._planner.plan(module.entry)
        self._llvm_ir: str | None = None
        self._jit = None
        self.cache_hit = False
        self._outputs = OutputPool()
        # The arenas and the output pool are per program: runs of one program are serialized.
        self._run_lock = threading.Lock()

    # ---- compilation -----------------------------------------------------------------------
    @classmethod
    def compile(cls, fused_module: HloModule, cache_dir=None) -> "CpuProgram":
        """Plan, emit, optimize and load `fused_module` (object code from the cache when possible)."""
        from ..emitters.cpu.target import CpuTarget

        start = time.perf_counter()
        prog = cls(fused_module)
        target = CpuTarget()
        key = cache_key(fused_module.to_text(), target.fingerprint())
        disk = CompileCache(cache_dir) if cache_dir is not None else None
        obj = _memory_cache.get(key)
        on_disk = disk.load(key) if disk is not None else None
        obj = obj or on_disk
        prog.cache_hit = obj is not None
        if obj is None:
            obj = prog._build_object(target)
        if disk is not None and on_disk is None:
            disk.store(key, obj)
        _memory_cache[key] = obj
        prog._load(obj)
        prog.compile_seconds = time.perf_counter() - start
        return prog

    def _emit_module(self, target):
        """The LLVM module (llvmlite.ir) with every kernel of the program."""
        from llvmlite import ir

        from ..emitters.cpu.kernels import CpuKernelSkeleton
        from ..emitters.loop_emitter import emit_loop_kernel, output_leaves
        from ..emitters.reduction_emitter import emit_reduction_kernel

        mod = ir.Module(name=_symbol(self.module.name))
        mod.triple = target.triple
        mod.data_layout = target.data_layout
        for k in self._planner.kernels:
            skel = CpuKernelSkeleton(mod, target, k.name, k.comp, len(output_leaves(k.comp)), len(k.scratch))
            if k.group is not None:
                emit_reduction_kernel(skel, k.comp, k.group, k.stage, k.parts)
            else:
                emit_loop_kernel(skel, k.comp, k.outputs)
        return mod

    def _optimized(self, target):
        import llvmlite.binding as llvm

        from ..emitters.cpu.target import optimize

        llmod = llvm.parse_assembly(str(self._emit_module(target)))
        llmod.verify()
        optimize(llmod)
        self._llvm_ir = str(llmod)
        return llmod

    def _build_object(self, target) -> bytes:
        from ..emitters.cpu.target import host_target_machine

        return host_target_machine().emit_object(self._optimized(target))

    def _load(self, obj: bytes) -> None:
        from ..emitters.cpu.target import JitModule
        from ..emitters.loop_emitter import output_leaves

        self._jit = JitModule(object_code=obj)
        for k in self._planner.kernels:
            n = sum(len(p.shape.leaves()) if p.shape.is_tuple else 1 for p in k.comp.parameters)
            n += len(output_leaves(k.comp)) + len(k.scratch)
            proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * n), ctypes.c_int64, ctypes.c_int64)
            k.fn = proto(self._jit.address(k.name))

    def llvm_ir(self) -> str:
        """The optimized LLVM IR of the program (re-emitted if the object came from the cache)."""
        if self._llvm_ir is None:
            from ..emitters.cpu.target import CpuTarget

            self._optimized(CpuTarget())
        return self._llvm_ir

    def asm(self) -> str:
        """Host assembly of the program."""
        from ..emitters.cpu.target import CpuTarget, host_target_machine

        import llvmlite.binding as llvm

        llmod = llvm.parse_assembly(self.llvm_ir())
        return host_target_machine().emit_assembly(llmod)

    # ---- execution -------------------------------------------------------------------------
    def run(self, args: list) -> list[np.ndarray]:
        """Run on numpy arrays (one per entry parameter); the entry result flattened."""
        params = self.module.entry.parameters
        if len(args) != len(params):
            raise InputError(f"module {self.module.name} takes {len(params)} arguments, got {len(args)}")
        checked = []
        for p, a in zip(params, args):
            checked.append(_check_input(p, a))
        protected = {id(x) for x in _flatten(tuple(checked))}
        fit_blas_threads()
        with self._run_lock:
            result = self._execute(self._entry, checked)
        out = []
        for leaf in _flatten(result):
            leaf = np.asarray(leaf)
            if id(leaf) in protected or not leaf.flags.owndata or not leaf.flags.writeable:
                leaf = np.array(leaf, copy=True)
            out.append(leaf)
        return out

    def call(self, comp: HloComputation, args: list):
        """Run a called computation (while body, branch, comparator ...) on values `args`."""
        return self._execute(self._planner.plan(comp), args)

    def _execute(self, plan: _ComputationPlan, args: list):
        env: list = [None] * len(plan.steps)
        arena = plan.arena()
        for i, step in enumerate(plan.steps):
            inst = step.inst
            ops = [env[j] for j in step.operand_steps]
            if step.kind == "param":
                env[i] = args[inst.parameter_number]
            elif step.kind == "const":
                env[i] = _constant(inst)
            elif step.kind == "tuple":
                env[i] = tuple(ops)
            elif step.kind == "gte":
                env[i] = ops[0][int(inst.attrs["index"])]
            elif step.kind == "library":
                env[i] = inst.info.library(inst, ops, self)
            elif step.kind == "call":
                env[i] = self.call(inst.fused_computation, ops)
            else:
                env[i] = self._run_kernels(plan, i, step, ops, arena)
        return env[plan.root_step]

    def _run_kernels(self, plan, i, step, ops, arena):
        inputs = [np.ascontiguousarray(x) for x in _flatten(tuple(ops))]
        outs = []
        for k, shape in enumerate(step.leaf_shapes):
            slot = plan.assignment.slots[(i, k)]
            dt = shape.dtype.numpy
            if slot.offset is None:
                outs.append(self._outputs.empty(shape.dims, dt))
            else:
                view = arena[slot.offset:slot.offset + slot.nbytes].view(dt)
                outs.append(view.reshape(shape.dims))
        temps = [np.empty(t.dims, t.dtype.numpy) for t in step.temps]
        where = {"in": [x.ctypes.data for x in inputs], "out": [o.ctypes.data for o in outs],
                 "tmp": [t.ctypes.data for t in temps]}
        for k in step.kernels:
            ptrs = [where[kind][n] for kind, n in k.inputs + k.results + k.scratch]
            _launch(k, ptrs)
        return _unflatten(step.inst.shape, outs)


def _launch(k: KernelPlan, ptrs: list[int]) -> None:
    """Call kernel `k` over all its units, split over the cores when there is enough work
    (the calling thread runs the first share itself)."""
    units = k.units
    if units <= 0:
        return
    total = units * max(k.unit_elements, 1)
    workers = min(available_cores(), units, max(1, total // _PARALLEL_MIN_ELEMENTS))
    if workers <= 1:
        k.fn(*ptrs, 0, units)
        return
    bounds = [units * c // workers for c in range(workers + 1)]
    futures = [thread_pool().submit(k.fn, *ptrs, bounds[c], bounds[c + 1]) for c in range(1, workers)]
    k.fn(*ptrs, bounds[0], bounds[1])
    for f in futures:
        f.result()


def _constant(inst: HloInstruction):
    lit = inst.literal
    if lit is None:
        raise UnsupportedError(f"constant {inst.name} has an elided value ({{...}}); cannot run it")
    if inst.shape.is_tuple:
        return lit
    return np.asarray(lit, dtype=inst.shape.dtype.numpy).reshape(inst.shape.dims)


def _check_input(p: HloInstruction, a):
    if p.shape.is_tuple:
        if not isinstance(a, (tuple, list)) or len(a) != len(p.shape.elements):
            raise InputError(f"parameter {p.name} expects a tuple of {len(p.shape.elements)} arrays")
        fake = [HloInstruction("parameter", s, name=f"{p.name}.{k}") for k, s in enumerate(p.shape.elements)]
        return tuple(_check_input(f, x) for f, x in zip(fake, a))
    want = p.shape.dtype.numpy
    arr = np.asarray(a)
    if arr.dtype != want:
        raise InputError(f"parameter {p.name} expects {p.shape.dtype.name} (numpy {want}), got {arr.dtype}")
    if tuple(arr.shape) != tuple(p.shape.dims):
        raise InputError(f"parameter {p.name} expects shape {tuple(p.shape.dims)}, got {tuple(arr.shape)}")
    return np.ascontiguousarray(arr)
