"""The host CPU as a Target, its LLVM target machine and the O3 pipeline (runtime/jit.py loads
the object code made with them into the process)."""
from __future__ import annotations

import functools

import llvmlite.binding as llvm

from ..target import Target


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
