"""`HloModule.clone()`'s structural deep copy (hlo/ir.py), apart from the IR classes: it is
given the computation and instruction classes, so this module does not import ir.py."""
from __future__ import annotations

from typing import Any

import numpy as np

from .users import Users


def _copy_literal(value: Any) -> Any:
    """A constant's value with its arrays copied (a tuple constant holds a tuple of values)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, tuple):
        return tuple(_copy_literal(v) for v in value)
    return value


def _remap_computations(value: Any, comps: dict, computation_cls: type) -> Any:
    """An attribute value with every computation in it replaced by its copy in `comps`."""
    if isinstance(value, computation_cls):
        return comps[value]
    if isinstance(value, (tuple, list)) and any(isinstance(v, computation_cls) for v in value):
        return type(value)(comps[v] if isinstance(v, computation_cls) else v for v in value)
    return value


def clone_module(module: Any, computation_cls: type, instruction_cls: type) -> Any:
    """A structural deep copy: computations in order, instructions with their operands and
    users in order, attributes (called computations remapped), literals, parameter numbers,
    shapes and layouts, control edges, fusion back-pointers, and the name pool (so the copy
    hands out the same new names as `module` would).

    Each copied instruction's `origin` is the instruction of `module` it copies (not
    that one's own origin): the compiler optimizes a clone of the user's module, and the
    fused result maps back to the user's instructions through it, even when the user's
    module was itself made by cloning (an importer that inlines a function at two call sites
    makes two instructions with one origin; their copies stay apart). The copy starts with
    no `fusion_log` (the log describes passes run on `module`'s objects)."""
    new = type(module)(module.name)
    new.attrs = dict(module.attrs)
    new.extra_sections = list(module.extra_sections)
    new._names = dict(module._names)
    new._next_suffix = dict(module._next_suffix)
    comps: dict[Any, Any] = {}
    insts: dict[Any, Any] = {}
    for comp in module.computations:
        c = comps[comp] = computation_cls(comp.name)
        c.parent = new
        c.is_entry = comp.is_entry
        c.execution_thread = comp.execution_thread
        for inst in comp.instructions:
            copy = insts[inst] = instruction_cls(inst.opcode, inst.shape, name=inst.name)
            copy.literal = _copy_literal(inst.literal)
            copy.parameter_number = inst.parameter_number
            copy.origin = inst
            copy.parent = c
            c.instructions.append(copy)
    users_of = Users.fromkeys  # (over a map: the quickest copy of the many short user sets)
    for comp, c in comps.items():
        c.root = insts[comp.root] if comp.root is not None else None
        if comp.fusion_instruction is not None:
            c.fusion_instruction = insts[comp.fusion_instruction]
        for inst in comp.instructions:
            copy = insts[inst]
            # operands and users in their own order: passes iterate over both
            copy.operands = [insts[o] for o in inst.operands]
            copy.users = users_of(map(insts.__getitem__, inst.users))
            copy.control_predecessors = [insts[p] for p in inst.control_predecessors]
            copy.attrs = {k: _remap_computations(v, comps, computation_cls) for k, v in inst.attrs.items()}
    new.computations = [comps[c] for c in module.computations]
    if module.entry is not None:
        new.entry = comps[module.entry]
    return new
