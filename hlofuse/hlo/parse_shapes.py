"""Shapes in HLO text: `f32[2,<=8,?]{2,1,0:T(8,128)S(1)}`, `token[]`, nested tuples.

Array shapes repeat a lot in a module, so each distinct text is decoded once and cached.
A missing layout gets XLA's default (row-major), as XLA's parser does.
"""
from __future__ import annotations

import re

from .dtypes import ELEMENT_TYPES
from .lexer import ARRAY_SHAPE, Lexer
from .shapes import TOKEN_SHAPE, UNBOUNDED, ArrayShape, Layout, Shape, TupleShape

_DIM = re.compile(r"(<=)?(\d+)$")
_BUFFER = re.compile(r"b\s*\(")  # XLA's buffer shape, `b(f32[32]{0})`
# Nesting limits. XLA accepts deeper tuples, but hlofuse's shapes, printer and passes recurse
# on tuple depth and its literals are numpy arrays (at most 64 dimensions); real modules nest
# tuples a few levels deep.
MAX_TUPLE_DEPTH = 64
MAX_RANK = 64
# Instructions written inside an operand list and computations written in place are read
# recursively; XLA's text nests them a level or two.
MAX_NESTING = 64
_LAYOUT = re.compile(r"\{\s*(\d+(?:\s*,\s*\d+)*)?\s*(?::([^{}]*))?\}$")


class ShapeReader:
    """Reads shapes from a Lexer, caching array shapes by their text."""

    def __init__(self, lex: Lexer) -> None:
        self.lex = lex
        self.cache: dict[str, Shape] = {}

    def cached(self, key: str, pos: int) -> Shape:
        """The array shape whose text `key` starts at offset `pos` (already matched)."""
        shape = self.cache.get(key)
        if shape is None:
            shape = self._array_shape(ARRAY_SHAPE.match(self.lex.text, pos), pos)
            self.cache[key] = shape
        return shape

    def parse(self) -> Shape:
        """The shape at the cursor: an array, `token[]` or a (nested) tuple.

        Iterative, so deep nesting costs no Python stack; tuples nested deeper than
        MAX_TUPLE_DEPTH are refused at the '(' that goes too deep (the IR, its printer and its
        passes walk shapes recursively)."""
        lex = self.lex
        text = lex.text
        stack: list[list[Shape]] = []  # the elements read so far of each open tuple
        while True:
            lex.skip_ws()
            pos = lex.pos
            if text.startswith("(", pos):
                if len(stack) == MAX_TUPLE_DEPTH:
                    raise lex.error(f"tuple shape nested more than {MAX_TUPLE_DEPTH} deep (hlofuse's limit)", pos)
                lex.pos = pos + 1
                stack.append([])
                if not lex.accept(")"):
                    continue
                shape: Shape = TupleShape(tuple(stack.pop()))
            else:
                shape = self._leaf(pos)
            # close every tuple that ends after this element
            while stack:
                stack[-1].append(shape)
                if lex.accept(")"):
                    shape = TupleShape(tuple(stack.pop()))
                    continue
                if not lex.accept(","):
                    raise lex.expected("',' or ')' in a tuple shape")
                break
            else:
                return shape

    def _leaf(self, pos: int) -> Shape:
        """The array (or token) shape at `pos`, or a clear error for what hlofuse cannot read."""
        lex = self.lex
        text = lex.text
        m = ARRAY_SHAPE.match(text, pos)
        if m is None:
            if _BUFFER.match(text, pos):
                raise lex.error("buffer shapes ('b(f32[32])': XLA's mutable buffer holding an array, for memory "
                                "pinning) are valid XLA but hlofuse's IR cannot represent them", pos)
            raise lex.expected("a shape")
        key = m.group()
        shape = self.cache.get(key)
        if shape is None:
            shape = self._array_shape(m, pos)
            self.cache[key] = shape
        lex.pos = m.end()
        return shape

    def _array_shape(self, m: re.Match, pos: int) -> Shape:
        lex = self.lex
        type_name, dims_text, layout_text = m.group(1), m.group(2), m.group(3)
        dtype = ELEMENT_TYPES.get(type_name)
        if dtype is None:
            raise lex.error(f"unknown element type '{type_name}'", pos)
        if type_name == "token":
            if dims_text.strip() or layout_text:
                raise lex.error("a token shape is written 'token[]'", pos)
            return TOKEN_SHAPE
        if dtype.kind == "opaque" and dims_text.strip():
            raise lex.error("an opaque shape is written 'opaque[]'", pos)
        dims: list[int] = []
        dynamic: list[bool] = []
        if dims_text.strip():
            for part in dims_text.split(","):
                part = part.strip()
                if part == "?":
                    dims.append(UNBOUNDED)
                    dynamic.append(True)
                    continue
                d = _DIM.match(part)
                if d is None:
                    raise lex.error(f"bad dimension '{part}' in shape '{m.group()}'", pos)
                dims.append(int(d.group(2)))
                dynamic.append(d.group(1) is not None)
        rank = len(dims)
        if rank > MAX_RANK:
            raise lex.error(f"shape '{type_name}[...]' has {rank} dimensions; hlofuse supports at most {MAX_RANK}", pos)
        if layout_text is None:
            layout = Layout.default(rank)
        else:
            lm = _LAYOUT.match(layout_text)
            if lm is None:
                raise lex.error(f"bad layout '{layout_text}' in shape '{m.group()}'", pos)
            order = tuple(int(x) for x in lm.group(1).split(",")) if lm.group(1) else ()
            if sorted(order) != list(range(rank)):
                raise lex.error(f"layout {layout_text} is not a permutation of the {rank} dimensions of "
                                f"'{m.group()}'", pos)
            # XLA prints tiles and the rest of the suffix without blanks: `T(2,*,128)`.
            layout = Layout(order, "".join((lm.group(2) or "").split()))
        return ArrayShape(dtype, tuple(dims), tuple(dynamic), layout)
