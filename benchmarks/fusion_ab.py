"""One model fused two ways by hlofuse, both timed interleaved beside XLA:CPU on the same HLO:
the harness of the fusion A/B scripts (conv_epilogue_ab.py, window_fusion_ab.py).

    row = compare_fusions(name, fuse, ("a", "b"), rounds)
    sys.exit(ab_main(__doc__, fuse, ("a", "b"), models="m1,m2", rounds=30, threads=1))

For each model of benchmarks/model_zoo.py the same HLO text is optimized without fusion, fused
by `fuse(unfused, label)` for each of the two labels (a fresh clone each), compiled, run on the
same inputs, checked equal to each other and to XLA, and timed in rotated rounds with XLA:CPU on
the same text (run.rotated_rounds). Each round records wall time and the process's CPU time of
each call; the row gives medians, their ratios, kernel counts and bytes moved (the fusion
report's figures) and the load. With `--threads N` hlofuse runs on N threads
(HLOFUSE_CPU_THREADS; XLA keeps its own pool, so compare its wall time only).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def timed(call) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    w, c = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - w, time.process_time() - c


def fused_by(unfused, passes: list):
    """A clone of `unfused` after `passes` and dead-code elimination."""
    from hlofuse.passes.dce import DeadCodeElimination
    from hlofuse.passes.pipeline import PassPipeline

    work = unfused.clone()
    PassPipeline([*passes, DeadCodeElimination()]).run(work)
    return work


def compare_fusions(name: str, fuse: Callable, labels: tuple[str, str], rounds: int) -> dict:
    """Fuse model `name` both ways (`fuse(unfused, label)`), compile, check against each other
    and XLA, time interleaved; one row."""
    import jax
    import numpy as np

    from hlofuse.compiler import optimize
    from hlofuse.hlo.parser import parse_hlo
    from hlofuse.passes.fusion import module_cost
    from hlofuse.runtime.compare import compare_outputs
    from hlofuse.runtime.cpu_executor import CpuProgram
    from model_zoo import BUILDERS
    from real_models import XlaExecutable
    from run import rotated_rounds

    a, b = labels
    model = BUILDERS[name]()
    text = jax.jit(model.fn, keep_unused=True).lower(*model.args).as_text(dialect="hlo")
    unfused, _ = optimize(parse_hlo(text), "cpu", fusion=False)
    programs, row = {}, {"model": name}
    for label in labels:
        fused = fuse(unfused, label)
        cost = module_cost(fused)
        row[f"kernels_{label}"] = cost.kernels
        row[f"MB_{label}"] = (cost.bytes_read + cost.bytes_written) / 1e6
        programs[label] = CpuProgram.compile(fused, cache=False)
    xla = XlaExecutable(text)
    args = [np.asarray(x, order="C") for x in model.args]
    buffers = xla.place(args)
    want = [np.asarray(o) for o in xla(buffers)]
    out_a = programs[a].run(args)
    row[f"{a}_matches_{b}"] = all(np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
                                  for x, y in zip(out_a, programs[b].run(args)))
    row[f"{a}_matches_xla"] = all(r.ok for r in compare_outputs(list(out_a), want))
    calls = {a: lambda: programs[a].run(args), b: lambda: programs[b].run(args), "xla": lambda: xla(buffers)}
    for call in calls.values():  # warm-up
        call()
        call()
    times = rotated_rounds(calls, rounds, timed)
    for label, ts in times.items():
        row[f"{label}_wall_ms"] = statistics.median(t[0] for t in ts) * 1e3
        row[f"{label}_cpu_ms"] = statistics.median(t[1] for t in ts) * 1e3
    row[f"{a}/{b}_cpu"] = row[f"{a}_cpu_ms"] / row[f"{b}_cpu_ms"]
    row[f"{a}/{b}_wall"] = row[f"{a}_wall_ms"] / row[f"{b}_wall_ms"]
    row[f"{a}/xla_wall"] = row[f"{a}_wall_ms"] / row["xla_wall_ms"]
    row[f"{b}/xla_wall"] = row[f"{b}_wall_ms"] / row["xla_wall_ms"]
    return row


def ab_main(doc: str, fuse: Callable, labels: tuple[str, str], models: str, rounds: int, threads: int,
            argv: list[str] | None = None) -> int:
    """The command line of an A/B script (`doc` its docstring): --models, --rounds, --threads;
    prints one row per model."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--models", default=models)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--threads", type=int, default=threads, help="hlofuse threads (0: its default)")
    args = parser.parse_args(argv)
    if args.threads:
        os.environ["HLOFUSE_CPU_THREADS"] = str(args.threads)
    for name in args.models.split(","):
        load_before = os.getloadavg()[0]
        row = compare_fusions(name, fuse, labels, args.rounds)
        row["load"] = f"{load_before:.1f}-{os.getloadavg()[0]:.1f}"
        print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    return 0
