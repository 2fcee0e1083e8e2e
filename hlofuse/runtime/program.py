"""Running a compiled program's schedule: the step interpreter shared by the CPU and the GPU
executables, the host arenas of temporaries, and the conversions of a run's outputs.

codegen/schedule.py plans every executed computation into steps with a buffer assignment;
`ProgramBase._execute` walks those steps, running library rules (runtime/library_ops.py),
called computations and the backend's kernels (`_run_kernels`, runtime/cpu_executor.py and
runtime/gpu_executor.py).
"""
from __future__ import annotations

import numpy as np

from ..codegen.buffers import Slot
from ..codegen.program import Program
from ..codegen.schedule import ComputationPlan, Planner, Step
from ..hlo.errors import UnsupportedError
from ..hlo.ir import HloComputation, HloInstruction
from ..hlo.rule_loader import load_rules
from ..hlo.shapes import Shape


class ProgramBase:
    """The step interpreter shared by the executables, running the schedule of `code` (the
    compiled program codegen made; `self._planner` is its Planner).

    Library rules receive the program as their interpreter (`call`)."""

    def __init__(self, code: Program) -> None:
        self.code = code
        self.module = code.module
        self._planner: Planner = code.planner
        self._entry = code.entry
        self._arenas: dict[ComputationPlan, np.ndarray] = {}  # plan -> its host arena of temporaries

    def call(self, comp: HloComputation, args: list):
        """Run a called computation (while body, branch, comparator ...) on values `args`."""
        return self._execute(self._planner.plan(comp), args)

    def host(self, value):
        """`value` (an array or a tuple of them, as `call` returns) in host memory, for a
        library rule that computes on a called computation's result (a while condition, a sort
        comparator, a scatter combiner). Host programs' values already are."""
        return value

    def host_interpreter(self):
        """An interpreter (runtime/interpreter, this target's denormal semantics) for library
        rules to evaluate their per-element called computations on the host (runtime/
        host_calls.py), or None where `call` itself is cheap enough (host programs)."""
        return None

    def _run_library(self, inst: HloInstruction, operands: list):
        """Run one unfused instruction through its library rule."""
        rule = inst.info.library
        if rule is None:
            # A program read from the compile cache was planned in another process: this one
            # has not loaded the library rules yet (the Planner loads them, and a hit makes none).
            load_rules("library")
            rule = inst.info.library
            if rule is None:
                raise UnsupportedError(f"{inst.opcode} {inst.name} has no library rule to run it")
        return rule(inst, operands, self)

    def _library_operands(self, ops: list) -> list:
        """The operand values a library rule gets (host arrays)."""
        return ops

    def _run_kernels(self, plan: ComputationPlan, i: int, step: Step, ops: list):
        """Run the kernels of step `i` of `plan` on operand values `ops`; its value."""
        raise NotImplementedError

    def arena_view(self, plan: ComputationPlan, slot: Slot, shape: Shape) -> np.ndarray:
        """The bytes of `slot` (which has an offset) in `plan`'s host arena of temporaries (one
        per plan and program, allocated on first use) as an array of `shape`."""
        arena = self._arenas.get(plan)
        if arena is None:
            arena = self._arenas[plan] = np.empty(max(plan.assignment.arena_bytes, 1), np.uint8)
        view = arena[slot.offset:slot.offset + slot.nbytes].view(shape.dtype.numpy)
        return view.reshape(shape.dims)

    def _execute(self, plan: ComputationPlan, args: list):
        env: list = [None] * len(plan.steps)
        for i, step in enumerate(plan.steps):
            inst = step.inst
            ops = [env[j] for j in step.operand_steps]
            if step.kind == "param":
                env[i] = args[inst.parameter_number]
            elif step.kind == "const":
                env[i] = constant_value(inst)
            elif step.kind == "tuple":
                env[i] = tuple(ops)
            elif step.kind == "gte":
                env[i] = ops[0][int(inst.attrs["index"])]
            elif step.kind == "library":
                env[i] = self._run_library(inst, self._library_operands(ops))
            elif step.kind == "call":
                env[i] = self.call(inst.fused_computation, ops)
            elif step.kind == "unsupported":
                raise UnsupportedError(step.message)
            else:
                env[i] = self._run_kernels(plan, i, step, ops)
        return env[plan.root_step]


def constant_value(inst: HloInstruction) -> np.ndarray | tuple:
    """The value of constant instruction `inst` (an array of its shape, or its tuple literal)."""
    lit = inst.literal
    if lit is None:
        raise UnsupportedError(f"constant {inst.name} has an elided value ({{...}}); cannot run it")
    if inst.shape.is_tuple:
        return lit
    return np.asarray(lit, dtype=inst.shape.dtype.numpy).reshape(inst.shape.dims)


def flatten(value) -> list:
    """The array leaves of a value (nested tuples flattened depth-first)."""
    if isinstance(value, tuple):
        out = []
        for v in value:
            out.extend(flatten(v))
        return out
    return [value]


def unflatten(shape: Shape, leaves: list) -> object:
    """The value of `shape` whose leaves, depth-first, are `leaves`."""
    # No recursive closure here: its reference cycle would keep the output arrays alive
    # until the cyclic GC runs, defeating the output pool.
    return _build(shape, iter(leaves))


def _build(shape: Shape, it):
    if shape.is_tuple:
        return tuple(_build(e, it) for e in shape.elements)
    return next(it)


def owned_outputs(result, checked: list, to_host=None) -> list[np.ndarray]:
    """The leaves of `result` as arrays the caller owns: a leaf that is an input, a view or
    read-only is copied. `to_host` first brings a leaf to the host (GPU results)."""
    protected = {id(x) for x in flatten(tuple(checked))}  # by id(): ndarrays are unhashable
    out = []
    for leaf in flatten(result):
        leaf = np.asarray(leaf if to_host is None else to_host(leaf))
        if id(leaf) in protected or not leaf.flags.owndata or not leaf.flags.writeable:
            leaf = np.array(leaf, copy=True)
        out.append(leaf)
    return out
