"""Locations' metadata read from the text a module was parsed from, not printed by MLIR.

An op's metadata (`op_name`, `source_file`, `source_line`: stablehlo.location_metadata) comes
from its printed location. JAX's locations are call-site chains: printed, haiku's ResNet-18
training step's 1,417 distinct locations are 2.9 MB of text, 41 ms of a first import (the
conversion of all its 3,391 ops takes about as long), BERT's 320 locations 13.5 ms, more than
parsing its HLO text. The text JAX writes holds each location once, as an alias
(`#loc12 = loc("jit(f)/sin"(#loc7))`), nested ones by reference. So, for text with aliases,
each named alias is parsed once more by MLIR, as the location of an argument of a function
in a small module of its own (`%a3: i1 loc(#loc12)`: MLIR uniques locations, so that location
is the attribute an op of the real module with `loc(#loc12)` has), and what the metadata needs
of its printed form (its name, the first file location of its expansion) is read from the
alias table, following references, instead of printed. Anything this cannot read is left to
printing.
"""
from __future__ import annotations

import re
from typing import Callable

# a line defining an alias (searched in "\n" + text: the literal start makes the search skip
# ahead, where `^` tried every position, 40% slower)
_ALIAS_DEF = re.compile(r"\n#loc(\d*) = loc\((.*)\)$", re.M)
# a definition that names (an op's location: the only kind with metadata, location_metadata)
_NAMED = re.compile(r'^"[^"]*"[()]')
# a quoted string (a file location's when `:line:col` follows), or a reference to an alias
_FILE_TOKEN = re.compile(r'("([^"]*)"(?::(\d+):(\d+))?)|(#loc\d*)')


def read_location_metadata(text: str, cache: dict,
                           metadata_of: Callable[[str, str | None, str | None], object]) -> int:
    """Add `metadata_of(name, file, line)` (stablehlo.named_metadata: a named location's name
    and its first file location, as MLIR's printing of it gives them; file and line None when
    it has none) to `cache` (location attribute -> metadata) for
    every named location alias `text` defines that `cache` does not hold (other locations have
    no metadata; an op with one is looked up the slow way); MLIR's context must be entered (the
    one the module of `text` was parsed in). Returns how many were added."""
    from jaxlib.mlir import ir

    defs = {m.group(1): m.group(2) for m in _ALIAS_DEF.finditer("\n" + text)}
    named = [n for n, body in defs.items() if _NAMED.match(body)]
    if not named:
        return 0
    # The named locations as those of a function's arguments: an argument costs MLIR's parser
    # less than an op (declarations, one per location, took 2.5x as long to parse and read).
    args = ", ".join(f"%a{i}: i1 loc(#loc{n})" for i, n in enumerate(named))
    aliases = "\n".join(f"#loc{n} = loc({body})" for n, body in defs.items())
    try:
        module = ir.Module.parse("module {\n  func.func private @hlofuse_locations(" + args
                                 + ") {\n    return\n  }\n}\n" + aliases + "\n")
    except Exception:  # noqa: BLE001 - not what JAX writes: the locations are printed instead
        return 0
    arguments = module.body.operations[0].regions[0].blocks[0].arguments
    found: dict[str, tuple | None] = {}  # alias -> its first file location, memoized (_first_file)
    added = 0
    for n, arg in zip(named, arguments):
        attr = arg.location.attr
        if attr in cache:
            continue
        parts = _named_parts(n, defs, found)
        if parts is not None:
            cache[attr] = metadata_of(*parts)
            added += 1
    return added


def _named_parts(name: str, defs: dict[str, str], found: dict) -> tuple[str, str | None, str | None] | None:
    """(op name, file, line) of named alias `name` as MLIR's printing of it gives them
    (stablehlo.location_metadata): its name, and the first file location of its expansion
    (None, None when it has none). The expansion itself (every reference replaced by its
    definition: JAX's call-site chains repeat their tails, the printed text grows with their
    depth) is never built. None when a string involved holds a backslash (an escape) or starts
    with `:`, whose reading in the printed text this does not reproduce: such a location is
    printed."""
    m = _NAMED.match(defs[name])
    if m is None:  # no name, or one with an escaped quote
        return None
    op_name = m.group(0)[1:-2]
    if "\\" in op_name or op_name.startswith(":"):
        return None
    first = _first_file(name, defs, found)
    if first is _UNREADABLE:
        return None
    if first is None:
        return op_name, None, None
    return op_name, first[0], first[1]


_UNREADABLE = ("",)  # _first_file of an expansion this cannot read


def _first_file(name: str, defs: dict[str, str], found: dict) -> tuple | None:
    """The first file location `(file, line, col)` in alias `name`'s expansion (what
    `_FILE_LOC` finds first in the printed location), None if it has none, _UNREADABLE if it
    refers to an alias the text does not define, to itself, or holds a string this does not
    read (see _named_parts). Memoized in `found`; an explicit stack (chains are as deep as
    calls go)."""
    stack, entered = [name], set()
    while stack:
        k = stack[-1]
        if k in found:
            stack.pop()
            continue
        body = defs.get(k)
        if body is None or "\\" in body:
            found[k] = _UNREADABLE
            stack.pop()
            continue
        tokens = _FILE_TOKEN.findall(body)
        missing = [ref for _, _, _, _, ref in tokens if ref and ref[4:] not in found]
        if missing:
            if k in entered:
                return _UNREADABLE  # its references were read, yet some are missing: a cycle
            entered.add(k)
            for ref in missing:
                if ref[4:] in entered:
                    return _UNREADABLE  # a cycle: MLIR would not have parsed it
                stack.append(ref[4:])
            continue
        result = None
        for _, string, line, col, ref in tokens:
            if ref:
                result = found[ref[4:]]
            elif string.startswith(":"):
                result = _UNREADABLE
            elif line:
                result = (string, line, col)
            if result is not None:
                break
        found[k] = result
        stack.pop()
    return found[name]
