"""StableHLO import speed beside HLO text parsing, for the same JAX programs.

Run: python benchmarks/import_speed.py [--repeat 5] [--programs mlp_adam,transformer,...] [--stages] [--cpu]

A program is one of PROGRAMS below or a real model of benchmarks/model_zoo.py (its name there,
e.g. keras_hub_gpt2: lowered with keep_unused, as benchmarks/real_models.py does; the `bench`
extra). `--cpu` times the process's CPU time (MLIR's threads included) instead of wall time,
which other load on a shared machine disturbs less. `--stages` adds, per program, the medians
of the StableHLO import's parts: MLIR's parsing, the CHLO legalization, the conversion of the
ops, the inlining of calls.

Each program is lowered once by JAX (`jax.jit(f).lower(*args)`): `.as_text(debug_info=True)` is its StableHLO with JAX's
locations (as `jax.export` writes it), `.as_text(dialect="hlo", debug_info=True)` its HLO text
with metadata (`--no-debug-info` drops both). Both are then imported in this process,
`hlofuse.from_stablehlo(stablehlo)` and `hlofuse.parse_hlo(hlo)`, each timed `--repeat` times
alternately (after one untimed warm-up of each, so that one-time work such as importing jaxlib
or building the MLIR context is not counted for either). The table gives the medians, instructions per
second of each (counting the instructions of the resulting modules) and the ratio
StableHLO/HLO; the goal is a ratio within ~1.5. (The imported module has more instructions than the HLO
text: `from_stablehlo` inlines JAX's calls, copying the callee into each caller, where the HLO
text keeps one callee computation.)
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _mlp_adam():
    """An MLP training step with Adam (optax-style, written in jax.numpy)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    sizes = [64, 256, 256, 256, 10]
    rng = np.random.default_rng(0)
    params = [(rng.standard_normal((a, b)).astype(np.float32) * 0.1, np.zeros(b, np.float32))
              for a, b in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((32, 64)).astype(np.float32)
    y = rng.integers(0, 10, 32).astype(np.int32)

    def loss(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = jax.nn.gelu(h)
        logp = jax.nn.log_softmax(h)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def step(params, m, v, t, x, y):
        l, g = jax.value_and_grad(loss)(params, x, y)
        b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        mh = jax.tree_util.tree_map(lambda m: m / (1 - b1 ** t), m)
        vh = jax.tree_util.tree_map(lambda v: v / (1 - b2 ** t), v)
        params = jax.tree_util.tree_map(lambda p, m, v: p - lr * m / (jnp.sqrt(v) + eps), params, mh, vh)
        return params, m, v, t, l

    zeros = jax.tree_util.tree_map(np.zeros_like, params)
    return step, (params, zeros, zeros, np.float32(0), x, y)


def _transformer():
    """A 6-layer pre-norm transformer block stack (attention + MLP), forward pass."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    layers, d, heads, seq, batch = 6, 128, 4, 64, 2
    rng = np.random.default_rng(0)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    params = [dict(g1=np.ones(d, np.float32), qkv=w(d, 3 * d), o=w(d, d), g2=np.ones(d, np.float32),
                   w1=w(d, 4 * d), w2=w(4 * d, d)) for _ in range(layers)]
    x = w(batch, seq, d)

    def norm(x, g):
        mu = jnp.mean(x, -1, keepdims=True)
        var = jnp.mean((x - mu) ** 2, -1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-6) * g

    def block(x, p):
        h = norm(x, p["g1"]) @ p["qkv"]
        q, k, v = jnp.split(h.reshape(batch, seq, 3, heads, d // heads), 3, axis=2)
        q, k, v = (a[:, :, 0].transpose(0, 2, 1, 3) for a in (q, k, v))
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads)
        mask = jnp.tril(jnp.ones((seq, seq), bool))
        s = jnp.where(mask, s, -1e9)
        a = jax.nn.softmax(s, -1) @ v
        x = x + a.transpose(0, 2, 1, 3).reshape(batch, seq, d) @ p["o"]
        return x + jax.nn.gelu(norm(x, p["g2"]) @ p["w1"]) @ p["w2"]

    def f(params, x):
        for p in params:
            x = block(x, p)
        return x

    return f, (params, x)


def _scan_rnn():
    """A GRU-like RNN over 50 steps with lax.scan, with its gradient."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    d = 64
    wx = (rng.standard_normal((d, 3 * d)) * 0.1).astype(np.float32)
    wh = (rng.standard_normal((d, 3 * d)) * 0.1).astype(np.float32)
    xs = rng.standard_normal((50, 8, d)).astype(np.float32)

    def loss(wx, wh, xs):
        def cell(h, x):
            zr = x @ wx + h @ wh
            z, r, c = jnp.split(zr, 3, axis=-1)
            z, r = jax.nn.sigmoid(z), jax.nn.sigmoid(r)
            h = (1 - z) * h + z * jnp.tanh(c * r)
            return h, jnp.sum(h)

        h, ys = jax.lax.scan(cell, jnp.zeros((8, d)), xs)
        return jnp.sum(ys) + jnp.sum(h)

    return jax.value_and_grad(loss, argnums=(0, 1)), (wx, wh, xs)


def wide_elementwise(n: int) -> tuple[Callable, tuple]:
    """A generated module of about `n` elementwise ops over 8 inputs (a wide, shallow DAG)."""
    import jax.numpy as jnp
    import numpy as np

    def f(*xs):
        vals = list(xs)
        ops = (jnp.add, jnp.multiply, jnp.subtract, jnp.maximum)
        unary = (jnp.exp, jnp.tanh, jnp.negative, jnp.abs)
        for k in range(n // 2):
            a, b = vals[(k * 7) % len(vals)], vals[(k * 13 + 3) % len(vals)]
            vals.append(unary[k % 4](ops[k % 4](a, b)))
        return sum(vals[-8:])

    return f, tuple(np.full((16, 16), i + 1, np.float32) for i in range(8))


_clock: Callable[[], float] = time.perf_counter  # time.process_time with --cpu


PROGRAMS: dict[str, Callable] = {
    "mlp_adam": _mlp_adam,
    "transformer6": _transformer,
    "scan_rnn": _scan_rnn,
    "wide_5000": lambda: wide_elementwise(5000),
}


def lower(builder: Callable, debug_info: bool = True, keep_unused: bool = False) -> tuple[str, str]:
    """(StableHLO text, HLO text) of a program, as JAX lowers it; with `debug_info` the
    StableHLO has JAX's locations (as `jax.export` keeps them) and the HLO its metadata."""
    import jax

    fn, args = builder()
    lowered = jax.jit(fn, keep_unused=keep_unused).lower(*args)
    return lowered.as_text(debug_info=debug_info), lowered.as_text(dialect="hlo", debug_info=debug_info)


def lower_program(name: str, debug_info: bool = True) -> tuple[str, str]:
    """`lower` of PROGRAMS[name], or of the real model `name` of benchmarks/model_zoo.py."""
    if name in PROGRAMS:
        return lower(PROGRAMS[name], debug_info)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from model_zoo import BUILDERS

    if name not in BUILDERS:
        raise SystemExit(f"unknown program {name!r}: one of {', '.join([*PROGRAMS, *BUILDERS])}")

    def model():
        m = BUILDERS[name]()
        return m.fn, m.args

    return lower(model, debug_info, keep_unused=True)


def stages(stablehlo: str, repeat: int) -> dict[str, float]:
    """Median seconds of each part of `from_stablehlo(stablehlo)` (after one warm-up): MLIR's
    parsing, the CHLO legalization, the conversion of the ops, the inlining of calls."""
    from hlofuse import from_stablehlo
    from hlofuse.frontends import stablehlo as shlo
    from hlofuse.frontends.stablehlo_mlir import context_state, parse_mlir

    from_stablehlo(stablehlo)
    times: dict[str, list[float]] = {"mlir parse": [], "chlo": [], "conversion": [], "inlining": []}
    for _ in range(repeat):
        state = context_state(len(stablehlo))
        with state.context:
            t0 = _clock()
            mod = parse_mlir(stablehlo)
            t1 = _clock()
            if "chlo." in stablehlo:
                shlo.legalize_chlo(mod, state)
            t2 = _clock()
            importer = shlo.Importer(mod, "module", None, None, state)
            module = importer.import_entry("main")
        t3 = _clock()
        if shlo._inline_all_calls(module):
            shlo._remove_inlined_functions(module, importer.converted.values())
        t4 = _clock()
        for key, seconds in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            times[key].append(seconds)
    return {key: statistics.median(v) for key, v in times.items()}


def measure(stablehlo: str, hlo: str, repeat: int) -> dict:
    """Median seconds and instruction counts of importing `stablehlo` and parsing `hlo`.

    The two are timed alternately (this machine is shared: both see the same load), after one
    untimed warm-up of each."""
    from hlofuse import from_stablehlo, parse_hlo

    def count(module) -> int:
        return sum(len(c.instructions) for c in module.computations)

    n_shlo = count(from_stablehlo(stablehlo))  # warm-up (and the count)
    n_hlo = count(parse_hlo(hlo))
    t_shlo, t_hlo = [], []
    for _ in range(repeat):
        for fn, arg, times in ((from_stablehlo, stablehlo, t_shlo), (parse_hlo, hlo, t_hlo)):
            t0 = _clock()
            fn(arg)
            times.append(_clock() - t0)
    return {"shlo_s": statistics.median(t_shlo), "hlo_s": statistics.median(t_hlo), "shlo_n": n_shlo, "hlo_n": n_hlo,
            "min_ratio": min(t_shlo) / min(t_hlo)}


def main() -> None:
    """Lower each program, time both imports, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ap.add_argument("--no-debug-info", action="store_true", help="lower without locations/metadata")
    ap.add_argument("--stages", action="store_true", help="also time the parts of the StableHLO import")
    ap.add_argument("--cpu", action="store_true",
                    help="time this process's CPU time instead of wall time (steadier on a shared machine)")
    args = ap.parse_args()
    if args.cpu:
        global _clock
        _clock = time.process_time
    print(f"{'program':<14} {'shlo inst':>9} {'shlo ms':>8} {'shlo inst/s':>12} "
          f"{'hlo inst':>8} {'hlo ms':>8} {'hlo inst/s':>11} {'ratio':>6} {'min ratio':>9}")
    for name in args.programs.split(","):
        stablehlo, hlo = lower_program(name, not args.no_debug_info)
        r = measure(stablehlo, hlo, args.repeat)
        print(f"{name:<14} {r['shlo_n']:>9} {r['shlo_s'] * 1e3:>8.1f} {r['shlo_n'] / r['shlo_s']:>12,.0f} "
              f"{r['hlo_n']:>8} {r['hlo_s'] * 1e3:>8.1f} {r['hlo_n'] / r['hlo_s']:>11,.0f} "
              f"{r['shlo_s'] / r['hlo_s']:>6.2f} {r['min_ratio']:>9.2f}", flush=True)
        if args.stages:
            parts = stages(stablehlo, args.repeat)
            print(" " * 15 + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in parts.items()), flush=True)
    print("ratio: median StableHLO import / median HLO parse; min ratio: the same of the fastest "
          "runs (less sensitive to other load on the machine)")


if __name__ == "__main__":
    main()
