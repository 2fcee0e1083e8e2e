"""Window reductions fused or not: one model compiled twice by hlofuse, timed interleaved beside XLA:CPU.

    KERAS_BACKEND=jax python benchmarks/window_fusion_ab.py [--models flax_mnist_cnn,flax_mnist_cnn_train]
        [--rounds 40] [--threads 1]

For each model of benchmarks/model_zoo.py, the same HLO text is fused twice after the same
passes: by hlofuse's CPU rules (reduce-window fused with its producers and consumers,
passes/fusion/window_fusion.py) and by XLA:CPU's (`fuse_window_reductions=False`: every pool a
kernel of its own); both are compiled and run on the same inputs, checked equal, and timed in
interleaved rounds with XLA:CPU on the same text (the order rotating per round). Each round records wall time and the process's
CPU time of each call; the table gives medians, the kernel counts and the load. With
`--threads N` hlofuse's programs run on N threads (HLOFUSE_CPU_THREADS; XLA keeps its own pool,
so compare its wall time only).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def _timed(call) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    w, c = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - w, time.process_time() - c


def run_model(name: str, rounds: int) -> dict:
    """Compile `name` both ways and beside XLA, check, time interleaved; one row."""
    import jax
    import numpy as np

    from hlofuse.compiler import optimize
    from hlofuse.hlo.parser import parse_hlo
    from hlofuse.passes.dce import DeadCodeElimination
    from hlofuse.passes.fusion import fusion_passes, module_cost
    from hlofuse.passes.fusion.cost_model import CPU
    from hlofuse.passes.pipeline import PassPipeline
    from hlofuse.runtime.compare import compare_outputs
    from hlofuse.runtime.cpu_executor import CpuProgram
    from model_zoo import BUILDERS
    from real_models import XlaExecutable
    from run import rotated_rounds

    model = BUILDERS[name]()
    text = jax.jit(model.fn, keep_unused=True).lower(*model.args).as_text(dialect="hlo")
    unfused, _ = optimize(parse_hlo(text), "cpu", fusion=False)
    programs, kernels = {}, {}
    for label, params in (("fused", CPU), ("apart", dataclasses.replace(CPU, fuse_window_reductions=False))):
        work = unfused.clone()
        PassPipeline([*fusion_passes(params), DeadCodeElimination()]).run(work)
        kernels[label] = module_cost(work).kernels
        programs[label] = CpuProgram.compile(work, cache=False)
    xla = XlaExecutable(text)
    args = [np.asarray(a, order="C") for a in model.args]
    buffers = xla.place(args)
    want = [np.asarray(o) for o in xla(buffers)]
    fused_out = programs["fused"].run(args)
    row = {"model": name, "kernels_fused": kernels["fused"], "kernels_apart": kernels["apart"],
           "fused_matches_apart": all(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
                                      for a, b in zip(fused_out, programs["apart"].run(args))),
           "fused_matches_xla": all(r.ok for r in compare_outputs(list(fused_out), want))}
    calls = {"fused": lambda: programs["fused"].run(args), "apart": lambda: programs["apart"].run(args),
             "xla": lambda: xla(buffers)}
    for call in calls.values():  # warm-up
        call()
    times = rotated_rounds(calls, rounds, _timed)
    for label, ts in times.items():
        row[f"{label}_wall_ms"] = statistics.median(t[0] for t in ts) * 1e3
        row[f"{label}_cpu_ms"] = statistics.median(t[1] for t in ts) * 1e3
    row["fused/apart_cpu"] = row["fused_cpu_ms"] / row["apart_cpu_ms"]
    row["fused/apart_wall"] = row["fused_wall_ms"] / row["apart_wall_ms"]
    row["fused/xla_wall"] = row["fused_wall_ms"] / row["xla_wall_ms"]
    row["apart/xla_wall"] = row["apart_wall_ms"] / row["xla_wall_ms"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="flax_mnist_cnn,flax_mnist_cnn_train")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--threads", type=int, default=0, help="hlofuse threads (0: its default)")
    a = parser.parse_args(argv)
    if a.threads:
        os.environ["HLOFUSE_CPU_THREADS"] = str(a.threads)
    for name in a.models.split(","):
        load_before = os.getloadavg()[0]
        row = run_model(name, a.rounds)
        row["load"] = f"{load_before:.1f}-{os.getloadavg()[0]:.1f}"
        print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
