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
  the two medians per call over the elements added, so the call's fixed cost drops out. What
  the row kernel's loops cost against the exp loop's, with no memory in the way. Not the same
  code as from memory: rows within L3 do not stream (cpu_row.streams_outputs), so softmax then
  stores exp(x - max) in its output row and folds the next row's max in its division loop, not
  in its exp loop.

`--loops` also prints, per kernel as compiled for the array from memory, each innermost loop of
its machine code (`loop_stats`): instructions, stack operands at a fixed offset (spill stores
and reloads; a row buffer on the stack is indexed and not counted) and register-to-register
vector moves: where a loop spills or shuffles registers.

`--baseline` compiles every kernel a second time (no cache) with those hlofuse module
attributes set (`hlofuse.codegen.kernels.row_ahead.PIPELINE_FIRST_LEVEL=False`) and times it as
`NAME@base` in the same rounds: an A/B in one process (as bandwidth_share.py's).
"""
from __future__ import annotations

import argparse
import os
import re
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


_LABEL = re.compile(r"^(\.L\w+):")
_BRANCH = re.compile(r"^\s+j\w+\s+(\.L\w+)")
# An operand at a fixed offset from the stack pointer, `96(%rsp)` (not `96(%rsp,%rax,4)`).
_SPILL = re.compile(r"-?\d*\(%rsp\)")
# A vector register copied whole into another: `vmovaps %zmm3, %zmm4` (no mask, no memory).
_MOVE = re.compile(r"^\s+vmov(?:aps|ups|apd|upd|dqa64|dqa32|dqu64|dqu32)\s+%[xyz]mm\d+, %[xyz]mm\d+\s*$")


def loop_stats(asm: str) -> list[dict]:
    """Each innermost loop of assembly text `asm` (AT&T syntax, as LLVM prints it): a label and
    a later branch back to it with no other such loop inside. Per loop: its label, its
    instructions, its stack operands at a fixed offset (`spills`: the register allocator's
    spill stores and reloads) and its whole-register vector moves (`moves`)."""
    lines = asm.splitlines()
    at: dict[str, int] = {}
    loops = []
    for i, line in enumerate(lines):
        if m := _LABEL.match(line):
            at[m.group(1)] = i
        elif (m := _BRANCH.match(line)) and m.group(1) in at:
            loops.append((at[m.group(1)], i, m.group(1)))
    inner = [x for x in loops if not any(x[0] <= y[0] and y[1] <= x[1] and y != x for y in loops)]
    stats = []
    for start, end, label in inner:
        body = [x for x in lines[start + 1:end + 1] if x.startswith("\t") and not x.startswith("\t.")]
        stats.append({"label": label, "instructions": len(body),
                      "spills": sum(bool(_SPILL.search(x)) for x in body),
                      "moves": sum(bool(_MOVE.match(x)) for x in body)})
    return stats


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
    p.add_argument("--loops", action="store_true", help="print each kernel's innermost loops (loop_stats)")
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
                if a.loops and size == "memory":
                    for st in loop_stats(exe.program.asm()):
                        print(f"{name + suffix:22s} loop {st['label']}: {st['instructions']} instructions, "
                              f"{st['spills']} spill stores/reloads, {st['moves']} register moves")
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
