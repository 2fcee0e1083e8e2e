"""benchmarks/python_stages.py: the Python stages of a compile, timed as compile_cpu runs them,
emit the kernels and driver that compile does (same groups), and the script prints each stage."""
from __future__ import annotations

import sys

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import python_stages  # noqa: E402

from hlofuse.hlo.parser import parse_hlo  # noqa: E402

TEXT = """HloModule stages

ENTRY main {
  p = f32[64,32] parameter(0)
  e = f32[64,32] exponential(p)
  z = f32[] constant(0)
  s = f32[64] reduce(e, z), dimensions={1}, to_apply=add
  ROOT n = f32[64] negate(s)
}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
"""


def test_every_stage_is_timed():
    times = python_stages.stages(parse_hlo(TEXT))
    assert list(times) == ["passes", "planning", "emission", "driver"]
    assert all(t >= 0 for t in times.values()) and times["passes"] > 0


def test_the_script_prints_each_stage(tmp_path, capsys):
    path = tmp_path / "m.hlo"
    path.write_text(TEXT)
    python_stages.main([str(path), "--runs", "2"])
    line = capsys.readouterr().out.strip()
    assert line.startswith("m.hlo") and all(k in line for k in ("passes", "planning", "emission", "driver", "load"))
