"""Byte and token mutations of HLO text (the semantic ones are in semantic.py).

Every mutator is `fn(text, rng) -> text` and deterministic for a seeded `random.Random`.
"""
from __future__ import annotations

import random
import re
from typing import Callable

Mutator = Callable[[str, random.Random], str]

# ---- bytes -------------------------------------------------------------------------------
_INTERESTING_BYTES = b"(){}[]<>=,:%\"/*\\\n\t -0123456789.e\x00\xff\x80"


def byte_flip(text: str, rng: random.Random) -> str:
    """Flip one bit of one byte (the result is decoded leniently, so it may hold U+FFFD)."""
    data = bytearray(text.encode())
    if not data:
        return text
    i = rng.randrange(len(data))
    data[i] ^= 1 << rng.randrange(8)
    return data.decode("utf-8", "replace")


def byte_delete(text: str, rng: random.Random) -> str:
    """Delete a run of 1-16 bytes."""
    if not text:
        return text
    i = rng.randrange(len(text))
    return text[:i] + text[i + rng.randint(1, 16):]


def byte_insert(text: str, rng: random.Random) -> str:
    """Insert 1-4 bytes, mostly ones that mean something in HLO text."""
    i = rng.randrange(len(text) + 1)
    n = rng.randint(1, 4)
    chars = bytes(rng.choice(_INTERESTING_BYTES) if rng.random() < 0.8 else rng.randrange(256) for _ in range(n))
    return text[:i] + chars.decode("latin-1") + text[i:]


def byte_truncate(text: str, rng: random.Random) -> str:
    """Cut the text at a random point."""
    return text[: rng.randrange(len(text) + 1)]


def byte_duplicate(text: str, rng: random.Random) -> str:
    """Copy a span of the text to another place."""
    if len(text) < 2:
        return text
    i = rng.randrange(len(text))
    span = text[i:i + rng.randint(1, 64)]
    j = rng.randrange(len(text) + 1)
    return text[:j] + span + text[j:]


BYTE_MUTATORS: dict[str, Mutator] = {
    "byte-flip": byte_flip, "byte-delete": byte_delete, "byte-insert": byte_insert,
    "byte-truncate": byte_truncate, "byte-duplicate": byte_duplicate,
}

# ---- tokens ------------------------------------------------------------------------------
# A lexer good enough to find the pieces of HLO text: names (opcodes, dtypes, attribute keys and
# values, instruction names), numbers, strings, and single punctuation characters.
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|inf|nan)\b|%?[A-Za-z_][\w.\-]*|->|\S')
_NUMBERS = ["0", "-1", "1", "2", "-0", "3", "7", "8", "31", "32", "63", "64", "127", "128", "255", "65536",
            "2147483647", "2147483648", "-2147483648", "4294967296", "9223372036854775807",
            "99999999999999999999999", "1e40", "-1e40", "1e-45", "nan", "inf", "-inf", "0.5", "1.5"]
_DTYPES = ["pred", "s2", "s4", "s8", "s16", "s32", "s64", "u2", "u4", "u8", "u16", "u32", "u64", "f16", "bf16", "f32",
           "f64", "c64", "c128", "f8e4m3fn", "f8e5m2", "token", "tuple", "f31", "x32"]
_KEYWORDS = ["ROOT", "ENTRY", "HloModule", "parameter", "constant", "dimensions", "to_apply", "calls", "index",
             "slice", "padding", "direction", "kind", "iota_dimension", "dynamic_slice_sizes", "window",
             "condition", "body", "branch_computations", "true_computation", "metadata", "sharding",
             "backend_config", "custom_call_target", "lhs_contracting_dims", "rhs_contracting_dims",
             "control-predecessors", "EQ", "LT", "GT", "kLoop", "kInput", "kOutput", "TOTALORDER", "SIGNED"]


def tokenize(text: str) -> list[tuple[int, int, str]]:
    """(start, end, token) of every token in `text`."""
    return [(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(text)]


def _token_class(tok: str) -> str:
    if tok[0] == '"':
        return "string"
    if tok[0].isdigit() or (tok[0] == "-" and len(tok) > 1) or tok in ("inf", "nan"):
        return "number"
    if tok[0].isalpha() or tok[0] in "%_":
        return "name"
    return "punct"


def _replacement(tok: str, tokens: list[str], opcodes: list[str], rng: random.Random) -> str:
    cls = _token_class(tok)
    r = rng.random()
    if cls == "number":
        return rng.choice(_NUMBERS) if r < 0.7 else rng.choice([t for t in tokens if _token_class(t) == "number"] or ["0"])
    if cls == "name":
        if r < 0.25:
            return rng.choice(opcodes)
        if r < 0.45:
            return rng.choice(_DTYPES)
        if r < 0.6:
            return rng.choice(_KEYWORDS)
        same = [t for t in tokens if _token_class(t) == "name"]
        return rng.choice(same) if same else tok
    if cls == "string":
        return rng.choice(['""', '"\\"', '"\u00e9"', '"x' + "\\n" * 3 + '"'])
    return rng.choice(list("(){}[]<>=,:%*/") + ["->", "{...}", ""])


def _opcodes() -> list[str]:
    from hlofuse.hlo.opcodes import OPS

    return sorted(OPS)


def token_replace(text: str, rng: random.Random) -> str:
    """Replace one token by another of a likely class (an opcode, a dtype, a keyword, a name of
    the module, an interesting number, a punctuation mark)."""
    toks = tokenize(text)
    if not toks:
        return text
    s, e, tok = rng.choice(toks)
    return text[:s] + _replacement(tok, [t for _, _, t in toks], _opcodes(), rng) + text[e:]


def token_delete(text: str, rng: random.Random) -> str:
    """Delete one token."""
    toks = tokenize(text)
    if not toks:
        return text
    s, e, _ = rng.choice(toks)
    return text[:s] + text[e:]


def token_swap(text: str, rng: random.Random) -> str:
    """Swap two tokens (neighbours half of the time, anywhere otherwise)."""
    toks = tokenize(text)
    if len(toks) < 2:
        return text
    i = rng.randrange(len(toks) - 1)
    j = i + 1 if rng.random() < 0.5 else rng.randrange(len(toks))
    if i == j:
        return text
    (s1, e1, t1), (s2, e2, t2) = sorted([toks[i], toks[j]])
    return text[:s1] + t2 + text[e1:s2] + t1 + text[e2:]


def token_duplicate(text: str, rng: random.Random) -> str:
    """Repeat one token right after itself."""
    toks = tokenize(text)
    if not toks:
        return text
    s, e, tok = rng.choice(toks)
    return text[:e] + rng.choice(["", " ", ", "]) + tok + text[e:]


TOKEN_MUTATORS: dict[str, Mutator] = {
    "token-replace": token_replace, "token-delete": token_delete, "token-swap": token_swap,
    "token-duplicate": token_duplicate,
}
