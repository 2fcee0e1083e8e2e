"""Running a CPU program through its native driver (codegen/driver.py): one call into compiled
code per run.

    driver = NativeDriver(code, jit, python_program)
    outputs = driver.run(checked_args)            # fresh arrays, one per result leaf
    table = driver.profile(checked_args, runs=10) # per-step seconds (hlofuse run --profile)

What the driver reads is set up once, when the program loads: the table of program-lifetime
buffers (constants, the arenas of every computation, kernel temporaries, shared buffers) and the
kernels' addresses. A run passes the parameters' addresses and fresh output arrays (recycled
when the caller has dropped them, runtime/output_pool.py) and calls the entry function; results
are never views of internal buffers. Library ops with no native code yet call back into Python
(`_callback`): the op's library rule runs on views of the driver's buffers and its result is
copied into the step's outputs. A Python exception there is kept, the driver returns a nonzero
status, and `run` raises it.
"""
from __future__ import annotations

import ctypes
import time

import numpy as np

from ..codegen.driver import CONFIG, PROFILE, RESERVED
from ..codegen.native_plan import NativeProgram, NativeStep, leaves
from ..hlo.errors import UnsupportedError
from .cpu_threads import IdleThreads, idle_cores_rule, kernel_threads, set_blas_threads, track
from .io import data_address
from .output_pool import OutputPool
from .program import constant_value, flatten, unflatten

_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p))
_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_ALIGN = 64


def _aligned(nbytes: int) -> np.ndarray:
    """A 64-byte aligned uint8 buffer of `nbytes` (at least 1)."""
    raw = np.empty(max(nbytes, 1) + _ALIGN, np.uint8)
    start = -raw.ctypes.data % _ALIGN
    return raw[start:start + max(nbytes, 1)]


def view(address: int, shape) -> np.ndarray:
    """The array leaf `shape` at `address` (no copy)."""
    dtype = shape.dtype.numpy
    dims = tuple(shape.dims)
    n = shape.element_count() * dtype.itemsize
    if n == 0 or not address:
        return np.empty(dims, dtype)
    buf = (ctypes.c_uint8 * n).from_address(address)
    return np.frombuffer(buf, np.uint8).view(dtype).reshape(dims)


class NativeDriver:
    """The loaded driver of one CPU program: its table, entry function and callbacks.

    `python` is the program's step interpreter (runtime/cpu_executor.py CpuProgram), which
    library rules receive to run the computations they call (a sort's comparator ...)."""

    def __init__(self, native: NativeProgram, entry_address: int, kernel_addresses: dict[str, int], python) -> None:
        self.native = native
        self.python = python
        self.module = python.module
        self.threads = kernel_threads()
        set_blas_threads(self.threads)
        self._entry = _ENTRY(entry_address)
        self._callback = _CALLBACK(self._run_callback)  # kept alive: compiled code calls it
        self._error: BaseException | None = None
        self._keep: list = []
        self._config = (ctypes.c_int64 * 2)(self.threads, self.threads)  # codegen/driver.py CONFIG
        # the threads of each call: the idle cores of the moment where the user asked for it
        # (HLOFUSE_IDLE_CORES=1; runtime/cpu_threads.py IdleThreads), else the process's count
        self._idle = IdleThreads(self.threads) if idle_cores_rule() else None
        track(self)
        self._kernel_addresses = kernel_addresses
        self._table = (ctypes.c_void_p * (RESERVED + len(native.table)))()
        self._table[CONFIG] = ctypes.addressof(self._config)
        self._table[1] = ctypes.cast(self._callback, ctypes.c_void_p).value
        self._table[PROFILE] = None
        self._allocated = False
        plan = native.entry
        self._params = (ctypes.c_void_p * max(len(plan.param_shapes), 1))()
        self._results = (ctypes.c_void_p * max(len(plan.result_shapes), 1))()
        self._out_specs = [(tuple(s.dims), s.dtype.numpy) for s in plan.result_shapes]
        self._outputs = OutputPool()
        entry_params = native.entry.comp.parameters
        self._tuple_params = any(p.shape.is_tuple or p.shape.is_token for p in entry_params)
        # (dtype, dims) per entry parameter, for the fast argument check
        self._param_specs = None if self._tuple_params else [(p.shape.dtype.numpy, tuple(p.shape.dims))
                                                             for p in sorted(entry_params, key=lambda p: p.parameter_number)]
        self._table_address = ctypes.addressof(self._table)
        self._params_address = ctypes.addressof(self._params)
        self._results_address = ctypes.addressof(self._results)

    def _allocate(self) -> None:
        """Fill the table with the program's buffers (on the first run, so compiling a program
        allocates nothing: the memory check runs between the two)."""
        native, table = self.native, self._table
        planner = native.planner
        for n, entry in enumerate(native.table):
            if entry.kind == "kernel":
                table[RESERVED + n] = self._kernel_addresses[entry.payload]
                continue
            if entry.kind == "const":
                inst, leaf = entry.payload
                arr = np.ascontiguousarray(flatten(constant_value(inst))[leaf],
                                           dtype=leaves(inst.shape)[leaf].dtype.numpy)
            elif entry.kind == "arena":
                arr = _aligned(entry.payload.arena_bytes)
            elif entry.kind == "temp":
                arr = np.empty(entry.payload.dims, entry.payload.dtype.numpy)
            elif entry.kind == "shared":
                s = planner.shared[entry.payload]
                arr = np.empty(s.dims, s.dtype.numpy)
            else:
                raise AssertionError(f"unknown driver table entry {entry.kind}")
            self._keep.append(arr)
            table[RESERVED + n] = arr.ctypes.data if arr.size else None
        self._allocated = True

    def serial(self) -> None:
        """Run every kernel on the calling thread from now on (in a forked child)."""
        self.pin_threads(1)

    def pin_threads(self, n: int) -> None:
        """Run kernels on up to `n` threads from now on, whatever the machine's load (as
        `HLOFUSE_CPU_THREADS` does for every program)."""
        self.threads = n
        self._config[0] = self._config[1] = n
        self._idle = None

    # ---- running ---------------------------------------------------------------------------
    def fast_checked(self, args: list) -> list | None:
        """`args` when each is already a C-contiguous array of its parameter's dtype and shape
        (the common case, checked in a few comparisons), else None: then the full check
        (runtime/io.py check_arguments) converts or refuses them."""
        specs = self._param_specs
        if specs is None or len(args) != len(specs):
            return None
        for a, (dtype, dims) in zip(args, specs):
            if type(a) is not np.ndarray or a.dtype != dtype or a.shape != dims or not a.flags.c_contiguous:
                return None
        return args

    def run(self, args: list[np.ndarray]) -> list[np.ndarray]:
        """Run the entry computation on checked arguments; its result leaves, freshly owned."""
        if not self._allocated:
            self._allocate()
        if self._idle is not None:
            self._config[0] = self._idle()
        params = self._params
        for k, a in enumerate(flatten(tuple(args)) if self._tuple_params else args):
            params[k] = data_address(a) if a.size else None
        outs = [self._outputs.empty(dims, dt) for dims, dt in self._out_specs]
        results = self._results
        for j, o in enumerate(outs):
            results[j] = data_address(o) if o.size else None
        self._error = None
        status = self._entry(self._table_address, self._params_address, self._results_address)
        if status:
            error, self._error = self._error, None
            if error is None:
                raise RuntimeError(f"the native driver failed with status {status} (a bug in hlofuse)")
            raise error
        return outs

    def profile(self, args: list[np.ndarray], runs: int) -> tuple[list[NativeStep], np.ndarray, np.ndarray, float]:
        """Run `runs` times with the per-step timers on: the steps, their seconds and call
        counts summed over the runs, and the wall seconds of the runs."""
        counters = np.zeros(2 * max(len(self.native.steps), 1), np.int64)
        self._table[PROFILE] = counters.ctypes.data
        try:
            c0, t0 = _cycles(), time.perf_counter()
            for _ in range(runs):
                self.run(args)
            c1, t1 = _cycles(), time.perf_counter()
        finally:
            self._table[PROFILE] = None
        per_cycle = (t1 - t0) / max(c1 - c0, 1)
        return self.native.steps, counters[0::2] * per_cycle, counters[1::2], t1 - t0

    # ---- callbacks ---------------------------------------------------------------------------
    def _run_callback(self, step_id: int, ptrs) -> int:
        try:
            self._callback_step(self.native.steps[step_id], ptrs)
            return 0
        except BaseException as e:  # noqa: BLE001 - kept and raised by run()
            self._error = e
            return 1

    def _callback_step(self, ns: NativeStep, ptrs) -> None:
        step = ns.step
        if step.kind == "unsupported":
            raise UnsupportedError(step.message)
        n_in = len(ns.ins)
        in_views = [view(ptrs[k] or 0, s) for k, s in enumerate(ns.in_shapes)]
        it = iter(in_views)
        operands = [unflatten(op.shape, [next(it) for _ in leaves(op.shape)]) for op in step.inst.operands]
        result = self.python._run_library(step.inst, operands)
        for k, (value, shape) in enumerate(zip(flatten(result), ns.out_shapes)):
            out = view(ptrs[n_in + k] or 0, shape)
            if out.size:
                np.copyto(out, np.asarray(value, dtype=out.dtype).reshape(out.shape))


def _cycles() -> int:
    """The time-stamp counter (what llvm.readcyclecounter reads), through a tiny compiled function."""
    global _rdtsc
    if _rdtsc is None:
        import llvmlite.binding as llvm
        from llvmlite import ir

        from ..emitters.cpu.target import new_host_target_machine

        m = ir.Module(name="hlofuse_cycles")
        m.triple = llvm.get_process_triple()
        i64 = ir.IntType(64)
        f = ir.Function(m, ir.FunctionType(i64, []), "hlofuse_cycles")
        b = ir.IRBuilder(f.append_basic_block("entry"))
        b.ret(b.call(ir.Function(m, ir.FunctionType(i64, []), "llvm.readcyclecounter"), []))
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(m)), new_host_target_machine())
        engine.finalize_object()
        _rdtsc = (engine, ctypes.CFUNCTYPE(ctypes.c_int64)(engine.get_function_address("hlofuse_cycles")))
    return _rdtsc[1]()


_rdtsc = None
