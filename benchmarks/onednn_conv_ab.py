"""Real models with convolutions, oneDNN's convolution primitives on and off, beside XLA:CPU.

Run (needs the `bench` extra, KERAS_BACKEND=jax):

    python benchmarks/onednn_conv_ab.py [--models a,b] [--rounds 15]

Each model of benchmarks/model_zoo.py is compiled by hlofuse twice from the same HLO text, the
rule `prefers_onednn` (codegen/kernels/cpu_conv_onednn.py) as it stands and turned off (the
convolutions then run on the direct and tiled-GEMM kernels, as before oneDNN's primitives;
no compile cache), and by XLA:CPU; the three run in rotated rounds on the same inputs
(benchmarks/run.py `rotated_rounds`). Printed per model: medians (wall seconds, or CPU seconds
with `--cpu-time`), the ratios to XLA, the outputs' agreement, cold compile seconds of each
hlofuse build, the convolutions oneDNN took, and the GFLOP/s of dots and convolutions from the
native profile (real_models.contraction_rate) with its share of a run. The load average is
printed before and after (shared machines).
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

CONV_MODELS = ("keras_resnet50", "keras_mobilenet_v2", "flax_mnist_cnn", "flax_mnist_cnn_train",
               "haiku_resnet18_train")


def compile_both(text: str):
    """{"onednn": exe, "old": exe} and their cold compile seconds, from HLO `text`."""
    import hlofuse
    from hlofuse.codegen.kernels import cpu_conv_gemm

    rule = cpu_conv_gemm.prefers_onednn
    exes, seconds = {}, {}
    try:
        for path in ("onednn", "old"):
            if path == "old":
                cpu_conv_gemm.prefers_onednn = lambda comp: False
            start = time.perf_counter()
            exes[path] = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)
            seconds[path] = time.perf_counter() - start
    finally:
        cpu_conv_gemm.prefers_onednn = rule
    return exes, seconds


def _cpu_seconds(call) -> float:
    t0 = time.process_time()
    call()
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(CONV_MODELS))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--cpu-time", action="store_true",
                    help="time the process's CPU seconds, not wall seconds (a shared machine's load "
                         "then counts less; with HLOFUSE_CPU_THREADS=1 the work of one thread)")
    args = ap.parse_args()
    import jax
    import numpy as np

    from model_zoo import BUILDERS
    from real_models import XlaExecutable, contraction_rate
    from run import rotated_rounds, uptime

    from hlofuse.runtime.compare import compare_outputs

    print(uptime(), flush=True)
    for name in args.models.split(","):
        model = BUILDERS[name]()
        text = jax.jit(model.fn, keep_unused=True).lower(*model.args).as_text(dialect="hlo")
        exes, seconds = compile_both(text)
        xla = XlaExecutable(text)
        inputs = [np.asarray(a, order="C") for a in model.args]
        buffers = xla.place(inputs)
        theirs = [np.asarray(o) for o in xla(buffers)]
        agree = {p: compare_outputs(list(e(*inputs)), theirs) for p, e in exes.items()}
        took = sum(k.custom == "onednn_conv" for k in exes["onednn"].program._planner.kernels)
        calls = {"xla": lambda: xla(buffers), **{p: (lambda e=e: e(*inputs)) for p, e in exes.items()}}
        for call in calls.values():  # warm-up
            call()
            call()
        times = rotated_rounds(calls, args.rounds, _cpu_seconds if args.cpu_time else None)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        rates = {p: contraction_rate(e, inputs) for p, e in exes.items()}
        print(f"{name}: oneDNN {med['onednn']:.2f} ms ({med['onednn'] / med['xla']:.2f}x XLA), old "
              f"{med['old']:.2f} ms ({med['old'] / med['xla']:.2f}x), XLA {med['xla']:.2f} ms; oneDNN/old "
              f"{med['onednn'] / med['old']:.2f}; compile {seconds['onednn']:.2f} / {seconds['old']:.2f} s "
              f"(XLA {xla.compile_seconds:.2f}); {took} oneDNN kernels; dot+conv GF/s "
              + " / ".join(f"{r.get('contraction_gflops', 0):.0f} ({r.get('contraction_share', 0) * 100:.0f}%)"
                           for r in rates.values())
              + "; agree " + " / ".join(str(all(r.ok for r in a)) for a in agree.values()), flush=True)
    print(uptime())


if __name__ == "__main__":
    main()
