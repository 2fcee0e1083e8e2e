"""benchmarks/thread_split.py: its per-thread counters give each thread's own CPU time (the
thread that did the work, not the one that waited for it), and its summary takes per-thread
medians, busiest first."""
from __future__ import annotations

import sys
import threading
import time

import pytest

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import thread_split  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")


def _spin(seconds: float) -> float:
    """Burn `seconds` of this thread's CPU; the CPU seconds it took by the thread's own clock."""
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        pass
    return time.thread_time() - t0


def test_counters_follow_the_running_thread_clock():
    import threading as th

    me = th.get_native_id()
    outer0 = time.thread_time_ns()
    before = thread_split.thread_counters()[me][0]
    spent = _spin(0.02)
    after = thread_split.thread_counters()[me][0]
    outer = time.thread_time_ns() - outer0
    # The counter's interval holds the spin and part of the two readings (listing every thread's
    # files costs this thread CPU time, more in a busy process), and lies inside the thread's
    # clock around both readings. Read while running: schedstat's run time would lag by up to a
    # tick (4 ms), which these bounds catch in a spin of 20 ms.
    assert spent * 1e9 <= after - before <= outer


def test_measured_call_charges_the_worker_not_the_caller():
    # A pool-like worker: alive before and after the call (a thread that has ended is no longer
    # listed, so only pool threads, as libgomp's, IREE's and XLA's, are counted).
    go, done, leave = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def worker():
        seen["tid"] = threading.get_native_id()
        go.wait()
        seen["cpu"] = _spin(0.03)
        done.set()
        leave.wait()

    t = threading.Thread(target=worker)
    t.start()
    while "tid" not in seen:
        time.sleep(0.001)

    def call():
        go.set()
        done.wait()  # the caller sleeps here: its CPU stays small

    try:
        wall, spent = thread_split.measured_call(call)
    finally:
        leave.set()
        t.join()
    worker_cpu = spent[seen["tid"]][0]
    caller_cpu = spent.get(threading.get_native_id(), (0, 0))[0]
    assert worker_cpu >= 0.9 * seen["cpu"] * 1e9
    assert caller_cpu < worker_cpu / 2
    assert wall >= seen["cpu"] * 0.9


def test_side_summary_medians_busiest_first_and_small_threads_left_out():
    samples = [(0.010, {1: (8_000_000, 0), 2: (3_000_000, 500_000), 3: (10_000, 0)}),
               (0.012, {1: (9_000_000, 0), 2: (2_000_000, 700_000)}),
               (0.011, {1: (7_000_000, 0), 2: (4_000_000, 600_000), 3: (20_000, 0)})]
    wall, threads = thread_split.side_summary(samples)
    assert wall == 0.011
    assert [(run, wait, tid) for run, wait, tid in threads] == [(8_000_000, 0, 1), (3_000_000, 600_000, 2)]


def test_foreign_cpu_counts_only_threads_named_other_than_the_process():
    # Another runtime's pool thread (named as IREE names its workers) and one of our own
    # (libgomp's workers carry the process's name) both burn CPU during the call.
    go, leave = threading.Event(), threading.Event()
    seen = {}

    def worker(key: str, rename: bool):
        tid = threading.get_native_id()
        if rename:
            with open(f"/proc/self/task/{tid}/comm", "w") as f:
                f.write("iree-worker-0")
        seen[key] = tid
        go.wait()
        seen[key + "_cpu"] = _spin(0.02)
        leave.wait()

    threads = [threading.Thread(target=worker, args=("foreign", True)),
               threading.Thread(target=worker, args=("own", False))]
    for t in threads:
        t.start()
    while len(seen) < 2:
        time.sleep(0.001)

    def call():
        go.set()
        while "foreign_cpu" not in seen or "own_cpu" not in seen:
            time.sleep(0.001)

    try:
        _, spent = thread_split.measured_call(call)
        assert thread_split.thread_name(seen["foreign"]) == "iree-worker-0"
        assert thread_split.thread_name(threading.get_native_id()) == "caller"
        foreign = thread_split.foreign_cpu(spent)
    finally:
        leave.set()
        for t in threads:
            t.join()
    assert 0.9 * seen["foreign_cpu"] * 1e9 <= foreign < (seen["foreign_cpu"] + seen["own_cpu"]) * 1e9


def test_after_samples_time_ours_after_every_side_with_and_without_a_pause():
    log = []
    calls = {"hlofuse": lambda: log.append("h"), "xla": lambda: log.append("x")}
    samples = thread_split.after_samples(calls, rounds=4, pause=0.0)
    assert list(samples) == ["after hlofuse", "after hlofuse + 0 ms", "after xla", "after xla + 0 ms"]
    assert all(len(v) == 4 for v in samples.values())
    # each condition's call is followed by one measured hlofuse call
    assert len(log) == 2 * 4 * 4 and log.count("x") == 2 * 4
    assert all(log[i + 1] == "h" for i in range(0, len(log), 2))
