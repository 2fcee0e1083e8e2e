"""benchmarks/llvm_rank.py: every distinct kernel gets one row with its kind, emitted size and
LLVM time, both rankings list them, and the pass report is read (user time per pass);
benchmarks/loop_hints_ab.py: the A/B flips the switch it names, compiling each side with it."""
from __future__ import annotations

import re
import sys

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import llvm_rank  # noqa: E402
import loop_hints_ab  # noqa: E402

from test_compile_time_kinds import TEXT  # noqa: E402


def test_rank_rows_one_row_per_distinct_kernel(capsys):
    rows = llvm_rank.rank_rows({"m": TEXT}, top=5, passes=3)
    out = capsys.readouterr().out
    total = int(re.search(r"^(\d+) distinct kernels, LLVM [\d.]+ CPU-s", out, re.M).group(1))
    assert total == len(rows) >= 1
    assert all(r["module"] == "m" and r["kind"] in {"loop", "reduce", "row"} and r["ir_in"] > 0
               and r["ms"] > 0 for r in rows)
    listed = re.findall(r"^  m +(\S+) ", out, re.M)
    assert sorted(listed) == sorted(2 * [r["kernel"] for r in rows])
    # each listed kernel's pass line names LLVM passes with their milliseconds
    passes = re.findall(r"^      (.*)$", out, re.M)
    assert len(passes) == 2 * len(rows) and all(re.search(r"Pass [\d.]+", p) for p in passes)


def test_levels_tabulate_small_kernels_by_work(capsys):
    """`levels`: every row has both levels' ms, and the table has a line per threshold whose
    kernel count is the rows that run once under it."""
    rows = llvm_rank.rank_rows({"m": TEXT}, top=1, levels=True)
    out = capsys.readouterr().out
    assert all(r["o3_ms"] > 0 and r["small_ms"] > 0 and r["work_ns"] >= 0 for r in rows)
    counts = [int(n) for n in re.findall(r"^  < +\d+ ns: +(\d+) kernels", out, re.M)]
    assert counts == [sum(r["once"] and r["work_ns"] < t for r in rows) for t in llvm_rank.WORK_THRESHOLDS_NS]


def test_pass_times_reads_the_report():
    from hlofuse.codegen.cpu import CpuCode, CpuPlanner, distinct_kernels, emit_kernel_module
    from hlofuse.compiler import optimize
    from hlofuse.emitters.cpu.target import CpuTarget
    import hlofuse

    fused = optimize(hlofuse.parse_hlo(TEXT), "cpu", verify=False)[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    o = distinct_kernels(code.kernels, CpuTarget())[0]
    times = llvm_rank.pass_times(str(emit_kernel_module(o.kernels[0], CpuTarget(), "k")), 3)
    assert "InstCombinePass" in times and "LoopVectorizePass" in times
    assert all(t >= 0 for t in times.values()) and sum(times.values()) > 0


def test_loop_hints_ab_flips_the_switch(monkeypatch):
    from hlofuse.codegen import generic_kernels, kernel_work
    from hlofuse.codegen.kernels import loop_hints

    # every kernel at O3: a 64-element kernel would be compiled at the small level
    # (codegen/kernel_work.py), which has no vector loop whose tail the switch folds
    monkeypatch.setattr(kernel_work, "SMALL_KERNEL_NS", 0.0)
    # and at its own shape, a flat loop: as a shape-generic kernel (codegen/generic_kernels.py)
    # it would walk rows of 32, which have no tail to fold
    monkeypatch.setattr(generic_kernels, "GENERIC_KERNELS", False)

    text = loop_hints_ab.KERNELS["tanh"].replace("NELEM", "64")
    import numpy as np

    x = np.linspace(-3, 3, 64, dtype=np.float32)
    rows = loop_hints_ab.compare("hlofuse.codegen.kernels.loop_hints:FOLD_TAILS", {"tanh": (text, [x])}, rounds=2,
                                 target_s=0.001)
    assert rows[0]["same_bits"] and rows[0]["a_ms"] > 0 and rows[0]["b_ms"] > 0
    assert loop_hints.FOLD_TAILS is True  # restored
    # the two sides' code differs: their objects (llvm_ir() would emit again under today's switch)
    a = loop_hints_ab._compile(text, loop_hints, "FOLD_TAILS", False)[0]
    b = loop_hints_ab._compile(text, loop_hints, "FOLD_TAILS", True)[0]
    assert [o.object_code for o in a.code.objects] != [o.object_code for o in b.code.objects]


def test_release_tools_make_the_same_code():
    """--release: Debian's opt and llc of llvmlite's LLVM major version (where installed) compile
    each kernel to the same machine code as hlofuse's own path (compile_timed), so the CPU
    times compared are of the same work."""
    import os

    import llvmlite.binding as llvm
    import pytest

    bindir = f"/usr/lib/llvm-{llvm.llvm_version_info[0]}/bin"
    if not (os.path.exists(os.path.join(bindir, "opt")) and os.path.exists(os.path.join(bindir, "llc"))):
        pytest.skip(f"no release opt/llc in {bindir} (apt-get install llvm-{llvm.llvm_version_info[0]})")
    rows = llvm_rank.rank_rows({"m": TEXT}, top=1, release=bindir)
    assert rows and all(r["same_code"] and "release_ms" in r and r["pass_ms"] > 0 and r["release_pass_ms"] > 0
                        for r in rows)
    # the comparison sees a difference: code made for another CPU is not the same
    tools = llvm_rank.ReleaseTools(bindir)
    for name in ("opt", "llc"):  # (opt writes the CPU into the functions' attributes, which llc reads)
        setattr(tools, name, [a if not a.startswith("-mcpu=") else "-mcpu=x86-64"
                              for a in getattr(tools, name) if not a.startswith("-mattr=")])
    from hlofuse.codegen.llvm_pool import compile_timed

    text = loop_hints_ab.KERNELS["tanh"].replace("NELEM", "64")
    import hlofuse
    from hlofuse.codegen.cpu import CpuCode, CpuPlanner, distinct_kernels, emit_kernel_module
    from hlofuse.compiler import optimize
    from hlofuse.emitters.cpu.target import CpuTarget

    fused = optimize(hlofuse.parse_hlo(text), "cpu", verify=False)[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    ir_text = str(emit_kernel_module(distinct_kernels(code.kernels, CpuTarget())[0].kernels[0], CpuTarget(), "k"))
    assert llvm_rank._text_section(compile_timed(ir_text, 3)[0]) != llvm_rank._text_section(tools.compile(ir_text)[1])
