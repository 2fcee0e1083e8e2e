"""Per-call overhead of a compiled executable against jax.jit (issue 12 item 5).

    python benchmarks/call_overhead.py [--calls 20000]

A tiny module (two f32[4] inputs, one add) is called with numpy arrays in and numpy arrays out,
by hlofuse (one call of the native driver, runtime/native_driver.py) and by jax.jit on the same
function (the result converted with np.asarray, so both hand numpy arrays back). Calls are
interleaved in rounds; the medians of the per-round means are printed with the load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    import jax

    import hlofuse

    def f(x, y):
        return x + y

    x = np.arange(4, dtype=np.float32)
    y = np.ones(4, np.float32)
    text = jax.jit(f).lower(x, y).as_text(dialect="hlo")
    exe = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu")
    jf = jax.jit(f)
    np.testing.assert_array_equal(exe(x, y)[0], np.asarray(jf(x, y)))
    per_round = max(1, args.calls // args.rounds)
    ours, theirs = [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for _ in range(per_round):
            exe(x, y)
        t1 = time.perf_counter()
        for _ in range(per_round):
            np.asarray(jf(x, y))
        t2 = time.perf_counter()
        ours.append((t1 - t0) / per_round)
        theirs.append((t2 - t1) / per_round)
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(f"hlofuse   {a * 1e6:7.2f} us per call")
    print(f"jax.jit   {b * 1e6:7.2f} us per call")
    print(f"ratio     {a / b:7.2f}x")


if __name__ == "__main__":
    main()
