"""A recursive-descent parser for XLA's HLO text.

Accepts what XLA prints before and after optimization and what its tests contain: the
`HloModule` header with attributes, the FileNames/FunctionNames/FileLocations/StackFrames
tables, computations with or without `%` sigils and signatures, operands with or without
inline shapes, every shape and layout form, constants of every element type, and every
attribute (structured ones decoded, unknown ones kept verbatim). Computations and
instructions may be used before they are defined. XLA's short test syntax is read too:
shapes left to infer, instructions nested in operand lists and a lone instruction instead
of a module (hlo/parse_short_forms.py). What XLA's parser checks beyond syntax (signatures,
async chains) and fills in (inferred shapes) is in hlo/parse_infer.py.
Every malformed input raises HloParseError with the line, column and source line of the
offending token.
"""
from __future__ import annotations

import gc
import re
from pathlib import Path

from .attributes import Raw, Window
from .errors import HloParseError
from .ir import HloComputation, HloInstruction, HloModule
from .lexer import STRING, STRING_RE, WORD, Lexer
from .literals import LiteralError, parse_literal
from .opcodes import OPS, VARIADIC
from .parse_attributes import (COMPUTATION_KEYS, COMPUTATION_LIST_KEYS, AttributeError_,
                               ComputationRef, decode_attribute)
from .parse_link import Linking
from .parse_infer import (ASYNC_OPCODES, build_async_computations, check_async_chains, check_signature,
                          complete_instructions)
from .parse_short_forms import LONE_INSTRUCTION, NESTED_HEAD, Pending, ShortForms
from .parse_shapes import MAX_NESTING, ShapeReader
from .shapes import Shape
from .source_locations import record as record_locations

_SECTION = re.compile(
    r"(FileNames|FunctionNames|FileLocations|StackFrames)[ \t]*(?:\n|$)((?:[ \t]*\d+[ \t][^\n]*(?:\n|$)|[ \t]*\n)*)"
)
_ATTR_KEY = re.compile(r"[A-Za-z_][\w\-]*")
_NAME_RE = r"(%?([A-Za-z_][\w.\-]*))"
_FAST_HEAD = re.compile(r"\s*(ROOT\s+)?" + _NAME_RE + r"[ \t]*=[ \t]*([a-z][a-z0-9]*\[[^\]\[]*\](?:\{[^{}]*\})?)"
                        r"[ \t]+([a-z][a-z0-9\-]*)\(")
_FAST_OPERAND = re.compile(r"[ \t]*(?:([a-z][a-z0-9]*\[[^\]\[]*\](?:\{[^{}]*\})?)[ \t]+)?" + _NAME_RE + r"[ \t]*([,)])")
_FAST_ATTR = re.compile(r"[ \t]*,[ \t]*([A-Za-z_][\w\-]*)[ \t]*=")
# A simple attribute value: a word, a string, or braces without nested braces or comments.
_FAST_VALUE = re.compile(r'[ \t]*([%\w.\-]+|\{[^{}"\n/]*(?:' + STRING_RE + r'[^{}"\n/]*)*\}|' + STRING_RE + ")"
                         r"(?=[ \t]*(?:,|\n|$))")
# A line break after which the attribute list does not go on (no ',' or comment comes next).
_LINE_END = re.compile(r"[ \t]*\n[ \t]*[^ \t\n,/]")
_ASYNC_SUGAR = re.compile(r"(.+)-(start|update|done)")
_NEXT_LINE = re.compile(r"\s*(\})?")


def parse_hlo(text: str, filename: str = "<string>") -> HloModule:
    """Parse HLO module text; raises HloParseError (with position) on any malformed input."""
    if "\r" in text:
        text = text.replace("\r\n", "\n")  # a lone '\r' (old Mac files) is a blank too
    # The parser allocates many long-lived objects and no cycles worth collecting: pausing
    # the cyclic garbage collector keeps it from rescanning the growing graph (about 2x faster).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    parser = _Parser(text, filename)
    try:
        return parser.parse_module()
    except HloParseError:
        raise
    except RecursionError:
        # A safety net: every construct that nests is limited (MAX_NESTING) or read iteratively.
        raise parser.lex.error("input nests too deeply", parser.lex.pos) from None
    finally:
        if gc_was_enabled:
            gc.enable()


def load_hlo_file(path) -> HloModule:
    """Read and parse an HLO text file."""
    p = Path(path)
    data = p.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        before = data[: e.start]
        line = before.count(b"\n") + 1
        column = e.start - (before.rfind(b"\n") + 1) + 1
        raise HloParseError("the file is not UTF-8 text", line, column, "", str(p)) from None
    return parse_hlo(text, str(p))


def _uniquify_instruction_names(module: HloModule) -> None:
    """Rename instructions whose name another computation already uses, as XLA's parser
    does (`x` in a second computation becomes `x.1`): names are scoped per computation in the
    text but unique per module in the IR, and passes rely on that when they create names.

    The entry computation keeps its names (they are the ones a user names on the command
    line and reads in reports); the others keep theirs in text order, as in XLA."""
    seen: set[str] = set()
    order = [module.entry] + [c for c in module.computations if c is not module.entry]
    for comp in order:
        for inst in comp.instructions:
            if inst.name in seen:
                module.release_name(inst.name)
                inst.name = module.unique_name(inst.name)
            seen.add(inst.name)


class _Parser(ShortForms, Linking):
    def __init__(self, text: str, filename: str) -> None:
        self.lex = Lexer(text, filename)
        self.shapes = ShapeReader(self.lex)
        self.computations: dict[str, HloComputation] = {}
        self.comp_refs: list[tuple[HloInstruction, str, ComputationRef]] = []
        self.module: HloModule | None = None
        self._name_pos: dict[HloInstruction, int] = {}  # instruction -> offset of its name, for errors
        self._async_starts: list[tuple[HloInstruction, str, int]] = []  # `op-start` shorthands
        self._async_ops: list[tuple[HloInstruction, str | None, int]] = []  # (op, shorthand's op, offset)
        self._nested: list[Pending] = []  # instructions written inside an operand list, in order
        self._incomplete = False  # a shape or a broadcast's dimensions are left to infer
        self._signatures: list[tuple[HloComputation, Shape, int]] = []
        self._params: list[HloInstruction] | None = None  # set while reading a lone instruction
        self._fast_operand = _FAST_OPERAND  # NEVER while reading a lone instruction's operands
        self._depth = 0  # computations and instructions written in place, open around the cursor

    # ---- module ---------------------------------------------------------------------------
    def parse_module(self) -> HloModule:
        lex = self.lex
        # Like XLA, accept bare computations without a header (XLA's tests use them); the
        # module is then called after its entry computation.
        has_header = lex.accept_keyword("HloModule")
        if not has_header and lex.at_end():
            raise lex.expected("'HloModule'")
        name = lex.name("a module name")[0] if has_header else ""
        if has_header:
            lex.accept(":")  # XLA's tests write `HloModule name:`
        module = self.module = HloModule(name)
        while has_header and lex.accept(","):
            key = self._attr_key()
            lex.expect("=")
            module.attrs[key] = Raw(lex.scan_value())
        entry = None
        if not has_header and LONE_INSTRUCTION.match(lex.text, lex.pos):
            entry = self._lone_instruction_computation()
        while not lex.at_end():
            m = _SECTION.match(lex.text, lex.pos)
            if m is not None:
                module.extra_sections.append(m.group(0).rstrip())
                lex.pos = m.end()
                continue
            comp, is_entry, pos = self.parse_computation()
            if is_entry:
                if entry is not None:
                    raise lex.error(f"second ENTRY computation '{comp.name}' (the first is '{entry.name}')", pos)
                entry = comp
        if not module.computations:
            raise lex.error("expected a computation but found end of input")
        self._resolve_computation_refs()
        error, name_pos = self.lex.error, lambda inst: self._name_pos.get(inst, 0)
        if self._incomplete:
            complete_instructions(module, error, name_pos)
        for comp, result, pos in self._signatures:
            check_signature(comp, result, pos, error)
        build_async_computations(module, self._async_starts, error)
        if self._async_ops:
            check_async_chains(self._async_ops, error)
        module.set_entry(entry if entry is not None else module.computations[-1])
        _uniquify_instruction_names(module)
        record_locations(module, self.lex, self._name_pos)  # for the verifier's errors
        if not has_header:
            module.name = "module_" + module.entry.name
        return module

    def _attr_key(self) -> str:
        m = self.lex.match(_ATTR_KEY)
        if m is None:
            raise self.lex.expected("an attribute name")
        return m.group()

    # ---- computations ---------------------------------------------------------------------
    def parse_computation(self) -> tuple[HloComputation, bool, int]:
        lex = self.lex
        is_entry = lex.accept_keyword("ENTRY")
        name, pos = lex.name("a computation name")
        if name in self.computations:
            raise lex.error(f"computation '{name}' is defined twice", pos)
        signature = self._signature() if lex.peek() == "(" else None
        lex.expect("{")
        comp = self._computation_body(name, pos)
        if signature is not None:
            self._signatures.append((comp, *signature))
        if lex.accept(","):
            if not lex.accept_keyword("execution_thread"):
                raise lex.expected("'execution_thread'")
            lex.expect("=")
            comp.execution_thread = lex.string()[1:-1]
        return comp, is_entry, pos

    def _computation_body(self, name: str, pos: int) -> HloComputation:
        """The instructions after a computation's `{` up to its `}`, linked."""
        lex = self.lex
        comp = HloComputation(name)
        module = self.module
        comp.parent = module
        module.computations.append(comp)
        module.reserve_name(name)
        self.computations[name] = comp
        pending: list[Pending] = []
        by_name: dict[str, HloInstruction] = {}
        root = None
        text = lex.text
        while True:
            m = _NEXT_LINE.match(text, lex.pos)
            lex.pos = m.end()
            if m.group(1) is not None:
                break
            if text.startswith("/", lex.pos):  # comments between instructions
                lex.skip_ws()
                if lex.accept("}"):
                    break
            if lex.pos >= len(text):
                raise lex.expected("'}' to close computation '" + name + "'")
            item, is_root, name_pos = self.parse_instruction()
            if self._nested:
                for nested in self._nested:  # operands written in place come first
                    self._add_instruction(comp, nested, by_name, pending)
                self._nested.clear()
            inst = item.inst
            if is_root:
                if root is not None:
                    raise lex.error(f"second ROOT '{inst.name}' in computation '{name}' (the first is "
                                    f"'{root.name}')", name_pos)
                root = inst
            # _add_instruction, inlined on this hot path
            if inst.name in by_name:
                raise lex.error(f"instruction '{inst.name}' is defined twice in computation '{name}'", name_pos)
            by_name[inst.name] = inst
            inst.parent = comp
            comp.instructions.append(inst)
            module.reserve_name(inst.name)
            pending.append(item)
        if not comp.instructions:
            raise lex.error(f"computation '{name}' has no instructions", pos)
        comp.root = root if root is not None else comp.instructions[-1]
        self._link(comp, pending, by_name)
        return comp

    def _add_instruction(self, comp: HloComputation, item: Pending, by_name: dict[str, HloInstruction],
                         pending: list[Pending]) -> None:
        inst = item.inst
        if inst.name in by_name:
            raise self.lex.error(f"instruction '{inst.name}' is defined twice in computation '{comp.name}'",
                                 self._name_pos.get(inst, 0))
        by_name[inst.name] = inst
        inst.parent = comp
        comp.instructions.append(inst)
        self.module.reserve_name(inst.name)
        pending.append(item)

    def _inline_computations(self, key: str):
        """XLA's canonical text writes called computations in place: `to_apply={ ... }` and
        `branch_computations={ {...}, {...} }`. Returns the computation(s) if the value at the
        cursor is written so, else None (the cursor does not move then)."""
        lex = self.lex
        text = lex.text
        lex.skip_ws()
        start = lex.pos
        if not text.startswith("{", start):
            return None
        if key in COMPUTATION_LIST_KEYS:
            lex.pos = start + 1
            if lex.peek() != "{":
                lex.pos = start
                return None
            comps = []
            while True:
                comps.append(self._inline_computation())
                if lex.accept("}"):
                    return tuple(comps)
                if not lex.accept(","):
                    raise lex.expected("',' or '}'")
        return self._inline_computation()

    def _inline_computation(self) -> HloComputation:
        lex = self.lex
        lex.skip_ws()
        pos = lex.pos
        lex.expect("{")
        # The callee is ordinary text: its operands are not a lone instruction's parameters, and
        # instructions nested in the caller's operands stay the caller's.
        if self._depth >= MAX_NESTING:
            raise lex.error(f"computations written in place nest more than {MAX_NESTING} deep (hlofuse's limit)", pos)
        params, self._params = self._params, None
        nested, self._nested = self._nested, []
        fast, self._fast_operand = self._fast_operand, _FAST_OPERAND
        name = self.module.unique_name("_")  # XLA calls them "_"
        self.module.release_name(name)  # _computation_body takes it
        self._depth += 1
        try:
            return self._computation_body(name, pos)
        finally:
            self._depth -= 1
            self._params, self._nested, self._fast_operand = params, nested, fast

    def _signature(self) -> tuple[Shape, int]:
        """`(p: shape, ...) -> shape`: the result shape and its offset. The parameters' shapes
        are read (they must parse) and not kept: as XLA's parser, only the result is checked
        against the body (parse_infer.check_signature)."""
        lex = self.lex
        lex.expect("(")
        if not lex.accept(")"):
            while True:
                lex.name("a parameter name")
                lex.expect(":")
                self.shapes.parse()
                if lex.accept(")"):
                    break
                lex.expect(",")
        lex.expect("->")
        lex.skip_ws()
        result_pos = lex.pos
        return self.shapes.parse(), result_pos

    # ---- instructions ---------------------------------------------------------------------
    def parse_instruction(self, head: tuple | None = None) -> tuple[Pending, bool, int]:
        """One instruction; `head` (is_root, name, name_pos, shape, opcode, op_pos) when the
        caller has read everything up to the opcode already."""
        lex = self.lex
        text = lex.text
        # Fast path for the common line head `[ROOT ]%name = f32[..]{..} opcode(`; anything
        # else (tuple shapes, comments) takes the general path, which accepts a superset.
        m = _FAST_HEAD.match(text, lex.pos) if head is None else None
        if head is not None:
            is_root, name, name_pos, shape, opcode, op_pos = head
        elif m is not None:
            is_root = m.group(1) is not None
            name, name_pos = m.group(3), m.start(2)
            shape = self.shapes.cached(m.group(4), m.start(4))
            opcode, op_pos = m.group(5), m.start(5)
            lex.pos = m.end()
        else:
            is_root = lex.accept_keyword("ROOT")
            name, name_pos = lex.name("an instruction name")
            lex.expect("=")
            shape = self._optional_shape()
            lex.skip_ws()
            op_pos = lex.pos
            w = WORD.match(text, op_pos)
            if w is None:
                raise lex.expected("an opcode")
            opcode = w.group()
            lex.pos = w.end()
        inst, info = self._new_instruction(opcode, op_pos, shape, name, name_pos)
        if m is None:
            lex.expect("(")
        operands = self._instruction_operands(inst, info, op_pos)
        attrs: list[tuple[str, int, str, int]] = []
        while True:
            a = _FAST_ATTR.match(text, lex.pos)
            if a is not None:
                key, key_pos = a.group(1), a.start(1)
                lex.pos = a.end()
            elif _LINE_END.match(text, lex.pos) is not None:
                break  # the usual end of an instruction: the next line starts something else
            elif lex.accept(","):
                lex.skip_ws()
                key_pos = lex.pos
                key = self._attr_key()
                lex.expect("=")
            else:
                break
            if key in COMPUTATION_KEYS:
                value_pos = lex.pos
                inline = self._inline_computations(key)
                if inline is not None:
                    attrs.append((key, key_pos, inline, value_pos))
                    continue
            v = _FAST_VALUE.match(text, lex.pos)
            if v is not None:
                raw, value_pos = v.group(1), v.start(1)
                lex.pos = v.end()
            else:
                lex.skip_ws()
                value_pos = lex.pos
                raw = lex.scan_value()
            attrs.append((key, key_pos, raw, value_pos))
        return self._finish(inst, operands, attrs), is_root, name_pos

    def _new_instruction(self, opcode: str, op_pos: int, shape: Shape, name: str, name_pos: int):
        info = OPS.get(opcode)
        wrapped = None
        if info is None:
            # XLA's shorthand for an async pair around one op: `custom-call-start(...)`,
            # `custom-call-update(...)`, `custom-call-done(...)`.
            sugar = _ASYNC_SUGAR.fullmatch(opcode)
            if sugar is None or sugar.group(1) not in OPS:
                raise self.lex.error(f"unknown opcode '{opcode}'", op_pos)
            wrapped = sugar.group(1)
            opcode = "async-" + sugar.group(2)
            info = OPS[opcode]
        inst = HloInstruction(opcode, shape, (), None, name)
        self._name_pos[inst] = name_pos
        if opcode in ASYNC_OPCODES:
            self._async_ops.append((inst, wrapped, op_pos))
            if wrapped is not None and opcode == "async-start":
                self._async_starts.append((inst, wrapped, op_pos))
        return inst, info

    def _instruction_operands(self, inst: HloInstruction, info, op_pos: int) -> list[tuple]:
        """What follows `opcode(`: a constant's literal, a parameter's number or the operand list."""
        operands: list[tuple] = []
        if inst.opcode == "constant":
            self._constant(inst)
        elif inst.opcode == "parameter":
            self._parameter_number(inst)
        else:
            self._operands(operands)
        self._check_arity(inst, info, len(operands), op_pos)
        return operands

    def _check_arity(self, inst: HloInstruction, info, count: int, op_pos: int) -> None:
        if inst.opcode in ("constant", "parameter") or info.arity == VARIADIC or count == info.arity:
            return
        raise self.lex.error(f"'{inst.opcode}' takes {info.arity} operand{'s' if info.arity != 1 else ''} but "
                             f"'{inst.name}' has {count}", op_pos)

    def _finish(self, inst: HloInstruction, operands, attr_items) -> Pending:
        """Decode the attributes (key, key offset, value text, value offset) of `inst`."""
        lex = self.lex
        controls: list[tuple[str, int]] = []
        comp_refs: list[tuple[str, ComputationRef]] = []
        attrs = inst.attrs
        for key, key_pos, raw, value_pos in attr_items:
            if key in attrs or (key == "control-predecessors" and controls):
                raise lex.error(f"attribute '{key}' is given twice on '{inst.name}'", key_pos)
            if key == "control-predecessors":
                controls = self._name_list(raw, value_pos, key)
                continue
            if not isinstance(raw, str):  # computations written in place
                attrs[key] = raw
                if key == "calls" and inst.opcode == "fusion":
                    raw.fusion_instruction = inst
                continue
            try:
                value = decode_attribute(key, raw, value_pos, inst.opcode)
            except AttributeError_ as e:
                raise lex.error(f"{e} (on '{inst.name}')", value_pos + e.offset) from None
            if isinstance(value, ComputationRef):
                comp_refs.append((key, value))
                value = None  # placeholder keeping the attribute's place; resolved at the end
            attrs[key] = value
        if inst.opcode == "broadcast" and "dimensions" not in attrs:
            self._incomplete = True  # XLA fills in dimensions={} for a scalar operand
        if inst.opcode in ("reduce-window", "select-and-scatter") and "window" not in attrs:
            attrs["window"] = Window(())  # as XLA's parser: no window is the empty one (a rank-0 operand's)
        return Pending(inst, operands, controls, comp_refs)

    def _operands(self, operands: list[tuple]) -> None:
        """Operands up to the closing ')', each `[shape] [%]name`; appends (name, offset)."""
        lex = self.lex
        text = lex.text
        first = True
        fast = self._fast_operand
        while True:
            m = fast.match(text, lex.pos)
            if m is not None:
                # (name, offset, declared shape text or None, its offset), checked in _link
                operands.append((m.group(3), m.start(2), m.group(1), m.start(1)))
                lex.pos = m.end()
                if m.group(4) == ")":
                    return
                first = False
                continue
            if first and lex.accept(")"):
                return
            first = False
            shape = self._optional_shape()
            lex.skip_ws()
            nested = NESTED_HEAD.match(text, lex.pos)
            if nested is not None:
                operands.append(self._nested_instruction(shape, nested) + (None, 0))
            elif self._params is not None:  # operands of a lone instruction become parameters
                operands.append(self._single_op_parameter(shape) + (None, 0))
            else:
                operands.append(lex.name("an operand name") + (shape, 0))
            if lex.accept(")"):
                return
            if not lex.accept(","):
                raise lex.expected("',' or ')'")

    def _parameter_number(self, inst: HloInstruction) -> None:
        """`N)` of `parameter(N)`."""
        lex = self.lex
        n = inst.parameter_number = lex.integer("a parameter number")
        if n < 0:
            raise lex.error(f"parameter number must be >= 0 but '{inst.name}' has {n}", lex.pos - len(str(n)))
        lex.expect(")")

    def _name_list(self, raw: str, offset: int, key: str) -> list[tuple[str, int]]:
        if not (raw.startswith("{") and raw.endswith("}")):
            raise self.lex.error(f"attribute '{key}' expects {{%a, %b}}", offset)
        out = []
        for m in re.finditer(r"[^,{}\s]+", raw[1:-1]):
            word = m.group()
            if word.startswith("%"):
                word = word[1:]
            if not WORD.fullmatch(word):
                raise self.lex.error(f"'{m.group()}' in {key} is not an instruction name", offset + m.start() + 1)
            out.append((word, offset + m.start() + 1))
        return out

    def _constant(self, inst: HloInstruction) -> None:
        lex = self.lex
        lex.skip_ws()
        start = lex.pos
        if inst.shape is None:
            raise lex.error(f"the shape of constant '{inst.name}' must be written out", start)
        text = lex.text
        depth = 1
        pos = start
        # The literal ends at the ')' that closes `constant(`.
        scan = re.compile(r'[^()"]*')
        while True:
            pos = scan.match(text, pos).end()
            if pos >= len(text):
                raise lex.error(f"expected ')' to close the literal of '{inst.name}'", start)
            ch = text[pos]
            if ch == '"':
                s = STRING.match(text, pos)
                if s is None:
                    raise lex.error("unterminated string", pos)
                pos = s.end()
                continue
            depth += 1 if ch == "(" else -1
            if depth == 0:
                break
            pos += 1
        literal_text = text[start:pos]
        lex.pos = pos + 1
        try:
            inst.literal = parse_literal(literal_text, inst.shape)
        except LiteralError as e:
            raise lex.error(f"bad literal for '{inst.name}': {e}", start + e.offset) from None
