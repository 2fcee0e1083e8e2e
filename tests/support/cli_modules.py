"""A small module the command-line tests run, and a fixture writing it to a file."""
from __future__ import annotations

import pytest

SIMPLE = """HloModule simple

ENTRY main {
  p0 = f32[4]{0} parameter(0)
  p1 = f32[4]{0} parameter(1)
  m = f32[4]{0} multiply(p0, p1)
  ROOT a = f32[4]{0} add(m, p0)
}
"""


@pytest.fixture
def simple_module(tmp_path):
    """The path of SIMPLE written to a file."""
    path = tmp_path / "simple.hlo"
    path.write_text(SIMPLE)
    return str(path)
