"""The GPU backend on a real CUDA GPU: every workload of benchmarks/workloads.py compiled for
target `gpu`, checked against hlofuse's CPU backend and the interpreter, and timed beside
XLA:GPU (jax) on the same HLO text.

Both sides are timed end to end as a user calls them: numpy arrays in, numpy arrays out (so
host-to-device and device-to-host copies are inside both timings), interleaved rounds, medians,
after untimed warm-up calls. The GPU runs dots, convolutions and
other library ops on the host (runtime/library_ops.py), so workloads built on them measure that.

Run on a machine with a CUDA GPU and jax's CUDA plugin:
    python3 benchmarks/gpu_device.py [--size small|large] [--rounds N] [--workloads a,b] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def _ms(fn) -> float:
    """Milliseconds one call of `fn` takes."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def run_one(name: str, w, size: str, rounds: int, target: str = "gpu") -> dict:
    """Compile workload `name` for the GPU, check it, time it beside jax on the GPU."""
    import jax
    import numpy as np

    import hlofuse
    from hlofuse.runtime.compare import compare_arrays

    args = w.inputs(size)
    row: dict = {"workload": name, "in_mb": sum(a.nbytes for a in args) / 1e6}
    text = jax.jit(w.fn, keep_unused=True).lower(*args).as_text(dialect="hlo")
    module = hlofuse.parse_hlo(text)
    t0 = time.perf_counter()
    gpu = hlofuse.compile(module, target=target)
    row["compile_s"] = time.perf_counter() - t0
    got = [np.asarray(g) for g in gpu(*args)]
    want = [np.asarray(x) for x in hlofuse.compile(module, target="cpu")(*args)]
    bad = [f"out{i}: {r.message}" for i, (g, x) in enumerate(zip(got, want))
           if not (r := compare_arrays(g, x, i)).ok]
    row["matches_cpu"] = not bad
    row["mismatch"] = bad[:3]
    jitted = jax.jit(w.fn, keep_unused=True)  # jax's default backend: the GPU where its plugin is installed

    def theirs():
        out = jitted(*args)
        return [np.asarray(o) for o in jax.tree_util.tree_leaves(out)]

    def ours():
        return gpu(*args)

    for _ in range(2):
        theirs()
        ours()
    mine, xla = [], []
    for _ in range(rounds):
        mine.append(_ms(ours))
        xla.append(_ms(theirs))
    row["hlofuse_ms"] = statistics.median(mine)
    row["xla_gpu_ms"] = statistics.median(xla)
    row["ratio"] = row["hlofuse_ms"] / row["xla_gpu_ms"]
    row["kernels"] = len(gpu.program.launches)
    return row


def main(argv=None) -> int:
    """Run the workloads on the GPU; print a table (and JSON); exit 1 if any result differs."""
    from workloads import WORKLOADS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=["small", "large"], default="large")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--workloads", help="comma-separated subset")
    p.add_argument("--json", help="also write the rows as JSON here")
    p.add_argument("--target", choices=["gpu", "gpu-emulated"], default="gpu",
                   help="gpu-emulated checks this script where there is no GPU (jax then runs on its CPU)")
    a = p.parse_args(argv)
    names = a.workloads.split(",") if a.workloads else list(WORKLOADS)
    rows = []
    print(f"{'workload':24} {'in MB':>7} {'compile s':>9} {'hlofuse ms':>10} {'XLA:GPU ms':>10} {'ratio':>6}  "
          "matches cpu", flush=True)
    for name in names:
        try:
            r = run_one(name, WORKLOADS[name], a.size, a.rounds, a.target)
        except Exception as e:  # noqa: BLE001 - report and go on with the next workload
            r = {"workload": name, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-1500:]}
            print(f"{name:24} ERROR {r['error'][:200]}", flush=True)
            rows.append(r)
            continue
        rows.append(r)
        print(f"{name:24} {r['in_mb']:7.1f} {r['compile_s']:9.2f} {r['hlofuse_ms']:10.3f} {r['xla_gpu_ms']:10.3f} "
              f"{r['ratio']:6.2f}  {'yes' if r['matches_cpu'] else 'NO ' + '; '.join(r['mismatch'])[:300]}",
              flush=True)
    ok = [r for r in rows if "ratio" in r]
    if ok:
        gm = statistics.geometric_mean([r["ratio"] for r in ok])
        print(f"geometric mean hlofuse/XLA:GPU end-to-end time over {len(ok)} workloads: {gm:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any("error" in r or not r.get("matches_cpu", True) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
