"""`hlofuse run --profile`: a row per step that ran, with its kind, bytes, time and share."""
from __future__ import annotations

import re

from hlofuse.cli import main

MODULE = """
HloModule prof
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[256,512] parameter(0)
  w = f32[512,128] parameter(1)
  d = f32[256,128] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[256,128] tanh(d)
  z = f32[] constant(0)
  ROOT r = f32[256] reduce(t, z), dimensions={1}, to_apply=add
}
"""


def test_profile_table(tmp_path, capsys):
    path = tmp_path / "m.hlo"
    path.write_text(MODULE)
    assert main(["run", str(path), "--profile", "4"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("profile of 4 runs:")
    assert "GFLOP/s" in lines[1] and "share" in lines[1]
    rows = [ln for ln in lines[3:] if ln.strip()]
    assert rows, out
    for row in rows:
        assert re.search(r"\s4\s", row), row  # every step ran once per run
        assert row.rstrip().endswith("%")
    dot_rows = [r for r in rows if "gemm" in r]
    assert dot_rows, out
    # 2 * 256 * 128 * 512 flops: the dot row shows a GFLOP/s figure
    assert re.search(r"\d+\.\d\s+\d+\.\d%$", dot_rows[0]), dot_rows[0]


def test_profile_needs_the_cpu_backend(tmp_path, capsys):
    path = tmp_path / "m.hlo"
    path.write_text(MODULE)
    assert main(["run", str(path), "--backend", "gpu-emulated", "--profile"]) == 2
    assert "--profile" in capsys.readouterr().err
