"""The host CPU as a Target, its LLVM target machine, the O3 pipeline and the JIT."""
from __future__ import annotations

import functools
import threading

import llvmlite.binding as llvm

from ..target import Target

_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _init() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.lru_cache(maxsize=None)
def host_target_machine() -> llvm.TargetMachine:
    """The target machine for this host CPU (its name and features), at O3 (shared; never
    give it to an execution engine, which takes ownership: use new_host_target_machine)."""
    return new_host_target_machine()


def new_host_target_machine() -> llvm.TargetMachine:
    """A fresh host target machine."""
    _init()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=3,
        reloc="default",
        codemodel="jitdefault",
    )


class CpuTarget(Target):
    """Host CPU: libm names for f64 math, atomicrmw for atomics, host triple and layout."""

    name = "cpu"

    def __init__(self) -> None:
        tm = host_target_machine()
        self.triple = llvm.get_process_triple()
        self.data_layout = str(tm.target_data)
        self.cpu_name = llvm.get_host_cpu_name()
        self.cpu_features = llvm.get_host_cpu_features().flatten()

    def fingerprint(self) -> str:
        """What compiled code depends on: triple, CPU name and features."""
        return f"{self.triple}|{self.cpu_name}|{self.cpu_features}"


def optimize(llmod: llvm.ModuleRef) -> None:
    """Run the new pass manager's O3 pipeline for the host on `llmod` in place."""
    tm = host_target_machine()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(llmod, pb)


class JitModule:
    """Machine code loaded in an MCJIT engine, from an optimized module or an object file."""

    def __init__(self, llmod: llvm.ModuleRef | None = None, object_code: bytes | None = None) -> None:
        from .libcalls import check_resolvable, register_builtins

        register_builtins()  # the builtins LLVM may call (half conversions) before any load
        if object_code is None:
            # Through an object file, so its external symbols can be checked like a cached one's.
            object_code = host_target_machine().emit_object(llmod)
        tm = new_host_target_machine()  # owned (and freed) by the engine
        with _lock:
            empty = llvm.parse_assembly("")
            empty.triple = llvm.get_process_triple()
            self.engine = llvm.create_mcjit_compiler(empty, tm)
            # After the engine exists (it makes the process's symbols searchable): MCJIT binds
            # an unknown symbol to address 0, so a missing one must fail here, not segfault.
            check_resolvable(object_code)
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
            self.engine.finalize_object()

    def address(self, name: str) -> int:
        """Address of the compiled function `name`."""
        addr = self.engine.get_function_address(name)
        if not addr:
            raise KeyError(f"no compiled function {name}")
        return addr
