"""Convolution epilogues kept or lost to copies: one model fused twice by hlofuse, timed interleaved beside XLA:CPU.

    KERAS_BACKEND=jax python benchmarks/conv_epilogue_ab.py [--models keras_mobilenet_v2,keras_resnet50]
        [--rounds 30] [--threads 1]

For each model of benchmarks/model_zoo.py, the same HLO text is fused twice after the same
passes: by the CPU rules as they are ("kept": a cheap producer ending a convolution's epilogue
chain is not copied into its other users, conv_fusion.duplicate_keeps_conv_epilogue) and by the
same rules without that check ("copied": the rule `conv_epilogue_copy` left out of
producer_consumer.CPU_RULES while fusing, the behaviour before it). Both are compiled, run on
the same inputs, checked equal to each other and to XLA, and timed in rotated rounds with
XLA:CPU on the same text. Each round records wall time and the process's CPU time of each
call; the row gives medians, their ratios, kernel counts and bytes moved (the fusion report's
figures) and the load. With `--threads N` hlofuse runs on N threads (HLOFUSE_CPU_THREADS; XLA
keeps its own pool, so compare its wall time only).
"""
from __future__ import annotations

import argparse
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


def _fuse(unfused, keep_epilogues: bool):
    """`unfused` fused for the CPU, with or without the conv-epilogue copy check."""
    from hlofuse.passes.dce import DeadCodeElimination
    from hlofuse.passes.fusion import fusion_passes, producer_consumer
    from hlofuse.passes.pipeline import PassPipeline

    rules = producer_consumer.CPU_RULES
    work = unfused.clone()
    if not keep_epilogues:
        producer_consumer.CPU_RULES = tuple(r for r in rules if r is not producer_consumer.conv_epilogue_copy)
    try:
        PassPipeline([*fusion_passes("cpu"), DeadCodeElimination()]).run(work)
    finally:
        producer_consumer.CPU_RULES = rules
    return work


def run_model(name: str, rounds: int) -> dict:
    """Fuse `name` both ways, compile, check against each other and XLA, time interleaved; one row."""
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

    model = BUILDERS[name]()
    text = jax.jit(model.fn, keep_unused=True).lower(*model.args).as_text(dialect="hlo")
    unfused, _ = optimize(parse_hlo(text), "cpu", fusion=False)
    programs, row = {}, {"model": name}
    for label, keep in (("kept", True), ("copied", False)):
        fused = _fuse(unfused, keep)
        cost = module_cost(fused)
        row[f"kernels_{label}"] = cost.kernels
        row[f"MB_{label}"] = (cost.bytes_read + cost.bytes_written) / 1e6
        programs[label] = CpuProgram.compile(fused, cache=False)
    xla = XlaExecutable(text)
    args = [np.asarray(a, order="C") for a in model.args]
    buffers = xla.place(args)
    want = [np.asarray(o) for o in xla(buffers)]
    kept_out = programs["kept"].run(args)
    row["kept_matches_copied"] = all(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
                                     for a, b in zip(kept_out, programs["copied"].run(args)))
    row["kept_matches_xla"] = all(r.ok for r in compare_outputs(list(kept_out), want))
    calls = {"kept": lambda: programs["kept"].run(args), "copied": lambda: programs["copied"].run(args),
             "xla": lambda: xla(buffers)}
    for call in calls.values():  # warm-up
        call()
        call()
    times = rotated_rounds(calls, rounds, _timed)
    for label, ts in times.items():
        row[f"{label}_wall_ms"] = statistics.median(t[0] for t in ts) * 1e3
        row[f"{label}_cpu_ms"] = statistics.median(t[1] for t in ts) * 1e3
    row["kept/copied_cpu"] = row["kept_cpu_ms"] / row["copied_cpu_ms"]
    row["kept/copied_wall"] = row["kept_wall_ms"] / row["copied_wall_ms"]
    row["kept/xla_wall"] = row["kept_wall_ms"] / row["xla_wall_ms"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="keras_mobilenet_v2")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1, help="hlofuse threads (0: its default)")
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
