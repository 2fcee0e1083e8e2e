"""Locations' metadata read from the text's alias table (frontends/stablehlo_locations.py) is
what printing each location gives (stablehlo.location_metadata of MLIR's printing), for JAX's
own output; anything the table cannot give is left to printing."""
from __future__ import annotations

import numpy as np
import pytest

from hlofuse import from_stablehlo
from hlofuse.frontends import stablehlo, stablehlo_locations
from hlofuse.frontends.stablehlo_locations import _UNREADABLE, _first_file, _named_parts, read_location_metadata
from hlofuse.frontends.stablehlo_mlir import ContextState, parse_mlir


def _jax_text() -> str:
    """A JAX program with nested calls, a loop and a reduction, lowered with its locations (as
    aliases, call-site chains)."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def inner(v):
        return jnp.tanh(v) * 2

    def layer(x, w):
        return jax.nn.gelu(x @ w)

    def f(x, w):
        y = layer(layer(x, w), w)
        y = jax.lax.fori_loop(0, 2, lambda i, v: v + jnp.sum(v), y)
        return inner(y) + jnp.max(y, axis=1, keepdims=True)

    x, w = np.ones((4, 8), np.float32), np.ones((8, 8), np.float32)
    return jax.jit(f).lower(x, w).as_text(debug_info=True)


def _op_locations(module) -> dict:
    """Location attribute -> location of every op of an ir.Module (an explicit stack)."""
    found, stack = {}, list(module.body.operations)
    while stack:
        op = stack.pop().operation
        found[op.location.attr] = op.location
        for region in op.regions:
            for block in region.blocks:
                stack.extend(block.operations)
    return found


def test_every_named_op_location_is_read_from_the_table_as_printing_reads_it():
    text = _jax_text()
    assert "\n#loc" in text and "callsite(" in text
    state = ContextState()
    with state.context:
        module = parse_mlir(text)
        cache: dict = {}
        assert read_location_metadata(text, cache, stablehlo.named_metadata) > 10
        locations = _op_locations(module)
        named = {a: loc for a, loc in locations.items() if stablehlo.location_metadata(str(loc)) is not None}
        assert len(named) > 10
        for attr, loc in named.items():
            assert attr in cache
            assert str(cache[attr]) == str(stablehlo.location_metadata(str(loc)))


def test_an_import_reads_its_locations_from_the_table_and_gives_the_same_module(monkeypatch):
    text = _jax_text()
    fast = from_stablehlo(text).to_text()
    printed = []
    real = stablehlo.location_metadata

    def counted(location: str):
        printed.append(location)
        return real(location)

    # locations left to printing: what the importer did before (a fresh context, so no cache)
    monkeypatch.setattr(stablehlo, "read_location_metadata", lambda *a: 0)
    monkeypatch.setattr(stablehlo, "context_state", lambda size=0: ContextState())
    monkeypatch.setattr(stablehlo, "location_metadata", counted)
    assert from_stablehlo(text).to_text() == fast
    assert printed  # the slow path did print them


_DEFS = {"1": '"f.py":3:4', "2": '"g"(#loc1)', "3": 'callsite(#loc2 at #loc1)', "5": '"h.py":7:1',
         "6": '"outer"(callsite("inner"(#loc7) at #loc5))', "7": "unknown", "8": '"bare"(#loc7)',
         "9": '"q \\"x"(#loc1)', "11": '"a\\\\b"(#loc1)', "10": '"n"(callsite(":1:2"(#loc7) at #loc1))'}


@pytest.mark.parametrize("name, printed", [
    # MLIR's printing of each alias (every reference replaced by its definition), by hand
    ("2", 'loc("g"("f.py":3:4))'),
    ("6", 'loc("outer"(callsite("inner"(unknown) at "h.py":7:1)))'),
    ("8", 'loc("bare"(unknown))'),
])
def test_the_parts_read_as_the_printed_location(name, printed):
    parts = _named_parts(name, _DEFS, {})
    assert str(stablehlo.named_metadata(*parts)) == str(stablehlo.location_metadata(printed))


def test_the_first_file_location_is_found_through_references():
    found: dict = {}
    assert _first_file("3", _DEFS, found) == ("f.py", "3", "4")  # through #loc2 -> #loc1
    assert found["2"] == ("f.py", "3", "4") and found["1"] == ("f.py", "3", "4")
    assert _first_file("6", _DEFS, found) == ("h.py", "7", "1")  # the name and unknown have none
    assert _first_file("8", _DEFS, found) is None


@pytest.mark.parametrize("name", ["9", "10", "11"])
def test_escapes_and_strings_like_file_positions_are_left_to_printing(name):
    # an escaped quote, or a string starting with ':' (the printed text's regex could start
    # inside it): not read from the table
    assert _named_parts(name, _DEFS, {}) is None


@pytest.mark.parametrize("defs", [{"1": '"a"(#loc2)', "2": "callsite(#loc1 at #loc1)"}, {"1": '"a"(#loc9)'}])
def test_a_cycle_or_an_unknown_alias_is_left_to_printing(defs):
    assert _first_file("1", defs, {}) is _UNREADABLE
    assert _named_parts("1", defs, {}) is None


def test_a_table_mlir_cannot_parse_adds_nothing():
    state = ContextState()
    with state.context:
        cache: dict = {}
        assert read_location_metadata('#loc1 = loc("x"(#loc2))\n#loc2 = loc(nonsense(\n', cache,
                                      stablehlo.named_metadata) == 0
        assert cache == {}


def test_no_alias_no_work():
    assert stablehlo_locations.read_location_metadata("func.func @main() { return }", {}, str) == 0
