"""benchmarks/math_approx_ab.py: the A/B of two math_approx versions compiles each version's
own math (a copy with one tanh coefficient changed gives other results, an unchanged copy the
same ones) and times both."""
from __future__ import annotations

import sys
from pathlib import Path

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import math_approx_ab  # noqa: E402

from hlofuse.emitters import math_approx  # noqa: E402


def test_same_version_same_results(tmp_path: Path):
    old = tmp_path / "same.py"
    old.write_text(Path(math_approx.__file__).read_text())
    rows = math_approx_ab.compare(str(old), ["tanh", "gelu_tanh"], n=4096, rounds=3, calls=1)
    assert [r["kernel"] for r in rows] == ["tanh", "gelu_tanh"]
    assert all(r["differing"] == 0 and r["a_ms"] > 0 and r["b_ms"] > 0 for r in rows)


def test_changed_version_is_the_one_compiled(tmp_path: Path):
    text = Path(math_approx.__file__).read_text()
    assert "_TANH_P = [" in text
    old = tmp_path / "changed.py"
    old.write_text(text.replace("_TANH_P = [", "_TANH_P = [4 * ", 1))  # tanh's degree-9 term x4
    rows = math_approx_ab.compare(str(old), ["tanh"], n=4096, rounds=3, calls=1)
    assert rows[0]["differing"] > 0
