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


# An outer loop around an inner one: the inner loop's body holds a whole-register move, a
# masked move (a blend, not a copy), a reload at a fixed stack offset and a store into an
# indexed stack buffer (a row buffer, not a spill).
_ASM = """f:
.LBB0_1:
\tvmovups\t(%rdi), %zmm0
.LBB0_2:
\tvmovaps\t%zmm1, %zmm2
\tvmovups\t-64(%rsp), %zmm3
\tvmovups\t%zmm3, 128(%rsp,%rax,4)
\tvmovaps\t%zmm1, %zmm2 {%k1}
\taddq\t$1, %rax
\tjne\t.LBB0_2
\t.p2align\t4
\tjmp\t.LBB0_1
"""


def test_loop_stats_counts_the_innermost_loop():
    assert row_limits.loop_stats(_ASM) == [{"label": ".LBB0_2", "instructions": 6, "spills": 1, "moves": 1}]


def test_loops_option_prints_each_kernels_loops(capsys, monkeypatch):
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "1")
    assert row_limits.main(["--rows", "24", "--cols", "64", "--rounds", "1", "--loops"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(line.startswith("softmax") and " loop .L" in line and "instructions" in line for line in lines)
