"""What `compile_cpu`'s timings say (codegen/cpu.py): the driver runs on a thread beside the
kernels' emission, so its wall span mostly waits (for the GIL, for LLVM's lock); `driver` is
its thread's CPU time and `driver wall` the span, `emission` the calling thread's wall time and
`emission cpu` its CPU time. A thread's CPU time cannot exceed its wall time, and the CLI
prints every stage."""
from __future__ import annotations

import re

from hlofuse.codegen.cpu import compile_cpu
from hlofuse.compiler import optimize
from hlofuse.hlo.parser import parse_hlo

TEXT = """HloModule m

ENTRY main {
  p = f32[64,64] parameter(0)
  q = f32[64,64] parameter(1)
  e = f32[64,64] exponential(p)
  t = f32[64,64] tanh(q)
  a = f32[64,64] add(e, t)
  ROOT m = f32[64,64] multiply(a, p)
}
"""


def test_cpu_and_wall_figures_of_emission_and_driver():
    fused, _ = optimize(parse_hlo(TEXT), "cpu")
    timings = compile_cpu(fused, cache=False).timings
    for stage in ("planning", "emission", "emission cpu", "llvm optimization", "code generation", "llvm wait",
                  "driver", "driver wall"):
        assert stage in timings and timings[stage] >= 0.0, (stage, timings)
    tolerance = 2e-3  # the two clocks are read one after the other
    assert timings["driver"] <= timings["driver wall"] + tolerance, timings
    assert timings["emission cpu"] <= timings["emission"] + tolerance, timings
    assert timings["driver"] > 0.0  # its IR was built and compiled on that thread (no cache)


def test_cli_prints_the_cpu_and_wall_stages(tmp_path, capsys, monkeypatch):
    from hlofuse.cli import main

    monkeypatch.setenv("HLOFUSE_MODULE_CACHE", "0")
    path = tmp_path / "m.hlo"
    path.write_text(TEXT)
    assert main(["compile", str(path), "--timings", "--no-cache", "-o", str(tmp_path / "out.hlo")]) == 0
    err = capsys.readouterr().err
    for stage in ("parse", "emission", "emission cpu", "driver", "driver wall"):
        assert re.search(rf"^{stage} +[0-9.]+ ms$", err, re.M), (stage, err)


def test_cli_other_is_the_wall_time_outside_the_sequential_stages(tmp_path, capsys, monkeypatch):
    """`other` is `total` less parsing, the passes and the sequential code generation stages
    (planning, cache, emission, llvm wait, loading), and `cpu` this process's CPU time."""
    from hlofuse.cli import main

    monkeypatch.setenv("HLOFUSE_MODULE_CACHE", "0")
    path = tmp_path / "m.hlo"
    path.write_text(TEXT)
    assert main(["compile", str(path), "--timings", "--no-cache", "-o", str(tmp_path / "out.hlo")]) == 0
    rows = [(m.group(1), float(m.group(2))) for m in re.finditer(r"^(.+?) +(-?[0-9.]+) ms", capsys.readouterr().err, re.M)]
    names = [name for name, _ in rows]
    lines = dict(rows)
    assert {"other", "total", "cpu"} <= set(lines), rows
    passes = sum(ms for _, ms in rows[names.index("parse") + 1:names.index("planning")])  # a pass may run twice
    listed = passes + sum(lines[k] for k in ("parse", "planning", "cache", "emission", "llvm wait", "loading"))
    assert abs(listed + lines["other"] - lines["total"]) < 0.01, rows
    assert lines["other"] >= 0.0 and lines["cpu"] > 0.0, rows
