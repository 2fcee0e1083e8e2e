"""benchmarks/compile_time.py --kinds: the per-kind rows count every distinct kernel once, under
the kind the kernel plan says, with the IR before and after optimization counted."""
from __future__ import annotations

import re
import sys

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import compile_time  # noqa: E402

TEXT = """HloModule kinds

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[64,32] parameter(0)
  e = f32[64,32] exponential(p)
  zero = f32[] constant(0)
  r = f32[64] reduce(e, zero), dimensions={1}, to_apply=add
  ROOT n = f32[64] negate(r)
}
"""


def test_kind_rows_count_each_distinct_kernel_once(capsys):
    compile_time.kind_rows({"kinds": TEXT}, variants=True)
    out = capsys.readouterr().out
    total = int(re.search(r"^kinds: (\d+) distinct kernels", out, re.M).group(1))
    rows = re.findall(r"^  (\w+) +(\d+) kernels .* IR +(\d+) -> +(\d+) instructions", out, re.M)
    assert total >= 1 and sum(int(n) for _, n, _, _ in rows) == total
    assert {kind for kind, *_ in rows} <= {"loop", "reduce", "row"} and all(int(a) > 0 and int(b) > 0
                                                                          for *_, a, b in rows)
    variants = re.findall(r"^    (.*)$", out, re.M)
    assert len(variants) == len(rows)
    assert all(all(v in line for v in compile_time.PIPELINE_VARIANTS) for line in variants)


def test_group_rows_time_every_group_size(capsys):
    """--groups: one LLVM figure per group size for the module's kernels, and GROUP_KERNELS is
    left as it was."""
    from hlofuse.codegen import cpu

    before = cpu.GROUP_KERNELS
    out = compile_time.group_rows({"kinds": TEXT}, sizes=(1, 2), rounds=1)
    assert set(out["kinds"]) == {1, 2} and all(s > 0 for s in out["kinds"].values())
    assert cpu.GROUP_KERNELS == before
    assert re.search(r"^kinds +\d+ kernels, LLVM CPU s by group size: 1: [\d.]+  2: [\d.]+$",
                     capsys.readouterr().out, re.M)
