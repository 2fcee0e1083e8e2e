"""Measure what codegen/region_cost.py assumes: a parallel region's cost and each kernel kind's
one-thread time per unit of work, on this machine.

Run:  python benchmarks/region_cost.py [--rounds 9] [--iterations 200] [--kinds plain,tanh,...]

Each measurement is a while loop of `--iterations` iterations whose body is one kernel (so the
native driver runs the iterations back to back, as scan_rnn's loop does, with no Python between
them), timed per iteration with the driver's thread count set to 1 and to 2 in alternating
order, round after round (medians; wall and CPU time). Two tables:

- per kind (plain and transcendental loop kernels, a row reduction, a GEMM), the one-thread CPU
  ns per unit of work beside the constant region_cost.py uses, and the time on two threads
  under the real rule (which may keep the kernel on one thread);
- the region: a kernel forced onto two threads (REGION_NS set to 1 ns while it compiles), its
  wall time on two threads minus on one, min and median over rounds. The min is the idle
  machine's wake-up (a round where the other core was free); the median says what a busy
  machine adds. Run it on an idle machine to check REGION_NS.

The load (`uptime`) is printed before and after: on a busy machine read the CPU columns.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import hlofuse  # noqa: E402
from hlofuse.codegen import region_cost  # noqa: E402


def loop_module(state: list[str], body: str, iterations: int, result: int = 1) -> str:
    """HLO text: a while loop of `iterations` over (s32 counter, *state) running `body`, which
    sees the state as s0, s1 ... and the next counter as i2, and ends in its ROOT tuple."""
    st = ", ".join(["s32[]"] + state)
    gtes = "\n".join(f"  s{k} = {s} get-tuple-element(p), index={k + 1}" for k, s in enumerate(state))
    params = "\n".join(f"  a{k} = {s} parameter({k})" for k, s in enumerate(state))
    names = ", ".join(f"a{k}" for k in range(len(state)))
    return f"""HloModule region_cost
add {{
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}}
cond {{
  p = ({st}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant({iterations})
  ROOT lt = pred[] compare(i, n), direction=LT
}}
body {{
  p = ({st}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
{gtes}
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
{body}
}}
ENTRY main {{
{params}
  z = s32[] constant(0)
  t = ({st}) tuple(z, {names})
  w = ({st}) while(t), condition=cond, body=body
  ROOT r = {state[result - 1]} get-tuple-element(w), index={result}
}}
"""


# Elementwise bodies: x -> op(x) with a fixed point, so values stay normal over the iterations.
_ELEMENTWISE = {
    "plain": "  c = f32[] constant(0.5)\n  cb = {s} broadcast(c), dimensions={{}}\n  y = {s} multiply(s0, cb)\n"
             "  t = {s} add(y, cb)",
    "divide": "  c = f32[] constant(1.5)\n  cb = {s} broadcast(c), dimensions={{}}\n  y = {s} add(s0, cb)\n"
              "  t = {s} divide(cb, y)",
    "tanh": "  c = f32[] constant(1.5)\n  cb = {s} broadcast(c), dimensions={{}}\n  y = {s} multiply(s0, cb)\n"
            "  t = {s} tanh(y)",
    "exp": "  c = f32[] constant(-0.5)\n  cb = {s} broadcast(c), dimensions={{}}\n  y = {s} multiply(s0, cb)\n"
           "  t = {s} exponential(y)",
    "logistic": "  c = f32[] constant(1.5)\n  cb = {s} broadcast(c), dimensions={{}}\n  y = {s} multiply(s0, cb)\n"
                "  t = {s} logistic(y)",
}


def case(kind: str, size: int, iterations: int) -> tuple[str, list, float, float]:
    """(HLO text, arguments, units of work per iteration, the ns per unit region_cost assumes)."""
    rng = np.random.default_rng(0)
    if kind in _ELEMENTWISE:
        s = f"f32[{size}]"
        body = _ELEMENTWISE[kind].format(s=s) + f"\n  ROOT r = (s32[], {s}) tuple(i2, t)"
        per = region_cost.ELEMENT_NS + region_cost.TRANSCENDENTAL_NS * (kind not in ("plain", "divide"))
        return loop_module([s], body, iterations), [rng.standard_normal(size).astype(np.float32)], size, per
    if kind == "rowsum":  # rows of 256; scaled by the counter so the loop cannot hoist it
        rows = size // 256
        s, o = f"f32[{rows},256]", f"f32[{rows}]"
        body = (f"  fi = f32[] convert(i)\n  fb = {s} broadcast(fi), dimensions={{}}\n  x = {s} multiply(s0, fb)\n"
                f"  zero = f32[] constant(0)\n  r0 = {o} reduce(x, zero), dimensions={{1}}, to_apply=add\n"
                f"  ROOT r = (s32[], {s}, {o}) tuple(i2, s0, r0)")
        args = [rng.standard_normal((rows, 256)).astype(np.float32), np.zeros(rows, np.float32)]
        return loop_module([s, o], body, iterations, 2), args, rows * 256, region_cost.REDUCED_ELEMENT_NS
    if kind == "gemm":  # [size,128] x [128,128], an orthogonal rhs so the state keeps its norm
        a, b = f"f32[{size},128]", "f32[128,128]"
        body = (f"  d = {a} dot(s0, s1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n"
                f"  ROOT r = (s32[], {a}, {b}) tuple(i2, d, s1)")
        q, _ = np.linalg.qr(rng.standard_normal((128, 128)))
        args = [rng.standard_normal((size, 128)).astype(np.float32), q.astype(np.float32)]
        return loop_module([a, b], body, iterations), args, size * 128 * 128, region_cost.MULTIPLY_ADD_NS
    raise SystemExit(f"unknown kind {kind!r}")


def per_iteration(text: str, args: list, rounds: int, iterations: int) -> dict[int, tuple[list, list]]:
    """Wall and CPU seconds per iteration at 1 and 2 driver threads, interleaved per round."""
    # no cache: a program compiled under another REGION_NS must not be reused (the module
    # cache keys on the sources, not on a constant patched in this process)
    exe = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)
    exe(*args)
    config = exe.program.driver._config  # [threads, 0]: read by the driver at every launch
    out: dict[int, tuple[list, list]] = {1: ([], []), 2: ([], [])}
    for r in range(rounds):
        for threads in ((1, 2) if r % 2 == 0 else (2, 1)):
            config[0] = threads
            w0, c0 = time.perf_counter(), time.process_time()
            exe(*args)
            out[threads][0].append((time.perf_counter() - w0) / iterations)
            out[threads][1].append((time.process_time() - c0) / iterations)
    return out


def uptime() -> str:
    """The machine's load line."""
    with os.popen("uptime") as f:
        return f.read().strip()


def main(argv=None) -> int:
    """Print the per-kind table and the region's cost."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--kinds", default="plain,divide,tanh,exp,logistic,rowsum,gemm")
    args = p.parse_args(argv)
    sizes = {"gemm": (256, 512)}
    print("before:", uptime())
    print(f"{'kind':9s} {'work/iter':>10s} {'1t cpu ns/unit':>15s} {'model':>7s} {'1t wall us':>11s} "
          f"{'rule threads':>12s} {'2t wall us':>11s}")
    for kind in args.kinds.split(","):
        for size in sizes.get(kind, (262144, 1048576)):
            text, inputs, work, model = case(kind, size, args.iterations)
            t = per_iteration(text, inputs, args.rounds, args.iterations)
            cpu1 = statistics.median(t[1][1])
            exe_threads = max(1, min(2, int(work * model // region_cost.REGION_NS)))
            print(f"{kind:9s} {work:10.3g} {cpu1 / work * 1e9:15.4f} {model:7.4f} {statistics.median(t[1][0]) * 1e6:11.1f} "
                  f"{exe_threads:12d} {statistics.median(t[2][0]) * 1e6:11.1f}", flush=True)
    saved = region_cost.REGION_NS
    region_cost.REGION_NS = 1.0  # force two threads on the kernels compiled below
    try:
        print("a region forced onto two threads: wall(2t) - wall(1t) per iteration, us")
        for kind, size in (("plain", 32768), ("tanh", 32768), ("tanh", 262144)):
            text, inputs, _, _ = case(kind, size, args.iterations)
            t = per_iteration(text, inputs, args.rounds, args.iterations)
            extra = [(w2 - w1) * 1e6 for w1, w2 in zip(t[1][0], t[2][0])]
            cpu = [(c2 - c1) * 1e6 for c1, c2 in zip(t[1][1], t[2][1])]
            print(f"  {kind} {size}: wall +{min(extra):.1f} min, +{statistics.median(extra):.1f} median; "
                  f"CPU +{statistics.median(cpu):.1f} median (REGION_NS assumes {saved / 1e3:.0f})", flush=True)
    finally:
        region_cost.REGION_NS = saved
    print("after:", uptime())
    return 0


if __name__ == "__main__":
    sys.exit(main())
