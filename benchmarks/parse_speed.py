"""Parser speed: parse a generated 20,000-instruction module and print instructions/s.

Run: python benchmarks/parse_speed.py [--instructions N] [--repeat R]
The module mixes what XLA prints after optimization: inline metadata, fusions calling fused
computations, broadcasts with dimensions, reductions with to_apply, constants.
"""
from __future__ import annotations

import argparse
import statistics
import time

from hlofuse.hlo.parser import parse_hlo


def generate_module(n: int) -> str:
    """HLO text with about `n` instructions, in XLA's optimized-output style."""
    lines = ["HloModule bench, entry_computation_layout={(f32[128,256]{1,0})->f32[128,256]{1,0}}", ""]
    lines += [
        "%add (x: f32[], y: f32[]) -> f32[] {",
        "  %x = f32[] parameter(0)",
        "  %y = f32[] parameter(1)",
        "  ROOT %s = f32[] add(f32[] %x, f32[] %y)",
        "}",
        "",
    ]
    # Each fusion contributes 6 fused instructions and 5 entry instructions; 6 more are fixed.
    fusions = max(1, -(-(n - 6) // 11))
    for k in range(fusions):
        lines += [
            f"%fused_computation.{k} (param_0.{k}: f32[128,256], param_1.{k}: f32[]) -> f32[128,256] {{",
            f"  %param_0.{k} = f32[128,256]{{1,0}} parameter(0)",
            f"  %param_1.{k} = f32[] parameter(1)",
            f"  %broadcast.{k} = f32[128,256]{{1,0}} broadcast(f32[] %param_1.{k}), dimensions={{}}",
            f"  %multiply.{k} = f32[128,256]{{1,0}} multiply(f32[128,256]{{1,0}} %param_0.{k}, "
            f"f32[128,256]{{1,0}} %broadcast.{k}), metadata={{op_name=\"jit(f)/mul\" stack_frame_id=3}}",
            f"  %exponential.{k} = f32[128,256]{{1,0}} exponential(f32[128,256]{{1,0}} %multiply.{k})",
            f"  ROOT %add.{k} = f32[128,256]{{1,0}} add(f32[128,256]{{1,0}} %exponential.{k}, "
            f"f32[128,256]{{1,0}} %param_0.{k}), metadata={{op_name=\"jit(f)/add\" stack_frame_id=4}}",
            "}",
            "",
        ]
    lines.append("ENTRY %main (p: f32[128,256]) -> f32[128,256] {")
    lines.append("  %p = f32[128,256]{1,0} parameter(0), metadata={op_name=\"x\"}")
    lines.append("  %c = f32[] constant(1.5)")
    prev = "%p"
    for k in range(fusions):
        lines.append(f"  %fusion.{k} = f32[128,256]{{1,0}} fusion(f32[128,256]{{1,0}} {prev}, f32[] %c), "
                     f"kind=kLoop, calls=%fused_computation.{k}, metadata={{op_name=\"jit(f)/fused\" "
                     f"source_file=\"/tmp/x.py\" source_line={k}}}")
        lines.append(f"  %reduce.{k} = f32[128]{{0}} reduce(f32[128,256]{{1,0}} %fusion.{k}, f32[] %c), "
                     f"dimensions={{1}}, to_apply=%add")
        lines.append(f"  %bcast.{k} = f32[128,256]{{1,0}} broadcast(f32[128]{{0}} %reduce.{k}), dimensions={{0}}")
        lines.append(f"  %sub.{k} = f32[128,256]{{1,0}} subtract(f32[128,256]{{1,0}} %fusion.{k}, "
                     f"f32[128,256]{{1,0}} %bcast.{k})")
        lines.append(f"  %neg.{k} = f32[128,256]{{1,0}} negate(f32[128,256]{{1,0}} %sub.{k})")
        prev = f"%neg.{k}"
    lines.append(f"  ROOT %out = f32[128,256]{{1,0}} copy(f32[128,256]{{1,0}} {prev})")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instructions", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    text = generate_module(args.instructions)
    count = sum(len(c.instructions) for c in parse_hlo(text).computations)
    wall, cpu = [], []
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        parse_hlo(text)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    # Wall time counts waiting for the CPU on a shared machine; CPU time is the parser's own cost.
    w, c = statistics.median(wall), statistics.median(cpu)
    print(f"{count} instructions, {len(text) / 1e6:.2f} MB, median of {args.repeat} runs: "
          f"wall {w * 1e3:.1f} ms -> {count / w:,.0f} instructions/s; "
          f"cpu {c * 1e3:.1f} ms -> {count / c:,.0f} instructions/s")

if __name__ == "__main__":
    main()
