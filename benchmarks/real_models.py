"""Real models beside XLA:CPU: the same HLO module compiled by hlofuse and by XLA, timed in one process.

Run (needs the `bench` extra: keras, keras-hub, flax, equinox, dm-haiku, optax):

    python benchmarks/real_models.py [--models a,b] [--rounds 15] [--budget 60] [--iree] [--json OUT]

For every model of benchmarks/model_zoo.py: JAX lowers the step to HLO text; hlofuse compiles
that text, and XLA:CPU compiles the very same text (parsed by XLA's HLO parser, through
jaxlib); both run on the same inputs, which are placed once (numpy arrays for hlofuse, device
buffers for XLA) and stay warm. Timing is interleaved — each round times one hlofuse call and
one XLA call — after two untimed warm-up calls each (any first-call work or tuning happens
there); the table gives medians, the ratio hlofuse/XLA, the geometric mean, compile times and
whether the outputs agree (`match`: `yes`; `f64` where they differ but hlofuse is as close as
XLA to the same program run in f64, benchmarks/precise_reference.py; else `NO`). Both sides run under the same malloc settings: the script re-executes
itself with GLIBC_TUNABLES set (below) when it is not already set, since glibc reads it at start.
The machine's load (`uptime`) is printed with the table: these machines are shared.
Every row also keeps hlofuse's compile stages (`compile_stages`: the passes, planning, emission,
LLVM, the driver; the compile's process CPU and the load when it began) in the JSON; a compile
slower than its expectation (`slow_compile`) prints them under its row, and one still running
after --stall-dump seconds writes every thread's stack to stderr (faulthandler), so a stalled
or pathological compile in a long run says where its time went.
With `--iree` (needs the `iree` extra; a printed note when missing) IREE compiles the same
lowering's StableHLO for llvm-cpu and is timed in the same rounds, after a check of its outputs
against XLA's: columns IREE ms, IREE/XLA and hlofuse/IREE (benchmarks/iree_reference.py).
`dot GF/s` is what hlofuse's dots and convolutions achieve (their flops over the time of the
steps computing them, from the native per-step profile), `dot %` those steps' share of a run,
and `% peak` the rate against oneDNN's sgemm peak on this machine's threads, measured at the
start of the same run (benchmarks/gemm_speed.py's onednn_peak, 2048^3; printed with the
one-thread peak).
"""
from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import math
import os
import statistics
import sys
import time

MALLOC_TUNABLES = ("glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296:"
                   "glibc.malloc.top_pad=67108864")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def reexec_with_malloc_settings() -> None:
    """Re-execute this script with GLIBC_TUNABLES=MALLOC_TUNABLES unless already set so (glibc
    reads it only at start)."""
    if os.environ.get("GLIBC_TUNABLES") != MALLOC_TUNABLES:
        os.environ["GLIBC_TUNABLES"] = MALLOC_TUNABLES
        os.execv(sys.executable, [sys.executable, *sys.argv])


_reexec_with_malloc_settings = reexec_with_malloc_settings  # the name benchmarks/kernel_limits.py imports


class XlaExecutable:
    """An HLO module compiled by XLA:CPU from its text (XLA's own parser), run on device buffers:
    hlofuse's `--compare xla` reference (runtime/xla_reference.py), called on placed buffers."""

    def __init__(self, text: str) -> None:
        from hlofuse.runtime.xla_reference import compile_for_xla_cpu

        self._exe = compile_for_xla_cpu(text)
        self.compile_seconds = self._exe.compile_seconds  # XLA:CPU's compile alone, wall seconds

    def place(self, args: list):
        """Device buffers of `args` (placed once, outside the timed calls)."""
        return self._exe.place(args)

    def __call__(self, buffers: list) -> list:
        return self._exe.run_placed(buffers)


# A compile is slow (its stages printed under the row) when it takes more than SLOW_FACTOR times
# XLA:CPU's compile of the same module in the same process, and at least SLOW_MIN_S. One
# all-models --iree run (load 8) compiled keras MobileNetV2 in 66 s where an isolated cold compile
# takes 2.9-5 s at that load, and nothing said where the time went. In an all-models run at
# load 0.9-8.4 hlofuse took 0.7-3.6x XLA's time, and 15x on the flax MNIST CNN, whose 0.41 s
# against XLA's 0.03 SLOW_MIN_S leaves out.
SLOW_FACTOR = 8.0
SLOW_MIN_S = 5.0
# Seconds after which a compile still running dumps every thread's stack to stderr (0: never).
STALL_DUMP_S = 30.0


# The stages of `compile_stages` that follow one another on the compiling thread (the driver's
# and the lanes' run beside them): the wall time outside them is `other` (the module cache's key
# and look-up, verification, the driver program's plan, storing the module entry, the memory
# check), 0.14-0.28 s in a process's first compile at load 2 (MobileNetV2, haiku's ResNet-18
# step). The 66 s compile (S7-F's run, 12:47:33-12:48:39) had 62 s before its code generation:
# its module entry holds its code generation stages (4.2 s) and its kernels' cache files were
# written in its last 3.5 s; whether the passes or `other` took them, these figures now say.
SEQUENTIAL_STAGES = ("passes", "planning", "cache", "emission", "llvm wait", "loading", "module cache")


@contextlib.contextmanager
def stall_dump(seconds: float, file=None):
    """While the block runs, have faulthandler write every thread's stack to `file` (a file with
    a descriptor; stderr by default) if it is still running after `seconds` (nothing when
    `seconds` <= 0). Process-wide: replaces any pending dump_traceback_later of the process."""
    if seconds <= 0:
        yield
        return
    faulthandler.dump_traceback_later(seconds, repeat=False, file=file if file is not None else sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def timed_compile(module, stall_s: float = STALL_DUMP_S):
    """hlofuse's compile of `module` for the CPU under `stall_dump(stall_s)`: (executable, its
    stages as `compile_stages` gives them, with `wall` and this process's `cpu` seconds, the
    1-minute `load` when it began, and `other`: the wall seconds outside SEQUENTIAL_STAGES)."""
    import hlofuse

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cpu0, start = time.process_time(), time.perf_counter()
    with stall_dump(stall_s):
        exe = hlofuse.compile(module, target="cpu")
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    stages = {"wall": wall, "cpu": cpu, "load": load, **compile_stages(exe)}
    stages["other"] = wall - sum(stages.get(k, 0.0) for k in SEQUENTIAL_STAGES)
    return exe, stages


def compile_stages(exe) -> dict:
    """Seconds of an executable's compile by stage: `passes` (the pass pipeline's sum) and its
    slowest pass `slowest pass`, then CpuCode.timings (codegen/cpu.py compile_cpu: planning,
    cache, emission, LLVM optimization and code generation summed over kernels wherever they
    ran, llvm wait, driver, loading; `module cache` for a module-cache hit)."""
    stages = {}
    timings = exe.timings()
    if timings:
        stages["passes"] = sum(t for _, t, _ in timings)
        name, seconds, _ = max(timings, key=lambda t: t[1])
        stages["slowest pass"] = seconds
        stages["slowest pass name"] = name
    code = getattr(getattr(exe, "program", None), "code", None)
    stages.update(getattr(code, "timings", None) or {})
    return stages


def slow_compile(row: dict) -> bool:
    """Whether a row's hlofuse compile took more than SLOW_FACTOR times XLA:CPU's and at least
    SLOW_MIN_S seconds."""
    ours = row.get("hlofuse_compile_s", 0.0)
    return ours >= SLOW_MIN_S and ours > SLOW_FACTOR * row.get("xla_compile_s", 0.0)


def stage_line(stages: dict) -> str:
    """`timed_compile`'s figures in one line, in the order the stages ran: each stage's seconds
    (the slowest pass named), the load as a load average."""
    name = stages.get("slowest pass name")
    return ", ".join(f"{k} {v:.2f}" if k != "slowest pass" else f"slowest pass ({name}) {v:.2f}"
                     for k, v in stages.items() if k != "slowest pass name")


def _load() -> str:
    try:
        return os.getloadavg().__repr__()
    except OSError:
        return "unknown"


def contraction_rate(exe, args: list, runs: int = 3) -> dict:
    """GFLOP/s of the model's dots and convolutions: their floating-point operations over the
    time of the steps that compute them, from the native driver's per-step profile
    (runtime/profile.py; `runs` calls after the timed ones), and those steps' share of a run.
    Empty when the module has no dot or convolution."""
    from hlofuse.runtime.io import check_arguments
    from hlofuse.runtime.profile import step_flops

    steps, seconds, calls, wall = exe.program.profile(check_arguments(exe.program.module, args), runs)
    flops = secs = 0.0
    for ns in steps:
        if ns.kind != "kernel" or int(calls[ns.id]) == 0:
            continue
        f = step_flops(ns)
        if f:
            flops += f * int(calls[ns.id])
            secs += float(seconds[ns.id])
    if not flops or secs <= 0:
        return {}
    return {"contraction_gflops": flops / secs / 1e9, "contraction_share": secs / max(wall, 1e-12)}


def precise_judgement(model, ours, theirs, differing: list[int]) -> dict:
    """Where hlofuse differs from XLA:CPU: the same program in f64 as a third opinion
    (precise_reference.py): `precise_ok` whether every differing output of hlofuse is as close
    to it as XLA's (None: no f64 run possible), and `precise` the verdicts' lines."""
    from precise_reference import f64_outputs, judge

    precise = f64_outputs(model.fn, list(model.args))
    verdicts = judge(list(ours), theirs, precise, differing) if precise is not None else None
    if verdicts is None:
        return {"precise_ok": None}
    return {"precise_ok": all(v.ok for v in verdicts), "precise": [v.line() for v in verdicts][:3]}


def match_word(row: dict) -> str:
    """The table's `match` cell: `yes` (hlofuse's outputs agree with XLA's), `f64` (they differ,
    but each differing output is as close to the program run in f64 as XLA's), else `NO`."""
    if row["match"]:
        return "yes"
    return "f64" if row.get("precise_ok") else "NO"


def run_model(name: str, rounds: int, budget: float, iree: bool = False, stall_s: float = STALL_DUMP_S) -> dict:
    """Build, compile (both, and IREE with `iree`), check and time one model; a row of the table."""
    import jax
    import numpy as np

    import hlofuse
    from hlofuse.runtime.compare import compare_outputs
    from model_zoo import BUILDERS

    model = BUILDERS[name]()
    # keep_unused: jax would drop unused parameters from the HLO, and the arguments would no
    # longer line up with the parameters
    lowered = jax.jit(model.fn, keep_unused=True).lower(*model.args)
    text = lowered.as_text(dialect="hlo")
    module = hlofuse.parse_hlo(text)
    row = {"model": name, "library": model.library, "kind": model.kind,
           "instructions": sum(len(c.instructions) for c in module.computations),
           "input_mb": model.input_bytes() / 1e6}
    exe, row["compile_stages"] = timed_compile(module, stall_s)
    row["hlofuse_compile_s"] = row["compile_stages"]["wall"]
    xla = XlaExecutable(text)
    row["xla_compile_s"] = xla.compile_seconds

    # C order without np.ascontiguousarray, which turns a 0-d array (optax's step count) into shape [1]
    args = [np.asarray(a, order="C") for a in model.args]
    buffers = xla.place(args)
    ours = exe(*args)
    theirs = [np.asarray(o) for o in xla(buffers)]
    results = compare_outputs(list(ours), theirs)
    row["match"] = all(r.ok for r in results)
    if not row["match"]:
        row["mismatch"] = [r.line() for r in results if not r.ok][:3]
        row.update(precise_judgement(model, ours, theirs, [r.index for r in results if not r.ok]))
    exe(*args)
    xla(buffers)  # second warm-up call each
    iree_call = None
    if iree:  # the same lowering's StableHLO, checked against XLA's outputs (benchmarks/iree_reference.py)
        from iree_reference import prepare

        fields, iree_call = prepare(model.fn, args, theirs, stablehlo=lowered.as_text())
        row.update(fields)

    t_ours, t_xla, t_iree = [], [], []
    deadline = time.perf_counter() + budget
    while len(t_ours) < rounds and (len(t_ours) < 3 or time.perf_counter() < deadline):
        t0 = time.perf_counter()
        exe(*args)
        t1 = time.perf_counter()
        xla(buffers)
        t2 = time.perf_counter()
        t_ours.append(t1 - t0)
        t_xla.append(t2 - t1)
        if iree_call is not None:
            iree_call()
            t_iree.append(time.perf_counter() - t2)
    row.update(contraction_rate(exe, args))
    row["rounds"] = len(t_ours)
    row["hlofuse_ms"] = statistics.median(t_ours) * 1e3
    row["xla_ms"] = statistics.median(t_xla) * 1e3
    row["ratio"] = row["hlofuse_ms"] / row["xla_ms"]
    if t_iree:
        row["iree_ms"] = statistics.median(t_iree) * 1e3
        row["iree_ratio"] = row["iree_ms"] / row["xla_ms"]
        row["hlofuse_over_iree"] = row["hlofuse_ms"] / row["iree_ms"]
    return row


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    from iree_reference import add_iree_flag, format_cell, resolve_iree_flag
    from model_zoo import BUILDERS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help=f"comma-separated subset of: {', '.join(BUILDERS)}")
    p.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds per model (at least 3)")
    p.add_argument("--budget", type=float, default=60.0, help="seconds of timing per model before stopping early")
    p.add_argument("--json", help="also write the rows to this JSON file")
    p.add_argument("--stall-dump", type=float, default=STALL_DUMP_S,
                   help="seconds after which a compile still running writes every thread's stack to stderr (0: never)")
    p.add_argument("--compile-stages", action="store_true",
                   help="print every model's compile stages, not only a slow compile's")
    add_iree_flag(p)
    args = p.parse_args(argv)
    iree = resolve_iree_flag(args.iree)
    names = args.models.split(",") if args.models else list(BUILDERS)
    unknown = [n for n in names if n not in BUILDERS]
    if unknown:
        p.error(f"unknown model(s): {', '.join(unknown)}")

    print(f"load average before: {_load()}", flush=True)
    from gemm_speed import onednn_peak

    peak = onednn_peak(2048, os.cpu_count() or 1, 3)
    if peak is not None:
        print(f"GEMM peak (oneDNN sgemm 2048^3): 1 thread {onednn_peak(2048, 1, 3):.1f}, "
              f"{os.cpu_count()} threads {peak:.1f} GFLOP/s", flush=True)
    rows = []
    header = (f"{'model':26s} {'library':14s} {'kind':9s} {'insts':>6s} {'in MB':>7s} {'hlofuse ms':>11s} "
              f"{'XLA ms':>9s} {'ratio':>7s} {'compile s':>10s} {'XLA cmp s':>9s} match {'dot GF/s':>8s} {'dot %':>5s} {'% peak':>6s}"
              + (f" {'IREE ms':>9s} {'IREE/XLA':>8s} {'hf/IREE':>8s}" if iree else ""))
    print(header, flush=True)
    for name in names:
        try:
            row = run_model(name, args.rounds, args.budget, iree, args.stall_dump)
        except ImportError as e:
            print(f"{name:26s} skipped: {e}", flush=True)
            continue
        except Exception as e:  # noqa: BLE001 - a failing model is a row of the table, not the end of the run
            print(f"{name:26s} FAILED: {type(e).__name__}: {str(e)[:200]}", flush=True)
            rows.append({"model": name, "error": f"{type(e).__name__}: {e}"})
            continue
        rows.append(row)
        print(f"{row['model']:26s} {row['library']:14s} {row['kind']:9s} {row['instructions']:6d} "
              f"{row['input_mb']:7.1f} {row['hlofuse_ms']:11.2f} {row['xla_ms']:9.2f} {row['ratio']:7.2f} "
              f"{row['hlofuse_compile_s']:10.2f} {row['xla_compile_s']:9.2f} {match_word(row):5s}"
              + (f" {row['contraction_gflops']:8.1f} {row['contraction_share'] * 100:5.0f}"
                 + (f" {row['contraction_gflops'] / peak * 100:6.0f}" if peak else f" {'-':>6s}")
                 if "contraction_gflops" in row else f" {'-':>8s} {'-':>5s} {'-':>6s}")
              + (f" {format_cell(row, 'iree_ms', 9)} {format_cell(row, 'iree_ratio')} "
                 f"{format_cell(row, 'hlofuse_over_iree')}" if iree else ""), flush=True)
        if args.compile_stages or slow_compile(row):
            print(f"    {'slow ' if slow_compile(row) else ''}compile, seconds: {stage_line(row['compile_stages'])}",
                  flush=True)
        for line in row.get("mismatch", []):
            print(f"    differs from XLA: {line}", flush=True)
        for line in row.get("precise", []):
            print(f"    {line}", flush=True)
        if row.get("precise_ok", False) is None:
            print("    no f64 run of the program to judge the difference by", flush=True)
        for line in row.get("iree_mismatch", []):
            print(f"    IREE differs from XLA: {line}", flush=True)
        if "iree_error" in row:
            print(f"    IREE failed: {row['iree_error']}", flush=True)
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"geometric mean of hlofuse/XLA time over {len(ratios)} models: {geo:.2f}x")
    for key, what in (("iree_ratio", "IREE/XLA"), ("hlofuse_over_iree", "hlofuse/IREE")):
        vals = [r[key] for r in rows if key in r]
        if vals:
            print(f"geometric mean of {what} time over {len(vals)} models: "
                  f"{math.exp(sum(math.log(v) for v in vals) / len(vals)):.2f}x")
    print(f"load average after: {_load()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "malloc": MALLOC_TUNABLES}, f, indent=2)
    return 0


if __name__ == "__main__":
    reexec_with_malloc_settings()
    sys.exit(main())
