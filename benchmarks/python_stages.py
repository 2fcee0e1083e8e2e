"""CPU time of the compiler's Python stages before LLVM, in one process: the passes, planning,
the kernels' emission (LLVM IR built and printed) and the driver's, as `codegen/cpu.compile_cpu`
runs them, LLVM left out.

    python benchmarks/python_stages.py MODEL.hlo [MODEL.hlo ...] [--runs 5]

Each module is compiled once first (imports, the kernel rules' first use), then `--runs` times;
the medians of the compiling thread's CPU seconds are printed with the machine's load. Compare
two trees by running this with each on PYTHONPATH, alternating (docs/compile_time.md, "The
Python stages before LLVM").
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stages(module) -> dict[str, float]:
    """One compile's Python stages: CPU seconds of the passes, planning, the kernels' emission
    (with the collections `compile_objects` makes after each group) and the driver's."""
    from hlofuse.codegen.cpu import CpuCode, CpuPlanner, CpuTarget, collector_paused, distinct_kernels, kernel_groups
    from hlofuse.codegen.driver import emit_driver
    from hlofuse.codegen.native_plan import NativeProgram
    from hlofuse.compiler import optimize
    from hlofuse.passes.fusion.decisions import module_log

    out: dict[str, float] = {}
    start = time.thread_time()
    fused, _ = optimize(module, "cpu")
    now = time.thread_time()
    out["passes"], start = now - start, now
    with collector_paused():
        planner = CpuPlanner(log=module_log(fused))
        code = CpuCode(fused, planner)
        planner.plan(fused.entry)
        target = CpuTarget()
        objects = distinct_kernels(code.kernels, target)
        native = NativeProgram(planner, fused.entry)
        now = time.thread_time()
        out["planning"], start = now - start, now
        for _, mod in kernel_groups(objects, target):
            str(mod)
            del mod
            gc.collect(0)  # as compile_objects does with the collector paused
        now = time.thread_time()
        out["emission"], start = now - start, now
        emit_driver(native, target)
        out["driver"] = time.thread_time() - start
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the median stage times of each module."""
    from hlofuse.hlo.parser import load_hlo_file

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="+", help="HLO text files")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    for path in args.modules:
        module = load_hlo_file(path)
        stages(module)  # warm-up
        runs = [stages(module) for _ in range(args.runs)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        total = statistics.median(sum(r.values()) for r in runs)
        print(f"{os.path.basename(path):32s} " + " ".join(f"{k} {v:.3f}" for k, v in med.items())
              + f" total {total:.3f}  load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
