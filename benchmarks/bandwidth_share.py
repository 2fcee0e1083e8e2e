"""Memory-bound workloads' share of the streaming bandwidth of the same access mix, on one thread
(process CPU time) and on two (wall time).

Run:  python benchmarks/bandwidth_share.py [--workloads a,b] [--rounds 21] [--threads 1,2] [--boost]
                                          [--aligned] [--profile] [--baseline MODULE.NAME=VALUE ...]

`--split` then prints, per workload on the most threads, each thread's CPU time and run-queue
wait per call (benchmarks/thread_split.py's counters): whether both threads are busy for the
whole call or one works alone.

`--threads 1,2` (default 1) times every program, references and workloads alike, on each count
in the same interleaved rounds: a program is compiled once and its driver pinned to the count
before each call (NativeDriver.pin_threads; the kernels do not depend on it). One thread is
timed by process CPU time, two by wall time (CPU time would add both threads' up). Each
workload is held against the reference of its access mix (`matching_reference`, the `ref`
column): the write share of its counted traffic nearest to read-only (a row sum: row_sums,
column_sums, sum_sumsq), copy (one read, one write: layer_norm, softmax), triad (two reads,
one write: scaled_add, box_decode, shared_producer, batch_norm_train), widen (u8 -> f32
convert, 80% writes: image_normalize) or write (a broadcast, all writes: iou_matrix), each the
better of its flat and row kernel. widen and write (kernel_figures.MIX_KERNELS) were added
because the write-heavy workloads had no reference of their own and were held against copy: a
1-thread u8 -> f32 convert over rows ran 2.3 ms where image_normalize ran 2.5-2.9. `%ref` is median against median, `best%` best round
against best round (STREAM's own statistic: on a shared host the medians of two threads
measure the neighbours), `%bar` median against the best stream of all. Two-thread figures
are medians of the quiet calls (nothing else runnable on the machine just before and after
the call, /proc/loadavg; `quiet` column) where there are QUIET_CALLS of them, else of all
calls: on the 2-core host any other runnable task takes the second thread's core. Check
`uptime` and repeat when the load is above 1.5.

On the shared host the load stays above that (other sessions' work: 3-6 runnable tasks),
and two threads then measured exactly one thread's time, references and workloads alike
(load 1.2-4, 41 rounds): not a split's fault but the scheduler's. With no idle core, a woken
libgomp worker is placed on its caller's core (per-thread run-queue waits around each call:
caller 1.34 ms of CPU and 1.37 ms waiting per 64 MB copy, the worker 1.22 and 1.43), and a
process's own nice weighs only against its session's tasks (Linux puts each session in an
autogroup): nice -20 alone changed nothing. `--boost` (`_boost`) gives the run the cores:
its own session and autogroup at nice -20, libgomp's threads bound one to a core. Then the
2-thread streams read 88-93 GB/s (copy-rows, triad-rows; best rounds 96-106) against 48-53 on
one thread, the figures docs/emitters.md's "Two threads against the 2-thread streams" gives;
the memory is still shared, and in some boosted runs (other sessions' heavy memory traffic)
the same streams read 56-61: compare the workloads only with the references of the same run.

On a shared, loaded machine wall time mostly measures the neighbours; a kernel on one thread
(HLOFUSE_CPU_THREADS=1, set before anything is compiled) spends process CPU time only on its
own work (memory bandwidth is still shared with the neighbours: interleave, take medians, and
report the load). Each round times, by `time.process_time`, one call of every workload and of
each STREAM reference of kernel_figures.STREAM_KERNELS over 64 MB arrays ("copy", flat;
"copy-rows", rows of 1024, non-temporal stores; "triad"), and of MIX_KERNELS (64 MB f32
outputs: "widen", "write"), in an order that alternates between rounds. (Since
generic_kernels, hlofuse walks a flat elementwise kernel as rows of 1024: each flat kernel
compiles to the same streaming loop as its rows twin, the asm identical, so "flat, plain
stores" no longer holds for any of these references.) The bar is the best reference's GB/s (as run.py's); a workload's share is
its least traffic (as benchmarks/run.py counts it: Workload.input_passes reads of its inputs,
plus its outputs) over its median CPU time, against that bar. A row sum of the same 64 MB
(`read`, kernel_figures.READ_KERNELS) is printed beside it, and each workload's rate against
it ("of read"): the read-only rate of a reduction. On one thread that is the ceiling of a kernel that only reads (row_sums,
column_sums, sum_sumsq), well below the bar: a core keeps a bounded number of line fills in
flight, and a read stream is limited by them, where the streaming-store half of triad-rows
is posted without one. A hand-written C row sum over cold 64 MB arrays (8 vector
accumulators) read 40-42 GB/s where C triad with streaming stores moved 54.7 (load 5.2);
software prefetch 1-8 KB ahead (T0 or T2) did not raise the read (36-39 GB/s); the read
reference itself is an hlofuse kernel, which reaches that C loop's rate since
reduction_groups.row_accumulators (it had 4 accumulator chains and ran 47 against the C loop's
55 on a warm input). numpy's column sum of the same array (`np.add.reduce(x, axis=0)`: row after
row into one row of sums) is printed beside it, an independent read-only reference: 33-35 GB/s.

(The figures below were printed before `--threads`: their `share` is now `%bar`, their "of
read" a reduction's `%ref`.)

Inputs are numpy's arrays as the workloads make them (large ones start 16 bytes into a cache
line, so every 64-byte vector load of a row kernel straddles two lines); with `--aligned` they
are copied to 64-byte boundaries first, as XLA's buffers are (benchmarks/run.py gives XLA its
own aligned copies). With `--profile`, each workload's kernels (CpuProgram.profile) are listed.
With `--baseline`, every workload is also compiled (no cache) with those module attributes of
hlofuse set to the values given (`hlofuse.codegen.kernels.reduction_groups.ROW_ACCUMULATORS=1`:
the code before a mechanism, where a constant switches it off) and timed as `NAME@base` in the
same rounds, beside a second compile as it is (`NAME`): an A/B in one process, interleaved.
The A/B is not symmetric: with nothing changed (an attribute set to the value it has), the
executable compiled later (`@base`) ran 2-10% faster than the first (batch_norm_train, 48 MB
of outputs, the most; load 7-10): a difference that small needs that A/A beside it.

What it showed first (one thread, CPU time, load 3.6-4.0; the bar 51-52 GB/s, triad-rows): with
numpy's inputs / aligned inputs, scaled_add 95/96%, image_normalize 85/82%, row_sums 75/77%,
shared_producer 70/67%, column_sums 67/66%, layer_norm 64/65%, batch_norm_train 64/93%,
sum_sumsq 61/53%. What limited each (the asm of its inner loop, then A/B in one process):
row_sums and sum_sumsq, 4 vector accumulators in a fully unrolled row, whose adds LLVM's
Reassociate pass rebuilds (sum_sumsq 28.7 GB/s): 8 accumulators in a rolled loop
(reduction_groups.row_accumulators; 41.7 and 41.2 GB/s, the read reference's rate); layer
norm, a horizontal sum every 64 elements in its prefetching variance loop (cpu_row
`_fold_chunk_bytes`; 34.8 -> 41.6 GB/s); two column sums of a wide row, 64 registers of
accumulators spilled and unrolled (ReductionGroup.block_columns; f32[12288,1024] 4.6 -> 1.7
ms); the copy-rows reference and the streaming loop kernels, a row of 64 streaming stores
unrolled whole (cpu_streaming.CHEAP_CHUNK_VECTORS; copy-rows 37.9 -> 53.4 GB/s, which raised
triad-rows, the bar, to 54-55). Then (load 7.4-7.8, the bar 54.4, triad-rows; read 40.5;
aligned / numpy's inputs): scaled_add 98/87%, row_sums 73/69% (98% of read), column_sums
61/62% (81% of read), sum_sumsq 70/65% (94% of read), layer_norm 72/68%, batch_norm_train
86/81%, shared_producer 64/62%, image_normalize 78/79%.

Column sums from memory then read rows whole into a row of partial sums in L1
(ReductionGroup.in_l1; docs/emitters.md, "Sums against the read ceiling"): column_sums 81-85%
-> 85-94% of read, aligned (load 7-10; numpy's column sum 33.8-34.2 GB/s, column_sums 34.1-36.8).

The kernels below the bar that write what they read, and why (one thread, numpy's inputs, load
5.9-6.1; the bar 55.2, triad-rows; read 41.3): softmax 42% (compute: 0.30 ns an element in
cache as from memory, half of it the exp; docs/emitters.md, "Row kernels against the memory
bar"), layer_norm 70% (93% of read), box_decode 64% (two exps a box and the permutes that
split its [n,4] columns), image_normalize 78%, shared_producer 62% (tanh and exp), iou_matrix
26% (compute: per vector of 16 outputs its six NaN-propagating min/max, which x86 lowers
with blends, unordered compares and masked moves around vmaxps/vminps, take 20-30
instructions, and 8 permutes split the second box set's columns; emitters' lowering, not the
loop kernel's).

Misalignment (numpy's large arrays start 16 bytes into a line), the same program on aligned
and on misaligned copies, interleaved, a 64 MB copy between calls (load 7.6-7.8): row_sums
1.04x, sum_sumsq 1.08x, column_sums 1.03x, layer_norm 1.12x, shared_producer 1.03x, two
column sums of f32[64,56,56,64] 1.15x and of f32[12288,1024] 1.13x. The runtime cannot align
a caller's array without copying it (a copy costs more than any of these); a kernel can align
its own vectors: a column kernel whose rows are one block of whole vectors now does, with the
same bits (kernels/cpu_reduction_rotated.py: batch_norm_stats on numpy's arrays 1.07-1.11 ->
0.99-1.03 ms); wider column blocks and row kernels would need a peeled head and tail per row
(not done). Pages:
numpy advises 2 MB pages for arrays of 4 MB and more (and hlofuse's arenas are numpy arrays);
the same inputs forced to 4 KB pages (MADV_NOHUGEPAGE) ran row_sums 1.12-1.18x, sum_sumsq
1.18-1.23x, column_sums 1.21-1.24x, layer_norm 1.02-1.06x slower than in 2 MB pages (two runs,
load 5-6), so the 2 MB pages matter, and they are there.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

DEFAULT = ("scaled_add,row_sums,column_sums,sum_sumsq,softmax,layer_norm,batch_norm_train,shared_producer,image_normalize,"
           "box_decode,iou_matrix")


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default=DEFAULT)
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--threads", default="1", help="thread counts, comma-separated (1, 2 or 1,2): see the module doc")
    p.add_argument("--aligned", action="store_true", help="copy the inputs to 64-byte boundaries first")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--baseline", action="append", default=[], metavar="MODULE.NAME=VALUE",
                   help="also time each workload compiled with this hlofuse attribute set (repeatable)")
    p.add_argument("--split", action="store_true",
                   help="then each workload's threads on the most threads: CPU and run-queue wait per call")
    p.add_argument("--boost", action="store_true",
                   help="run in its own scheduler autogroup at nice -20, threads bound to cores (module doc)")
    a = p.parse_args(argv)
    if a.boost:
        _boost(sys.argv[1:] if argv is None else argv)
    counts = sorted({int(t) for t in a.threads.split(",")})
    # the most threads any program may use; each call pins its program to its own count
    os.environ["HLOFUSE_CPU_THREADS"] = str(max(counts))
    import jax
    import numpy as np

    from kernel_figures import (MIX_KERNELS, READ_KERNELS, STREAM_KERNELS, format_profile, nbytes_of, profile_rows,
                                stream_inputs)
    from run import uptime
    from workloads import WORKLOADS

    import hlofuse
    from hlofuse.runtime.output_pool import aligned_empty

    print(uptime(), flush=True)
    programs, moved, writes = {}, {}, {}  # name -> (exe, args); bytes counted; bytes written
    rows = (64 << 20) // 4 // 1024
    n = rows * 1024
    for kernel, (template, per_element) in {**STREAM_KERNELS, **MIX_KERNELS}.items():
        module = hlofuse.parse_hlo(template.format(n=n, rows=rows))
        xs = stream_inputs(module, aligned_empty)  # each parameter's own type (widen's are u8)
        programs[kernel] = (hlofuse.compile(module, target="cpu"), xs)
        moved[kernel], writes[kernel] = per_element * n, 4 * n  # every output f32[n]
    read_template, read_per_element = READ_KERNELS["read"]
    xr = aligned_empty((rows, 1024), np.float32)
    xr[...] = 1.5
    programs["read"] = (hlofuse.compile(hlofuse.parse_hlo(read_template.format(rows=rows)), target="cpu"), [xr])
    moved["read"], writes["read"] = read_per_element * n, 0
    references = list(programs)
    for name in a.workloads.split(","):
        w = WORKLOADS[name]
        args = [np.asarray(x, order="C") for x in w.inputs("large")]
        if a.aligned:
            args = [_aligned_copy(x) for x in args]
        text = jax.jit(w.fn, keep_unused=True).lower(*args).as_text(dialect="hlo")
        exe = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=not a.baseline)
        outs = list(exe(*args))
        programs[name] = (exe, args)
        writes[name] = nbytes_of(outs)
        moved[name] = w.input_passes * nbytes_of(args) + writes[name]
        if a.baseline:
            with _attributes_set(a.baseline):
                base = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)
                base(*args)  # the driver is made on the first run
            programs[name + "@base"] = (base, args)
            moved[name + "@base"], writes[name + "@base"] = moved[name], writes[name]
    calls = {}
    for k, (exe, args) in programs.items():
        for t in counts:
            calls[(k, t)] = _pinned_call(exe, args, t)
    column = np.empty(1024, np.float32)  # numpy's column sum: row after row into one row of sums
    if 1 in counts:
        calls[("numpy-colsum", 1)] = lambda: np.add.reduce(xr, axis=0, out=column)
        moved["numpy-colsum"], writes["numpy-colsum"] = 4 * n, 0
    keys = list(calls)
    for f in calls.values():
        f()
        f()
    wall, cpu, quiet = _interleaved_both([calls[k] for k in keys], a.rounds)
    # one thread: this process's CPU time (its own work only); more: wall time (what the
    # threads together took; CPU time would add theirs up) of the quiet calls, where there
    # are at least QUIET_CALLS of them (else of all, and the table says so)
    timed, n_quiet = {}, {}
    for i, k in enumerate(keys):
        times = (cpu if k[1] == 1 else wall)[i]
        kept = [x for x, q in zip(times, quiet[i]) if q]
        n_quiet[k] = len(kept)
        timed[k] = kept if k[1] > 1 and len(kept) >= QUIET_CALLS else times
    med = {k: statistics.median(v) for k, v in timed.items()}
    best = {k: min(v) for k, v in timed.items()}
    rate = {k: moved[k[0]] / med[k] for k in keys}
    top = {k: moved[k[0]] / best[k] for k in keys}
    for t in counts:
        clock = "CPU time" if t == 1 else "wall time"
        refs = ", ".join(f"{k} {rate[(k, t)] / 1e9:.2f} ({top[(k, t)] / 1e9:.1f})" for k in references)
        extra = f", numpy column sum {rate[('numpy-colsum', 1)] / 1e9:.2f}" if t == 1 else ""
        quiet_note = "" if t == 1 else (f"; quiet calls {min(n_quiet[k] for k in keys if k[1] == t)}-"
                                         f"{max(n_quiet[k] for k in keys if k[1] == t)} of {a.rounds} each")
        print(f"{t} thread{'s' if t > 1 else ''}, {clock}, medians (best rounds): {refs}{extra} GB/s; inputs "
              + ("aligned" if a.aligned else "as numpy makes them") + quiet_note)
    head = f"{'workload':20s} {'MB':>6s} {'wr%':>4s} {'ref':>5s}"
    for t in counts:
        head += f" | {t}T {'ms':>6s} {'GB/s':>6s} {'%ref':>5s} {'best%':>5s} {'%bar':>5s}" + (" quiet" if t > 1 else "")
    print(head)
    for name in programs:
        if name in references:
            continue
        ref = matching_reference(moved[name], writes[name])
        line = f"{name:20s} {moved[name] / 1e6:6.1f} {100 * writes[name] / moved[name]:4.0f} {ref:>5s}"
        for t in counts:
            k = (name, t)
            r_med, r_best = _reference_rate(rate, ref, t), _reference_rate(top, ref, t)
            bar = max(rate[(s, t)] for s in STREAM_KERNELS)
            line += (f" | {t}T {med[k] * 1e3:6.2f} {rate[k] / 1e9:6.2f} {100 * rate[k] / r_med:4.0f}% "
                     f"{100 * top[k] / r_best:4.0f}% {100 * rate[k] / bar:4.0f}%"
                     + (f" {n_quiet[k]:5d}" if t > 1 else ""))
        print(line)
    print(uptime(), flush=True)
    if a.split and max(counts) > 1:
        _print_split(programs, calls, references, max(counts))
    if a.profile:
        for k, (exe, args) in programs.items():
            if k in references:
                continue
            exe.program.driver.pin_threads(max(counts))
            prof_rows, per_run = profile_rows(exe, args, runs=3)
            print(format_profile(k, prof_rows, per_run))
    return 0


# Fewest quiet calls (see _interleaved_both) whose median stands for a multi-thread figure.
QUIET_CALLS = 5

# The streaming references a workload is held against, by its access mix (write share of its
# counted traffic): each a pair of kernel_figures kernels, the flat one (plain stores) and the
# one over rows (non-temporal stores), whose better rate is the reference.
# widen and write (kernel_figures.MIX_KERNELS) are the write-heavy mixes' own streams: with
# only the three above, image_normalize (80% writes) and iou_matrix (all writes) were held
# against copy, whose rate a stream that writes most of what it moves need not have.
MIXES = {"read": (0.0, ("read",)), "copy": (0.5, ("copy", "copy-rows")), "triad": (1 / 3, ("triad", "triad-rows")),
         "widen": (0.8, ("widen", "widen-rows")), "write": (1.0, ("write", "write-rows"))}


def matching_reference(moved: int, written: int) -> str:
    """The MIXES entry whose write share is nearest the workload's (`written` of `moved` bytes):
    a reduction, which writes next to nothing, is held against the read-only stream."""
    share = written / moved if moved else 0.0
    return min(MIXES, key=lambda m: abs(MIXES[m][0] - share))


def _reference_rate(rate: dict, mix: str, threads: int) -> float:
    """The better of the mix's reference kernels' rates at `threads`."""
    return max(rate[(k, threads)] for k in MIXES[mix][1])


def _pinned_call(exe, args, threads: int):
    """A call of `exe(*args)` with its kernels split over at most `threads` threads (the count
    is the driver's, set before each call: one program serves every count, same kernels)."""
    exe(*args)  # the driver is made on the first run
    driver = exe.program.driver

    def call():
        driver.pin_threads(threads)
        return exe(*args)
    return call


def _interleaved_both(fns: list, rounds: int) -> tuple[list[list[float]], list[list[float]], list[list[bool]]]:
    """Wall and process CPU seconds of each of `fns` per round, one call of each per round, the
    order reversed every other round (as benchmarks/run.py's `interleaved`), and whether each
    call was quiet: nothing but this process's calling thread runnable on the machine just
    before and just after it (/proc/loadavg's instantaneous count, read outside the timing)."""
    from hlofuse.runtime.cpu_threads import runnable_tasks

    wall: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    quiet: list[list[bool]] = [[] for _ in fns]
    for r in range(rounds):
        for k in (range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))):
            before = runnable_tasks()
            c0, t0 = time.process_time(), time.perf_counter()
            fns[k]()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
            after = runnable_tasks()
            quiet[k].append(before is not None and after is not None and max(before, after) <= 1)
    return wall, cpu, quiet


def _print_split(programs: dict, calls: dict, references: list, threads: int, rounds: int = 15) -> None:
    """For each workload on `threads` threads: the median wall time of `rounds` calls and, per
    thread that ran, its median CPU time and run-queue wait per call (thread_split.py's
    counters). Two threads equally busy for the wall time: the split is balanced and neither
    waits; a caller busier than its worker: serial work (kernels on one thread) or a late
    worker."""
    from thread_split import measured_call, side_summary, thread_name

    empty = statistics.median(measured_call(lambda: None)[1].get(threading.get_native_id(), (0, 0))[0]
                              for _ in range(rounds))
    print(f"threads per call (the caller's CPU includes reading the counters: {empty / 1e6:.2f} ms "
          "for an empty call)", flush=True)
    for name in programs:
        if name in references:
            continue
        wall, rows = side_summary([measured_call(calls[(name, threads)]) for _ in range(rounds)])
        detail = ", ".join(f"{thread_name(tid)} {run / 1e6:.2f} (wait {wait / 1e6:.2f})" for run, wait, tid in rows)
        print(f"{name:20s} {threads} threads: wall {wall * 1e3:.2f} ms; CPU ms per thread: {detail}", flush=True)


def _boost(argv: list[str]) -> None:
    """Make this run the machine's first claim on its cores (`--boost`): re-run the script as
    the leader of a new session (setsid), so of a scheduler autogroup of its own, with
    libgomp's threads bound one to a core (OMP_PROC_BIND=spread, OMP_PLACES=cores: set before
    libgomp loads); there set that autogroup's nice to -20. With autogroups (Linux's default
    for sessions) a process's own nice weighs only against its own session's tasks, and
    without the binding a woken libgomp worker is placed on its caller's busy core (no core is
    idle), where the two take turns: 2 threads then ran in 1 thread's time."""
    if os.environ.get("HLOFUSE_BANDWIDTH_BOOSTED") != "1":
        env = dict(os.environ, HLOFUSE_BANDWIDTH_BOOSTED="1", OMP_PROC_BIND="spread", OMP_PLACES="cores")
        sys.stdout.flush()
        os.execvpe("setsid", ["setsid", "--wait", sys.executable, os.path.abspath(__file__)] + list(argv), env)
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("-20")
        with open("/proc/self/autogroup") as f:
            print("boosted:", f.read().strip(), flush=True)
    except OSError as e:
        print(f"not boosted ({e}): the figures share the cores with the machine's other work", flush=True)


@contextlib.contextmanager
def _attributes_set(assignments: list[str]):
    """Set each `MODULE.NAME=VALUE` (VALUE a Python literal) for the duration, then restore."""
    import ast
    import importlib

    saved = []
    try:
        for item in assignments:
            target, value = item.split("=", 1)
            module_name, attr = target.rsplit(".", 1)
            module = importlib.import_module(module_name)
            saved.append((module, attr, getattr(module, attr)))
            setattr(module, attr, ast.literal_eval(value))
        yield
    finally:
        for module, attr, old in reversed(saved):
            setattr(module, attr, old)


def _aligned_copy(x):
    """`x` copied to an array starting on a 64-byte boundary (0-d and small arrays as they are)."""
    import numpy as np

    from hlofuse.runtime.output_pool import aligned_empty

    if x.ndim == 0:
        return x
    out = aligned_empty(x.shape, x.dtype)
    np.copyto(out, x)
    return out


if __name__ == "__main__":
    sys.exit(main())
