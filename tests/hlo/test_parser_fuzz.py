"""Malformed input never crashes the parser: truncated, mutated and spliced modules either
parse or raise HloParseError with a position inside the text, never another exception."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlofuse.hlo.errors import HloParseError
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.printer import module_to_text

from hlo_corpus import EDGE_MODULES, corpus_files, input_text

SEEDS = list(EDGE_MODULES.values()) + [input_text(p) for p in corpus_files()[:20]]
# Fragments that appear in HLO text, to splice into the middle of valid modules.
FRAGMENTS = ["(", ")", "{", "}", "[", "]", ",", "=", "%", '"', "/*", "*/", "//", "->", "<=", "?", ":",
             "ROOT", "ENTRY", "HloModule", "f32[", "token[]", "constant(", "parameter(", "{...}", "-nan",
             "T(8,128)", "S(1)", "dimensions=", "to_apply=", "calls=", "slice={[0:", "padding=1_", "window={size=",
             "dim_labels=b01f_", "metadata={", "\n", " ", "0", "-1", "99999999999999999999", "1e999", "x" * 50,
             "control-predecessors={", "FileNames\n", "execution_thread=", "\\", "\x00", "é"]

SETTINGS = settings(max_examples=int(__import__("os").environ.get("HLOFUSE_FUZZ_EXAMPLES", "300")), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(text: str) -> None:
    try:
        m = parse_hlo(text)
    except HloParseError as e:
        assert 1 <= e.line <= text.count("\n") + 1
        assert e.column >= 1
        assert e.message
        return
    # Whatever parses must print, and the print must parse back to the same text.
    printed = module_to_text(m)
    assert module_to_text(parse_hlo(printed)) == printed


@SETTINGS
@given(st.sampled_from(SEEDS), st.floats(0, 1))
def test_truncated_modules(text, where):
    check(text[: int(len(text) * where)])


@SETTINGS
@given(st.sampled_from(SEEDS), st.floats(0, 1), st.sampled_from(FRAGMENTS))
def test_spliced_fragments(text, where, fragment):
    i = int(len(text) * where)
    check(text[:i] + fragment + text[i:])


@SETTINGS
@given(st.sampled_from(SEEDS), st.floats(0, 1), st.integers(1, 20))
def test_deleted_spans(text, where, length):
    i = int(len(text) * where)
    check(text[:i] + text[i + length:])


@SETTINGS
@given(st.sampled_from(SEEDS), st.lists(st.tuples(st.floats(0, 1), st.characters()), min_size=1, max_size=5))
def test_replaced_characters(text, edits):
    chars = list(text)
    for where, ch in edits:
        if chars:
            chars[min(int(len(chars) * where), len(chars) - 1)] = ch
    check("".join(chars))


@SETTINGS
@given(st.text(max_size=200))
def test_arbitrary_text(text):
    check(text)
    check("HloModule m\nENTRY e {\n" + text + "\n}\n")


# ---- valid random inputs: literals and shapes survive print -> parse exactly ---------------
DTYPES = ["pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64", "c64",
          "c128", "f8e4m3fn", "f8e5m2", "s4", "u4"]


@SETTINGS
@given(st.sampled_from(DTYPES), st.lists(st.integers(0, 3), max_size=4), st.data())
def test_random_constants_round_trip_bit_exactly(dtype, dims, data):
    import numpy as np

    from hlofuse.hlo import shapes
    from hlofuse.hlo.literals import format_literal

    shape = shapes.array(dtype, dims)
    count = shape.element_count()
    raw = data.draw(st.binary(min_size=count * shape.dtype.byte_size * (2 if dtype in ("s4", "u4") else 1),
                              max_size=count * shape.dtype.byte_size * 2))
    if dtype in ("s4", "u4"):
        values = np.array([b % 16 - (8 if dtype == "s4" else 0) for b in raw[:count]]).astype(shape.dtype.numpy)
    elif dtype == "pred":
        values = np.array([b & 1 for b in raw[:count]], dtype=bool)
    else:
        values = np.frombuffer(raw[: count * shape.dtype.byte_size], dtype=shape.dtype.numpy).copy()
    values = values.reshape(dims)
    text = f"HloModule m\nENTRY e {{ ROOT c = {shape} constant({format_literal(values, shape)}) }}"
    back = parse_hlo(text).entry.root.literal
    assert back.dtype == values.dtype and back.shape == values.shape
    if shape.dtype.is_float or shape.dtype.is_complex:
        # NaN payloads are not printable; every other bit pattern must come back.
        wide = np.complex128 if shape.dtype.is_complex else np.float64
        nan = np.isnan(values.astype(wide))
        assert np.array_equal(np.isnan(back.astype(wide)), nan)
        assert back[~nan].tobytes() == values[~nan].tobytes()
    else:
        assert back.tobytes() == values.tobytes()
