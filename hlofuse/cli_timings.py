"""What `hlofuse compile --timings` and `hlofuse opt --timings` print on standard error: each
stage's seconds, and for a CPU compile its code generation stages, the wall time outside them
(`other`) and the process's CPU time."""
from __future__ import annotations

import sys

# Code generation stages of CpuCode.timings, in order, as --timings prints them.
_CODEGEN_STAGES = ("planning", "cache", "emission", "emission cpu", "llvm optimization", "code generation", "llvm wait",
                   "driver", "driver wall", "loading")


# The stages of _CODEGEN_STAGES that follow one another on the compiling thread (the others are
# sums over kernels compiled on the lanes, CPU times, or the driver's span beside the kernels):
# with parsing and the passes they add up to the wall time, but for `other`.
_SEQUENTIAL_CODEGEN_STAGES = ("planning", "cache", "emission", "llvm wait", "loading")


def print_timings(pipeline, parse_seconds: float | None = None, program=None,
                   span: tuple[float, float] | None = None) -> None:
    """Per-stage wall times on standard error (standard output holds the module): parsing,
    every pass, and with a CPU program its code generation stages (LLVM optimization and code
    generation summed over the kernels LLVM compiled; `llvm wait` is the wall time spent
    waiting for them after emission; `emission cpu` and `driver` are CPU seconds of the thread
    doing it, `driver wall` the driver's span beside the kernels; see codegen/cpu.py
    compile_cpu), then which LLVM ran them and whether its assertions are on (llvm_build.py).
    `parse` excludes importing the parser (a new process's one-off cost).

    `span`, the command's (wall, process CPU) seconds from parsing to the last stage, adds
    `other` (the wall time outside parsing, the passes and the sequential code generation
    stages: verification, the driver's plan and its wait after the kernels, the output, imports
    on first use), `total` and `cpu` (this process's CPU time, every thread, LLVM's lanes
    included)."""
    if parse_seconds is not None:
        print(f"{'parse':32s} {parse_seconds * 1e3:9.3f} ms", file=sys.stderr)
    for name, seconds, changed in pipeline.timings:
        print(f"{name:32s} {seconds * 1e3:9.3f} ms{'  (changed)' if changed else ''}", file=sys.stderr)
    listed = (parse_seconds or 0.0) + sum(seconds for _, seconds, _ in pipeline.timings)
    code = program.code if program is not None else None
    if code is not None:
        for stage in _CODEGEN_STAGES:
            print(f"{stage:32s} {code.timings.get(stage, 0.0) * 1e3:9.3f} ms", file=sys.stderr)
        listed += sum(code.timings.get(stage, 0.0) for stage in _SEQUENTIAL_CODEGEN_STAGES)
    if span is not None:
        wall, cpu = span
        print(f"{'other':32s} {(wall - listed) * 1e3:9.3f} ms", file=sys.stderr)
        print(f"{'total':32s} {wall * 1e3:9.3f} ms", file=sys.stderr)
        print(f"{'cpu':32s} {cpu * 1e3:9.3f} ms  (this process, every thread)",
              file=sys.stderr)
    if code is None:
        return
    print(f"{'kernels':32s} {len(code.kernels)} ({len(code.objects)} distinct, {code.compiled_count} compiled, "
          f"{len(code.objects) - code.compiled_count} from the cache)", file=sys.stderr)
    from .llvm_build import RELEASE_HINT, llvm_build

    llvm = llvm_build()  # which LLVM those stages ran: a build with assertions costs ~1/5 of them
    print(f"{'llvm':32s} {llvm.describe()}", file=sys.stderr)
    if llvm.assertions != "off":
        print(f"{'':32s} {RELEASE_HINT}", file=sys.stderr)
