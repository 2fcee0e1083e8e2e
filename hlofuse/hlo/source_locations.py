"""Where each instruction of a parsed module was written, so that an error found after parsing
(the verifier's: a shape that does not fit its operands) can point at the source as a syntax
error does: `file:line:col: error: ...`, the line, a caret under the instruction's name.

The parser records its lexer and the offset of every instruction's name (`record`); the table
is held weakly per module object, so it costs nothing once the module is gone, never travels
with a clone or a pickled module (a pass's output has no source), and is not part of the IR.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

from .errors import VerifierError

_TABLES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@dataclass
class _Table:
    lexer: object  # the parser's Lexer: its text, file name and line index
    offsets: dict  # HloInstruction -> offset of its name in the text


# Texts longer than this are not kept for locating errors (the table holds the text as long as
# the module lives: a module of huge literals would keep twice its size).
MAX_KEPT_TEXT = 64 << 20


def record(module, lexer, offsets: dict) -> None:
    """Remember where `module`'s instructions were written (`offsets`: instruction -> offset of
    its name in `lexer`'s text), unless the text is over MAX_KEPT_TEXT."""
    if len(lexer.text) <= MAX_KEPT_TEXT:
        _TABLES[module] = _Table(lexer, offsets)


class LocatedVerifierError(VerifierError):
    """A verifier error at an instruction of parsed text: the file, line and column of its
    name, the source line and a caret, then the verifier's message."""

    def __init__(self, error: VerifierError, filename: str, line: int, column: int, source_line: str) -> None:
        self.filename, self.line, self.column, self.source_line = filename, line, column, source_line
        self.instruction, self.computation = error.instruction, error.computation
        caret = " " * max(column - 1, 0) + "^"
        Exception.__init__(self, f"{filename}:{line}:{column}: error: {error}\n{source_line}\n{caret}")


def located(module, error: VerifierError) -> VerifierError:
    """`error` pointing at its instruction's place in the text `module` was parsed from, or
    `error` itself where that is unknown (a module built in Python or by a pass)."""
    table = _TABLES.get(module)
    if table is None or error.instruction is None or isinstance(error, LocatedVerifierError):
        return error
    try:
        comps = [module.computation(error.computation)] if error.computation else module.computations
    except KeyError:
        return error
    for comp in comps:
        try:
            inst = comp.instruction(error.instruction)
        except KeyError:
            continue
        if inst in table.offsets:
            line, column, source_line = table.lexer.location(table.offsets[inst])
            return LocatedVerifierError(error, table.lexer.filename, line, column, source_line)
    return error
