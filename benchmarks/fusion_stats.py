"""Fusion statistics per workload: kernels and bytes moved before -> after hlofuse's fusion,
for the GPU and CPU fusion policies, next to the number of fusions XLA's CPU compiler makes.

Run:  python benchmarks/fusion_stats.py [--size small|large] [--workloads a,b] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def xla_cpu_fusions(fn, args) -> int:
    """How many fusion instructions XLA's CPU compiler makes for `fn` (entry computation)."""
    import jax

    text = jax.jit(fn).lower(*args).compile().as_text()
    entry = text[text.index("\nENTRY"):]
    return len(re.findall(r"= [^=]*? fusion\(", entry))


def stats_for(name: str, fn, args) -> dict:
    """One row: hlofuse's kernels/bytes before and after fusion per target, and XLA CPU's count."""
    import jax

    from hlofuse.hlo.parser import parse_hlo
    from hlofuse.passes.fusion import fusion_passes, module_log
    from hlofuse.passes.fusion.report import build_report
    from hlofuse.passes.pipeline import get_pass

    text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    row = {"workload": name}
    for target in ("gpu", "cpu"):
        module = parse_hlo(text)
        # "before" is the module the fusion passes see: simplified, calls inlined
        for p in ("simplifier", "cse", "dce", "call-inliner"):
            get_pass(p).run(module)
        unfused = module.clone()
        for p in fusion_passes(target):
            p.run(module)
        get_pass("dce").run(module)
        # duplicated work is counted on the fused module (copies merged back cost nothing)
        report = build_report(unfused, module, module_log(module))
        before, after = report.before, report.after
        fusions = sum(1 for i in module.entry.instructions if i.opcode == "fusion")
        row[target] = {"kernels_before": before.kernels, "kernels_after": after.kernels,
                       "bytes_before": before.bytes_moved, "bytes_after": after.bytes_moved,
                       "fusions": fusions, "duplicated_elements": after.duplicated_elements,
                       "duplicated_expensive_elements": after.duplicated_expensive_elements}
    row["xla_cpu_fusions"] = xla_cpu_fusions(fn, args)
    return row


def _kib(n: int) -> str:
    return f"{n / 1024:.1f}K" if n < 1 << 20 else f"{n / (1 << 20):.1f}M"


def print_table(rows: list[dict]) -> None:
    head = (f"{'workload':18s} | {'GPU kernels':>12s} {'GPU bytes':>17s} {'fus':>3s} | "
            f"{'CPU kernels':>12s} {'CPU bytes':>17s} {'fus':>3s} | {'XLA:CPU fusions':>15s}")
    print(head)
    print("-" * len(head))
    for r in rows:
        g, c = r["gpu"], r["cpu"]
        print(f"{r['workload']:18s} | {g['kernels_before']:>5d} -> {g['kernels_after']:<3d} "
              f"{_kib(g['bytes_before']):>7s} -> {_kib(g['bytes_after']):<7s} {g['fusions']:>3d} | "
              f"{c['kernels_before']:>5d} -> {c['kernels_after']:<3d} "
              f"{_kib(c['bytes_before']):>7s} -> {_kib(c['bytes_after']):<7s} {c['fusions']:>3d} | "
              f"{r['xla_cpu_fusions']:>15d}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["small", "large"], default="small")
    parser.add_argument("--workloads", help="comma-separated names (default: all)")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    args = parser.parse_args(argv)

    from workloads import WORKLOADS

    names = args.workloads.split(",") if args.workloads else list(WORKLOADS)
    rows = [stats_for(n, WORKLOADS[n].fn, WORKLOADS[n].inputs(args.size)) for n in names]
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
