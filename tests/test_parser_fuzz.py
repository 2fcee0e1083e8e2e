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

SETTINGS = settings(max_examples=int(__import__("os").environ.get("HLOFUSE_FUZZ_EXAMPLES", "150")), deadline=None, suppress_health_check=[HealthCheck.too_slow])


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
