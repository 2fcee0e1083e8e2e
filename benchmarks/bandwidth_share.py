"""Memory-bound workloads' share of the one-thread streaming bandwidth, in process CPU time.

Run:  python benchmarks/bandwidth_share.py [--workloads a,b] [--rounds 21] [--aligned] [--profile]
                                          [--baseline MODULE.NAME=VALUE ...]

On a shared, loaded machine wall time mostly measures the neighbours; a kernel on one thread
(HLOFUSE_CPU_THREADS=1, set before anything is compiled) spends process CPU time only on its
own work (memory bandwidth is still shared with the neighbours: interleave, take medians, and
report the load). Each round times, by `time.process_time`, one call of every workload and of
each STREAM reference of kernel_figures.STREAM_KERNELS over 64 MB arrays ("copy", flat, plain
stores; "copy-rows", rows of 1024, non-temporal stores; "triad"), in an order that alternates
between rounds. The bar is the best reference's GB/s (as run.py's); a workload's share is
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

DEFAULT = ("scaled_add,row_sums,column_sums,sum_sumsq,softmax,layer_norm,batch_norm_train,shared_producer,image_normalize,"
           "box_decode,iou_matrix")


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table."""
    os.environ["HLOFUSE_CPU_THREADS"] = "1"
    import jax
    import numpy as np

    from kernel_figures import READ_KERNELS, STREAM_KERNELS, format_profile, nbytes_of, profile_rows
    from run import interleaved, uptime
    from workloads import WORKLOADS

    import hlofuse
    from hlofuse.runtime.output_pool import aligned_empty

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default=DEFAULT)
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--aligned", action="store_true", help="copy the inputs to 64-byte boundaries first")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--baseline", action="append", default=[], metavar="MODULE.NAME=VALUE",
                   help="also time each workload compiled with this hlofuse attribute set (repeatable)")
    a = p.parse_args(argv)
    print(uptime(), flush=True)
    calls, moved = {}, {}
    rows = (64 << 20) // 4 // 1024
    n = rows * 1024
    for kernel, (template, per_element) in STREAM_KERNELS.items():
        module = hlofuse.parse_hlo(template.format(n=n, rows=rows))
        exe = hlofuse.compile(module, target="cpu")
        xs = [aligned_empty(tuple(q.shape.dims), np.float32) for q in module.entry.parameters]
        for x in xs:
            x[...] = 1.5
        calls[kernel], moved[kernel] = (lambda e=exe, xs=xs: e(*xs)), per_element * n
    read_template, read_per_element = READ_KERNELS["read"]
    read = hlofuse.compile(hlofuse.parse_hlo(read_template.format(rows=rows)), target="cpu")
    xr = aligned_empty((rows, 1024), np.float32)
    xr[...] = 1.5
    calls["read"], moved["read"] = (lambda: read(xr)), read_per_element * n
    column = np.empty(1024, np.float32)  # numpy's column sum: row after row into one row of sums
    calls["numpy-colsum"], moved["numpy-colsum"] = (lambda: np.add.reduce(xr, axis=0, out=column)), 4 * n
    references = len(STREAM_KERNELS) + 2
    exes = {}
    for name in a.workloads.split(","):
        w = WORKLOADS[name]
        args = [np.asarray(x, order="C") for x in w.inputs("large")]
        if a.aligned:
            args = [_aligned_copy(x) for x in args]
        text = jax.jit(w.fn, keep_unused=True).lower(*args).as_text(dialect="hlo")
        exe = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=not a.baseline)
        outs = list(exe(*args))
        exes[name] = (exe, args)
        calls[name] = (lambda e=exe, g=args: e(*g))
        moved[name] = w.input_passes * nbytes_of(args) + nbytes_of(outs)
        if a.baseline:
            with _attributes_set(a.baseline):
                base = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)
                base(*args)  # the driver is made on the first run
            calls[name + "@base"], moved[name + "@base"] = (lambda e=base, g=args: e(*g)), moved[name]
    names = list(calls)
    for f in calls.values():
        f()
        f()
    times = interleaved([calls[k] for k in names], a.rounds, float("inf"), time.process_time)  # all a.rounds
    med = {k: statistics.median(v) for k, v in zip(names, times)}
    rate = {k: moved[k] / med[k] for k in names}
    bar = max(rate[k] for k in STREAM_KERNELS)
    print("one thread, CPU time: " + ", ".join(f"{k} {rate[k] / 1e9:.2f}" for k in STREAM_KERNELS)
          + f" GB/s (the bar: the best, {bar / 1e9:.2f}); row-sum read {rate['read'] / 1e9:.2f} GB/s, numpy column "
          + f"sum {rate['numpy-colsum'] / 1e9:.2f}; inputs "
          + ("aligned" if a.aligned else "as numpy makes them"))
    print(f"{'workload':20s} {'MB':>7s} {'CPU ms':>8s} {'GB/s':>7s} {'share':>6s} {'of read':>8s}")
    for k in names[references:]:
        print(f"{k:20s} {moved[k] / 1e6:7.1f} {med[k] * 1e3:8.2f} {rate[k] / 1e9:7.2f} {100 * rate[k] / bar:5.0f}% "
              f"{100 * rate[k] / rate['read']:7.0f}%")
    print(uptime(), flush=True)
    if a.profile:
        for k, (exe, args) in exes.items():
            rows, per_run = profile_rows(exe, args, runs=3)
            print(format_profile(k, rows, per_run))
    return 0


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
