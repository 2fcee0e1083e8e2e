"""The GPU executable: plan a fused module into grid launches, emit them once for NVPTX (PTX)
and once for the host emulation, and run them on a CUDA GPU or on the CPU.

    program = GpuProgram.compile(fused_module, emulated=True)   # runs anywhere
    outputs = program.run([x, y])                                # entry result flattened
    program.ptx()                                                # every kernel, for sm_90

Planning and step execution are shared with the CPU executor (runtime/executor_common.py):
every executed computation becomes steps with a buffer assignment (runtime/buffers.py); a
fusion (or a fusible op left unfused, wrapped in a computation) is split into kernels by the
shared kernel planner (runtime/kernel_planning.py: reduction groups, loop kernels per output
dimensions, reduces materialized into temporaries), and each kernel becomes GPU launches (GpuLaunch):
  * a reduction group: [init] main [finish] [epilogue] (emitters/gpu/reduction_kernel.py),
  * a loop kernel: one grid (loop_kernel.py).
Other ops (dot, convolution, sort, while, ...) are not kernels: they run on the host through
the CPU backend's library rules (runtime/library_ops.py, numpy). On a real GPU their operands
are copied to the host and their results back to the device when a kernel reads them; inputs
are copied host->device once per run (on first use), kernel results stay on the device, and
each output leaf is copied device->host once at the end.

The real-GPU path (CudaDevice: numba.cuda memory, cuda.core launches) could not be run where
this was written (no GPU); the emulated path runs the same kernel bodies, and every PTX is
checked by ptxas in the tests.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..emitters.gpu.kernels import LaunchDims
from ..emitters.kernel_args import param_leaf_count
from ..emitters.gpu.target import DEFAULT_ARCH
from ..hlo.errors import UnsupportedError
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from .executor_common import (ComputationPlan, Planner, ProgramBase, Step, flatten, owned_outputs, symbol_name,
                              unflatten)
from .io import check_arguments, contiguous

if TYPE_CHECKING:
    from llvmlite import ir


@dataclass
class GpuLaunch:
    """One kernel launch of a fusion step. `inputs`/`results` say where the kernel's
    parameter and output leaves live: ("in", i) a leaf of the fusion's operands, ("out", k) a
    leaf of its result, ("tmp", t) a temporary between the step's kernels (a reduce that the
    shared kernel planner materializes, e.g. softmax's row max)."""

    name: str
    comp: HloComputation
    role: str  # loop | init | main | finish | epilogue
    dims: LaunchDims
    plan: object  # LoopPlan or ReductionPlan
    outputs: list[int] = field(default_factory=list)  # output leaves of loop kernels
    inputs: list[tuple[str, int]] = field(default_factory=list)
    results: list[tuple[str, int]] = field(default_factory=list)
    fn: object = None  # loaded kernel (emulated ctypes function or CUDA function)

    @property
    def scratch_types(self) -> tuple:
        """Element types of the scratch buffers the kernel takes after its outputs."""
        return () if self.role == "loop" else self.plan.scratch_types()


def _launches_of(kp, leaves, add) -> None:
    """GPU launches for one kernel of the shared kernel planner (a reduction group or loop)."""
    from ..emitters.gpu.loop_kernel import plan_loop
    from ..emitters.gpu.reduction_kernel import plan_reduction

    if kp.group is not None:
        # The shared planner may split a reduction for the CPU's cores into a "partial" and
        # a "combine" kernel; the grid kernels split reductions themselves, so the group is
        # emitted whole, once (at its first kernel).
        if getattr(kp, "stage", "single") == "combine":
            return
        plan = plan_reduction(kp.group, leaves)
        if plan.kind != "per_output" and plan.atomic:
            add(kp, "init", plan.output_launch, plan)
        add(kp, "main", plan.launch, plan)
        if plan.two_pass:
            add(kp, "finish", plan.output_launch, plan)
        if plan.needs_epilogue:
            add(kp, "epilogue", plan.output_launch, plan)
        return
    widest = max(leaves[k].shape.dtype.byte_size for k in kp.outputs)
    plan = plan_loop(leaves[kp.outputs[0]].shape.dims, widest)
    add(kp, "loop", plan.launch, plan, kp.outputs)


class _GpuPlanner(Planner):
    """Plans the launches of every kernel of the shared kernel planner."""

    backend = "GPU"

    def kernel_calls(self, comp: HloComputation, inst: HloInstruction) -> tuple[list[GpuLaunch], list]:
        """The launches of fused computation `comp` (in order) and its temporaries' shapes."""
        from ..emitters.loop_emitter import output_leaves
        from .kernel_planning import plan_fusion

        kernels, temps = plan_fusion(comp, self.kernel_name(inst))
        launches: list[GpuLaunch] = []

        def add(kp, role, dims, plan, outputs=()):
            launches.append(GpuLaunch(f"{kp.name}_{role}{len(launches)}", kp.comp, role, dims, plan,
                                      list(outputs), list(kp.inputs), list(kp.results)))

        for kp in kernels:
            _launches_of(kp, output_leaves(kp.comp), add)
        self.kernels.extend(launches)
        return launches, temps


def emit_module(launches: list[GpuLaunch], target, name: str) -> ir.Module:
    """An llvmlite module with every launch's kernel for `target` (GPU or emulated)."""
    from llvmlite import ir

    from ..emitters.gpu.kernels import GpuKernelSkeleton
    from ..emitters.gpu.loop_kernel import emit_loop_kernel
    from ..emitters.gpu.reduction_kernel import (
        emit_reduction_epilogue,
        emit_reduction_finish,
        emit_reduction_init,
        emit_reduction_main,
    )

    mod = ir.Module(name=symbol_name(name))
    mod.triple = target.triple
    mod.data_layout = target.data_layout
    emitters = {"init": emit_reduction_init, "main": emit_reduction_main, "finish": emit_reduction_finish,
                "epilogue": emit_reduction_epilogue}
    for launch in launches:
        skel = GpuKernelSkeleton(mod, target, launch.name, launch.comp, launch.dims, launch.scratch_types)
        if launch.role == "loop":
            emit_loop_kernel(skel, launch.comp, launch.outputs, launch.plan)
        else:
            emitters[launch.role](skel, launch.comp, launch.plan)
    return mod


class HostDevice:
    """The emulation: device memory is host memory, launches run on the CPU (gpu_emulator)."""

    def __init__(self, launches: list[GpuLaunch], module) -> None:
        from ..emitters.loop_emitter import output_leaves
        from .gpu_emulator import EmulatedModule

        self.module = EmulatedModule(module)
        for launch in launches:
            n = param_leaf_count(launch.comp) + len(output_leaves(launch.comp)) + len(launch.scratch_types)
            launch.fn = self.module.function(launch.name, n)

    def to_device(self, a):
        """`a` as a contiguous host array of its shape (device memory is host memory)."""
        return contiguous(a)

    def to_host(self, a):
        """`a` itself (device memory is host memory)."""
        return a

    def empty(self, dims, dtype):
        """An uninitialized host array of `dims` and numpy `dtype`."""
        return np.empty(dims, dtype)

    def pointer(self, a) -> int:
        """The address of `a`, for kernel arguments."""
        return a.ctypes.data

    def launch(self, launch: GpuLaunch, pointers: list[int]) -> None:
        """Run every block of `launch` on the host with kernel arguments `pointers`."""
        from .gpu_emulator import run_grid

        run_grid(launch.fn, pointers, launch.dims.grid)

    def synchronize(self) -> None:
        """Nothing to wait for: emulated launches finish before they return."""


@dataclass
class DeviceBuffer:
    """Bytes on the GPU holding an array of `dims` and numpy `dtype` (kept as raw bytes so
    every element type, bf16 and pred included, moves the same way)."""

    data: object  # numba DeviceNDArray of uint8
    dims: tuple
    dtype: np.dtype


class CudaDevice:
    """A CUDA GPU through numba.cuda (memory, PTX loading) and cuda.core (launches)."""

    def __init__(self, launches: list[GpuLaunch], ptx: str) -> None:
        from cuda.core import Device
        from numba import cuda

        self.cuda = cuda
        self.module = cuda.current_context().create_module_ptx(ptx)
        self.device = Device()
        self.device.set_current()  # the primary context numba made current
        for launch in launches:
            launch.fn = self.module.get_function(launch.name)

    def to_device(self, a):
        """`a` in device memory (a host array is copied; device memory is returned as is)."""
        if isinstance(a, DeviceBuffer):
            return a
        a = contiguous(a)
        raw = a.reshape(-1).view(np.uint8) if a.size else np.zeros(1, np.uint8)
        return DeviceBuffer(self.cuda.to_device(raw), tuple(a.shape), a.dtype)

    def to_host(self, a):
        """`a` as a host array (device memory is copied back)."""
        if not isinstance(a, DeviceBuffer):
            return a
        n = int(np.prod(a.dims, dtype=np.int64))
        if n == 0:
            return np.empty(a.dims, a.dtype)
        return a.data.copy_to_host().view(a.dtype)[:n].reshape(a.dims)

    def empty(self, dims, dtype):
        """Uninitialized device memory for an array of `dims` and numpy `dtype`."""
        dtype = np.dtype(dtype)
        nbytes = max(int(np.prod(dims, dtype=np.int64)) * dtype.itemsize, 1)
        return DeviceBuffer(self.cuda.device_array(nbytes, np.uint8), tuple(dims), dtype)

    def pointer(self, a) -> int:
        """The device address of `a`, for kernel arguments."""
        return a.data.__cuda_array_interface__["data"][0]

    def launch(self, launch: GpuLaunch, pointers: list[int]) -> None:
        """Launch `launch` over its grid with kernel arguments `pointers`."""
        from cuda.core import LaunchConfig, launch as cu_launch

        if launch.dims.grid <= 0:
            return
        config = LaunchConfig(grid=launch.dims.grid, block=launch.dims.block)
        cu_launch(self.device.default_stream, config, launch.fn.kernel, *[ctypes.c_void_p(p) for p in pointers])

    def synchronize(self) -> None:
        """Wait until every launch so far has finished."""
        self.cuda.synchronize()


class GpuProgram(ProgramBase):
    """A fused module compiled into grid kernels (run emulated on the host, or on a GPU)."""

    def __init__(self, module: HloModule, emulated: bool, arch: str = DEFAULT_ARCH, lenient: bool = False) -> None:
        self.module = module
        self.emulated = emulated
        self.arch = arch
        self._planner = _GpuPlanner(lenient)
        self._entry = self._planner.plan(module.entry)
        self._ptx: str | None = None
        self._nvptx_ir: str | None = None
        self.device = None

    @property
    def launches(self) -> list[GpuLaunch]:
        """Every kernel launch of the program (in planning order)."""
        return self._planner.kernels

    # ---- compilation ---------------------------------------------------------------------
    @classmethod
    def compile(cls, fused_module: HloModule, emulated: bool, build_only: bool = False,
                arch: str = DEFAULT_ARCH) -> "GpuProgram":
        """Plan `fused_module`; unless `build_only`, build and load its kernels for the host
        emulation (`emulated`) or for the CUDA GPU of this machine."""
        prog = cls(fused_module, emulated, arch, lenient=build_only)
        if build_only:
            return prog
        if emulated:
            from ..emitters.gpu.target import EmulatedGpuTarget

            prog.device = HostDevice(prog.launches, emit_module(prog.launches, EmulatedGpuTarget(), fused_module.name))
        else:
            from numba import cuda

            if not cuda.is_available():
                raise UnsupportedError("no CUDA GPU is available on this machine; use the gpu-emulated backend")
            prog.device = CudaDevice(prog.launches, prog.ptx())
        return prog

    def ptx(self) -> str:
        """PTX of every kernel of the program (one module, for `arch`)."""
        if self._ptx is None:
            from ..emitters.gpu.target import GpuTarget, compile_ptx

            mod = emit_module(self.launches, GpuTarget(self.arch), self.module.name)
            self._nvptx_ir, self._ptx = compile_ptx(mod, self.arch)
        return self._ptx

    def llvm_ir(self) -> str:
        """Optimized NVPTX LLVM IR of the program (libdevice linked)."""
        self.ptx()
        return self._nvptx_ir

    def emulated_llvm_ir(self) -> str:
        """Optimized host LLVM IR of the emulated kernels (after compile(emulated=True))."""
        if not isinstance(self.device, HostDevice):
            raise RuntimeError("the program was not compiled for the emulation")
        return self.device.module.llvm_ir

    def validate(self, arch: str | None = None) -> bytes:
        """Assemble the PTX for `arch` (ptxas or nvJitLink); returns the cubin."""
        from ..emitters.gpu.ptxas import assemble

        return assemble(self.ptx(), arch or self.arch)

    # ---- execution -----------------------------------------------------------------------
    def run(self, args: list) -> list[np.ndarray]:
        """Run on numpy arrays (one per entry parameter); the entry result flattened."""
        if self.device is None:
            raise RuntimeError("the program was compiled with build_only=True; it cannot run")
        checked = check_arguments(self.module, args)
        self._resident: dict[int, object] = {}
        result = self._execute(self._entry, checked)
        self.device.synchronize()
        out = owned_outputs(result, checked, self.device.to_host)
        self._resident = {}
        return out

    def _host(self, value):
        if isinstance(value, tuple):
            return tuple(self._host(v) for v in value)
        return self.device.to_host(value)

    def _on_device(self, value):
        # Each host array is copied to the device once per run, however many kernels read it.
        if isinstance(value, tuple):
            return tuple(self._on_device(v) for v in value)
        if isinstance(value, np.ndarray):
            dev = self._resident.get(id(value))
            if dev is None:
                dev = self.device.to_device(value)
                self._resident[id(value)] = (dev, value)
                return dev
            return dev[0]
        return value

    def _library_operands(self, ops: list) -> list:
        """Library rules run on the host: operands come back from the device."""
        return [self._host(o) for o in ops]

    def _run_kernels(self, plan: ComputationPlan, i: int, step: Step, ops: list):
        """Run the launches of step `i` (emulated outputs in the host arena when planned so)."""
        dev = self.device
        inputs = flatten(self._on_device(tuple(ops)))
        outs = []
        emulated = isinstance(dev, HostDevice)
        for k, shape in enumerate(step.leaf_shapes):
            slot = plan.assignment.slots[(i, k)]
            if emulated and slot.offset is not None:
                outs.append(plan.arena_view(slot, shape))
            else:
                outs.append(dev.empty(shape.dims, shape.dtype.numpy))
        scratch: dict[int, list] = {}
        temps = [dev.empty(t.dims, t.dtype.numpy) for t in step.temps]
        where = {"in": [dev.pointer(x) for x in inputs], "out": [dev.pointer(o) for o in outs],
                 "tmp": [dev.pointer(t) for t in temps]}
        for launch in step.kernels:
            base = [where[kind][n] for kind, n in launch.inputs] + [where[kind][n] for kind, n in launch.results]
            extra = []
            if launch.scratch_types:
                bufs = scratch.get(id(launch.plan))
                if bufs is None:
                    bufs = [dev.empty((max(n, 1),), et.numpy) for et, n in launch.plan.scratch()]
                    scratch[id(launch.plan)] = bufs
                extra = [dev.pointer(x) for x in bufs]
            dev.launch(launch, base + extra)
        return unflatten(step.inst.shape, outs)


def launch_summary(program: GpuProgram) -> list[dict]:
    """One dict per launch (name, role, kind, grid, block, threads), for reports and tests."""
    rows = []
    for launch in program.launches:
        kind = getattr(launch.plan, "kind", "loop")
        rows.append({"name": launch.name, "role": launch.role, "kind": kind, "grid": launch.dims.grid,
                     "block": launch.dims.block, "threads": launch.dims.threads,
                     "atomic": bool(getattr(launch.plan, "atomic", False)) and kind != "per_output"})
    return rows
