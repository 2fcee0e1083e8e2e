"""Per-kernel figures for benchmarks/run.py: the machine's streaming bandwidth, measured in the
same run, and per-kernel profiles of compiled programs.

Streaming bandwidth (`stream_bandwidth`) is measured as STREAM does, with its copy and triad
kernels over arrays larger than the caches (64 MB each by default; this host reports a 32 MB
L3), on 1 and 2 threads:

- copy:  y = -x         (8 bytes per element: one read, one write)
- triad: y = a + 3.0 b  (12 bytes per element: two reads, one write)
- copy-rows, triad-rows: the same over rows of 1024 elements: hlofuse writes the rows of a
  loop kernel whose data exceed L3 with non-temporal stores (codegen/kernels/cpu_streaming.py), so no line is
  read for ownership before it is written; a flat loop (copy, triad) uses plain stores, which
  move more than the bytes counted (no longer: since generic_kernels hlofuse walks a flat
  elementwise kernel as rows of 1024, so copy and triad compile to the same streaming loop as
  their rows twins, the asm identical). The reference is the best of all, so a kernel that
  streams its stores is held against references that do too. (A hand-written AVX-512 loop of
  64-byte loads and non-temporal stores copied 48 MB at 52-60 GB/s on one thread of this host,
  CPU time, against 40-45 for hlofuse's copy-rows in the same process, load 1-5: LLVM unrolled
  a row's 64 streaming stores whole, which measured 25-30% slower than loops of 4-16 stores,
  in C too. Since cpu_streaming.CHEAP_CHUNK_VECTORS hlofuse's copy-rows is such a loop: 51-55
  GB/s, load 7-8.)
- read (READ_KERNELS): a row sum, 4 bytes per element, all of them reads. Not part of the
  reference: it is below all of the above on one thread (bandwidth_share.py: a row sum reads
  40-42 GB/s, as a C loop does), the physical limit of a kernel that only reads, so it is a
  second column (`read_bandwidth`), beside the bar and not instead of it.
- widen, write (MIX_KERNELS): u8 -> f32 convert (5 bytes per element, 80% writes) and a
  broadcast of a scalar (4, all writes), flat and over rows: the references of the
  write-heavy mixes in bandwidth_share.py, not part of the bar either.

All are HLO modules compiled and run by hlofuse itself (its kernels are plain vectorised loops,
split over libgomp threads as every kernel is; the thread count is `HLOFUSE_CPU_THREADS`, set
while each program is built), and the copy is also measured with numpy's `copyto` split over
Python threads (numpy releases the GIL) as an independent check. Write-allocate traffic is not
counted, and each figure is the best of its timed calls, as in STREAM: it estimates what the
machine can do, and on a shared, loaded machine a median mostly measures the neighbours. The
reference a memory-bound workload is held against is the best
2-thread figure (`reference_bandwidth`), so a slow hlofuse kernel cannot lower its own bar.

`profile_rows` turns `CpuProgram.profile` (per-step cycle-derived seconds from the native
driver) into a table: step, kind, bytes read and written, time per run, GB/s and share.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

STREAM_KERNELS = {
    # name: (HLO text template over the element count {n}, bytes per element)
    "copy": ("""HloModule stream_copy
ENTRY e {{
  x = f32[{n}] parameter(0)
  ROOT y = f32[{n}] negate(x)
}}
""", 8),
    "copy-rows": ("""HloModule stream_copy_rows
ENTRY e {{
  x = f32[{rows},1024] parameter(0)
  ROOT y = f32[{rows},1024] negate(x)
}}
""", 8),
    "triad-rows": ("""HloModule stream_triad_rows
ENTRY e {{
  a = f32[{rows},1024] parameter(0)
  b = f32[{rows},1024] parameter(1)
  s = f32[] constant(3)
  sb = f32[{rows},1024] broadcast(s), dimensions={{}}
  m = f32[{rows},1024] multiply(sb, b)
  ROOT y = f32[{rows},1024] add(a, m)
}}
""", 12),
    "triad": ("""HloModule stream_triad
ENTRY e {{
  a = f32[{n}] parameter(0)
  b = f32[{n}] parameter(1)
  s = f32[] constant(3)
  sb = f32[{n}] broadcast(s), dimensions={{}}
  m = f32[{n}] multiply(sb, b)
  ROOT y = f32[{n}] add(a, m)
}}
""", 12),
}

# A read-only stream (not part of the bar): each row of 1024 f32 summed to one value, 4 bytes
# per element read (the [rows] result, 1/1024 of that, is not counted). On one thread a read
# stream is below copy and triad (bandwidth_share.py: a core keeps a bounded number of line
# fills in flight, and a stream of reads is limited by them, where streaming stores are posted
# without one), so a kernel that only reads (row and column sums, sum with sum of squares) is
# also held against it: `read_bandwidth`, run.py's %rd2 column.
READ_KERNELS = {
    "read": ("""HloModule stream_read
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY e {{
  x = f32[{rows},1024] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[{rows}] reduce(x, z), dimensions={{1}}, to_apply=add
}}
""", 4),
}


# The streaming references of the write-heavy access mixes (bandwidth_share.MIXES), not part
# of the bar (run.py's bar is the best of STREAM_KERNELS): a workload that writes most of what it
# moves (image_normalize, u8 in and f32 out: 80% of its traffic writes; iou_matrix, tiny inputs
# and a large output: all writes) is held against a stream of its own mix, not against copy.
# Each over a 64 MB f32 output, flat and over rows of 1024 as the pairs above; all outputs f32,
# so 4 bytes per element are written.
# - widen: u8 -> f32 convert, 5 bytes per element (16 MB of u8 read, 64 MB written; 80% writes)
# - write: a broadcast of an f32[] parameter, 4 bytes per element, all of them writes
# (hlofuse's asm, full size: the rows kernels' loops are vectorised, 4 zmm vmovntps a step, the
# widen loop a vpmovzxbd and a vcvtdq2ps per vector; the flat ones compile to the same code,
# since generic_kernels walks a flat elementwise kernel as rows of 1024, streaming stores too.)
MIX_KERNELS = {
    "widen": ("""HloModule stream_widen
ENTRY e {{
  x = u8[{n}] parameter(0)
  ROOT y = f32[{n}] convert(x)
}}
""", 5),
    "widen-rows": ("""HloModule stream_widen_rows
ENTRY e {{
  x = u8[{rows},1024] parameter(0)
  ROOT y = f32[{rows},1024] convert(x)
}}
""", 5),
    "write": ("""HloModule stream_write
ENTRY e {{
  p = f32[] parameter(0)
  ROOT y = f32[{n}] broadcast(p), dimensions={{}}
}}
""", 4),
    "write-rows": ("""HloModule stream_write_rows
ENTRY e {{
  p = f32[] parameter(0)
  ROOT y = f32[{rows},1024] broadcast(p), dimensions={{}}
}}
""", 4),
}


def stream_inputs(module, fill=None) -> list:
    """Inputs for the parameters of reference kernel `module` (a parsed STREAM_KERNELS,
    READ_KERNELS or MIX_KERNELS template), each of its parameter's shape and element type, set
    to 1.5 (3 for integer types); `fill(shape, dtype)` makes each array (np.empty by default;
    bandwidth_share passes 64-byte aligned arrays)."""
    out = []
    for p in module.entry.parameters:
        dtype = p.shape.dtype.numpy
        x = (fill or np.empty)(tuple(p.shape.dims), dtype)
        x[...] = 1.5 if np.issubdtype(dtype, np.floating) else 3
        out.append(x)
    return out


def call_seconds(fn, repeat: int, warmup: int = 2, clock=time.perf_counter) -> list[float]:
    """Seconds (wall by default; `clock=time.process_time` for this process's CPU time) of each
    of `repeat` calls of `fn()`, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return times


def median_seconds(fn, repeat: int, warmup: int = 2, clock=time.perf_counter) -> float:
    """Median seconds (by `clock`, wall by default) of `fn()` over `repeat` calls, after
    `warmup` untimed calls."""
    return statistics.median(call_seconds(fn, repeat, warmup, clock))


def _with_threads(threads: int, build):
    """`build()` with HLOFUSE_CPU_THREADS=threads (read when a program's driver is made)."""
    old = os.environ.get("HLOFUSE_CPU_THREADS")
    os.environ["HLOFUSE_CPU_THREADS"] = str(threads)
    try:
        return build()
    finally:
        if old is None:
            del os.environ["HLOFUSE_CPU_THREADS"]
        else:
            os.environ["HLOFUSE_CPU_THREADS"] = old


def hlofuse_stream(kernel: str, threads: int, nbytes: int = 64 << 20, repeat: int = 15) -> float:
    """Bytes per second of STREAM kernel `kernel` (a key of STREAM_KERNELS, READ_KERNELS or
    MIX_KERNELS) compiled by hlofuse and run on `threads` threads, over f32 arrays of `nbytes`
    each (whole rows of 1024; widen's u8 input is a quarter of that), inputs of each
    parameter's own type (`stream_inputs`)."""
    import hlofuse

    template, per_element = {**STREAM_KERNELS, **READ_KERNELS, **MIX_KERNELS}[kernel]
    rows = max(nbytes // 4 // 1024, 1)
    n = rows * 1024
    module = hlofuse.parse_hlo(template.format(n=n, rows=rows))
    args = stream_inputs(module)

    def build():
        exe = hlofuse.compile(module, target="cpu")
        exe(*args)  # the driver (and its thread count) is made on the first run
        return exe

    exe = _with_threads(threads, build)
    if getattr(getattr(exe.program, "driver", None), "threads", threads) != threads:
        raise RuntimeError(f"hlofuse did not run the stream kernel on {threads} threads")
    return per_element * n / min(call_seconds(lambda: exe(*args), repeat))


def numpy_copy(threads: int, nbytes: int = 64 << 20, repeat: int = 15) -> float:
    """Bytes per second (read + write) of numpy's copyto split over `threads` Python threads."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    bounds = [(int(c[0]), int(c[-1]) + 1) for c in np.array_split(np.arange(src.size), threads) if c.size]
    with ThreadPoolExecutor(threads) as pool:
        def copy():
            list(pool.map(lambda b: np.copyto(dst[b[0]:b[1]], src[b[0]:b[1]]), bounds))

        return 2 * src.nbytes / min(call_seconds(copy, repeat))


def stream_bandwidth(threads: tuple[int, ...] = (1, 2), nbytes: int = 64 << 20, repeat: int = 15) -> dict[str, float]:
    """Bytes per second, keyed "copy/1t", "triad/2t", "numpy-copy/1t", "read/2t" ..., measured now."""
    out: dict[str, float] = {}
    for t in threads:
        for kernel in STREAM_KERNELS:
            out[f"{kernel}/{t}t"] = hlofuse_stream(kernel, t, nbytes, repeat)
        out[f"numpy-copy/{t}t"] = numpy_copy(t, nbytes, repeat)
        for kernel in READ_KERNELS:
            out[f"{kernel}/{t}t"] = hlofuse_stream(kernel, t, nbytes, repeat)
    return out


def reference_bandwidth(stream: dict[str, float], threads: int = 2) -> float:
    """The best copy or triad figure on `threads` threads (bytes per second; nan if none): the
    read-only streams (READ_KERNELS) are not part of it."""
    values = [v for k, v in stream.items() if k.endswith(f"/{threads}t") and k.split("/")[0] not in READ_KERNELS]
    return max(values) if values else float("nan")


def read_bandwidth(stream: dict[str, float], threads: int = 2) -> float:
    """The read-only stream's figure on `threads` threads (bytes per second; nan if not measured)."""
    return stream.get(f"read/{threads}t", float("nan"))


def nbytes_of(arrays) -> int:
    """Total bytes of numpy arrays (or anything np.asarray accepts)."""
    return int(sum(np.asarray(a).nbytes for a in arrays))


def geomean(values) -> float:
    """Geometric mean of the positive values (nan when there are none)."""
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _shape_bytes(shape) -> int:
    return shape.element_count() * shape.dtype.numpy.itemsize


def profile_rows(exe, args: list, runs: int = 3) -> tuple[list[dict], float]:
    """Per-step rows of `runs` profiled runs of a CPU executable (steps that took time, slowest
    first) and the wall seconds per run. Each row: step (instruction name), kind (kernel,
    callback, while ...), op (its opcode, and fusion kind), bytes (leaves read + written per
    call), calls per run, ms per run, GB/s and share of the run's wall time. A step inside a
    while body counts once per iteration; its bytes are per call, from the shapes of its operands
    and results (an in-place update, which touches only its window, moves less)."""
    steps, seconds, counts, wall = exe.program.profile(list(args), runs)
    per_run = wall / runs
    rows = []
    for ns, sec, calls in zip(steps, seconds, counts):
        if calls == 0 or sec <= 0:
            continue
        inst = ns.step.inst
        kind = inst.attrs.get("kind") if inst.opcode == "fusion" else None
        op = inst.opcode + (f":{kind}" if kind else "")
        nbytes = sum(_shape_bytes(s) for s in ns.in_shapes) + sum(_shape_bytes(s) for s in ns.out_shapes)
        t = sec / runs
        # A step that takes (almost) no time of its own ran inside another's kernel (a row
        # kernel spans the steps of its chain): no bandwidth is claimed for it.
        gbps = nbytes * calls / runs / t / 1e9 if t * runs >= 1e-6 * calls else float("nan")
        rows.append({"step": inst.name, "kind": ns.kind, "op": op, "bytes": nbytes, "calls": int(calls) / runs,
                     "ms": t * 1e3, "GBps": gbps, "share": t / per_run})
    rows.sort(key=lambda r: -r["ms"])
    return rows, per_run


def format_profile(name: str, rows: list[dict], per_run: float, top: int = 6) -> str:
    """The `top` slowest steps of a profile as a text table."""
    lines = [f"{name}: {per_run * 1e3:.2f} ms per run (profiled)",
             f"  {'step':28s} {'kind':9s} {'op':18s} {'MB/call':>8s} {'calls':>6s} {'ms':>8s} {'GB/s':>7s} {'share':>6s}"]
    for r in rows[:top]:
        lines.append(f"  {r['step'][:28]:28s} {r['kind']:9s} {r['op'][:18]:18s} {r['bytes'] / 1e6:8.2f} "
                     f"{r['calls']:6.0f} {r['ms']:8.3f} "
                     + (f"{r['GBps']:7.2f}" if math.isfinite(r["GBps"]) else f"{'-':>7s}") + f" {100 * r['share']:5.1f}%")
    return "\n".join(lines)
