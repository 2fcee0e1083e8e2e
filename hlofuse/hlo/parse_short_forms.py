"""XLA's short test syntax, read by the HLO parser: instructions whose shape is left out,
instructions nested in an operand list (`add(f32[2] parameter(0), negate(...))`, named
`<opcode>.anon`), and text that is a single instruction rather than a module, whose operands
become the parameters of an entry computation `_`.
"""
from __future__ import annotations

import re

from .ir import HloComputation, HloInstruction
from .lexer import NAME, WORD
from .parse_shapes import MAX_NESTING
from .shapes import Shape

# Where a shape starts: an array shape, or XLA's buffer shape `b(f32[32])` (which the shape
# reader refuses by name rather than leaving `b` to be read as an opcode).
SHAPE_START = re.compile(r"[a-z][a-z0-9]*\[|b\s*\(\s*[(a-z]")
# Text that is one instruction, not a module: `[ROOT] [%]name = ...` or `shape opcode(...)`.
LONE_INSTRUCTION = re.compile(r"\s*(?:ROOT\s|%?[A-Za-z_][\w.\-]*\s*=|[a-z][a-z0-9]*\[|\()")
NEVER = re.compile(r"(?!)")  # a pattern that matches nothing
# An operand written as an instruction of its own: `[shape] opcode(` (XLA's nested syntax).
NESTED_HEAD = re.compile(r"([a-z][a-z0-9\-]*)[ \t]*\(")


class Pending:
    """Names an instruction refers to, resolved when its computation is complete."""

    __slots__ = ("inst", "operands", "controls", "comp_refs")

    def __init__(self, inst, operands, controls, comp_refs) -> None:
        self.inst = inst
        self.operands = operands  # list of (name, offset)
        self.controls = controls  # list of (name, offset)
        self.comp_refs = comp_refs  # list of (key, ComputationRef)


class ShortForms:
    """Methods of the parser (hlo/parser.py `_Parser`) for the short forms; they use its lexer,
    shape reader, module and bookkeeping (`_nested`, `_params`, `_incomplete`, `_name_pos`)."""

    def _lone_instruction_computation(self) -> HloComputation:
        """XLA's parser also reads a single instruction, `[name =] shape opcode(shape [name], ...)`:
        each operand becomes a parameter of an entry computation `_` whose root the instruction is."""
        lex = self.lex
        text = lex.text
        comp = HloComputation("_")
        comp.parent = self.module
        self.module.computations.append(comp)
        self.module.reserve_name("_")
        self.computations["_"] = comp
        lex.accept_keyword("ROOT")
        lex.skip_ws()
        name, name_pos = "_", lex.pos
        if not (SHAPE_START.match(text, lex.pos) or text.startswith("(", lex.pos)):
            name, name_pos = lex.name("an instruction name")
            lex.expect("=")
        shape = self.shapes.parse()
        lex.skip_ws()
        op_pos = lex.pos
        w = WORD.match(text, op_pos)
        if w is None:
            raise lex.expected("an opcode")
        lex.pos = w.end()
        params: list[HloInstruction] = []
        fast_operand = self._fast_operand
        self._params, self._fast_operand = params, NEVER  # every operand becomes a parameter
        item, _, _ = self.parse_instruction((True, name, name_pos, shape, w.group(), op_pos))
        self._params, self._fast_operand = None, fast_operand
        if not lex.at_end():
            raise lex.expected("the end of the text after a single instruction")
        pending: list[Pending] = []
        by_name: dict[str, HloInstruction] = {}
        for nested in [Pending(p, [], [], []) for p in params] + self._nested + [item]:
            self._add_instruction(comp, nested, by_name, pending)
        self._nested.clear()
        comp.root = item.inst
        self._link(comp, pending, by_name)
        return comp

    def _single_op_parameter(self, shape: Shape | None) -> tuple[str, int]:
        """Operand `shape [name]` of a lone instruction: a new parameter (named `_<n>` if unnamed)."""
        lex = self.lex
        lex.skip_ws()
        pos = lex.pos
        if shape is None:
            raise lex.error("an operand of a single instruction needs its shape (it becomes a parameter)", pos)
        number = len(self._params)
        name = lex.name()[0] if NAME.match(lex.text, pos) else f"_{number}"
        param = HloInstruction("parameter", shape, name=name)
        param.parameter_number = number
        self._params.append(param)
        self._name_pos[param] = pos
        return name, pos

    def _optional_shape(self) -> Shape | None:
        """The shape at the cursor, or None where the text leaves it to be inferred."""
        lex = self.lex
        c = lex.peek()
        if c == "(" or SHAPE_START.match(lex.text, lex.pos):
            return self.shapes.parse()
        self._incomplete = True
        return None

    def _nested_instruction(self, shape: Shape | None, head: re.Match) -> tuple[str, int]:
        """An operand written as `[shape] opcode(operands)`: XLA names it `<opcode>.anon`."""
        lex = self.lex
        opcode, op_pos = head.group(1), head.start(1)
        if self._depth >= MAX_NESTING:
            raise lex.error(f"instructions written inside operand lists nest more than {MAX_NESTING} deep "
                            f"(hlofuse's limit)", op_pos)
        name = self.module.unique_name(opcode + ".anon")
        inst, info = self._new_instruction(opcode, op_pos, shape, name, op_pos)
        lex.pos = head.end()
        self._depth += 1
        try:
            operands = self._instruction_operands(inst, info, op_pos)
        finally:
            self._depth -= 1
        self._nested.append(self._finish(inst, operands, []))
        return name, op_pos

