"""benchmarks/cache_hit.py: each round's new processes find the module entry a compile wrote,
from the parsed module and from the text, and report hits (a miss would time a cold compile
and say so in the table's last column)."""
from __future__ import annotations

import sys

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import cache_hit  # noqa: E402

import hlofuse  # noqa: E402
from hlofuse.codegen import cache  # noqa: E402

TEXT = """HloModule hit

ENTRY main {
  p = f32[64,32] parameter(0)
  e = f32[64,32] exponential(p)
  ROOT n = f32[64,32] negate(e)
}
"""


def test_a_new_process_hits_the_entry(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HLOFUSE_MODULE_CACHE", "1")
    cache.memory_cache.clear()
    (tmp_path / "m.hlo").write_text(TEXT)
    assert not hlofuse.compile_text(TEXT, "cpu", cache_dir=str(tmp_path / "cache")).from_cache
    assert cache_hit.main([str(tmp_path), "--models", "m", "--rounds", "2"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("m ")]
    assert [r[1] for r in rows] == ["module", "text"] and all(r[-1] == "True" for r in rows)
    cache.memory_cache.clear()
