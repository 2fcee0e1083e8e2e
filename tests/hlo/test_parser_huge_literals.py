"""Literals too large to build are parse errors at the literal, not numpy tracebacks."""
from __future__ import annotations

import pytest

from hlofuse.hlo.errors import HloParseError
from hlofuse.hlo.parser import parse_hlo


@pytest.mark.parametrize("dims", ["99999999999999999999", "4294967296,4294967296", "9223372036854775807"])
def test_lone_scalar_for_a_huge_array_is_a_parse_error(dims):
    text = f"HloModule m\nENTRY e {{ ROOT c = f32[{dims}] constant(6) }}\n"
    with pytest.raises(HloParseError, match="too large to build") as info:
        parse_hlo(text)
    assert info.value.line == 2
