"""Canonical HLO text in XLA's style.

    HloModule name, entry_computation_layout={...}, ...

    %callee (p: f32[2]) -> f32[2] {
      %p = f32[2]{0} parameter(0)
      ROOT %n = f32[2]{0} negate(f32[2]{0} %p), metadata={...}
    }

    ENTRY %main ...

Callees come before callers; attributes come in XLA's order; values the compiler does not
interpret (metadata, backend_config, sharding ...) print back as they were read (less comments).
`parse_hlo(module_to_text(m))` prints byte-identically, and XLA's parser accepts the text.
"""
from __future__ import annotations

import re

import numpy as np

# The printer reads hlo.ir's objects (HloModule, HloComputation, HloInstruction) by their
# attributes and does not import hlo.ir: ir's to_text() methods call it, so the dependency goes
# one way (the annotations below name those classes; they are never evaluated).
from .literals import format_literal
from .parse_attributes import attribute_rank, encode_attribute
from .shapes import ArrayShape, Shape, TupleShape

_LAYOUT_KEY = "entry_computation_layout"
_REMEMBERED_LITERAL_SIZE = 16  # elements: larger literals print once each anyway
_HEADER_FIRST = ("is_scheduled", _LAYOUT_KEY)


def shape_to_text(shape: Shape, with_layout: bool = True) -> str:
    """A shape as XLA prints it: scalars without `{}`, `/*index=5*/` every five tuple elements."""
    if isinstance(shape, ArrayShape):
        return shape.to_text(with_layout)
    if isinstance(shape, TupleShape):
        parts = []
        for i, e in enumerate(shape.elements):
            prefix = f"/*index={i}*/" if i and i % 5 == 0 else ""
            parts.append(prefix + shape_to_text(e, with_layout))
        return "(" + ", ".join(parts) + ")"
    return shape.to_text(with_layout)


def _operands_text(inst: HloInstruction, operand_shapes: bool, shape_texts: _ShapeTexts | None = None) -> str:
    opcode = inst.opcode
    if opcode == "parameter":
        return str(inst.parameter_number)
    if opcode == "constant":
        if shape_texts is None:
            return format_literal(inst.literal, inst.shape)
        return shape_texts.literal(inst.literal, inst.shape)
    ops = inst.operands
    if not operand_shapes and len(ops) <= 5:  # most instructions: no `/*index=5*/` comment
        return ", ".join(["%" + op.name for op in ops])
    parts = []
    for i, op in enumerate(ops):
        prefix = f"/*index={i}*/" if i and i % 5 == 0 else ""
        if operand_shapes:
            parts.append(f"{prefix}{_shape_text(op.shape, shape_texts)} %{op.name}")
        else:
            parts.append(f"{prefix}%{op.name}")
    return ", ".join(parts)


def _shape_text(shape: Shape, shape_texts: dict | None) -> str:
    """`shape_to_text(shape)`, remembered in `shape_texts` (see `_ShapeTexts`)."""
    if shape_texts is None:
        return shape_to_text(shape)
    text = shape_texts.get(id(shape))
    return text if text is not None else shape_texts.remember(shape)


class _ShapeTexts(dict):
    """One printing's memo of shape texts by the shape object's id: the parser and the passes
    share shape objects, so a module's thousands of instructions hold a few of them, and a
    lookup by id costs less than hashing the shape. It keeps every shape it saw alive, so an id
    cannot be reused for another shape while it lives. Small literals' texts too (`literal`)."""

    def __init__(self) -> None:
        super().__init__()
        self._shapes: list[Shape] = []
        self._literals: dict[tuple, str] = {}

    def remember(self, shape: Shape) -> str:
        """The text of `shape` (not yet remembered), remembered."""
        self._shapes.append(shape)
        text = self[id(shape)] = shape_to_text(shape)
        return text

    def literal(self, value, shape: Shape) -> str:
        """`format_literal(value, shape)`, remembered for small arrays: modules repeat their
        scalar constants (zeros, ones, -inf), and each costs several numpy calls to print. The
        text depends on the shape's type and dimensions (its text) and on the array's values
        (its type, dimensions and bytes)."""
        if type(value) is not np.ndarray or value.size > _REMEMBERED_LITERAL_SIZE:
            return format_literal(value, shape)
        key = (self.get(id(shape)) or self.remember(shape), value.dtype.str, value.shape, value.tobytes())
        text = self._literals.get(key)
        if text is None:
            text = self._literals[key] = format_literal(value, shape)
        return text


def instruction_to_text(inst: HloInstruction, operand_shapes: bool = True) -> str:
    """One instruction line without indentation: `[ROOT ]%name = shape opcode(operands), attrs`."""
    return _instruction_line(inst, inst.is_root(), operand_shapes, None)


def _instruction_line(inst: HloInstruction, is_root: bool, operand_shapes: bool,
                      shape_texts: _ShapeTexts | None) -> str:
    """`instruction_to_text` with the root known and a shape memo (`_ShapeTexts`): the module's
    printing calls it for every instruction (the module cache's key prints the module on every
    compile), so the common lines, one or two operands by name and no attribute or control
    edge, take no detour."""
    ops = inst.operands
    n = len(ops)
    if operand_shapes or not n:
        operands = _operands_text(inst, operand_shapes, shape_texts)
    elif n == 1:
        operands = "%" + ops[0].name
    elif n == 2:
        operands = f"%{ops[0].name}, %{ops[1].name}"
    else:
        operands = _operands_text(inst, operand_shapes, shape_texts)
    if shape_texts is None:
        shape = shape_to_text(inst.shape)
    else:
        shape = shape_texts.get(id(inst.shape)) or shape_texts.remember(inst.shape)
    head = f"{'ROOT ' if is_root else ''}%{inst.name} = {shape} {inst.opcode}({operands})"
    attrs = inst.attrs
    control = inst.control_predecessors
    if not attrs and not control:
        return head
    if control:
        attrs = {**attrs, "control-predecessors": None}
    keys = sorted(attrs, key=attribute_rank) if len(attrs) > 1 else attrs
    parts = [head]
    for key in keys:
        if key == "control-predecessors":
            value = "{" + ", ".join("%" + p.name for p in control) + "}"
        else:
            value = encode_attribute(key, attrs[key])
        parts.append(f"{key}={value}")
    return ", ".join(parts)


def computation_signature(comp: HloComputation) -> str:
    """`(p0: f32[2], p1: s32[]) -> f32[2]` (shapes without layouts, as XLA prints them)."""
    params = ", ".join(f"{p.name}: {shape_to_text(p.shape, False)}" for p in comp.parameters)
    result = shape_to_text(comp.root.shape, False) if comp.root is not None else "()"
    return f"({params}) -> {result}"


def computation_to_text(comp: HloComputation, operand_shapes: bool = True,
                        shape_texts: _ShapeTexts | None = None) -> str:
    """A computation block: header line, two-space indented instructions, closing brace.
    `shape_texts`: a shape memo shared by the computations of one printing."""
    entry = "ENTRY " if comp.is_entry else ""
    lines = [f"{entry}%{comp.name} {computation_signature(comp)} {{"]
    root = comp.root
    memo = _ShapeTexts() if shape_texts is None else shape_texts
    for inst in comp.instructions:
        lines.append("  " + _instruction_line(inst, inst is root, operand_shapes, memo))
    close = "}"
    if comp.execution_thread is not None:
        close += f', execution_thread="{comp.execution_thread}"'
    lines.append(close)
    return "\n".join(lines)


def entry_computation_layout(module: HloModule) -> str:
    """`{(param shapes)->result shape}` of the entry computation, with layouts."""
    entry = module.entry
    params = ", ".join(shape_to_text(p.shape) for p in entry.parameters)
    return "{(" + params + ")->" + shape_to_text(entry.root.shape) + "}"


def _header(module: HloModule) -> str:
    attrs = dict(module.attrs)
    if module.entry is not None and module.entry.root is not None:
        current = entry_computation_layout(module)
        old = attrs.get(_LAYOUT_KEY)
        # Keep a layout read from the text only where it says more than the entry signature
        # (other layouts for the same shapes); print the canonical form otherwise.
        if old is None or _canon(str(old), False) != _canon(current, False) or _canon(str(old)) == _canon(current):
            attrs[_LAYOUT_KEY] = current
    keys = [k for k in _HEADER_FIRST if k in attrs] + [k for k in attrs if k not in _HEADER_FIRST]
    return ", ".join([f"HloModule {module.name}"] + [f"{k}={attrs[k]}" for k in keys])


def _canon(text: str, layouts: bool = True) -> str:
    """`text` without comments and blanks (and without layouts unless `layouts`)."""
    text = re.sub(r"/\*.*?\*/", "", text)
    if not layouts:
        text = re.sub(r"\]\{[^{}]*\}", "]", text)
    return "".join(text.split())


def module_to_text(module: HloModule, operand_shapes: bool = True) -> str:
    """The whole module as canonical HLO text (ends with a newline)."""
    out = [_header(module), ""]
    for section in module.extra_sections:
        out.append(section)
        out.append("")
    if module.extra_sections:
        out.append("")
    shape_texts = _ShapeTexts()
    blocks = [computation_to_text(c, operand_shapes, shape_texts) for c in module.computations_post_order()]
    out.append("\n\n".join(blocks))
    return "\n".join(out) + "\n"
