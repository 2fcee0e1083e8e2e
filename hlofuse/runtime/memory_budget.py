"""How much memory a run needs, said before anything is allocated.

A module whose shapes do not fit the machine (`f32[100000000000]`, or temporaries of 73 GiB)
would otherwise end in numpy's MemoryError deep inside a backend, or get the process killed.
`estimate_memory` counts what a backend will hold at once; `check_memory` compares it with
the memory the machine has available and raises ResourceError (exit 2 in the CLI) first.

The estimates are lower bounds, so that a module which fits is never refused:

- the compiled backends (cpu, gpu-emulated) read their buffer assignment: the arena of
  every executed computation (allocated once and kept), the temporaries between a step's
  kernels, and the values outside the arena (library ops and constants, which the step
  interpreter keeps until the computation returns);
- the interpreter keeps every value of the entry computation until it returns and then
  copies the results, so it needs at least the parameters, the results twice and its
  largest entry temporary (or, inside a called computation, that computation's largest value);
- the CUDA backend (gpu) holds the parameters and results on the host, and on the device
  those plus every kernel output of the entry computation.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..hlo.errors import ResourceError
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..hlo.shapes import Shape


@dataclass(frozen=True)
class Available:
    """Memory the machine can give a run, and where the number comes from."""

    bytes: int
    source: str


@dataclass
class MemoryEstimate:
    """What a run of a module on one backend holds at once (bytes, lower bounds)."""

    module: str
    backend: str
    parameters: int
    results: int
    temporaries: int
    temporaries_from: str  # how the temporaries were counted, for the message
    largest: str = ""  # the largest single array, e.g. "parameter p0 f32[100000000000] (372.5 GiB)"
    extras: list[tuple[str, int]] = field(default_factory=list)  # e.g. ("random inputs", n)
    purpose: str = ""  # what the memory is for; default "to run on the <backend> backend"

    @property
    def total(self) -> int:
        """Bytes needed at once."""
        return self.parameters + self.results + self.temporaries + sum(n for _, n in self.extras)

    def message(self, available: Available) -> str:
        """One paragraph: what the run needs, of which what, and what the machine has."""
        parts = [f"parameters {format_bytes(self.parameters)}", f"results {format_bytes(self.results)}",
                 f"temporaries {format_bytes(self.temporaries)} ({self.temporaries_from})"]
        parts += [f"{label} {format_bytes(n)}" for label, n in self.extras]
        largest = f"; the largest array is {self.largest}" if self.largest else ""
        purpose = self.purpose or f"to run on the {self.backend} backend"
        return (f"module {self.module} needs at least {format_bytes(self.total)} of memory {purpose} "
                f"({', '.join(parts)}){largest}, but this machine has "
                f"{format_bytes(available.bytes)} available ({available.source}). Nothing was allocated; "
                f"use smaller shapes or a machine with more memory.")


def format_bytes(n: int) -> str:
    """`n` bytes in binary units: '0 B', '512 B', '1.5 KiB', '372.5 GiB'."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def available_memory(meminfo: str = "/proc/meminfo") -> Available | None:
    """Memory available to a new allocation: MemAvailable of `meminfo` (free memory plus what
    the kernel can reclaim), else the free physical pages; None when neither is known."""
    try:
        with open(meminfo, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return Available(int(line.split()[1]) * 1024, f"MemAvailable in {meminfo}")
    except (OSError, ValueError, IndexError):
        pass
    try:
        pages, size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    if pages <= 0 or size <= 0:
        return None
    return Available(pages * size, "free physical pages from sysconf")


def check_memory(estimate: MemoryEstimate, available: Available | None = None) -> None:
    """ResourceError when `estimate` needs more than `available` (default: the machine's)."""
    available = available if available is not None else available_memory()
    if available is not None and estimate.total > available.bytes:
        raise ResourceError(estimate.message(available))


# ---- estimates --------------------------------------------------------------------------
def _nbytes(shape: Shape) -> int:
    return shape.byte_size()


def _describe(kind: str, inst: HloInstruction) -> str:
    return f"{kind} {inst.name} {inst.shape.to_text(False)} ({format_bytes(_nbytes(inst.shape))})"


def _result_instructions(comp: HloComputation) -> set[HloInstruction]:
    """The instructions whose values are the computation's result (through tuples)."""
    out: set[HloInstruction] = set()
    stack = [comp.root]
    while stack:
        inst = stack.pop()
        if inst in out:
            continue
        out.add(inst)
        if inst.opcode in ("tuple", "bitcast"):
            stack.extend(inst.operands)
    return out


def _is_value(inst: HloInstruction) -> bool:
    """Whether `inst` makes a new array (not a parameter, nor a regrouping of buffers)."""
    return inst.opcode != "parameter" and not inst.info.bookkeeping


def _base(module: HloModule) -> tuple[int, int, str, int]:
    """Bytes of the entry's parameters and result, and the largest of those arrays."""
    entry = module.entry
    params = sum(_nbytes(p.shape) for p in entry.parameters)
    results = _nbytes(entry.root.shape)
    largest, largest_bytes = "", 0
    for p in entry.parameters:
        if _nbytes(p.shape) > largest_bytes:
            largest, largest_bytes = _describe("parameter", p), _nbytes(p.shape)
    if results > largest_bytes:
        largest, largest_bytes = _describe("result", entry.root), results
    return params, results, largest, largest_bytes


def estimate_interpreter(module: HloModule) -> MemoryEstimate:
    """What the numpy interpreter needs at least to run `module` (see the module docstring)."""
    params, results, largest, largest_bytes = _base(module)
    entry = module.entry
    result_insts = _result_instructions(entry)
    entry_temp, nested = 0, 0
    for comp in module.computations_post_order():
        for inst in comp.instructions:
            if not _is_value(inst) or (comp is entry and inst in result_insts):
                continue
            n = _nbytes(inst.shape)
            if comp is entry:
                entry_temp = max(entry_temp, n)
            else:
                nested = max(nested, n)
            if n > largest_bytes:
                largest, largest_bytes = _describe("temporary", inst), n
    # evaluate() copies the results while the entry's values are still alive.
    temporaries = max(entry_temp + results, nested)
    return MemoryEstimate(module.name, "interpreter", params, results, temporaries,
                          "its largest temporary and the copy of the results", largest)


def _unplanned_bytes(plan, result_insts: set[HloInstruction]) -> int:
    """Bytes of the values of `plan` outside its arena that the step interpreter keeps until
    the computation returns: library results, constants, kernel outputs not in the arena
    (those in `result_insts`, the entry's results, are counted as results)."""
    total = 0
    for i, step in enumerate(plan.steps):
        if step.inst in result_insts:
            continue
        if step.kind in ("library", "const"):
            total += _nbytes(step.inst.shape)
        elif step.kind == "kernel":
            total += sum(plan.assignment.slots[(i, k)].nbytes for k in range(len(step.leaf_shapes))
                         if plan.assignment.slots[(i, k)].offset is None)
    return total


def estimate_program(module: HloModule, program, backend: str) -> MemoryEstimate:
    """What a compiled program (CpuProgram, or an emulated GpuProgram) needs at least, from
    its buffer assignment; `module` is the fused module it runs."""
    params, results, largest, largest_bytes = _base(module)
    planner = program._planner  # the plans and their buffer assignments (read only)
    entry_plan = planner.plan(module.entry)
    result_insts = _result_instructions(module.entry)
    plans = list(planner.plans.values())
    arenas = sum(p.assignment.arena_bytes for p in plans)
    step_temps = [sum(_nbytes(t) for t in s.temps) for p in plans for s in p.steps]
    # The CPU keeps each step's temporaries and the shared buffers from run to run; the
    # emulated GPU allocates a step's temporaries for that step only.
    persistent = backend == "cpu"
    temps = sum(step_temps) if persistent else max(step_temps, default=0)
    shared = sum(_nbytes(s) for s in getattr(planner, "shared", []))
    native = getattr(getattr(program, "code", None), "native", None)
    if persistent and native is not None:
        # The CPU's native driver (codegen/native_plan.py) keeps every value in an arena of
        # its computation, a table buffer or the caller's results.
        arenas = sum(p.arena_bytes for p in native.plans)
        entry_values = nested_values = 0
    else:
        entry_values = _unplanned_bytes(entry_plan, result_insts)
        nested_values = max((_unplanned_bytes(p, set()) for p in plans if p is not entry_plan), default=0)
    temporaries = arenas + temps + shared + entry_values + nested_values
    for p in plans:
        for s in p.steps:
            n = _nbytes(s.inst.shape)
            if s.kind in ("kernel", "library") and n > largest_bytes:
                largest, largest_bytes = _describe("instruction", s.inst), n
    return MemoryEstimate(module.name, backend, params, results, temporaries,
                          "the arenas of its buffer assignment and the values outside them", largest)


def estimate_gpu_device(module: HloModule, program) -> MemoryEstimate:
    """What the CUDA backend needs at least in device memory: the parameters, the results
    and every kernel output of the entry computation (kept until it returns)."""
    params, results, largest, _ = _base(module)
    planner = program._planner
    entry_plan = planner.plan(module.entry)
    result_insts = _result_instructions(module.entry)
    outputs = sum(sum(_nbytes(sh) for sh in s.leaf_shapes) for s in entry_plan.steps
                  if s.kind == "kernel" and s.inst not in result_insts)
    temps = max((sum(_nbytes(t) for t in s.temps) for p in planner.plans.values() for s in p.steps), default=0)
    return MemoryEstimate(module.name, "gpu", params, results, outputs + temps,
                          "the kernel outputs of the entry computation", largest,
                          purpose="on the CUDA device to run on the gpu backend")


def _device_available() -> Available | None:
    try:
        from numba import cuda

        free, _total = cuda.current_context().get_memory_info()
    except Exception:  # noqa: BLE001 - no usable device: the compile has already said so
        return None
    return Available(int(free), "free memory of the CUDA device")


def estimate_memory(module: HloModule, target: str, program=None) -> MemoryEstimate:
    """The host memory a run of `module` (the fused module) on `target` needs at least."""
    if target == "interpreter" or program is None:
        return estimate_interpreter(module)
    if target == "gpu":
        params, results, largest, _ = _base(module)
        return MemoryEstimate(module.name, target, params, results, 0,
                              "held on the device, checked separately", largest)
    return estimate_program(module, program, target)


def check_compiled(module: HloModule, target: str, program=None) -> MemoryEstimate:
    """Check that a run of `module` on `target` fits the machine (and the CUDA device for
    `gpu`); the host estimate, for callers that add to it (random inputs, a comparison)."""
    estimate = estimate_memory(module, target, program)
    check_memory(estimate)
    if target == "gpu" and program is not None:
        device = _device_available()
        if device is not None:
            check_memory(estimate_gpu_device(module, program), device)
    return estimate


def random_inputs_bytes(module: HloModule) -> int:
    """Scratch that generating seeded random inputs needs beyond the inputs themselves:
    numpy draws in 64 bits (two draws and a complex128 for complex types), one parameter at
    a time."""
    most = 0
    for p in module.entry.parameters:
        for leaf in p.shape.leaves():
            per = 32 if leaf.dtype.is_complex else 8
            most = max(most, leaf.element_count() * per)
    return most
