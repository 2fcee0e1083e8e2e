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
