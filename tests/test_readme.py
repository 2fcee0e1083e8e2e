"""The README's Python example runs as written (it is what a newcomer copies first)."""
from __future__ import annotations

import os
import re

import pytest
from repo_paths import REPO

ROOT = str(REPO)


def test_readme_python_example_runs(monkeypatch, capsys):
    pytest.importorskip("jax")
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    assert blocks, "the README has no Python example"
    monkeypatch.chdir(ROOT)
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "fusion(" in out and "8.761594" in out  # tanh(1) * 1 + 8, by hand
