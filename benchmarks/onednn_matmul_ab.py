"""Batched dots through oneDNN's matmul primitive on and off, beside XLA:CPU.

Run (needs the `bench` extra, KERAS_BACKEND=jax):

    python benchmarks/onednn_matmul_ab.py [case ...] [--rounds 9] [--force] [--cpu-time] [--split]

Each case (attention's dots b4 h6 s512 d64 as jax lowers them: `attn_qk`, `attn_pv`, both
`attn_dots`, the causal masked attention `attn_causal`; `pv:B,H,Q,K,D:LAYOUT`, a p.v dot of
those sizes and result layout (`PV_EINSUM`); a workload of benchmarks/run.py at its large
size; or a model of benchmarks/model_zoo.py)
is compiled by hlofuse twice from the same HLO text, the rule `prefers_onednn_matmul`
(codegen/kernels/cpu_gemm_onednn.py) as it stands ("after") and turned off ("before": the
per-batch sgemm kernels), no compile cache; `--force` routes every dot the primitive runs
with its brgemm kernels instead of the rule's class; `--split` compares the rule's primitives
called once per batch work unit (the driver's threads share the units, cpu_gemm_onednn.SPLIT_BATCH,
"after") with one call of each, split over the threads by oneDNN ("before"). Both and XLA:CPU's executable of the
same text run in interleaved rounds on the same inputs; printed per case: medians, ratios,
the kernels that took the primitive, the largest difference between the two hlofuse
results, and the load average (shared machines). `--cpu-time` times process CPU seconds
instead of wall seconds (with HLOFUSE_CPU_THREADS=1: the kernels' own cost, which another
job's share of the cores does not move; XLA's column then counts its threads' CPU time).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

ATTENTION = ("attn_qk", "attn_pv", "attn_dots", "attn_causal")


def compile_rule(text: str, mode: str):
    """hlofuse's executable of `text` with the matmul rule "on", "off" or "force", or on with
    each primitive called once for the whole product ("whole": no batch work units)."""
    import hlofuse
    from hlofuse.codegen.kernels import cpu_gemm_onednn as g

    saved, split = g.prefers_onednn_matmul, g.SPLIT_BATCH
    if mode == "whole":
        g.SPLIT_BATCH = False
    if mode == "off":
        g.prefers_onednn_matmul = lambda comp: False
    elif mode == "force":
        g.prefers_onednn_matmul = lambda comp: ((m := g.onednn_matmul(comp)) is not None
                                                and g.fast_implementation(m.desc))
    try:
        return hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)
    finally:
        g.prefers_onednn_matmul, g.SPLIT_BATCH = saved, split


def attention_case(name: str, b: int = 4, h: int = 6, s: int = 512, d: int = 64):
    """(HLO text, arguments) of one of ATTENTION as jax lowers it."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def qk(q, k):
        return jnp.einsum("bqhd,bkhd->bhqk", q, k)

    def pv(p, v):
        return jnp.einsum("bhqk,bkhd->bqhd", p, v)

    def causal(q, k, v):
        logits = qk(q, k) / np.float32(np.sqrt(d))
        logits = jnp.where(jnp.tril(jnp.ones((s, s), bool)), logits, -1e9)
        return pv(jax.nn.softmax(logits, axis=-1), v)

    fn, args = {
        "attn_qk": (qk, [f32(b, s, h, d), f32(b, s, h, d)]),
        "attn_pv": (pv, [f32(b, h, s, s), f32(b, s, h, d)]),
        "attn_dots": (lambda q, k, v, p: (qk(q, k), pv(p, v)), [f32(b, s, h, d) for _ in range(3)] + [f32(b, h, s, s)]),
        "attn_causal": (causal, [f32(b, s, h, d) for _ in range(3)]),
    }[name]
    return jax.jit(fn).lower(*args).as_text(dialect="hlo"), args


# p.v-shaped dots by result layout ("pv:B,H,Q,K,D:LAYOUT" cases, the rule's measurements):
# bqhd as attention writes it (jax: dot(v, p) under a transpose, the C^T form), bhqd (direct,
# N = D), bhdq (a row-major [d, q] result: M = D).
PV_EINSUM = {"bqhd": ("bhqk,bkhd->bqhd", "bkhd"), "bhqd": ("bhqk,bhkd->bhqd", "bhkd"),
             "bhdq": ("bhqk,bhkd->bhdq", "bhkd")}


def pv_case(spec: str):
    """(HLO text, arguments) of "pv:B,H,Q,K,D:LAYOUT" (PV_EINSUM)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    _, sizes, layout = spec.split(":")
    b, h, q, k, d = (int(x) for x in sizes.split(","))
    equation, v_order = PV_EINSUM[layout]
    rng = np.random.default_rng(0)
    dims = {"b": b, "h": h, "k": k, "d": d}
    p = rng.standard_normal((b, h, q, k)).astype(np.float32)
    v = rng.standard_normal(tuple(dims[c] for c in v_order)).astype(np.float32)
    return jax.jit(lambda p, v: jnp.einsum(equation, p, v)).lower(p, v).as_text(dialect="hlo"), [p, v]


def case(name: str):
    """(HLO text, arguments) of case `name`."""
    if name in ATTENTION:
        return attention_case(name)
    if name.startswith("pv:"):
        return pv_case(name)
    import jax
    from model_zoo import BUILDERS
    from workloads import WORKLOADS

    if name in WORKLOADS:  # benchmarks/run.py's workloads, large size
        work = WORKLOADS[name]
        args = work.inputs("large")
        return jax.jit(work.fn).lower(*args).as_text(dialect="hlo"), args

    model = BUILDERS[name]()
    return jax.jit(model.fn, keep_unused=True).lower(*model.args).as_text(dialect="hlo"), model.args


def main() -> None:
    """Measure and print one line per case."""
    from real_models import XlaExecutable, reexec_with_malloc_settings

    reexec_with_malloc_settings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", help=f"cases (default: {' '.join(ATTENTION)})")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--force", action="store_true", help="every dot the primitive runs fast, not the rule's")
    parser.add_argument("--cpu-time", action="store_true", help="process CPU seconds instead of wall seconds")
    parser.add_argument("--split", action="store_true",
                        help="after: the rule's primitives called per batch work unit (cpu_gemm_onednn.SPLIT_BATCH); "
                             "before: the same primitives, one call each split by oneDNN")
    opts = parser.parse_args()
    import time

    import numpy as np

    from kernel_figures import median_seconds

    print(f"load average before: {os.getloadavg()}", flush=True)
    for name in opts.cases or ATTENTION:
        text, args = case(name)
        after = compile_rule(text, "force" if opts.force else "on")
        before = compile_rule(text, "whole" if opts.split else "off")
        taken = sum(k.custom == "onednn_matmul" for k in after.program._planner.kernels)
        xla = XlaExecutable(text)
        buffers = xla.place(args)
        diff = max((float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
                    for x, y in zip(after(*args), before(*args)) if np.asarray(x).size), default=0.0)
        times: dict[str, list] = {"after": [], "before": [], "xla": []}
        clock = time.process_time if opts.cpu_time else time.perf_counter
        for _ in range(opts.rounds):  # interleaved rounds
            times["after"].append(median_seconds(lambda: after(*args), 1, warmup=1, clock=clock))
            times["before"].append(median_seconds(lambda: before(*args), 1, warmup=1, clock=clock))
            times["xla"].append(median_seconds(lambda: xla(buffers), 1, warmup=1, clock=clock))
        a, b, x = (statistics.median(times[k]) for k in ("after", "before", "xla"))
        print(f"{name:26} primitives {taken:2}  before {b * 1e3:8.2f} ms  after {a * 1e3:8.2f} ms  "
              f"XLA {x * 1e3:8.2f} ms  after/before {a / b:5.2f}  before/XLA {b / x:5.2f}  after/XLA {a / x:5.2f}  "
              f"max|after-before| {diff:.2e}  load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
