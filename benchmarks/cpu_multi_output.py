"""CPU multi-output loop fusion: time with and without it, beside XLA:CPU, on large inputs.

The CPU's sibling fusion merges plain loops over the same dimensions that read a common operand
into one loop kernel, and computes a plain loop read by several kernels inside one loop user as
an extra output (passes/fusion/cpu_multi_output.py). This measures whether the bytes the
cost model saves are time saved: for each module, hlofuse's CPU program with the rule
(`sibling-fusion{loop_siblings=true}`, the default) and without both loop rules
(`loop_siblings=false`, the reductions-only rule before), and XLA:CPU on the same HLO text, run interleaved (one call of
each per round, order rotating), medians. Modules: the workloads whose CPU fusion the rule
changes, and the JAX corpus programs it changes (tests/support/jax_programs.py) called on
inputs of `--elements` elements (their corpus inputs are tiny).

Run:  KERAS_BACKEND=jax /tmp/benchvenv/bin/python benchmarks/cpu_multi_output.py [--rounds 15]
      [--elements 4194304] [--only a,b] [--models]
Read the ratios (both sides share the machine's load round by round); the load is printed.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests", "support"))

from real_models import XlaExecutable, reexec_with_malloc_settings  # noqa: E402
from run import rotated_rounds  # noqa: E402

WORKLOADS = ("shared_producer", "batch_norm_train", "lstm_cell", "scan_rnn")
# Corpus programs the rule changes whose functions take inputs of any length.
# Real models whose CPU kernel count the rules change (benchmarks/fusion_algorithms.py --models).
MODELS = ("flax_mnist_cnn_train", "equinox_mlp_train", "haiku_lstm_scan", "haiku_resnet18_train")
CORPUS = ("transcendental", "integer_ops", "unsigned_ops", "clamp_select_compare", "gelu_variants", "complex_ops")


def _corpus_args(name: str, n: int) -> list[np.ndarray]:
    """The corpus program's example arguments, each tiled to `n` elements (same dtypes and
    values, so integer divisors stay non-zero)."""
    from jax_programs import by_name

    return [np.resize(a, (n,)) for a in by_name(name).make_args()]


def sources(n: int, only: set[str] | None) -> list[tuple[str, str, list]]:
    """(name, HLO text, inputs) of every module measured."""
    import jax

    from workloads import WORKLOADS as ALL

    out = []
    for name in WORKLOADS:
        if only and name not in only:
            continue
        args = [np.asarray(a) for a in ALL[name].inputs("large")]
        out.append((f"workload:{name}", jax.jit(ALL[name].fn).lower(*args).as_text(dialect="hlo"), args))
    from jax_programs import by_name

    for name in CORPUS:
        if only and name not in only:
            continue
        args = _corpus_args(name, n)
        out.append((f"jax:{name}", jax.jit(by_name(name).fn).lower(*args).as_text(dialect="hlo"), args))
    return out


def model_sources(only: set[str] | None) -> list[tuple[str, str, list]]:
    """The real models of benchmarks/model_zoo.py whose CPU fusion the rules change (the bench
    extra), lowered as benchmarks/fusion_algorithms.py lowers them."""
    import jax

    from model_zoo import BUILDERS

    out = []
    for name in MODELS:
        if only and name not in only:
            continue
        model = BUILDERS[name]()
        text = jax.jit(model.fn, keep_unused=True).lower(*model.args).as_text(dialect="hlo")
        out.append((f"model:{name}", text, [np.asarray(a, order="C") for a in model.args]))
    return out


def hlofuse_program(text: str, loop_siblings: bool):
    """hlofuse's CPU program of `text`: the standard pipeline, its sibling fusion with the
    given `loop_siblings`, then compiled as fused."""
    import hlofuse
    from hlofuse.passes.fusion import SiblingFusion, module_cost
    from hlofuse.passes.pipeline import standard_pipeline

    module = hlofuse.parse_hlo(text)
    pipeline = standard_pipeline(target="cpu", fusion=True)
    pipeline.passes = [dataclasses.replace(p, loop_siblings=loop_siblings) if isinstance(p, SiblingFusion) else p
                       for p in pipeline.passes]
    pipeline.run(module)
    exe = hlofuse.compile(hlofuse.parse_hlo(module.to_text()), target="cpu", fusion=False)
    return exe, module_cost(module).kernels


def time_module(text: str, args: list, rounds: int) -> dict:
    """Medians (seconds) of the three programs, interleaved, and the kernel counts."""
    on, k_on = hlofuse_program(text, True)
    off, k_off = hlofuse_program(text, False)
    xla = XlaExecutable(text)
    bufs = xla.place(args)
    calls = {"on": lambda: on(*args), "off": lambda: off(*args), "xla": lambda: xla(bufs)}
    for fn in calls.values():  # first-call work
        fn()
        fn()
    # the same results with and without the rule (bit for bit: the same element code)
    for a, b in zip(on(*args), off(*args)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    times = rotated_rounds(calls, rounds)
    return {"kernels_on": k_on, "kernels_off": k_off, **{k: statistics.median(v) for k, v in times.items()}}


def main(argv: list[str] | None = None) -> int:
    """Time every module and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--elements", type=int, default=1 << 22)
    parser.add_argument("--only", help="comma-separated workload, corpus or model names")
    parser.add_argument("--models", action="store_true", help="also the real models (the bench extra)")
    args = parser.parse_args(argv)
    reexec_with_malloc_settings()
    only = set(args.only.split(",")) if args.only else None
    print("load before:", os.getloadavg())
    print(f"{'module':32s} {'kernels off->on':>15s} {'off ms':>9s} {'on ms':>9s} {'xla ms':>9s} "
          f"{'on/off':>7s} {'on/xla':>7s} {'off/xla':>7s}")
    found = sources(args.elements, only) + (model_sources(only) if args.models else [])
    for name, text, inputs in found:
        r = time_module(text, inputs, args.rounds)
        print(f"{name:32s} {r['kernels_off']:>7d} -> {r['kernels_on']:<5d} {r['off'] * 1e3:>9.2f} {r['on'] * 1e3:>9.2f} "
              f"{r['xla'] * 1e3:>9.2f} {r['on'] / r['off']:>7.2f} {r['on'] / r['xla']:>7.2f} {r['off'] / r['xla']:>7.2f}",
              flush=True)
    print("load after:", os.getloadavg())
    return 0


if __name__ == "__main__":
    sys.exit(main())
