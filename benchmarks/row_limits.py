"""Row kernels (softmax, log-softmax, layer norm) against the limits that bind them, measured in
the same run: the `exp` alone and a copy, each a loop kernel over the same array.

Run:  python benchmarks/row_limits.py [--rows 3072] [--cols 2048] [--rounds 21]
                                      [--baseline MODULE.NAME=VALUE ...]

One thread (HLOFUSE_CPU_THREADS=1), process CPU time, one call of every kernel per round in an
order that alternates between rounds (run.interleaved), inputs on 64-byte boundaries. Two
regimes:

- from memory: f32[rows, cols] (24 MB at the default, more than L3 with its output): a
  kernel's median time per element, its GB/s (input and output once) and its rate against the
  exp-alone kernel ("of exp"), which reads and writes the same bytes and computes one exp per
  element: a row kernel that computes one exp per element (softmax, log-softmax) and reaches
  100% of it is bound by the exp, not by the passes over its rows.
- in cache: the marginal cost of 64 more rows (16 and 80 rows of `cols`, at most 1.3 MB of
  input and output together, within L2; each timed sample 40 and 10 calls): the difference of
  the two medians per call over the elements added, so the call's fixed cost drops out. What the row kernel's loops cost against the exp
  loop's, with no memory in the way.

`--baseline` compiles every kernel a second time (no cache) with those hlofuse module
attributes set (`hlofuse.codegen.kernels.row_ahead.PIPELINE_FIRST_LEVEL=False`) and times it as
`NAME@base` in the same rounds: an A/B in one process (as bandwidth_share.py's).
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


# Calls per timed sample of the in-cache sizes: each sample a few hundred microseconds, long
# against the clock's and the scheduler's noise.
_REPEAT = {"cache16": 40, "cache80": 10}


def _kernels():
    """name -> JAX function of one f32[rows, cols] argument."""
    import jax
    import jax.numpy as jnp

    def layer_norm(x):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        xc = x - mean
        return xc * jax.lax.rsqrt(jnp.mean(xc * xc, axis=-1, keepdims=True) + 1e-5)

    return {
        "exp (reference)": jnp.exp,
        "copy (reference)": lambda x: -x,
        "softmax": lambda x: jax.nn.softmax(x, axis=-1),
        "log_softmax": lambda x: jax.nn.log_softmax(x, axis=-1),
        "layer_norm": layer_norm,
    }


def main(argv: list[str] | None = None) -> int:
    """Measure and print both tables."""
    os.environ["HLOFUSE_CPU_THREADS"] = "1"
    import jax
    import numpy as np

    from bandwidth_share import _aligned_copy, _attributes_set
    from run import interleaved, uptime

    import hlofuse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=3072)
    p.add_argument("--cols", type=int, default=2048)
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--baseline", action="append", default=[], metavar="MODULE.NAME=VALUE")
    a = p.parse_args(argv)
    rng = np.random.default_rng(0)
    sizes = {"memory": a.rows, "cache16": 16, "cache80": 80}
    inputs = {k: _aligned_copy(rng.standard_normal((r, a.cols), np.float32)) for k, r in sizes.items()}
    calls = {}
    for name, fn in _kernels().items():
        for size, x in inputs.items():
            text = jax.jit(fn).lower(x).as_text(dialect="hlo")
            variants = [("", [])] + ([("@base", a.baseline)] if a.baseline else [])
            for suffix, attrs in variants:
                with _attributes_set(attrs):
                    exe = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=not a.baseline)
                    exe(x)  # the driver is made on the first run
                calls[(name + suffix, size)] = (lambda e=exe, g=x, k=_REPEAT.get(size, 1): [e(g) for _ in range(k)])
    print(uptime(), flush=True)
    keys = list(calls)
    for f in calls.values():
        f()
    times = interleaved([calls[k] for k in keys], a.rounds, float("inf"), time.process_time)
    med = {k: statistics.median(t) for k, t in zip(keys, times)}
    print(uptime(), flush=True)
    names = list(dict.fromkeys(k[0] for k in keys))
    n_mem = a.rows * a.cols
    for k in keys:
        med[k] /= _REPEAT.get(k[1], 1)
    exp_mem = med[("exp (reference)", "memory")]
    print(f"one thread, CPU time, f32[{a.rows},{a.cols}] from memory; in cache: marginal cost of 64 rows")
    print(f"{'kernel':22s} {'ms':>7s} {'ns/el':>6s} {'GB/s':>6s} {'of exp':>7s} | {'cache ns/el':>11s} {'of exp':>7s}")
    exp_cache = (med[("exp (reference)", "cache80")] - med[("exp (reference)", "cache16")]) / (64 * a.cols)
    for name in names:
        t = med[(name, "memory")]
        cache = (med[(name, "cache80")] - med[(name, "cache16")]) / (64 * a.cols)
        print(f"{name:22s} {t * 1e3:7.3f} {t / n_mem * 1e9:6.3f} {8 * n_mem / t / 1e9:6.1f} {100 * exp_mem / t:6.0f}% | "
              f"{cache * 1e9:11.3f} {100 * exp_cache / cache:6.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
