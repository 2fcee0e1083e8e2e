"""Legacy fusion (instruction fusion, fusion merger, multi-output) against priority fusion.

For every workload of benchmarks/workloads.py and every JAX module of testdata/jax/ (the real
models and op tests the differential tests run), the module goes through hlofuse's standard
pipeline with each fusion algorithm, for the GPU and for the CPU target, and the table gives
kernels and bytes moved (passes/fusion/cost_model.module_cost: each kernel reads its distinct
operands once and writes its outputs) next to XLA:CPU's optimized module counted the same way
(testdata/jax/*.opt.hlo, or the workload compiled by jax). The last lines are geometric means
of the ratios to XLA:CPU. With --time, the CPU programs of both algorithms run too, interleaved
rounds, medians (use --size large for figures: 24-64 MB inputs, and the GLIBC_TUNABLES of
benchmarks/run.py; report the load).

Run:  .venv/bin/python benchmarks/fusion_algorithms.py [--only a,b] [--time] [--size small|large]
      [--models] [--json OUT]
(--models adds the real models of benchmarks/model_zoo.py: run it with the bench extra installed,
KERAS_BACKEND=jax.)
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

ALGORITHMS = ("legacy", "priority")


def _cost(module) -> tuple[int, int]:
    from hlofuse.passes.fusion import module_cost

    c = module_cost(module)
    return c.kernels, c.bytes_moved


def _fused_cost(module, target: str, algorithm: str) -> tuple[int, int]:
    from hlofuse.compiler import optimize

    fused, _ = optimize(module, target, algorithm=algorithm, verify=False)
    return _cost(fused)


def _xla_cost(opt_text: str | None) -> tuple[int, int] | None:
    """XLA:CPU's optimized module, counted as hlofuse counts its own (None: unreadable)."""
    if not opt_text:
        return None
    from hlofuse.hlo.parser import parse_hlo

    try:
        return _cost(parse_hlo(opt_text))
    except Exception:  # noqa: BLE001 - an XLA attribute hlofuse does not read: no XLA column
        return None


def model_sources(only: set[str] | None) -> list[tuple[str, str, str | None, list | None]]:
    """The real models of benchmarks/model_zoo.py (keras, flax, equinox, haiku; needs the `bench`
    extra): each step lowered by jax as benchmarks/real_models.py does, and XLA:CPU's optimized
    module of the same lowering."""
    import jax
    import numpy as np

    from model_zoo import BUILDERS

    out = []
    for name, build in BUILDERS.items():
        if only and name not in only:
            continue
        model = build()
        lowered = jax.jit(model.fn, keep_unused=True).lower(*model.args)
        args = [np.asarray(a, order="C") for a in model.args]
        out.append((f"model:{name}", lowered.as_text(dialect="hlo"), lowered.compile().as_text(), args))
    return out


def sources(size: str, only: set[str] | None) -> list[tuple[str, str, str | None, list | None]]:
    """(name, HLO text, XLA:CPU optimized text or None, inputs or None) for every module."""
    out = []
    try:
        import jax

        from workloads import WORKLOADS
    except ImportError:
        WORKLOADS = {}
    for name, w in WORKLOADS.items():
        if only and name not in only:
            continue
        args = w.inputs(size)
        lowered = jax.jit(w.fn).lower(*args)
        out.append((f"workload:{name}", lowered.as_text(dialect="hlo"), lowered.compile().as_text(), args))
    for path in sorted(glob.glob(os.path.join(REPO, "testdata", "jax", "*.hlo"))):
        if path.endswith(".opt.hlo"):
            continue
        name = os.path.basename(path)[:-4]
        if only and name not in only:
            continue
        opt = path[:-4] + ".opt.hlo"
        with open(path) as f:
            text = f.read()
        xla = open(opt).read() if os.path.exists(opt) else None
        out.append((f"jax:{name}", text, xla, None))
    return out


def cpu_times(module, args, rounds: int) -> dict[str, float]:
    """Median seconds per run of the CPU program of each algorithm, interleaved rounds."""
    import numpy as np

    import hlofuse

    if args is None:
        rng = np.random.default_rng(0)
        args = [rng.standard_normal(p.shape.dims).astype(p.shape.dtype.numpy) for p in module.entry.parameters]
    exes = {a: hlofuse.compile(module, target="cpu", algorithm=a) for a in ALGORITHMS}
    for exe in exes.values():
        exe(*args)
    times: dict[str, list[float]] = {a: [] for a in ALGORITHMS}
    for _ in range(rounds):
        for a, exe in exes.items():
            t = time.perf_counter()
            exe(*args)
            times[a].append(time.perf_counter() - t)
    return {a: statistics.median(ts) for a, ts in times.items()}


def measure(name: str, text: str, xla_text: str | None, args, timed: bool, rounds: int) -> dict:
    """One row: kernels and bytes of each algorithm on each target, XLA:CPU's, CPU times."""
    from hlofuse.hlo.parser import parse_hlo

    module = parse_hlo(text)
    row: dict = {"module": name, "xla_cpu": _xla_cost(xla_text)}
    # XLA:CPU hands whole subgraphs of dots and convolutions to YNNPACK as one kCustom fusion
    # (`ynn_fusion`): one kernel in its count, with traffic inside it that no HLO shows
    row["xla_library_fusions"] = xla_text.count("kind=kCustom") if xla_text else 0
    for target in ("gpu", "cpu"):
        for a in ALGORITHMS:
            try:
                row[f"{target}_{a}"] = _fused_cost(module, target, a)
            except Exception as e:  # noqa: BLE001 - reported in the table, not hidden
                row[f"{target}_{a}"] = None
                row.setdefault("errors", []).append(f"{target}/{a}: {type(e).__name__}: {e}"[:200])
    if timed:
        try:
            row["cpu_seconds"] = cpu_times(module, args, rounds)
        except Exception as e:  # noqa: BLE001
            row.setdefault("errors", []).append(f"time: {type(e).__name__}: {e}"[:200])
    return row


def _cell(kb: tuple[int, int] | None) -> str:
    if kb is None:
        return f"{'-':>17s}"
    k, b = kb
    return f"{k:>4d} {b / 1e3:>9.1f} KB"


def _geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def print_table(rows: list[dict]) -> None:
    """The table: kernels and MB moved per module and algorithm, then geometric means."""
    cols = ["gpu_legacy", "gpu_priority", "cpu_legacy", "cpu_priority", "xla_cpu"]
    head = f"{'module (kernels, bytes moved)':34s} " + " ".join(f"{c:>17s}" for c in cols)
    timed = any("cpu_seconds" in r for r in rows)
    if timed:
        head += f" {'cpu ms legacy':>14s} {'cpu ms priority':>15s}"
    print(head)
    print("-" * len(head))
    for r in rows:
        line = f"{r['module'][:34]:34s} " + " ".join(_cell(r.get(c)) for c in cols)
        if r.get("xla_library_fusions"):
            line += f"  (XLA: {r['xla_library_fusions']} kCustom library fusions)"
        if "cpu_seconds" in r:
            t = r["cpu_seconds"]
            line += f" {t['legacy'] * 1e3:>14.3f} {t['priority'] * 1e3:>15.3f}"
        print(line)
        for e in r.get("errors", []):
            print(f"    error: {e}")
    print()
    for col in cols[:4]:
        pairs = [(r[col], r["xla_cpu"]) for r in rows if r.get(col) and r.get("xla_cpu")]
        if not pairs:
            continue
        more = sum(1 for (k, _), (xk, _) in pairs if k > xk)
        ratio = _geomean([b / xb for (_, b), (_, xb) in pairs if xb])
        print(f"{col:14s} vs XLA:CPU over {len(pairs)} modules: more kernels than XLA in {more}; "
              f"bytes moved geomean {ratio:.3f}x")
        plain = [(r[col], r["xla_cpu"]) for r in rows
                 if r.get(col) and r.get("xla_cpu") and not r.get("xla_library_fusions")]
        if len(plain) != len(pairs) and plain:
            more = sum(1 for (k, _), (xk, _) in plain if k > xk)
            ratio = _geomean([b / xb for (_, b), (_, xb) in plain if xb])
            print(f"{'':14s} over the {len(plain)} without XLA kCustom library fusions: more kernels in {more}; "
                  f"bytes moved geomean {ratio:.3f}x")
    pairs = [(r["gpu_priority"], r["gpu_legacy"]) for r in rows if r.get("gpu_priority") and r.get("gpu_legacy")]
    if pairs:
        print(f"gpu priority vs legacy: kernels {sum(p[0] for p, _ in pairs)} vs {sum(q[0] for _, q in pairs)}, "
              f"bytes geomean {_geomean([p[1] / q[1] for p, q in pairs if q[1]]):.3f}x")
    if timed:
        ts = [r["cpu_seconds"] for r in rows if "cpu_seconds" in r]
        print(f"cpu time priority/legacy geomean {_geomean([t['priority'] / t['legacy'] for t in ts]):.3f}x "
              f"over {len(ts)} modules")


def main(argv: list[str] | None = None) -> int:
    """Measure every module (or --only some) and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated names (workload names or testdata/jax stems)")
    parser.add_argument("--size", choices=["small", "large"], default="small")
    parser.add_argument("--time", action="store_true", help="also time both CPU programs")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    parser.add_argument("--models", action="store_true",
                        help="also the real models of benchmarks/model_zoo.py (needs the bench extra)")
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    found = sources(args.size, only) + (model_sources(only) if args.models else [])
    rows = [measure(n, t, x, a, args.time, args.rounds) for n, t, x, a in found]
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
