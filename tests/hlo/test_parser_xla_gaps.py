"""Where our HLO parser and XLA's disagreed: dense literals (a lone number for an array
shape, optional commas, element counts), XLA's buffer shape `b(f32[32])`, and deep nesting
(refused fast, at the right position, never with a RecursionError).

XLA's own parser (jaxlib's `hlo_module_from_text`) is the oracle for what is accepted, and
XLA's CPU compiler (tests/xla_oracle.py) for the values.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from hlofuse.hlo.errors import HloParseError
from hlofuse.hlo.parse_shapes import MAX_NESTING, MAX_RANK, MAX_TUPLE_DEPTH
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.verifier import verify
from xla_oracle import run_on_xla, xla_available

_XLA = xla_available()
needs_xla = pytest.mark.skipif(not _XLA, reason="jaxlib's XLA internals are not available")


def _xla_accepts(text: str) -> bool:
    from jax._src.lib import xla_client

    try:
        xla_client.hlo.hlo_module_from_text(text)
    except Exception:  # noqa: BLE001 - XLA raises its own status errors
        return False
    return True


def _constant_module(decl: str) -> str:
    return f"HloModule m\nENTRY e {{\n  ROOT c = {decl}\n}}\n"


def _error(text: str) -> HloParseError:
    with pytest.raises(HloParseError) as err:
        parse_hlo(text)
    return err.value


# ---- dense literals ------------------------------------------------------------------------

# Accepted by XLA: the value comes from running the module on XLA.
ACCEPTED = [
    "s8[1,1,1,1] constant(0)", "s8[1,1,1,1] constant(-3)", "f32[40] constant(15)", "f32[2,3] constant(7)",
    "f32[1] constant(3)", "f32[1,2] constant(4)", "pred[4] constant(true)", "pred[2] constant(1)",
    "f32[4] constant(-inf)", "u32[4] constant(4294967295)", "s64[3] constant(-9)", "bf16[5] constant(2.5)",
    "f16[2,2] constant(0.5)", "f32[3] constant({1, 2, 3,})", "f32[3] constant({,1,2,3})",
    "f32[3] constant({1,,2,3})", "f32[2] constant({1 2})", "f32[2,2] constant({{1,2},{3,4},})",
    "f32[2,2] constant({{1,2,},{3,4}})", "f32[1,1] constant({{5}})", "c64[2] constant({(1,2) (3,4)})",
    "c64[1] constant({(1,2)})",
]
# Tuple constants XLA accepts: (declaration, each element's declaration on its own). XLA's
# compiler takes no tuple constant, so each element's value is XLA's for the element alone.
ACCEPTED_TUPLES = [
    ("(f32[], f32[2]) constant((1, 2))", ["f32[] constant(1)", "f32[2] constant(2)"]),
    ("(f32[], f32[2]) constant((1, {2,3}))", ["f32[] constant(1)", "f32[2] constant({2,3})"]),
    ("(s8[1,1], (pred[3])) constant((5, (true)))", ["s8[1,1] constant(5)", "pred[3] constant(true)"]),
]
ACCEPTED_NO_RUN = ["f32[0] constant({})", "f32[0,3] constant({})", "f32[2,0] constant({{},{}})",
                   "f32[0] constant({,})", "f32[4] constant(nan)"]
# Refused by XLA: (declaration, what our message says, the text our caret points at).
REFUSED = [
    ("f32[0] constant(1)", "cannot initialize f32[0]", "1)"),
    ("s32[2,0] constant(3)", "cannot initialize s32[2,0]", "3)"),
    ("f32[] constant({3})", "single value", "{3}"),
    ("f32[2] constant({1,2,3})", "more than 2 elements in dimension 0", "3})"),
    ("f32[3] constant({1,2})", "has 2 elements in dimension 0, expected 3", "})"),
    ("f32[2,2] constant({1,2,3,4})", "nesting depth 1", "1,2,3,4"),
    ("f32[2,2] constant({{1,2},{3}})", "has 1 elements in dimension 1, expected 2", "}})"),
    ("f32[2,2] constant({{1,2},3})", "nesting depth 1", "3})"),
    ("f32[2,2] constant({1,{2,3}})", "nesting depth 1", "1,{"),
    ("f32[1,1] constant({5})", "nesting depth 1", "5})"),
    ("f32[1,1] constant({{{5}}})", "nested deeper than its rank 2", "{5}}}"),
    ("f32[2] constant({{1},{2}})", "nested deeper than its rank 1", "{1},"),
    ("f32[2,0] constant({})", "has 0 elements in dimension 0, expected 2", "})"),
    ("s32[3] constant(1.5)", "expected an integer", "1.5"),
    ("c64[2] constant((1,2))", "must be an array in braces", "(1,2))"),
    ("c64[2] constant({(1,2),})", "has 1 elements in dimension 0, expected 2", "})"),
    ("f32[2] constant(1,2)", "unexpected ','", ",2)"),
    ("f32[2] constant(1 2)", "unexpected '2'", "2)"),
    ("f32[2] constant({1,2}{3})", "unexpected '{'", "{3})"),
    ("(f32[], f32[2]) constant((1, {2,3},))", "expected ')'", ",))"),
    ("s32[3] constant(99999999999)", "out of range", "99999999999"),
    ("f16[2] constant(1e6)", "out of range", "1e6"),
]


@needs_xla
@pytest.mark.parametrize("decl", ACCEPTED)
def test_literals_xla_accepts_have_xlas_value(decl: str) -> None:
    text = _constant_module(decl)
    assert _xla_accepts(text)
    ours = parse_hlo(text).entry.root.literal
    want = run_on_xla(text, [])
    got = list(ours) if isinstance(ours, tuple) else [ours]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_array_equal(np.asarray(g, dtype=w.dtype), w)


@needs_xla
@pytest.mark.parametrize("decl,elements", ACCEPTED_TUPLES)
def test_tuple_literals_xla_accepts_have_xlas_values(decl: str, elements: list[str]) -> None:
    text = _constant_module(decl)
    assert _xla_accepts(text)
    ours = parse_hlo(text).entry.root.literal
    flat = []
    stack = [ours]
    while stack:  # leaves in order
        v = stack.pop(0)
        if isinstance(v, tuple):
            stack[:0] = list(v)
        else:
            flat.append(v)
    assert len(flat) == len(elements)
    for got, element in zip(flat, elements):
        want = run_on_xla(_constant_module(element), [])[0]
        np.testing.assert_array_equal(np.asarray(got, dtype=want.dtype).reshape(want.shape), want)
        assert got.shape == want.shape


@needs_xla
@pytest.mark.parametrize("decl", ACCEPTED_NO_RUN)
def test_empty_and_nan_literals_xla_accepts(decl: str) -> None:
    text = _constant_module(decl)
    assert _xla_accepts(text)
    module = parse_hlo(text)
    verify(module)
    value = module.entry.root.literal
    assert value.shape == tuple(module.entry.root.shape.dims)
    if "nan" in decl:
        assert np.isnan(value[0]) and not value[1:].any()  # element 0, the rest zero


@pytest.mark.parametrize("decl,message,at", REFUSED)
def test_literals_xla_refuses_are_refused_at_the_token(decl: str, message: str, at: str) -> None:
    text = _constant_module(decl)
    if _XLA:
        assert not _xla_accepts(text)
    err = _error(text)
    assert message in err.message
    line = text.split("\n")[2]
    assert (err.line, err.column) == (3, line.rindex(at) + 1), err.render()
    assert err.render().splitlines()[-1] == " " * line.rindex(at) + "^"


@pytest.mark.parametrize("dtype", ["pred", "s8", "s32", "u16", "s64", "f16", "bf16", "f32", "f64"])
@pytest.mark.parametrize("dims", [(1,), (1, 1, 1, 1), (5,), (2, 3), (3, 1, 2)])
def test_a_lone_number_sets_element_zero(dtype: str, dims: tuple[int, ...]) -> None:
    # what XLA does (checked against XLA above): element 0 is the number, the rest zero
    shape = f"{dtype}[{','.join(map(str, dims))}]"
    value = parse_hlo(_constant_module(f"{shape} constant(1)")).entry.root.literal
    expected = np.zeros(dims, dtype=value.dtype)
    expected.reshape(-1)[0] = 1
    np.testing.assert_array_equal(value, expected)


def test_a_lone_number_round_trips_through_the_printer() -> None:
    module = parse_hlo(_constant_module("f32[2,3] constant(7)"))
    again = parse_hlo(module.to_text())
    np.testing.assert_array_equal(again.entry.root.literal, [[7, 0, 0], [0, 0, 0]])


# ---- buffer shapes --------------------------------------------------------------------------

BUFFERS = [
    "HloModule m\nENTRY e {\n  ROOT p = b(f32[32]) parameter(0)\n}\n",
    "HloModule m\nENTRY e {\n  ROOT p = b(f32[32]{0}) parameter(0)\n}\n",
    "HloModule m\nENTRY e {\n  ROOT p = (f32[2], b(f32[32])) parameter(0)\n}\n",
    "HloModule m\nENTRY e {\n  p = f32[32] parameter(0)\n  ROOT q = b(f32[32]) custom-call(p), custom_call_target=\"Pin\"\n}\n",
    "HloModule m\nENTRY e (p: b(f32[32])) -> f32[2] {\n  p = b(f32[32]) parameter(0)\n  ROOT c = f32[2] constant({1, 2})\n}\n",
]


@pytest.mark.parametrize("text", BUFFERS)
def test_buffer_shapes_are_refused_by_name(text: str) -> None:
    # XLA's parser reads them (a buffer wrapping an array, for memory pinning); hlofuse's IR
    # has no buffer shapes, so it refuses them naming the construct, at the `b(`.
    if _XLA:
        assert _xla_accepts(text)
    err = _error(text)
    assert "buffer shape" in err.message and "cannot represent" in err.message
    line = text.split("\n")[err.line - 1]
    assert line[err.column - 1:].startswith("b(")


def test_b_is_still_a_name_and_a_shape_prefix() -> None:
    # `b` as an instruction name, and `bf16[...]` shapes, are not buffer shapes
    module = parse_hlo("HloModule m\nENTRY e {\n  b = bf16[2] parameter(0)\n  ROOT n = bf16[2] negate(b)\n}\n")
    verify(module)


# ---- deep nesting ---------------------------------------------------------------------------

def _tuple(depth: int, leaf: str = "f32[]") -> str:
    return "(" * depth + leaf + ")" * depth


def _nested_ops(depth: int) -> str:
    """`depth` instructions nested in the operand list of the root (itself one more)."""
    return ("HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  ROOT r = f32[] "
            + "negate(f32[] " * (depth + 1) + "p" + ")" * (depth + 1) + "\n}\n")


def _inline_computations(depth: int) -> str:
    """`depth` computations written in place, each calling the next (built in linear time)."""
    heads = [f"x{k} = f32[] parameter(0)\n ROOT y{k} = f32[] call(x{k}), to_apply={{\n " for k in range(depth)]
    inner = f"x{depth} = f32[] parameter(0)\n ROOT y{depth} = f32[] negate(x{depth})"
    return "HloModule m\nENTRY e {\n" + "".join(heads) + inner + "\n}" * depth + "\n}\n"


DEEP = {
    "tuple parameter": lambda d: f"HloModule m\nENTRY e {{\n  ROOT p = {_tuple(d)} parameter(0)\n}}\n",
    "tuple constant": lambda d: f"HloModule m\nENTRY e {{\n  ROOT p = {_tuple(d)} constant({_tuple(d, '1')})\n}}\n",
    "tuple in a signature": lambda d: f"HloModule m\nENTRY e (p: {_tuple(d)}) -> f32[] {{\n  p = {_tuple(d)} "
                                      f"parameter(0)\n  ROOT c = f32[] constant(1)\n}}\n",
    "rank": lambda d: f"HloModule m\nENTRY e {{\n  ROOT c = f32[{','.join(['1'] * d)}] "
                      f"constant({'{' * d}1{'}' * d})\n}}\n",
    "nested operands": _nested_ops,
    "computations in place": _inline_computations,
}
LIMITS = {"tuple parameter": MAX_TUPLE_DEPTH, "tuple constant": MAX_TUPLE_DEPTH, "tuple in a signature": MAX_TUPLE_DEPTH,
          "rank": MAX_RANK, "nested operands": MAX_NESTING, "computations in place": MAX_NESTING}
MESSAGES = {"tuple parameter": "tuple shape nested more than", "tuple constant": "tuple shape nested more than",
            "tuple in a signature": "tuple shape nested more than", "rank": "dimensions; hlofuse supports at most",
            "nested operands": "instructions written inside operand lists nest more than",
            "computations in place": "computations written in place nest more than"}


@pytest.mark.parametrize("kind", DEEP)
def test_nesting_up_to_the_limit_is_accepted(kind: str) -> None:
    text = DEEP[kind](LIMITS[kind])
    if _XLA:
        assert _xla_accepts(text)
    module = parse_hlo(text)
    verify(module)
    verify(parse_hlo(module.to_text()))


@pytest.mark.parametrize("depth_over", [1, 1000, 100_000])
@pytest.mark.parametrize("kind", DEEP)
def test_deeper_nesting_is_refused_fast_where_it_goes_too_deep(kind: str, depth_over: int) -> None:
    limit = LIMITS[kind]
    text = DEEP[kind](limit + depth_over)
    start = time.perf_counter()
    err = _error(text)
    assert time.perf_counter() - start < 1.0
    assert MESSAGES[kind] in err.message and str(limit) in err.message
    assert (err.line, err.column) != (1, 1)
    line = text.split("\n")[err.line - 1]
    assert err.render().splitlines()[-2] == line
    if kind.startswith("tuple"):
        # the caret is at the '(' that opens level limit + 1
        assert line[err.column - 1] == "(" and line[:err.column].count("(") - line[:err.column].count(")") \
            == limit + 1 + (1 if kind == "tuple in a signature" else 0)
    elif kind == "nested operands":
        assert line[:err.column - 1].count("negate(") == limit + 1 and line[err.column - 1:].startswith("negate(")
    elif kind == "computations in place":
        assert err.line == 2 + 2 * (limit + 1) and line[err.column - 1] == "{"  # the (limit + 1)th


@pytest.mark.parametrize("text", [
    "HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0), backend_config=" + "{" * 100_000 + "}" * 100_000 + "\n}\n",
    "HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0), frontend_attributes={a=" + "{" * 100_000 + "}"
    * 100_000 + "}\n}\n",
    "HloModule m\nENTRY e {\n  ROOT r = f32[2] constant(" + "{" * 100_000 + "1" + "}" * 100_000 + ")\n}\n",
    "HloModule m\nENTRY e {\n  ROOT r = f32[] constant(" + "(" * 100_000 + "1" + ")" * 100_000 + ")\n}\n",
], ids=["backend_config", "frontend_attributes", "literal braces", "literal parens"])
def test_deep_braces_elsewhere_need_no_recursion(text: str) -> None:
    # Process CPU time, not wall time: the bound is there to catch a quadratic scan of the
    # 200,000 brackets (minutes), and other work on a shared machine must not trip it.
    start = time.process_time()
    try:
        module = parse_hlo(text)
    except HloParseError as e:
        assert (e.line, e.column) != (1, 1)
    else:
        verify(module)
        module.to_text()
    assert time.process_time() - start < 1.0
