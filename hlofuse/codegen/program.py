"""The compiled program: what codegen hands to the runtime.

A `Program` is a fused module compiled for one target: the schedule of every executed
computation (the planner's `ComputationPlan`s, each with its steps and buffer assignment),
every kernel in emission order, and the kernels' code. Each target extends it with its
code: host object bytes and LLVM IR on the CPU (codegen/cpu.py `CpuCode`), PTX or the
emulated kernels' LLVM module on the GPU (codegen/gpu.py `GpuCode`). The runtime loads the
code and runs the schedule (runtime/cpu_executor.py, runtime/gpu_executor.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..hlo.ir import HloModule
from .schedule import ComputationPlan, Planner


@dataclass(eq=False)
class Program:
    """A fused module's schedule and kernels for one target (code in subclasses)."""

    module: HloModule
    planner: Planner  # every executed computation's plan, and the kernels in emission order

    @property
    def entry(self) -> ComputationPlan:
        """The plan of the entry computation."""
        return self.planner.plan(self.module.entry)

    @property
    def kernels(self) -> list:
        """Every kernel of the program, in emission order (KernelPlans or GpuLaunches)."""
        return self.planner.kernels
