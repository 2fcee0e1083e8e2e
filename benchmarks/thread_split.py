"""Where each side's threads spend a call: hlofuse, XLA:CPU and IREE on the same workload, with
every thread's CPU time and run-queue wait per call (issue 14 item 3: why a kernel scales worse
on two threads than on one).

Run:  python benchmarks/thread_split.py [--workloads gelu_tanh,...] [--rounds 30] [--no-iree]
      python benchmarks/thread_split.py --models keras_hub_gpt2,haiku_lstm_scan   (real models,
                                                             benchmarks/model_zoo.py)
      python benchmarks/thread_split.py --models keras_hub_gpt2 --after   (hlofuse's call right
                                                             after each other side's call)
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
little. Each thread is named by its name in /proc (`comm`: libgomp's workers and the calling
thread carry the process's name, XLA's pool `tf_XLAEigen`, IREE's workers `iree-worker-N`), so
another runtime's threads that ran (spun) during hlofuse's calls show up in its row; the
calling thread is `caller`. With `--after` hlofuse's call is timed right after a call of each
side (itself, XLA, IREE) and after that call and a PAUSE_S sleep, in rotated rounds: if
another runtime's workers kept spinning after their call, they would take CPU during the
next hlofuse call and slow it against the paused rows; the column `foreign CPU` is the
median CPU those threads took during our calls. Only threads alive before and after a call are
seen (pool threads: libgomp's, XLA's, IREE's workers; a thread started and ended within the
call is not). Reading the counters costs the calling thread about 0.2 ms per call (17
threads), inside its CPU figure.

What it showed for gelu_tanh (docs/native_runtime.md, "Two threads on a busy host"): under load
4-7 on the 2-core host hlofuse's libgomp worker waits on the run queue for most of a call and
computes 1-2 of the kernel's 8 chunks, so two threads take the one-thread time; IREE's workers
fare no better, and IREE's calling thread spins (a PAUSE loop) while its workers run. For
keras-hub GPT-2 and haiku's LSTM with `--after` (docs/native_runtime.md, "Other runtimes'
threads"): XLA's and IREE's threads took no CPU during hlofuse's calls, and hlofuse right after
them was no slower than after the pause.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
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


# The pause of `--after`'s control rows: longer than XLA's (Eigen's) and IREE's workers may spin
# after a call before they sleep.
PAUSE_S = 0.02


def thread_name(tid: int) -> str:
    """The thread's name (/proc/self/task/<tid>/comm; `caller` for the thread that calls the
    sides), or "?" once it has ended."""
    if tid == threading.get_native_id():
        return "caller"
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


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


def build(name: str, size: str, iree: bool, cache_dir: str, model: bool = False) -> dict:
    """The sides' zero-argument calls for workload `name` (a model of benchmarks/model_zoo.py
    with `model`), after checking and two warm-ups."""
    import jax

    import hlofuse

    if model:
        from model_zoo import BUILDERS

        m = BUILDERS[name]()
        fn, args = m.fn, [np.asarray(a, order="C") for a in m.args]
    else:
        from workloads import WORKLOADS

        w = WORKLOADS[name]
        fn, args = w.fn, [np.asarray(a, order="C") for a in w.inputs(size)]
    lowered = jax.jit(fn, keep_unused=True).lower(*args)
    text = lowered.as_text(dialect="hlo")
    exe = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache_dir=cache_dir)
    xla = XlaExecutable(text)
    buffers = xla.place(args)
    theirs = [np.asarray(o) for o in xla(buffers)]
    calls = {"hlofuse": lambda: exe(*args), "xla": lambda: xla(buffers)}
    if iree:
        from iree_reference import prepare

        fields, call = prepare(fn, args, theirs, stablehlo=lowered.as_text())
        if call is None:
            print(f"{name}: IREE failed: {fields.get('iree_error')}")
        else:
            calls["iree"] = call
    for _ in range(2):
        for c in calls.values():
            c()
    return calls


def after_samples(calls: dict, rounds: int, pause: float = PAUSE_S) -> dict[str, list]:
    """hlofuse's measured calls (`measured_call`) right after one call of each side, and after
    that call and `pause` seconds, rotated over `rounds` rounds: condition -> samples."""
    ours = calls["hlofuse"]
    conds = {}
    for k, c in calls.items():
        conds[f"after {k}"] = c
        conds[f"after {k} + {pause * 1e3:.0f} ms"] = lambda c=c: (c(), time.sleep(pause))
    samples: dict[str, list] = {k: [] for k in conds}
    order = list(conds)
    for r in range(rounds):
        s = r % len(order)
        for k in order[s:] + order[:s]:
            conds[k]()
            samples[k].append(measured_call(ours))
    return samples


def foreign_cpu(spent: dict[int, tuple[int, int]]) -> int:
    """CPU ns of threads named other than the process (its own threads, libgomp's workers among
    them, carry its name): XLA's and IREE's pools."""
    with open("/proc/self/comm") as f:
        own = f.read().strip()
    return sum(run for tid, (run, _) in spent.items() if thread_name(tid) not in (own, "caller"))


def print_samples(samples: dict[str, list], width: int = 8) -> None:
    """A line per side or condition: wall (min, quartiles), CPU, the busiest threads' medians,
    and the median CPU of other runtimes' threads (`foreign_cpu`) during the calls."""
    for k, v in samples.items():
        wall, threads = side_summary(v)
        foreign = statistics.median(foreign_cpu(spent) for _, spent in v) / 1e6
        cells = ", ".join(f"{thread_name(tid)} {run / 1e6:.2f}/{wait / 1e6:.2f}" for run, wait, tid in threads[:5])
        cpu = sum(run for run, _, _ in threads) / 1e6
        walls = sorted(w for w, _ in v)
        print(f"  {k:{width}s} wall {wall * 1e3:7.2f} (min {walls[0] * 1e3:.2f}, quartiles "
              f"{walls[len(walls) // 4] * 1e3:.2f}-{walls[3 * len(walls) // 4] * 1e3:.2f})  CPU {cpu:7.2f}  "
              f"foreign CPU {foreign:.2f}  threads: {cells}", flush=True)


def main(argv=None) -> int:
    """Measure and print the per-thread table of each workload."""
    from hlofuse.runtime.cpu_threads import kernel_threads

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="gelu_tanh")
    p.add_argument("--models", help="real models of benchmarks/model_zoo.py instead of workloads")
    p.add_argument("--size", default="large", choices=["small", "large"])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--no-iree", action="store_true")
    p.add_argument("--after", action="store_true", help="time hlofuse's call after each side's call (module doc)")
    a = p.parse_args(argv)
    print(f"before: {uptime()}; affinity {len(os.sched_getaffinity(0))} cores, hlofuse kernel threads "
          f"{kernel_threads()}", flush=True)
    with tempfile.TemporaryDirectory() as cache_dir:
        names = (a.models or a.workloads).split(",")
        for name in names:
            calls = build(name, a.size, not a.no_iree, cache_dir, model=bool(a.models))
            if a.after:
                print(f"\n{name} ({a.rounds} rounds): hlofuse's call after each side's; median wall ms; "
                      "per thread median CPU ms / run-queue wait ms", flush=True)
                print_samples(after_samples(calls, a.rounds), width=22)
                continue
            samples: dict[str, list] = {k: [] for k in calls}
            order = list(calls)
            for r in range(a.rounds):
                s = r % len(order)
                for k in order[s:] + order[:s]:
                    samples[k].append(measured_call(calls[k]))
            print(f"\n{name} ({a.rounds} rounds): median wall ms; per thread median CPU ms / run-queue wait ms")
            print_samples(samples)
    print(f"\nafter: {uptime()}")
    return 0


if __name__ == "__main__":
    reexec_with_malloc_settings()
    sys.exit(main())
