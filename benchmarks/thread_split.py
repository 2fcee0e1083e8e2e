"""Where each side's threads spend a call: hlofuse, XLA:CPU and IREE on the same workload, with
every thread's CPU time and run-queue wait per call (issue 14 item 3: why a kernel scales worse
on two threads than on one).

Run:  python benchmarks/thread_split.py [--workloads gelu_tanh,...] [--rounds 30] [--no-iree]
      taskset -c 0 python benchmarks/thread_split.py ...     (the one-thread figures: every side
                                                             sizes its pool by the affinity mask)

The sides are built as benchmarks/run.py builds them (same lowering, placed inputs, hlofuse's
outputs recycled by its pool, XLA's and IREE's results dropped after each call) and timed in
interleaved rounds, one call of each per round. Around every call each thread of the process is
read: its CPU time from its own CPU clock (clock_gettime, up to date even while it runs) and its
run-queue wait from /proc/self/task/<tid>/schedstat (nanoseconds runnable but waiting for a CPU,
counted when the thread gets one: a call's share is approximate). A side's threads are those
that ran during its calls; the table gives, per side, the median wall time (min, quartiles),
and per thread that ran (busiest first) its median CPU time and run-queue wait per call. A
second thread whose CPU time is half the first's and whose wait is small did its share; a large
wait means the machine had no core for it (load), a small CPU time that the split gave it
little. Only threads alive before and after a call are seen (pool threads: libgomp's, XLA's,
IREE's workers; a thread started and ended within the call is not). Reading the counters costs
the calling thread about 0.2 ms per call (17 threads), inside its CPU figure.

What it showed for gelu_tanh (docs/native_runtime.md, "Two threads on a busy host"): under load
4-7 on the 2-core host hlofuse's libgomp worker waits on the run queue for most of a call and
computes 1-2 of the kernel's 8 chunks, so two threads take the one-thread time; IREE's workers
fare no better, and IREE's calling thread spins (a PAUSE loop) while its workers run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from real_models import XlaExecutable, reexec_with_malloc_settings  # noqa: E402
from run import uptime  # noqa: E402


def _cpu_clock(tid: int) -> int:
    """The CPU-time clock id of thread `tid` of this process (the kernel's MAKE_THREAD_CPUCLOCK:
    per-thread, CPUCLOCK_SCHED), which clock_gettime reads up to date even while it runs;
    schedstat's run time is updated only at a tick or a switch."""
    return (~tid << 3) | 6


def thread_counters() -> dict[int, tuple[int, int]]:
    """Every thread of this process: tid -> (ns on a CPU, ns waiting on a run queue; the wait
    as schedstat has it: counted when the thread gets a CPU, so a call's share is approximate)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                _, wait, _ = f.read().split()
            run = time.clock_gettime_ns(_cpu_clock(int(tid)))
        except (OSError, ValueError):
            continue  # a thread that ended between the listing and the read
        out[int(tid)] = (run, int(wait))
    return out


def measured_call(call) -> tuple[float, dict[int, tuple[int, int]]]:
    """Wall seconds of `call()` and each thread's (CPU ns, wait ns) spent during it."""
    before = thread_counters()
    t0 = time.perf_counter()
    call()
    wall = time.perf_counter() - t0
    after = thread_counters()
    spent = {}
    for tid, (run, wait) in after.items():
        r0, w0 = before.get(tid, (0, 0))
        if run - r0 > 0 or wait - w0 > 0:
            spent[tid] = (run - r0, wait - w0)
    return wall, spent


def side_summary(samples: list[tuple[float, dict]], min_share: float = 0.02) -> tuple[float, list]:
    """Median wall seconds and, per thread that did at least `min_share` of the busiest thread's
    work (busiest first), its median CPU and wait ns per call."""
    walls = [w for w, _ in samples]
    per: dict[int, tuple[list, list]] = {tid: ([], []) for _, spent in samples for tid in spent}
    for _, spent in samples:
        for tid, (runs, waits) in per.items():
            run, wait = spent.get(tid, (0, 0))
            runs.append(run)
            waits.append(wait)
    rows = sorted(((statistics.median(r), statistics.median(w), tid) for tid, (r, w) in per.items()), reverse=True)
    top = rows[0][0] if rows else 0
    return statistics.median(walls), [row for row in rows if row[0] >= min_share * top or row[1] > 1e5]


def build(name: str, size: str, iree: bool, cache_dir: str) -> dict:
    """The sides' zero-argument calls for workload `name`, after checking and two warm-ups."""
    import jax

    import hlofuse
    from workloads import WORKLOADS

    w = WORKLOADS[name]
    args = [np.asarray(a, order="C") for a in w.inputs(size)]
    lowered = jax.jit(w.fn, keep_unused=True).lower(*args)
    text = lowered.as_text(dialect="hlo")
    exe = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache_dir=cache_dir)
    xla = XlaExecutable(text)
    buffers = xla.place(args)
    theirs = [np.asarray(o) for o in xla(buffers)]
    calls = {"hlofuse": lambda: exe(*args), "xla": lambda: xla(buffers)}
    if iree:
        from iree_reference import prepare

        fields, call = prepare(w.fn, args, theirs, stablehlo=lowered.as_text())
        if call is None:
            print(f"{name}: IREE failed: {fields.get('iree_error')}")
        else:
            calls["iree"] = call
    for _ in range(2):
        for c in calls.values():
            c()
    return calls


def main(argv=None) -> int:
    """Measure and print the per-thread table of each workload."""
    from hlofuse.runtime.cpu_threads import kernel_threads

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="gelu_tanh")
    p.add_argument("--size", default="large", choices=["small", "large"])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--no-iree", action="store_true")
    a = p.parse_args(argv)
    print(f"before: {uptime()}; affinity {len(os.sched_getaffinity(0))} cores, hlofuse kernel threads "
          f"{kernel_threads()}", flush=True)
    with tempfile.TemporaryDirectory() as cache_dir:
        for name in a.workloads.split(","):
            calls = build(name, a.size, not a.no_iree, cache_dir)
            samples: dict[str, list] = {k: [] for k in calls}
            order = list(calls)
            for r in range(a.rounds):
                s = r % len(order)
                for k in order[s:] + order[:s]:
                    samples[k].append(measured_call(calls[k]))
            print(f"\n{name} ({a.rounds} rounds): median wall ms; per thread median CPU ms / run-queue wait ms")
            for k in order:
                wall, threads = side_summary(samples[k])
                cells = ", ".join(f"{run / 1e6:.2f}/{wait / 1e6:.2f}" for run, wait, _ in threads[:4])
                cpu = sum(run for run, _, _ in threads) / 1e6
                walls = sorted(w for w, _ in samples[k])
                print(f"  {k:8s} wall {wall * 1e3:7.2f} (min {walls[0] * 1e3:.2f}, quartiles "
                      f"{walls[len(walls) // 4] * 1e3:.2f}-{walls[3 * len(walls) // 4] * 1e3:.2f})  CPU {cpu:7.2f}  "
                      f"threads: {cells}")
    print(f"\nafter: {uptime()}")
    return 0


if __name__ == "__main__":
    reexec_with_malloc_settings()
    sys.exit(main())
