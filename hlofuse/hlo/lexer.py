"""A position-based lexer for HLO text.

HLO's token set depends on context (`b01f_01io->b01f`, `1_1x2_2`, `[2,2]<=[4]` are single
values after the right `key=`), so instead of cutting the whole file into tokens up front the
lexer offers compiled regular expressions that the recursive-descent parser applies at the
current position, plus a scanner that finds the extent of a balanced attribute value. Comments
(`/* ... */`, `// ...`) count as whitespace everywhere outside string literals.
"""
from __future__ import annotations

import bisect
import re

from .errors import HloParseError

# Whitespace and comments; `/*index=5*/` and `/*i0=0*/` appear inside XLA's own output.
WS = re.compile(r"(?:\s+|/\*.*?\*/|//[^\n\r]*)*", re.S)
# An instruction or computation name, with or without its `%` sigil.
NAME = re.compile(r"%?([A-Za-z_][\w.\-]*)")
# A bare word: identifiers, opcodes, attribute keys (which may contain '-').
WORD = re.compile(r"[A-Za-z_][\w.\-]*")
INT = re.compile(r"[-+]?\d+")
# Unrolled loops ("normal* (special normal*)*") match in linear time even when they fail.
STRING_RE = r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
STRING = re.compile(STRING_RE, re.S)
# XLA's strings may also span lines (a module's `origin_recovery_table` holds whole modules);
# attribute values accept those, everything else keeps the one-line form for clearer errors.
STRING_MULTILINE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
# Array shape text: element type, dimensions, optional layout. Layout bodies never nest braces.
ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]\[]*)\](\{[^{}]*\})?")
# Characters that open/close a nesting level or start a string, for balanced scanning.
_SPECIAL = re.compile(r'[^{}\[\]()"/,\n]+')
_OPEN = {"{": "}", "[": "]", "(": ")"}
_CLOSE = {"}", "]", ")"}
# What to quote in "found X" messages: a word, a number, a string or one character.
_TOKEN_AT = re.compile(r'%?[\w.\-]+|"(?:[^"\\\n]|\\.)*"?|->|<=|\S')


class Lexer:
    """The HLO source text with a cursor, helpers to match at the cursor, and error reporting."""

    __slots__ = ("text", "pos", "filename", "_line_starts")

    def __init__(self, text: str, filename: str = "<string>") -> None:
        self.text = text
        self.pos = 0
        self.filename = filename
        self._line_starts: list[int] | None = None

    # ---- positions and errors -----------------------------------------------------------
    def location(self, pos: int) -> tuple[int, int, str]:
        """1-based (line, column) of offset `pos` and the text of that line."""
        if self._line_starts is None:
            self._line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        pos = max(0, min(pos, len(self.text)))
        line = bisect.bisect_right(self._line_starts, pos) - 1
        start = self._line_starts[line]
        end = self.text.find("\n", start)
        source_line = self.text[start:] if end < 0 else self.text[start:end]
        return line + 1, pos - start + 1, source_line

    def error(self, message: str, pos: int | None = None) -> HloParseError:
        """An HloParseError at `pos` (default: the cursor) to raise."""
        line, col, source = self.location(self.pos if pos is None else pos)
        return HloParseError(message, line, col, source, self.filename)

    def describe(self, pos: int | None = None) -> str:
        """The token at `pos` quoted for a message, or 'end of input'."""
        p = self.pos if pos is None else pos
        m = _TOKEN_AT.match(self.text, p)
        if m is None:
            return "end of input"
        tok = m.group()
        if len(tok) > 40:
            tok = tok[:37] + "..."
        return f"'{tok}'"

    def expected(self, what: str) -> HloParseError:
        """'expected X but found Y' at the cursor (after whitespace)."""
        self.skip_ws()
        if self.text.startswith("/*", self.pos):
            return self.error("unterminated comment: '/*' without '*/'")
        return self.error(f"expected {what} but found {self.describe()}")

    # ---- matching -----------------------------------------------------------------------
    def skip_ws(self) -> None:
        """Move past white space and comments."""
        self.pos = WS.match(self.text, self.pos).end()

    def at_end(self) -> bool:
        """Whether only white space and comments are left."""
        self.skip_ws()
        return self.pos >= len(self.text)

    def peek(self) -> str:
        """The next non-blank character ('' at the end)."""
        self.skip_ws()
        return self.text[self.pos : self.pos + 1]

    def accept(self, literal: str) -> bool:
        """Consume `literal` if it comes next (after whitespace)."""
        self.skip_ws()
        if self.text.startswith(literal, self.pos):
            self.pos += len(literal)
            return True
        return False

    def expect(self, literal: str) -> None:
        """Consume `literal` or raise 'expected ... but found ...'."""
        if not self.accept(literal):
            raise self.expected(f"'{literal}'")

    def match(self, pattern: re.Pattern) -> re.Match | None:
        """Match `pattern` after whitespace; advance past it on success."""
        self.skip_ws()
        m = pattern.match(self.text, self.pos)
        if m is not None:
            self.pos = m.end()
        return m

    def accept_keyword(self, word: str) -> bool:
        """Consume the bare word `word` if it comes next as a whole word."""
        self.skip_ws()
        m = WORD.match(self.text, self.pos)
        if m is not None and m.group() == word:
            self.pos = m.end()
            return True
        return False

    def name(self, what: str = "a name") -> tuple[str, int]:
        """A name with optional `%`; returns (name without %, its offset)."""
        self.skip_ws()
        start = self.pos
        m = NAME.match(self.text, start)
        if m is None:
            raise self.expected(what)
        self.pos = m.end()
        return m.group(1), start

    def integer(self, what: str = "an integer") -> int:
        """Read an integer, or fail saying `what` was expected."""
        m = self.match(INT)
        if m is None:
            raise self.expected(what)
        return int(m.group())

    def string(self) -> str:
        """A double-quoted string literal, returned with its quotes."""
        m = self.match(STRING)
        if m is None:
            raise self.expected("a string")
        return m.group()

    def scan_value(self) -> str:
        """The text of one attribute value: up to the next ',' or closing bracket at depth 0,
        or the end of the line, with brackets balanced, strings intact and comments dropped."""
        self.skip_ws()
        text = self.text
        start = pos = self.pos
        n = len(text)
        stack: list[str] = []
        pieces: list[str] = []
        piece_start = start
        while pos < n:
            m = _SPECIAL.match(text, pos)
            if m is not None:
                pos = m.end()
                if pos >= n:
                    break
            ch = text[pos]
            if ch == '"':
                s = STRING.match(text, pos) or STRING_MULTILINE.match(text, pos)
                if s is None:
                    raise self.error("unterminated string", pos)
                pos = s.end()
            elif ch in _OPEN:
                stack.append(_OPEN[ch])
                pos += 1
            elif ch in _CLOSE:
                if not stack:
                    break
                if stack.pop() != ch:
                    raise self.error(f"unbalanced '{ch}' in attribute value", pos)
                pos += 1
            elif ch == "/":
                c = WS.match(text, pos)
                if c.end() == pos:
                    if text.startswith("/*", pos):
                        raise self.error("unterminated comment: '/*' without '*/'", pos)
                    pos += 1
                elif stack:
                    # Comments inside a value are dropped (keeping one blank in their place),
                    # so the value prints back as plain text.
                    pieces.append(text[piece_start:pos].rstrip() + " ")
                    pos = piece_start = c.end()
                else:
                    break
            elif not stack:  # ',' or newline at depth 0 ends the value
                break
            else:
                pos += 1
        if stack:
            raise self.error(f"expected '{stack[-1]}' to close attribute value", pos)
        self.pos = pos
        value = ("".join(pieces) + text[piece_start:pos]).rstrip()
        if not value:
            raise self.error(f"expected an attribute value but found {self.describe(start)}", start)
        return value
