"""The structural text of a planned kernel: what its machine code depends on, without names.

Two kernels with the same text compile to the same machine code (up to the function's name), so
codegen/cpu.py compiles each distinct text once per program (a training step's optimizer
updates of same-shaped parameters share one kernel) and caches object code per kernel text
(codegen/cache.py): a module changed in one place recompiles the kernels that changed.

The text holds everything the CPU kernel emitters read (codegen/kernels/cpu_*.py): every
instruction of the kernel's computation and of the computations it calls, numbered in list
order (opcode, shape with layout, operands by number, parameter number, literal, attributes
with called computations by number), the root, and the plan's fields the emitters take
(output leaves of a loop or custom kernel, the reduction group, stage, parts, scratch buffers). Names
are left out (the emitters use them only in messages and internal global names), and so are
attributes that do not change the code (metadata, backend_config, frontend_attributes,
sharding).
"""
from __future__ import annotations

import numpy as np

from ..hlo.ir import HloComputation, HloInstruction
from ..hlo.literals import format_literal
from ..hlo.parse_attributes import COMPUTATION_KEYS, COMPUTATION_LIST_KEYS, encode_attribute
from ..hlo.printer import shape_to_text
from .kernels.args import output_leaves
from .planning import KernelPlan

# Attributes that never change the code an emitter produces.
IGNORED_ATTRS = frozenset({"metadata", "backend_config", "frontend_attributes", "sharding", "statistics"})


class _Texts:
    """Numbered structural texts of computations (callees first, each once)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.number: dict[HloComputation, int] = {}
        self.index: dict[HloInstruction, int] = {}  # an instruction's number in its computation
        self.ref: dict[HloInstruction, str] = {}  # `c<computation>.<instruction>`

    def computation(self, comp: HloComputation) -> int:
        """The number of `comp`'s text, writing it (and its callees' first) if new. Iterative over
        calls nested in calls, so deep nesting needs no Python recursion."""
        stack = [comp]
        while stack:
            c = stack[-1]
            if c in self.number:
                stack.pop()
                continue
            callees = [x for x in _callees(c) if x not in self.number]
            if callees:
                stack.extend(callees)
                continue
            stack.pop()
            self._write(c)
        return self.number[comp]

    def _write(self, comp: HloComputation) -> None:
        index = self.index
        for n, inst in enumerate(comp.instructions):
            index[inst] = n
        number = len(self.number)
        out = [f"c{number} root={index[comp.root] if comp.root is not None else -1}"]
        for n, inst in enumerate(comp.instructions):
            out.append(self._instruction(n, inst))
            self.ref[inst] = f"c{number}.{n}"
        self.number[comp] = number
        self.lines.append("\n".join(out))

    def _instruction(self, n: int, inst: HloInstruction) -> str:
        ops = ",".join(str(self.index[o]) for o in inst.operands)
        attrs = []
        for key in sorted(inst.attrs):
            if key in IGNORED_ATTRS:
                continue
            value = inst.attrs[key]
            if key in COMPUTATION_LIST_KEYS:
                text = "{" + ",".join(f"c{self.number[c]}" for c in value) + "}"
            elif key in COMPUTATION_KEYS:
                text = f"c{self.number[value]}"
            else:
                text = encode_attribute(key, value)
            attrs.append(f"{key}={text}")
        head = f"{n} {shape_to_text(inst.shape)} {inst.opcode}({ops})"
        if inst.opcode == "parameter":
            head += f" p{inst.parameter_number}"
        if inst.literal is not None:
            head += " " + _literal_text(inst)
        return " ".join([head] + attrs)


def _callees(comp: HloComputation) -> list[HloComputation]:
    found: list[HloComputation] = []
    for inst in comp.instructions:
        for key, value in inst.attrs.items():
            if key in COMPUTATION_LIST_KEYS:
                found.extend(value)
            elif key in COMPUTATION_KEYS:
                found.append(value)
    return found


def _literal_text(inst: HloInstruction) -> str:
    """The literal exactly: its dtype, shape and bytes for an array, its HLO text otherwise."""
    lit = inst.literal
    if isinstance(lit, np.ndarray):
        return f"{lit.dtype.str}{list(lit.shape)}:{lit.tobytes().hex()}"
    return format_literal(lit, inst.shape)


def _free_hero(texts: _Texts, hero: HloInstruction) -> str:
    """A hero outside the kernel's computations (not expected): by its own computation's text."""
    if hero.parent is None:
        raise ValueError(f"reduction hero {hero.name} belongs to no computation")
    texts.computation(hero.parent)
    return texts.ref[hero]


def kernel_text(kernel: KernelPlan) -> str:
    """The structural text of `kernel` (equal texts: equal machine code, see the module doc)."""
    texts = _Texts()
    body = texts.computation(kernel.comp)
    plan = [f"kernel c{body} stage={kernel.stage} parts={kernel.parts} scratch={len(kernel.scratch)}"
            f" outputs={len(output_leaves(kernel.comp))}"]
    if kernel.custom is not None:
        # A custom emitter may write one output leaf of several (one in-place kernel per
        # dynamic-update-slice root): the leaves it writes are part of its code.
        plan.append(f"custom {kernel.custom} units={kernel.units} unit_elements={kernel.unit_elements}"
                    f" outputs={list(kernel.outputs)}")
    elif kernel.group is None:
        plan.append(f"loop {list(kernel.outputs)}")
    else:
        g = kernel.group
        heroes = ",".join(texts.ref[h] if h in texts.ref else _free_hero(texts, h) for h in g.heroes)
        # The column layout the emitter takes from the host's caches and registers as well as
        # from the shapes (ReductionGroup.block_columns, tiles_rows): a machine of another L3, or
        # a run with other budgets, has other code for the same computation.
        plan.append(f"reduce heroes={heroes} epilogue={list(g.epilogue)} extras={list(g.extras)}"
                    f" in_dims={list(g.in_dims)} rdims={list(g.rdims)}"
                    + ("" if g.is_row else f" block_columns={g.block_columns} tiles_rows={g.tiles_rows}"))
    return "\n".join(texts.lines + plan) + "\n"
