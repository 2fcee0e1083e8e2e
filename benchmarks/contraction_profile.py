"""Where a model's dot and convolution time goes below the GEMM peak: each contraction step's
GFLOP/s beside oneDNN's sgemm peak measured in the same run, by shape class and path.

Run (the `bench` extra, KERAS_BACKEND=jax):

    python benchmarks/contraction_profile.py MODEL_OR_WORKLOAD [--threads 1] [--repeat 15] [--top 40]

MODEL_OR_WORKLOAD is a model of benchmarks/model_zoo.py (keras_resnet50, ...) or a workload of
benchmarks/workloads.py (causal_attention, ...; its "large" inputs). The HLO jax lowers is
compiled by hlofuse for `--threads` kernel threads (HLOFUSE_CPU_THREADS; default all cores)
and profiled by the native driver's per-step counters (CpuProgram.profile) `--repeat` times,
one run each; every step's time is its minimum over the repeats (on this shared machine a step
is often descheduled: the least-disturbed run is the kernel's own speed). The peak is oneDNN's
sgemm on 2048^3 on the same number of threads, the best of `--repeat` calls, measured before
and after the profile (both printed; the percentages use the higher).

Printed per contraction step: the instruction, the path (the step's kernel kinds: onednn_conv,
conv_gemm, conv, gemm, onednn_matmul, ...), the shape class (convolution: window, stride,
input -> output features, rows = batch x output positions, groups; dot: batch x M x N x K),
its work units (a oneDNN primitive: "dnnl", split by oneDNN; a kernel of one unit runs on one
thread whatever the thread count), microseconds, GFLOP/s, % of peak, and the share of the
contraction time; then the same summed per class (conv 1x1 / 3x3 / other window, dot) and
path, each class's GFLOP/s and the time it would save at the peak, and the time in steps of
one work unit. The load average is printed before and after.

`sg%` is the step's speed against oneDNN's sgemm of the same sizes (`gemm_sizes`: a dense
convolution's batch x output positions, output features, taps x input features; a dot's M, N,
K per batch element), on the same threads with cold caches (64 MiB written before each call,
as in a model whose weights do not stay in cache), the best of `--repeat` calls: under 100 the
step loses to the library on its shape (packing, epilogue, the thread split), while a step
near 100 that is still far below the peak is at the shape's own limit (a short K, few rows,
weights read from memory). Grouped convolutions have no such GEMM ("-"). `--no-sgemm` skips it.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def _lowered(name: str):
    """(HLO text, numpy arguments) of model or workload `name`."""
    import jax
    import numpy as np

    from model_zoo import BUILDERS
    from workloads import WORKLOADS

    if name in BUILDERS:
        model = BUILDERS[name]()
        fn, args = model.fn, model.args
    elif name in WORKLOADS:
        w = WORKLOADS[name]
        fn, args = w.fn, w.inputs("large")
    else:
        raise SystemExit(f"unknown model or workload {name!r}: one of {', '.join([*BUILDERS, *WORKLOADS])}")
    text = jax.jit(fn, keep_unused=True).lower(*args).as_text(dialect="hlo")
    return text, [np.asarray(a, order="C") for a in args]


def describe(inst) -> tuple[str, str]:
    """(class, shape) of dot or convolution instruction `inst`: class "conv 1x1", "conv 3x3",
    "conv other", "conv grouped", "conv depthwise" or "dot"; shape a short text of its sizes."""
    out = tuple(inst.shape.dims)
    if inst.opcode == "dot":
        lhs = inst.operands[0].shape.dims
        batch = math.prod(lhs[d] for d in inst.attrs.get("lhs_batch_dims") or ())
        k = math.prod(lhs[d] for d in inst.attrs.get("lhs_contracting_dims") or ())
        mn = math.prod(out) // max(batch, 1)
        rhs = inst.operands[1].shape.dims
        n = math.prod(rhs[d] for d in range(len(rhs))
                      if d not in (inst.attrs.get("rhs_batch_dims") or ())
                      and d not in (inst.attrs.get("rhs_contracting_dims") or ()))
        return "dot", f"{batch} x {mn // max(n, 1)}x{n}x{k}"
    from hlofuse.codegen.kernels.cpu_conv import dimension_numbers

    dn = dimension_numbers(inst)
    rhs = inst.operands[1].shape.dims
    window = inst.attrs.get("window")
    sizes = [int(d.size) for d in window.dimensions] if window is not None else []
    strides = [int(d.stride) for d in window.dimensions] if window is not None else []
    groups = int(inst.attrs.get("feature_group_count", 1)) * int(inst.attrs.get("batch_group_count", 1))
    cin = rhs[dn.kernel_input_feature] * groups
    cout = out[dn.output_feature]
    rows = out[dn.output_batch] * math.prod(out[d] for d in dn.output_spatial)
    win = "x".join(map(str, sizes)) or "1"
    cls = ("conv depthwise" if groups > 1 and groups == cin else "conv grouped" if groups > 1
           else f"conv {win}" if win in ("1x1", "3x3") else "conv other")
    stride = "" if all(s == 1 for s in strides) else f" s{'x'.join(map(str, strides))}"
    return cls, f"{win}{stride} {cin}->{cout} rows {rows}" + (f" g{groups}" if groups > 1 else "")


def gemm_sizes(inst) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of the GEMM computing dot or dense convolution `inst` (a convolution:
    one batch of M = batch x output positions, N = output features, K = taps x input
    features); None for grouped convolutions."""
    out = tuple(inst.shape.dims)
    if inst.opcode == "dot":
        lhs, rhs = inst.operands[0].shape.dims, inst.operands[1].shape.dims
        batch = math.prod(lhs[d] for d in inst.attrs.get("lhs_batch_dims") or ())
        k = math.prod(lhs[d] for d in inst.attrs.get("lhs_contracting_dims") or ())
        n = math.prod(rhs[d] for d in range(len(rhs))
                      if d not in (inst.attrs.get("rhs_batch_dims") or ())
                      and d not in (inst.attrs.get("rhs_contracting_dims") or ()))
        return batch, math.prod(out) // max(batch * n, 1), n, k
    from hlofuse.codegen.kernels.cpu_conv import dimension_numbers

    if int(inst.attrs.get("feature_group_count", 1)) * int(inst.attrs.get("batch_group_count", 1)) > 1:
        return None
    dn = dimension_numbers(inst)
    rhs = inst.operands[1].shape.dims
    k = rhs[dn.kernel_input_feature] * math.prod(rhs[d] for d in dn.kernel_spatial)
    return 1, out[dn.output_batch] * math.prod(out[d] for d in dn.output_spatial), out[dn.output_feature], k


def cold_sgemm_seconds(sizes: tuple[int, int, int, int], threads: int, repeat: int) -> float | None:
    """Seconds of oneDNN's sgemm on `sizes` (batch x one M x N x K call) on `threads` threads,
    the best of `repeat` calls each after 64 MiB were written (caches cold); None without
    libdnnl."""
    import time

    import numpy as np
    from conv_classes import Sgemm

    from hlofuse.runtime.gemm_provider import onednn_library

    if onednn_library() is None:
        return None
    batch, m, n, k = sizes
    call = Sgemm(m, n, k, threads)
    evict = np.zeros(16 << 20, np.float32)
    best = math.inf
    for _ in range(repeat):
        evict += 1.0
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best * batch


def contraction_of(ns):
    """The dot or convolution instruction a native step computes, or None."""
    inst = ns.step.inst
    insts = inst.fused_computation.instructions if inst.opcode == "fusion" else [inst]
    found = [i for i in insts if i.opcode in ("dot", "convolution")]
    return found[0] if len(found) == 1 else None


def work_units(ns) -> str:
    """How the step's contraction kernel can share the threads: "dnnl" (a oneDNN primitive, one
    unit that oneDNN splits over its own team), else its work-unit count (a step of one unit runs
    on one thread whatever the thread count)."""
    kernels = [k for k in ns.step.kernels if k.custom is not None]
    if any(k.custom.startswith("onednn") for k in kernels):
        return "dnnl"
    return str(max((k.units for k in kernels), default=0))


def peak(threads: int, repeat: int, n: int = 1024) -> float | None:
    """GFLOP/s of oneDNN's sgemm n^3 on `threads` threads, the best of `repeat` calls (n = 1024:
    a few milliseconds, the length of a model's larger steps, so that the best call is as
    likely to be undisturbed as the best step; 2048^3 calls rarely are on a loaded machine)."""
    from gemm_speed import _onednn_square_gemm

    times = [_onednn_square_gemm(n, threads, 1) for _ in range(repeat)]  # each: one timed call
    if times[0] is None:
        return None
    return 2 * n ** 3 / min(times) / 1e9


def profile_minimum(exe, args: list, repeat: int):
    """(steps, per-step minimum seconds per call, calls per run, minimum wall per run) over
    `repeat` one-run profiles of `exe`."""
    from hlofuse.runtime.io import check_arguments

    checked = check_arguments(exe.program.module, args)
    best: dict[int, float] = {}
    calls: dict[int, int] = {}
    wall_best = math.inf
    steps = None
    for _ in range(repeat):
        steps, seconds, counts, wall = exe.program.profile(checked, 1)
        wall_best = min(wall_best, wall)
        for ns in steps:
            n = int(counts[ns.id])
            if n and ns.kind == "kernel":
                calls[ns.id] = n
                best[ns.id] = min(best.get(ns.id, math.inf), float(seconds[ns.id]))
    return steps, best, calls, wall_best


def main(argv=None) -> int:
    """Profile one model or workload and print its contraction steps against the peak."""
    from real_models import reexec_with_malloc_settings
    from run import uptime

    reexec_with_malloc_settings()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--top", type=int, default=40, help="contraction steps listed (slowest first)")
    ap.add_argument("--no-sgemm", action="store_true", help="skip the same-shape sgemm column (sg%%)")
    opts = ap.parse_args(argv)

    import hlofuse
    from hlofuse.runtime.profile import step_flops, step_kind

    print(f"before: {uptime()}", flush=True)
    text, args = _lowered(opts.name)
    os.environ["HLOFUSE_CPU_THREADS"] = str(opts.threads)
    exe = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu")
    exe(*args)
    exe(*args)
    p0 = peak(opts.threads, 3 * opts.repeat)
    steps, best, calls, wall = profile_minimum(exe, args, opts.repeat)
    p1 = peak(opts.threads, 3 * opts.repeat)
    top = max(p for p in (p0, p1) if p is not None) if p0 or p1 else None
    print(f"oneDNN sgemm 1024^3 peak on {opts.threads} thread(s), best of {3 * opts.repeat}: "
          f"{p0 or 0:.1f} before, {p1 or 0:.1f} after the profile GFLOP/s", flush=True)

    rows, others = [], []
    sgemm: dict[tuple, float | None] = {}  # (batch, M, N, K): cold sgemm seconds
    for ns in steps:
        if ns.id not in best:
            continue
        flops = step_flops(ns)
        inst = contraction_of(ns)
        if not flops or inst is None:
            others.append((best[ns.id], ns.step.inst.name, step_kind(ns)))
            continue
        cls, shape = describe(inst)
        t = best[ns.id] / calls[ns.id]
        sizes = None if opts.no_sgemm else gemm_sizes(inst)
        if sizes is not None and sizes not in sgemm:
            sgemm[sizes] = cold_sgemm_seconds(sizes, opts.threads, opts.repeat)
        rows.append((t * calls[ns.id], ns.step.inst.name, step_kind(ns), cls, shape, t, flops / t / 1e9,
                     flops * calls[ns.id], work_units(ns), sgemm.get(sizes)))
    total = sum(r[0] for r in rows)
    print(f"{opts.name}: {wall * 1e3:.2f} ms per run (least of {opts.repeat}); contraction steps "
          f"{total * 1e3:.2f} ms ({total / wall * 100:.0f}%), "
          f"{sum(r[7] for r in rows) / max(total, 1e-12) / 1e9:.1f} GFLOP/s"
          + (f" = {sum(r[7] for r in rows) / max(total, 1e-12) / 1e9 / top * 100:.0f}% of peak" if top else ""))
    head = (f"{'instruction':28s} {'path':18s} {'shape':38s} {'units':>5s} {'us':>9s} {'GF/s':>7s} {'%pk':>5s} "
            f"{'share':>6s} {'sg%':>5s}")
    print(head)
    for r in sorted(rows, key=lambda r: -r[0])[:opts.top]:
        pct = f"{r[6] / top * 100:5.0f}" if top else f"{'-':>5s}"
        sg = f"{r[9] / r[5] * 100:5.0f}" if r[9] else f"{'-':>5s}"
        print(f"{r[1][:28]:28s} {r[2][:18]:18s} {r[4][:38]:38s} {r[8]:>5s} {r[5] * 1e6:9.1f} {r[6]:7.1f} {pct} "
              f"{r[0] / max(total, 1e-12) * 100:5.1f}% {sg}")
    groups: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0, 0.0, 0.0])
    for r in rows:
        g = groups[(r[3], r[2])]
        g[0] += r[0]
        g[1] += r[7]
        g[2] += 1
        if r[9]:  # the steps with a same-shape sgemm: their time and the sgemm's
            g[3] += r[0]
            g[4] += r[9] * r[0] / r[5]
    print(f"\n{'class':16s} {'path':18s} {'steps':>5s} {'ms':>8s} {'GF/s':>7s} {'%pk':>5s} {'share':>6s} "
          f"{'ms over peak':>12s} {'sg%':>5s}")
    for (cls, path), (t, f, n, t_sg, sg) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        rate = f / t / 1e9
        over = (t - f / (top * 1e9)) * 1e3 if top else 0.0
        pct = f"{rate / top * 100:5.0f}" if top else f"{'-':>5s}"
        sg_pct = f"{sg / t_sg * 100:5.0f}" if t_sg else f"{'-':>5s}"
        print(f"{cls:16s} {path[:18]:18s} {n:5d} {t * 1e3:8.2f} {rate:7.1f} {pct} "
              f"{t / max(total, 1e-12) * 100:5.1f}% {over:12.2f} {sg_pct}")
    single = sum(r[0] for r in rows if r[8] == "1")
    print(f"steps of one work unit (one thread on any thread count): {single * 1e3:.2f} ms, "
          f"{single / max(total, 1e-12) * 100:.0f}% of the contraction time")
    rest = sorted(others, key=lambda r: -r[0])
    print(f"\nother steps: {sum(r[0] for r in rest) * 1e3:.2f} ms; slowest: "
          + ", ".join(f"{n} ({k}) {t * 1e3:.2f} ms" for t, n, k in rest[:5]))
    print(f"after: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
