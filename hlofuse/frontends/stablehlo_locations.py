"""Locations' metadata read from the text a module was parsed from, not printed by MLIR.

An op's metadata (`op_name`, `source_file`, `source_line`: stablehlo.location_metadata) comes
from its printed location. JAX's locations are call-site chains: printed, haiku's ResNet-18
training step's 1,417 distinct locations are 2.9 MB of text, 41 ms of a first import (the
conversion of all its 3,391 ops takes about as long), BERT's 320 locations 13.5 ms, more than
parsing its HLO text. The text JAX writes holds each location once, as an alias
(`#loc12 = loc("jit(f)/sin"(#loc7))`), nested ones by reference. So, for text with aliases,
each alias is parsed once by MLIR, as the location of a declaration in a small module of its
own (`func.func private @hlofuse_loc_3() loc(#loc12)`: MLIR uniques locations, so that
location is the attribute an op of the real module with `loc(#loc12)` has), and its printed
form is rebuilt from the alias table (each reference replaced by its definition, as MLIR's
printer expands it) instead of printed. Anything this cannot read is left to printing.
"""
from __future__ import annotations

import re
from typing import Callable

_ALIAS_DEF = re.compile(r"^#loc(\d*) = loc\((.*)\)$", re.M)
# a definition that names (an op's location: the only kind with metadata, location_metadata)
_NAMED = re.compile(r'^"[^"]*"[()]')
# a quoted string (kept as it is), or a reference to an alias
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|#loc(\d*)')


def read_location_metadata(text: str, cache: dict, metadata_of: Callable[[str], object]) -> int:
    """Add `metadata_of(printed location)` to `cache` (location attribute -> metadata) for
    every named location alias `text` defines that `cache` does not hold (other locations have
    no metadata; an op with one is looked up the slow way); MLIR's context must be entered (the
    one the module of `text` was parsed in). Returns how many were added."""
    from jaxlib.mlir import ir

    defs = {m.group(1): m.group(2) for m in _ALIAS_DEF.finditer(text)}
    named = [n for n, body in defs.items() if _NAMED.match(body)]
    if not named:
        return 0
    decls = "".join(f"  func.func private @hlofuse_loc_{i}() loc(#loc{n})\n" for i, n in enumerate(named))
    aliases = "\n".join(f"#loc{n} = loc({body})" for n, body in defs.items())
    try:
        module = ir.Module.parse("module {\n" + decls + "}\n" + aliases + "\n")
    except Exception:  # noqa: BLE001 - not what JAX writes: the locations are printed instead
        return 0
    pieces: dict[str, list] = {}
    expanded: dict[str, str] = {}
    added = 0
    for n, op in zip(named, module.body.operations):
        attr = op.operation.location.attr
        if attr in cache:
            continue
        body = _expand(n, defs, pieces, expanded)
        if body is not None:
            cache[attr] = metadata_of("loc(" + body + ")")
            added += 1
    return added


def _pieces(body: str) -> list:
    """`body` split into literal text (str) and references to aliases (1-tuples of names)."""
    if "#loc" not in body:
        return [body]
    out: list = []
    last = 0
    for m in _TOKEN.finditer(body):
        if m.group(1) is not None:
            out.append(body[last:m.start()])
            out.append((m.group(1),))
            last = m.end()
    out.append(body[last:])
    return out


def _expand(name: str, defs: dict[str, str], pieces: dict[str, list], done: dict[str, str]) -> str | None:
    """Alias `name`'s definition with every reference replaced by the referenced definition
    (MLIR's printing of the location), memoized in `done` (`pieces`: the definitions split);
    None if it refers to an alias the text does not define, or to itself (an explicit stack:
    chains are as deep as calls go)."""
    stack, entered = [name], set()
    while stack:
        k = stack[-1]
        if k in done:
            stack.pop()
            continue
        parts = pieces.get(k)
        if parts is None:
            body = defs.get(k)
            if body is None:
                return None
            parts = pieces[k] = _pieces(body)
        missing = [p[0] for p in parts if type(p) is tuple and p[0] not in done]
        if not missing:
            done[k] = "".join(p if type(p) is str else done[p[0]] for p in parts)
            stack.pop()
            continue
        if k in entered:
            return None  # its references were expanded, yet some are missing: a cycle
        entered.add(k)
        for ref in missing:
            if ref in entered:
                return None  # a cycle: MLIR would not have parsed it
            stack.append(ref)
    return done[name]
