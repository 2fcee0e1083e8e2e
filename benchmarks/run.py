"""The kernel benchmark suite: hlofuse beside XLA:CPU on the same HLO, with per-kernel figures.

Run:  python benchmarks/run.py [--size large|small] [--rounds 10] [--budget 8] [--workloads a,b]
                               [--profile 4] [--numpy] [--iree] [--json OUT]

Every workload of benchmarks/workloads.py is lowered by JAX to HLO text once; hlofuse compiles
that text and XLA:CPU compiles the very same text (XLA's own parser, through jaxlib; see
real_models.XlaExecutable). Both run in this process on the same inputs, placed once and kept
warm; after two untimed warm-up calls each (first-call work happens there), timing is
interleaved, one call of each per round, the order alternating between rounds, until `--rounds`
rounds or `--budget` seconds; the table gives medians. Both run under the same malloc settings:
the script re-executes itself with GLIBC_TUNABLES set (real_models.MALLOC_TUNABLES). Large
inputs are 24-64 MB (benchmarks/workloads.py), so caches flatter nobody.

Per-kernel figures (benchmarks/kernel_figures.py), measured in the same run:
- the machine's streaming bandwidth, copy and triad on 1 and 2 threads (hlofuse's own kernels,
  and numpy's copy as a check); every workload's achieved GB/s (bytes of its inputs and outputs
  over its median time, the least traffic any implementation has) and its share of the best
  2-thread figure (a workload whose exact computation must read its inputs several times,
  Workload.input_passes, counts every pass: batch-norm training's two-pass variance, 3): %bw2,
  the median's share, the issue's figure; best%, the best round's share (the reference is a
  best of 15 calls, as in STREAM: on a shared machine the median also measures the
  neighbours, and best% compares like with like, though a workload of under twice the L3
  finds part of its inputs there from the call before: row sums of 48 MB, best% 119 at load
  6.7); %rd2, the median's share of the 2-thread read-only stream (kernel_figures.READ_KERNELS:
  the limit of a kernel that only reads, such as a row or column sum; on one thread it is
  below the bar, on two it measured above it, 68.7 against 54.0 GB/s, so it excuses nothing
  there; a kernel that writes as much as it reads has the bar as its limit);
- for transcendental-bound workloads, elements per second (output elements over time) beside
  XLA:CPU's on the same HLO, the vectorised reference;
- for workloads with dots or convolutions, their GFLOP/s (flops over the time of the steps
  computing them, from the native profile: real_models.contraction_rate) and those steps'
  share of a run, beside oneDNN's sgemm peak on all threads measured after the workloads in the
  same run (2048^3, gemm_speed.onednn_peak; printed with the one-thread peak): `format_contraction`;
- `CpuProgram.profile` of the `--profile` slowest workloads (by time against XLA): per kernel,
  its bytes, time, GB/s and share.
With `--iree` (the `iree` extra; a printed note when missing), IREE compiles the same lowering's
StableHLO for llvm-cpu, its outputs are checked against XLA's, and it joins the interleaved
rounds: columns IREE ms, IREE/XLA and hlofuse/IREE (benchmarks/iree_reference.py).
The load (`uptime`) is printed before and after: these machines are shared, so read ratios (the
two sides share the load, round by round) rather than absolute times.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from kernel_figures import (format_profile, geomean, median_seconds, nbytes_of, profile_rows,  # noqa: E402
                            read_bandwidth, reference_bandwidth, stream_bandwidth)
from real_models import XlaExecutable, contraction_rate, reexec_with_malloc_settings  # noqa: E402


# The environment that changes what is measured, printed with every run: the malloc settings,
# hlofuse's kernel threads, and libgomp's wait policy (on a loaded machine libgomp's default
# spinning at its barriers costs a parallel kernel a scheduler time slice; passive does not).
RUNTIME_ENV = ("GLIBC_TUNABLES", "HLOFUSE_CPU_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def uptime() -> str:
    """The machine's `uptime` line (load averages)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"load average: {os.getloadavg()}"


def interleaved(fns: list, rounds: int, budget: float, clock=time.perf_counter) -> list[list[float]]:
    """Seconds (by `clock`: wall by default, `time.process_time` for this process's CPU time) of
    each of `fns` per round, one call of each per round, the order reversed every other round;
    at least 3 rounds, at most `rounds`, stopping after `budget` wall seconds."""
    times: list[list[float]] = [[] for _ in fns]
    deadline = time.perf_counter() + budget
    r = 0
    while r < rounds and (r < 3 or time.perf_counter() < deadline):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for k in order:
            t0 = clock()
            fns[k]()
            times[k].append(clock() - t0)
        r += 1
    return times


def rotated_rounds(calls: dict, rounds: int, measure=None) -> dict[str, list]:
    """What `measure(call)` gives (default: the call's wall seconds) for one call of each of
    `calls` (name -> function) per round, over `rounds` rounds, the order rotated by one every
    round so that none always runs right after another (with three or more, reversing every
    other round, as `interleaved` does, would keep the middle one in the middle)."""
    if measure is None:
        def measure(call) -> float:
            t0 = time.perf_counter()
            call()
            return time.perf_counter() - t0
    out: dict[str, list] = {k: [] for k in calls}
    order = list(calls)
    for r in range(rounds):
        s = r % len(order)
        for k in order[s:] + order[:s]:
            out[k].append(measure(calls[k]))
    return out


def run_workload(name: str, w, size: str, rounds: int, budget: float, cache_dir: str, numpy_too: bool,
                 iree: bool = False) -> tuple[dict, object, list]:
    """Compile, check and time one workload (beside IREE too with `iree`); its row, the hlofuse
    executable and its arguments."""
    import jax

    import hlofuse
    from hlofuse.runtime.compare import compare_outputs

    args = [np.asarray(a, order="C") for a in w.inputs(size)]  # not ascontiguousarray: it makes 0-d 1-d
    lowered = jax.jit(w.fn, keep_unused=True).lower(*args)
    text = lowered.as_text(dialect="hlo")
    module = hlofuse.parse_hlo(text)
    t0 = time.perf_counter()
    exe = hlofuse.compile(module, target="cpu", cache_dir=cache_dir)
    compile_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    hlofuse.compile(module, target="cpu", cache_dir=cache_dir)
    compile_cached = time.perf_counter() - t0
    xla = XlaExecutable(text)
    buffers = xla.place(args)

    ours = list(exe(*args))
    interp = hlofuse.compile(module, target="interpreter", fusion=False)
    ok = all(r.ok for r in compare_outputs(ours, list(interp(*args))))
    theirs = [np.asarray(o) for o in xla(buffers)]
    agrees_xla = all(r.ok for r in compare_outputs(ours, theirs))
    for _ in range(2):  # warm-up: any first-call work of either side happens here, untimed
        exe(*args)
        xla(buffers)
    calls = [lambda: exe(*args), lambda: xla(buffers)]
    iree_fields: dict = {}
    if iree:  # the same lowering's StableHLO, checked against XLA's outputs and warmed up there
        from iree_reference import prepare

        iree_fields, iree_call = prepare(w.fn, args, theirs, stablehlo=lowered.as_text())
        if iree_call is not None:
            calls.append(iree_call)
    t_ours, t_xla, *t_iree = interleaved(calls, rounds, budget)
    moved = w.input_passes * nbytes_of(args) + nbytes_of(ours)
    elements = max((o.size for o in ours), default=0)
    row = {"workload": name, "kind": w.kind, "in_bytes": nbytes_of(args), "out_bytes": nbytes_of(ours),
           "rounds": len(t_ours), "hlofuse_s": statistics.median(t_ours), "xla_s": statistics.median(t_xla),
           "compile_s": compile_cold, "compile_cached_s": compile_cached, "xla_compile_s": xla.compile_seconds,
           "matches_interpreter": ok, "agrees_with_xla": agrees_xla}
    row["ratio"] = row["hlofuse_s"] / row["xla_s"]
    row["hlofuse_GBps"] = moved / row["hlofuse_s"] / 1e9
    row["hlofuse_best_GBps"] = moved / min(t_ours) / 1e9
    row["xla_GBps"] = moved / row["xla_s"] / 1e9
    row["hlofuse_Gelem_s"] = elements / row["hlofuse_s"] / 1e9
    row["xla_Gelem_s"] = elements / row["xla_s"] / 1e9
    row.update(iree_fields)
    if t_iree:
        row["iree_s"] = statistics.median(t_iree[0])
        row["iree_ratio"] = row["iree_s"] / row["xla_s"]
        row["hlofuse_over_iree"] = row["hlofuse_s"] / row["iree_s"]
    if numpy_too:
        row["numpy_s"] = median_seconds(lambda: interp(*args), 3, warmup=1)
    row.update(contraction_rate(exe, args))
    return row, exe, args


def gemm_peaks() -> dict[int, float]:
    """oneDNN's sgemm GFLOP/s on 2048^3 on one and on all threads ({} without libdnnl)."""
    from gemm_speed import onednn_peak

    peaks = {}
    for threads in sorted({1, len(os.sched_getaffinity(0))}):
        p = onednn_peak(2048, threads, 3)
        if p is not None:
            peaks[threads] = p
    return peaks


def format_contraction(rows: list[dict], peaks: dict[int, float]) -> str:
    """A line per workload with dots or convolutions: their GFLOP/s, share of the run and
    percentage of the all-thread sgemm peak `peaks` (threads: GFLOP/s) measured in this run ('' when
    no workload has any)."""
    sel = [r for r in rows if "contraction_gflops" in r]
    if not sel:
        return ""
    top = peaks.get(max(peaks)) if peaks else None
    lines = ["dots and convolutions (GFLOP/s over their steps' time; peak: oneDNN sgemm 2048^3 in this run, "
             + (", ".join(f"{p:.1f} on {t} thread{'s' if t > 1 else ''}" for t, p in sorted(peaks.items()))
                or "not measured: no libdnnl") + "):"]
    for r in sel:
        pct = f", {r['contraction_gflops'] / top * 100:.0f}% of the {max(peaks)}-thread peak" if top else ""
        lines.append(f"  {r['workload']:23s} {r['contraction_gflops']:7.1f} GFLOP/s{pct}, "
                     f"{r['contraction_share'] * 100:.0f}% of the run")
    return "\n".join(lines)


def format_stream(stream: dict[str, float]) -> str:
    """The streaming-bandwidth line of the report."""
    parts = ", ".join(f"{k} {v / 1e9:.1f}" for k, v in stream.items())
    return f"streaming bandwidth, GB/s (best of 15 calls, 64 MB arrays): {parts}"


def iree_cells(r: dict) -> str:
    """The IREE columns of a row: time, IREE/XLA, hlofuse/IREE, or why there are none (a failed
    compile, or outputs that differ from XLA's, marked after the figures)."""
    if "iree_error" in r:
        return f" {'failed':>8s} | {'-':>8s} | {'-':>6s} |"
    if "iree_s" not in r:
        return f" {'-':>8s} | {'-':>8s} | {'-':>6s} |"
    mark = "" if r.get("iree_match", True) else " (IREE differs from XLA)"
    return f" {r['iree_s'] * 1e3:8.3f} | {r['iree_ratio']:8.2f} | {r['hlofuse_over_iree']:6.2f} |{mark}"


def _share(gbps: float | None, bw: float) -> str:
    """A rate's share of a reference (bytes per second) as a table cell, '-' where either is missing."""
    if gbps is None or not bw == bw:  # nan: the reference was not measured
        return f"{'-':>5s}"
    return f"{100 * gbps * 1e9 / bw:5.0f}"


def format_table(rows: list[dict], ref_bw: float, read_bw: float = float("nan")) -> str:
    """The workload table (markdown), the geometric means and the per-kind summary. `ref_bw`: the
    bar (best 2-thread copy or triad); `read_bw`: the 2-thread read-only stream."""
    head = (f"| {'workload':23s} | {'kind':6s} | {'in MB':>6s} | {'out MB':>6s} | {'hlofuse ms':>10s} | "
            f"{'XLA ms':>8s} | {'t/XLA':>6s} | {'GB/s':>6s} | {'XLA GB/s':>8s} | {'%bw2':>5s} | {'best%':>5s} | "
            f"{'%rd2':>5s} | {'Gel/s':>6s} | {'XLA Gel/s':>9s} | {'compile s':>9s} | {'ok':3s} |")
    with_iree = any("iree_s" in r or "iree_error" in r for r in rows)
    if with_iree:  # the --iree columns (benchmarks/iree_reference.py)
        head += f" {'IREE ms':>8s} | {'IREE/XLA':>8s} | {'t/IREE':>6s} |"
    lines = [head, "|" + "|".join("-" * len(c) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['workload']:23s} | FAILED: {r['error'][:150]} |")
            continue
        mem = r["kind"] in ("memory", "transcendental")
        trans = r["kind"] == "transcendental"
        lines.append(
            f"| {r['workload']:23s} | {r['kind'][:6]:6s} | {r['in_bytes'] / 1e6:6.1f} | {r['out_bytes'] / 1e6:6.1f} | "
            f"{r['hlofuse_s'] * 1e3:10.3f} | {r['xla_s'] * 1e3:8.3f} | {r['ratio']:6.2f} | "
            f"{r['hlofuse_GBps']:6.1f} | {r['xla_GBps']:8.1f} | "
            + " | ".join(_share(r.get(key) if mem else None, bw) for key, bw in
                         (("hlofuse_GBps", ref_bw), ("hlofuse_best_GBps", ref_bw), ("hlofuse_GBps", read_bw)))
            + " | "
            + (f"{r['hlofuse_Gelem_s']:6.2f} | {r['xla_Gelem_s']:9.2f}" if trans else f"{'-':>6s} | {'-':>9s}")
            + f" | {r['compile_s']:9.2f} | {'yes' if r['matches_interpreter'] else 'NO'}"
            + ("" if r["agrees_with_xla"] else " (differs from XLA)") + " |"
            + (iree_cells(r) if with_iree else ""))
    ok_rows = [r for r in rows if "ratio" in r]
    lines.append("")
    lines.append(f"geometric mean hlofuse/XLA:CPU time over {len(ok_rows)} workloads: "
                 f"{geomean([r['ratio'] for r in ok_rows]):.2f}x; over 1.1x: "
                 + (", ".join(r["workload"] for r in ok_rows if r["ratio"] > 1.1) or "none"))
    for kind in ("memory", "transcendental", "compute", "loop"):
        sel = [r for r in ok_rows if r["kind"] == kind]
        if sel:
            lines.append(f"  {kind:14s} {len(sel):2d} workloads, geometric mean {geomean([r['ratio'] for r in sel]):.2f}x")
    for key, what in (("iree_ratio", "IREE/XLA:CPU"), ("hlofuse_over_iree", "hlofuse/IREE")):
        sel = [r for r in ok_rows if key in r]
        if sel:
            lines.append(f"geometric mean {what} time over {len(sel)} workloads: {geomean([r[key] for r in sel]):.2f}x")
    if any("numpy_s" in r for r in ok_rows):
        lines.append("interpreter (numpy op by op) ms: "
                     + ", ".join(f"{r['workload']} {r['numpy_s'] * 1e3:.1f}" for r in ok_rows if "numpy_s" in r))
    return "\n".join(lines)


def main(argv=None) -> int:
    """Run the suite and print the report."""
    from iree_reference import add_iree_flag, resolve_iree_flag
    from workloads import WORKLOADS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["small", "large"], default="large")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved timing rounds per workload (at least 3)")
    parser.add_argument("--budget", type=float, default=8.0, help="seconds of timing per workload before stopping early")
    parser.add_argument("--workloads", help=f"comma-separated subset of: {', '.join(WORKLOADS)}")
    parser.add_argument("--profile", type=int, default=4, help="per-kernel profiles of the N slowest workloads against XLA")
    parser.add_argument("--numpy", action="store_true", help="also time the interpreter (numpy op by op; slow)")
    parser.add_argument("--json", help="also write the results as JSON to this file")
    add_iree_flag(parser)
    args = parser.parse_args(argv)
    iree = resolve_iree_flag(args.iree)
    names = args.workloads.split(",") if args.workloads else list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s): {', '.join(unknown)}")

    print(f"before: {uptime()}", flush=True)
    print(" ".join(f"{k}={os.environ.get(k, '')}" for k in RUNTIME_ENV), flush=True)
    stream = stream_bandwidth()
    ref_bw, read_bw = reference_bandwidth(stream, 2), read_bandwidth(stream, 2)
    print(format_stream(stream), flush=True)
    rows, programs, peaks = [], {}, {}
    with tempfile.TemporaryDirectory() as cache_dir:
        for name in names:
            try:
                row, exe, wargs = run_workload(name, WORKLOADS[name], args.size, args.rounds, args.budget,
                                               cache_dir, args.numpy, iree)
            except Exception as e:  # noqa: BLE001 - a failing workload is a row of the table, not the end of the run
                rows.append({"workload": name, "kind": WORKLOADS[name].kind, "error": f"{type(e).__name__}: {e}"})
                print(f"{name}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
                continue
            rows.append(row)
            programs[name] = (exe, wargs)
            print(f"{name}: {row['hlofuse_s'] * 1e3:.2f} ms, XLA {row['xla_s'] * 1e3:.2f} ms, "
                  f"ratio {row['ratio']:.2f} ({row['rounds']} rounds)"
                  + (f", IREE {row['iree_s'] * 1e3:.2f} ms" if "iree_s" in row else "")
                  + (f", IREE failed: {row['iree_error']}" if "iree_error" in row else ""), flush=True)
            for line in row.get("iree_mismatch", []):
                print(f"    IREE differs from XLA: {line}", flush=True)
        print()
        print(format_table(rows, ref_bw, read_bw))
        if any("contraction_gflops" in r for r in rows):
            peaks = gemm_peaks()
        contraction = format_contraction(rows, peaks)
        if contraction:
            print(contraction)
        slowest = sorted((r for r in rows if "ratio" in r), key=lambda r: -r["ratio"])[:max(args.profile, 0)]
        profiles = {}
        for r in slowest:
            exe, wargs = programs[r["workload"]]
            prows, per_run = profile_rows(exe, wargs, runs=3)
            profiles[r["workload"]] = prows
            print()
            print(format_profile(r["workload"], prows, per_run))
    print(f"\nafter: {uptime()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"stream_Bps": stream, "reference_Bps": ref_bw, "read_Bps": read_bw, "rows": rows, "profiles": profiles,
                       "gemm_peaks": peaks, "load": os.getloadavg()}, f, indent=2)
    return 0


if __name__ == "__main__":
    reexec_with_malloc_settings()
    sys.exit(main())
