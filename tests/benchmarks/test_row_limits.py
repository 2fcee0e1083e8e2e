"""benchmarks/row_limits.py runs on small arrays and prints a row per kernel (and per baseline),
each with its time from memory and its marginal cost in cache, against the exp reference."""
from __future__ import annotations

import sys

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import row_limits  # noqa: E402


def test_table_has_every_kernel_and_baseline(capsys, monkeypatch):
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "1")
    assert row_limits.main(["--rows", "24", "--cols", "64", "--rounds", "3",
                            "--baseline", "hlofuse.codegen.kernels.row_ahead.PIPELINE_FIRST_LEVEL=False"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split("  ")[0].strip(): line for line in lines if "%" in line}
    for name in ("exp (reference)", "copy (reference)", "softmax", "log_softmax", "layer_norm"):
        assert name in rows and name + "@base" in rows
    assert rows["exp (reference)"].split()[-4] == "100%"
