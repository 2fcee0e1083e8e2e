"""The benchmark runner: hlofuse on the CPU vs. numpy op by op (the interpreter) vs. XLA:CPU.

Run:  python benchmarks/run.py [--size large|small] [--repeat N] [--workloads a,b] [--json OUT]

Every workload (benchmarks/workloads.py) is lowered by JAX to HLO, compiled by hlofuse, and
timed side by side with the interpreter and jax.jit on the same inputs in one process; the table
gives medians, ratios, the bandwidth achieved (bytes that must move / time) and this machine's
copy bandwidth measured in the same run, and the compile time (cold and from the on-disk cache).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def median_time(fn, repeat: int, min_seconds: float = 0.0) -> float:
    """Median wall time of `fn()` over `repeat` calls (after one warm-up call)."""
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < repeat or (time.perf_counter() - start < min_seconds and len(times) < 10 * repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_bandwidth(nbytes: int = 64 << 20, repeat: int = 10, threads: int | None = None) -> float:
    """Bytes per second of a large memory copy (read + write counted), numpy's copy split over
    `threads` threads (numpy releases the GIL while copying), default one per core."""
    from concurrent.futures import ThreadPoolExecutor

    threads = threads or os.cpu_count() or 1
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    chunks = np.array_split(np.arange(src.size), threads)
    bounds = [(int(c[0]), int(c[-1]) + 1) for c in chunks if c.size]
    with ThreadPoolExecutor(threads) as pool:
        def copy():
            list(pool.map(lambda b: np.copyto(dst[b[0]:b[1]], src[b[0]:b[1]]), bounds))

        t = median_time(copy, repeat)
    return 2 * nbytes / t


def bytes_moved(args, outputs) -> int:
    """Bytes a perfect implementation must read (inputs) and write (outputs)."""
    return int(sum(np.asarray(a).nbytes for a in args) + sum(np.asarray(o).nbytes for o in outputs))


def run_workload(name: str, fn, args, repeat: int, cache_dir: str) -> dict:
    import jax

    import hlofuse
    from hlofuse.runtime.compare import compare_outputs

    text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    module = hlofuse.parse_hlo(text)
    t0 = time.perf_counter()
    exe = hlofuse.compile(module, target="cpu", cache_dir=cache_dir)
    compile_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    hlofuse.compile(module, target="cpu", cache_dir=cache_dir)
    compile_cached = time.perf_counter() - t0
    interp = hlofuse.compile(module, target="interpreter", fusion=False)

    np_args = [np.asarray(a) for a in args]
    outputs = exe(*np_args)
    reference = interp(*np_args)
    ok = all(r.ok for r in compare_outputs(list(outputs), list(reference)))

    jitted = jax.jit(fn)
    dev_args = [jax.device_put(a) for a in np_args]

    def run_xla():
        out = jitted(*dev_args)
        jax.block_until_ready(out)

    t_hlofuse = median_time(lambda: exe(*np_args), repeat, 0.2)
    t_interp = median_time(lambda: interp(*np_args), max(3, repeat // 3))
    t_xla = median_time(run_xla, repeat, 0.2)
    moved = bytes_moved(np_args, outputs)
    report = exe.report()
    return {
        "workload": name,
        "matches_interpreter": ok,
        "bytes": moved,
        "hlofuse_s": t_hlofuse,
        "numpy_s": t_interp,
        "xla_s": t_xla,
        "speedup_vs_numpy": t_interp / t_hlofuse,
        "time_ratio_vs_xla": t_hlofuse / t_xla,
        "hlofuse_GBps": moved / t_hlofuse / 1e9,
        "xla_GBps": moved / t_xla / 1e9,
        "compile_s": compile_cold,
        "compile_cached_s": compile_cached,
        "kernels": report.get("kernels_after") if isinstance(report, dict) else None,
    }


def geomean(values) -> float:
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def print_table(rows: list[dict], copy_bw: float) -> None:
    print(f"\ncopy bandwidth (numpy copyto on {os.cpu_count()} threads, read+write): {copy_bw / 1e9:.2f} GB/s\n")
    head = (f"| {'workload':22s} | {'MB':>6s} | {'hlofuse ms':>10s} | {'numpy ms':>9s} | {'XLA ms':>8s} | "
            f"{'x numpy':>7s} | {'t/XLA':>6s} | {'GB/s':>6s} | {'%copy':>5s} | {'compile s':>9s} | {'cached ms':>9s} | ok |")
    print(head)
    print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    for r in rows:
        print(f"| {r['workload']:22s} | {r['bytes'] / 1e6:6.1f} | {r['hlofuse_s'] * 1e3:10.3f} | "
              f"{r['numpy_s'] * 1e3:9.3f} | {r['xla_s'] * 1e3:8.3f} | {r['speedup_vs_numpy']:7.2f} | "
              f"{r['time_ratio_vs_xla']:6.2f} | {r['hlofuse_GBps']:6.2f} | "
              f"{100 * r['hlofuse_GBps'] * 1e9 / copy_bw:5.0f} | {r['compile_s']:9.3f} | "
              f"{r['compile_cached_s'] * 1e3:9.1f} | {'yes' if r['matches_interpreter'] else 'NO'} |")
    print(f"\ngeometric mean speed-up over numpy op by op: {geomean([r['speedup_vs_numpy'] for r in rows]):.2f}x")
    print(f"geometric mean time ratio hlofuse / XLA:CPU: {geomean([r['time_ratio_vs_xla'] for r in rows]):.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["small", "large"], default="large")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--workloads", help="comma-separated names (default: all)")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    args = parser.parse_args(argv)

    from workloads import WORKLOADS

    from hlofuse.progress import Progress

    names = args.workloads.split(",") if args.workloads else list(WORKLOADS)
    copy_bw = copy_bandwidth()
    rows = []
    with tempfile.TemporaryDirectory() as cache_dir, Progress(len(names), "benchmarks") as bar:
        for name in names:
            bar.update(0, note=name)
            w = WORKLOADS[name]
            rows.append(run_workload(name, w.fn, w.inputs(args.size), args.repeat, cache_dir))
            bar.update(note=name)
    print_table(rows, copy_bw)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_GBps": copy_bw / 1e9, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
