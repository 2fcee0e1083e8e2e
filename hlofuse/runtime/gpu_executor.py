"""The GPU executable: load the grid kernels codegen made for a fused module, on a CUDA GPU or
in the host emulation, and run them.

    program = GpuProgram.compile(fused_module, emulated=True)   # runs anywhere
    outputs = program.run([x, y])                                # entry result flattened
    program.ptx()                                                # every kernel, for sm_90

codegen/gpu.py plans the module into steps and grid launches (GpuLaunch) and emits PTX or
the emulated kernels; here they are loaded (each device keeps its kernels' functions by
launch name) and the steps run (runtime/program.py). Other ops
(dot, convolution, sort, while, ...) run on the host through the library rules
(runtime/library_ops.py, numpy). On a real GPU their operands are copied to the host and
their results back to the device when a kernel reads them; inputs are copied host->device
once per run (on first use), kernel results stay on the device, and each output leaf is
copied device->host once at the end.

The real-GPU path (CudaDevice: numba.cuda memory, cuda.core launches) is checked on a lent GPU
machine by scripts/gpu_device_check.sh (tests/runtime/test_gpu_device.py, the conformance files
and random graphs on target gpu); everywhere else the emulated path runs the same kernel bodies,
and every PTX is checked by ptxas in the tests.
"""
from __future__ import annotations

import os
import weakref
from dataclasses import dataclass

import numpy as np

from ..codegen.gpu import GpuCode, GpuLaunch, compile_gpu
from ..codegen.schedule import ComputationPlan, Step
from ..emitters.gpu.target import DEFAULT_ARCH
from ..hlo.errors import UnsupportedError
from ..hlo.ir import HloModule
from .io import check_arguments, contiguous
from .program import ProgramBase, flatten, owned_outputs, unflatten


class HostDevice:
    """The emulation: device memory is host memory, launches run on the CPU (gpu_emulator)."""

    def __init__(self, launches: list[GpuLaunch], module) -> None:
        """Load `module` (the emulated kernels, optimized: GpuCode.emulated_module) and bind
        every launch to its kernel."""
        from .gpu_emulator import EmulatedModule

        self.module = EmulatedModule(module)
        self.functions = {launch.name: self.module.function(launch.name, launch.pointer_count)
                          for launch in launches}

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

        run_grid(self.functions[launch.name], pointers, launch.dims.grid)

    def synchronize(self) -> None:
        """Nothing to wait for: emulated launches finish before they return."""


@dataclass
class DeviceBuffer:
    """Bytes on the GPU holding an array of `dims` and numpy `dtype` (kept as raw bytes so
    every element type, bf16 and pred included, moves the same way)."""

    data: object  # numba DeviceNDArray of uint8
    dims: tuple
    dtype: np.dtype


def kernel_arguments(pointers: list[int]) -> list[np.uint64]:
    """Device addresses as cuda.core's launch takes a pointer parameter: a 64-bit integer
    scalar (its argument packer refuses ctypes.c_void_p)."""
    return [np.uint64(p) for p in pointers]


# Assemble the kernels with ptxas at this -O level (0-3) instead of the driver's JIT (which
# assembles at its highest level). A workaround and a diagnosis for assembler bugs: CUDA 13.0's
# ptxas miscompiles some kernels at -O1 and above (docs/gpu_device.md, "Eighth run"), and the
# graph fuzzer reruns a real-GPU mismatch at 0 to tell such a case from hlofuse's own.
PTXAS_LEVEL_ENV = "HLOFUSE_PTXAS_LEVEL"


def ptxas_level() -> int | None:
    """The -O level `HLOFUSE_PTXAS_LEVEL` asks for, or None (the driver's JIT) when unset."""
    raw = os.environ.get(PTXAS_LEVEL_ENV, "").strip()
    if not raw:
        return None
    if raw not in ("0", "1", "2", "3"):
        raise UnsupportedError(f"{PTXAS_LEVEL_ENV}={raw!r}: expected 0, 1, 2 or 3 (ptxas's -O level)")
    return int(raw)


class CudaDevice:
    """A CUDA GPU through numba.cuda (memory, PTX loading) and cuda.core (launches)."""

    def __init__(self, launches: list[GpuLaunch], ptx: str) -> None:
        from cuda.core import Device
        from numba import cuda

        self.cuda = cuda
        context = cuda.current_context()  # numba makes the device's primary context current
        self.device = Device()
        level = ptxas_level()
        if level is None:
            self.module = context.create_module_ptx(ptx)
        else:
            from cuda.core import ObjectCode

            from ..emitters.gpu.ptxas import assemble

            major, minor = self.device.compute_capability
            cubin = assemble(ptx, f"sm_{major}{minor}", level)
            self.module = context.create_module_image(ObjectCode.from_cubin(cubin))
        self.device.set_current()  # the primary context numba made current
        self.functions = {launch.name: self.module.get_function(launch.name) for launch in launches}

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
        cu_launch(self.device.default_stream, config, self.functions[launch.name].kernel, *kernel_arguments(pointers))

    def synchronize(self) -> None:
        """Wait until every launch so far has finished."""
        self.cuda.synchronize()


class GpuProgram(ProgramBase):
    """A fused module compiled into grid kernels (`code`), run emulated on the host or on a GPU."""

    def __init__(self, code: GpuCode, emulated: bool) -> None:
        super().__init__(code)
        self.emulated = emulated
        self.arch = code.arch
        self.device = None
        self._host_interpreter = None

    @property
    def launches(self) -> list[GpuLaunch]:
        """Every kernel launch of the program (in planning order)."""
        return self.code.launches

    # ---- compilation ---------------------------------------------------------------------
    @classmethod
    def compile(cls, fused_module: HloModule, emulated: bool, build_only: bool = False,
                arch: str = DEFAULT_ARCH) -> "GpuProgram":
        """Plan `fused_module` (codegen/gpu.py); unless `build_only`, build and load its kernels
        for the host emulation (`emulated`) or for the CUDA GPU of this machine."""
        prog = cls(compile_gpu(fused_module, arch, lenient=build_only), emulated)
        if build_only:
            return prog
        if emulated:
            prog.device = HostDevice(prog.launches, prog.code.emulated_module())
        else:
            from numba import cuda

            if not cuda.is_available():
                raise UnsupportedError("no CUDA GPU is available on this machine; use the gpu-emulated backend")
            prog.device = CudaDevice(prog.launches, prog.ptx())
        return prog

    def ptx(self) -> str:
        """PTX of every kernel of the program (one module, for `arch`)."""
        return self.code.ptx()

    def llvm_ir(self) -> str:
        """Optimized NVPTX LLVM IR of the program (libdevice linked)."""
        return self.code.llvm_ir()

    def emulated_llvm_ir(self) -> str:
        """Optimized host LLVM IR of the emulated kernels (after compile(emulated=True))."""
        if not isinstance(self.device, HostDevice):
            raise RuntimeError("the program was not compiled for the emulation")
        return self.device.module.llvm_ir

    def validate(self, arch: str | None = None) -> bytes:
        """Assemble the PTX for `arch` (ptxas or nvJitLink); returns the cubin."""
        return self.code.validate(arch)

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

    def host_interpreter(self):
        """A host interpreter for the library rules' per-element calls (runtime/host_calls.py),
        keeping denormals as the program's kernels do. On a real GPU a called computation run
        through `call` is a kernel launch and a read-back, and a sort calls its comparator per
        comparison (minutes for XLA's TopK sorts on an H200). The emulation's `call` runs the
        emulated grid through its driver, about 0.25 ms a call: a stable sort of 4 x 8,732
        with a custom comparator took 2 minutes (XLA's stable sort expander test modules).
        Both take the host path, so the emulation runs what the real GPU runs."""
        if self.device is None:
            return None
        if self._host_interpreter is None:
            from ..emitters.gpu.target import EmulatedGpuTarget, GpuTarget
            from .interpreter import Interpreter

            target = EmulatedGpuTarget if isinstance(self.device, HostDevice) else GpuTarget
            denormals = "flush" if target.flushes_denormals else "keep"
            self._host_interpreter = Interpreter(self.module, denormals=denormals)
        return self._host_interpreter

    def host(self, value):
        """`value` with every device buffer copied to the host (tuples recurse)."""
        if isinstance(value, tuple):
            return tuple(self.host(v) for v in value)
        return self.device.to_host(value)

    def _on_device(self, value):
        """`value` on the device: each host array is copied once per run, however many kernels
        read it, and its copy is forgotten when the array dies. (The copies were kept, with
        their arrays, for the whole run: a while loop's state of every iteration stayed alive,
        and XLA's hlo_evaluator_test accumulation loop, thousands of iterations over two
        f32[1024,1024], took the emulation past the machine's memory.)"""
        if isinstance(value, tuple):
            return tuple(self._on_device(v) for v in value)
        if isinstance(value, np.ndarray):
            key = id(value)  # ndarrays are unhashable; the weak reference tells a reused id apart
            entry = self._resident.get(key)
            if entry is not None and entry[1]() is value:
                return value if entry[0] is None else entry[0]
            dev = self.device.to_device(value)
            # the emulation's device memory is the host array itself: no strong reference kept.
            # The weak reference's callback drops the entry when the array dies; at the end of
            # the run the whole dict goes, callbacks and all (a finalizer per array and run
            # would pile up on a long-lived input).
            resident = self._resident
            self._resident[key] = (None if dev is value else dev,
                                   weakref.ref(value, lambda _ref: resident.pop(key, None)))
            return dev
        return value

    def _library_operands(self, ops: list) -> list:
        """Library rules run on the host: operands come back from the device."""
        return [self.host(o) for o in ops]

    def _run_kernels(self, plan: ComputationPlan, i: int, step: Step, ops: list):
        """Run the launches of step `i` (emulated outputs in the host arena when planned so)."""
        dev = self.device
        inputs = flatten(self._on_device(tuple(ops)))
        outs = []
        emulated = isinstance(dev, HostDevice)
        for k, shape in enumerate(step.leaf_shapes):
            slot = plan.assignment.slots[(i, k)]
            if emulated and slot.offset is not None:
                outs.append(self.arena_view(plan, slot, shape))
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
                # by id(): a ReductionPlan is a mutable dataclass (unhashable); the step's
                # launches hold their plans for the whole loop, so the ids stay theirs
                bufs = scratch.get(id(launch.plan))
                if bufs is None:
                    bufs = [dev.empty((max(n, 1),), et.numpy) for et, n in launch.plan.scratch()]
                    scratch[id(launch.plan)] = bufs
                extra = [dev.pointer(x) for x in bufs]
            dev.launch(launch, base + extra)
        return unflatten(step.inst.shape, outs)
