"""What shape-generic elementwise kernels (codegen/generic_kernels.py) save in LLVM time and cost
at run time: each module compiled twice in this process, A with every kernel at its own shape
(generic_kernels.GENERIC_KERNELS off) and B as chosen, then

- distinct kernels and LLVM's CPU seconds (optimization + code generation, in this process,
  cache off) of each,
- whether B's outputs are A's bits,
- the run time per call, A and B interleaved (medians): one thread's CPU time where the process
  may use one thread (HLOFUSE_CPU_THREADS=1), else wall time,
- the steps that run B's generic kernels, timed by the driver's per-step timers in both programs
  (medians of alternating profiles, benchmarks/small_level_ab.small_steps_ms), and their
  difference as a share of A's run time.

    HLOFUSE_CPU_THREADS=1 python benchmarks/generic_kernels_ab.py --hlo F.hlo,... [--adam]
        [--rounds 15] [--profile-runs 20] [--profiles 5]
    HLOFUSE_CPU_THREADS=1 python benchmarks/generic_kernels_ab.py --rows [--sizes 4096,65536,1048576]
    python benchmarks/generic_kernels_ab.py --cold --hlo F.hlo,... [--adam] [--rounds 3]

`--adam` adds benchmarks/compile_time.py's 50-parameter Adam step (needs jax). `--rows` times
one elementwise kernel (an Adam update, and y + a x) per element count at each canonical row
length of generic_kernels.ROW_LENGTHS forced alone, and at its own shape, interleaved: what
chose the row lengths. `--cold` times cold compiles both ways instead (`cold_rows`), beside
XLA:CPU's (needs jaxlib: run it with the benchmark environment's python).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
from cold_ab import compiled_under, module_settings  # noqa: E402

from hlofuse.codegen import generic_kernels  # noqa: E402
from hlofuse.hlo.parser import parse_hlo  # noqa: E402
from hlofuse.runtime.cpu_executor import CpuProgram  # noqa: E402
from hlofuse.runtime.io import random_inputs  # noqa: E402
from small_level_ab import _cpu_s, small_steps_ms  # noqa: E402


def compiled(text: str, **settings) -> tuple[CpuProgram, float]:
    """`text` compiled (cache off) under generic_kernels' `settings`, and LLVM's seconds."""
    return compiled_under(text, generic_kernels, settings)


def generic_names(prog: CpuProgram) -> set[str]:
    """Names of `prog`'s kernels that run in their shape-generic form."""
    return {k.name for k in prog.code.kernels if k.comp.name.endswith(".generic")}


def compare(name: str, text: str, rounds: int, profile_runs: int, profiles: int) -> dict:
    """The A/B row of one module (see the module's doc)."""
    module = parse_hlo(text)
    args = random_inputs(module, seed=1)
    a, llvm_a = compiled(text, GENERIC_KERNELS=False)
    b, llvm_b = compiled(text, GENERIC_KERNELS=True)
    names = generic_names(b)
    out_a, out_b = a.run(args), b.run(args)
    same = all(np.array_equal(x, y, equal_nan=True) for x, y in zip(out_a, out_b))
    calls = max(1, int(0.02 / max(_cpu_s(a, args, 1), 1e-6)))  # ~20 ms of calls per sample
    times: dict[str, list[float]] = {"a": [], "b": []}
    for r in range(rounds):
        for key, prog in ((("a", a), ("b", b)) if r % 2 == 0 else (("b", b), ("a", a))):
            times[key].append(_cpu_s(prog, args, calls) * 1e3)
    ma, mb = statistics.median(times["a"]), statistics.median(times["b"])
    ga, gb = small_steps_ms(a, b, args, profile_runs, names, profiles) if names else (0.0, 0.0)
    return {"module": name, "distinct_a": len(a.code.objects), "distinct_b": len(b.code.objects),
            "generic": len(names), "llvm_a": llvm_a, "llvm_b": llvm_b, "same_bits": same,
            "run_a_ms": ma, "run_b_ms": mb, "generic_a_ms": ga, "generic_b_ms": gb,
            "cost_pct": 100 * (gb - ga) / ma}


def _row_module(n: int, kind: str, dims: tuple[int, ...]) -> str:
    """One elementwise fusion over f32 `dims` (n elements): `adam` (an Adam update: two outputs,
    a sqrt and a divide), `axpy` (y + a x) or `chain` (erf(logistic(log1p(exp(tanh x)))): five
    math functions, which cpu_loop.interleave_count interleaves 8 vectors where the row allows)."""
    s = f"f32[{','.join(map(str, dims))}]"
    if kind == "chain":
        body = (f"  x = {s} parameter(0)\n  a = {s} tanh(x)\n  b = {s} exponential(a)\n  c = {s} log-plus-one(b)\n"
                f"  d = {s} logistic(c)\n  ROOT r = {s} erf(d)\n")
        return f"HloModule chain\nENTRY e {{\n{body}}}\n"
    if kind == "axpy":
        body = (f"  x = {s} parameter(0)\n  y = {s} parameter(1)\n  a = f32[] parameter(2)\n"
                f"  ab = {s} broadcast(a), dimensions={{}}\n  m = {s} multiply(ab, x)\n  ROOT r = {s} add(m, y)\n")
        return f"HloModule axpy\nENTRY e {{\n{body}}}\n"
    body = (f"  p = {s} parameter(0)\n  g = {s} parameter(1)\n  m = {s} parameter(2)\n  lr = f32[] parameter(3)\n"
            f"  c = f32[] constant(0.9)\n  cb = {s} broadcast(c), dimensions={{}}\n  lb = {s} broadcast(lr), dimensions={{}}\n"
            f"  mm = {s} multiply(m, cb)\n  mn = {s} add(mm, g)\n  q = {s} multiply(mn, mn)\n  r = {s} sqrt(q)\n"
            f"  e = f32[] constant(1e-8)\n  eb = {s} broadcast(e), dimensions={{}}\n  d = {s} add(r, eb)\n"
            f"  u = {s} divide(mn, d)\n  st = {s} multiply(lb, u)\n  np = {s} subtract(p, st)\n"
            f"  ROOT t = ({s}, {s}) tuple(np, mn)\n")
    return f"HloModule adam\nENTRY e {{\n{body}}}\n"


def row_rows(sizes: list[int], rounds: int, kinds: tuple[str, ...] = ("axpy", "adam", "chain")) -> None:
    """For each element count and kernel kind: microseconds per call of the kernel at its own
    shape ([n / 64, 64], and [n] flat) and at each canonical row length dividing n, all
    interleaved; the least of `rounds` profiles each (on a shared machine preemptions only
    lengthen a profile of microseconds)."""
    for n in sizes:
        for kind in kinds:
            progs = {}
            for label, dims in (("[n/64,64]", (n // 64, 64)), ("[n]", (n,))):
                progs[label] = compiled(_row_module(n, kind, dims), GENERIC_KERNELS=False)[0]
            for c in generic_kernels.ROW_LENGTHS:
                if n % c == 0:
                    progs[f"C={c}"] = compiled(_row_module(n, kind, (n,)), ROW_LENGTHS=(c,))[0]
            flat = random_inputs(parse_hlo(_row_module(n, kind, (n,))), seed=1)
            args = {label: [a.reshape(p.shape.dims) for a, p in zip(flat, prog.module.entry.parameters)]
                    for label, prog in progs.items()}  # the same values at each program's shapes
            runs = max(5, min(200, (1 << 24) // n))
            times: dict[str, list[float]] = {k: [] for k in progs}
            for r in range(rounds):
                order = list(progs.items()) if r % 2 == 0 else list(progs.items())[::-1]
                for label, prog in order:
                    times[label].append(kernel_us(prog, args[label], runs))
            print(f"n={n:8d} {kind:4s} " + "  ".join(f"{k} {min(v):8.2f}" for k, v in times.items())
                  + " us", flush=True)


def kernel_us(prog: CpuProgram, args, runs: int) -> float:
    """Microseconds per run of `prog`'s kernel steps (the driver's per-step timers, `runs` runs):
    the kernel alone, without the call's overhead (some 20 us from Python, which hid the
    differences of kernels of a few thousand elements)."""
    steps, seconds, _, _ = prog.profile(args, runs)
    return 1e6 * sum(s for ns, s in zip(steps, seconds) if ns.kind == "kernel") / runs


def cold_rows(texts: dict[str, str], rounds: int) -> None:
    """Print each module's cold compile with generic kernels off (A) and on (B), alternating,
    beside XLA:CPU's (cold_ab.cold_ab_rows: distinct kernels, wall, CPU and LLVM seconds, the
    ratio to XLA's; medians of `rounds`)."""
    from cold_ab import cold_ab_rows

    cold_ab_rows(texts, rounds, lambda key: module_settings(generic_kernels, {"GENERIC_KERNELS": key == "b"}), distinct=True)



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hlo", default="", help="HLO text files, comma-separated (seeded random inputs)")
    ap.add_argument("--adam", action="store_true", help="also compile_time.py's 50-parameter Adam step (jax)")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved whole-run samples of each")
    ap.add_argument("--profile-runs", type=int, default=20, help="runs per profile")
    ap.add_argument("--profiles", type=int, default=5, help="profiles of each program (alternating)")
    ap.add_argument("--rows", action="store_true", help="time canonical row lengths instead (see the doc)")
    ap.add_argument("--cold", action="store_true", help="time cold compiles both ways instead (see the doc)")
    ap.add_argument("--sizes", default="4096,65536,1048576", help="element counts for --rows")
    ap.add_argument("--kinds", default="axpy,adam,chain", help="kernels for --rows: axpy, adam, chain")
    args = ap.parse_args(argv)
    if not args.cold:
        os.environ.setdefault("HLOFUSE_LLVM_PROCESSES", "0")  # LLVM's CPU time measured in this process
    print(f"load {os.getloadavg()}, threads {os.environ.get('HLOFUSE_CPU_THREADS', 'all')}", flush=True)
    if args.rows:
        row_rows([int(s) for s in args.sizes.split(",")], args.rounds, tuple(args.kinds.split(",")))
        print(f"load {os.getloadavg()}")
        return 0
    texts = {}
    for path in filter(None, args.hlo.split(",")):
        with open(path) as f:
            texts[os.path.splitext(os.path.basename(path))[0]] = f.read()
    if args.adam:
        from compile_time import adam_step_text

        texts["adam step (50 params)"] = adam_step_text()
    if args.cold:
        cold_rows(texts, args.rounds)
        print(f"load {os.getloadavg()}")
        return 0
    for name, text in texts.items():
        r = compare(name, text, args.rounds, args.profile_runs, args.profiles)
        print(f"{r['module']:26s} distinct {r['distinct_a']:4d} -> {r['distinct_b']:4d}, LLVM {r['llvm_a']:6.3f} -> "
              f"{r['llvm_b']:6.3f} s ({r['llvm_b'] / max(r['llvm_a'], 1e-9):.2f}), {r['generic']:3d} generic calls  "
              f"run {r['run_a_ms']:8.3f} -> {r['run_b_ms']:8.3f} ms ({r['run_b_ms'] / r['run_a_ms']:.3f})  "
              f"generic steps {r['generic_a_ms']:7.4f} -> {r['generic_b_ms']:7.4f} ms = {r['cost_pct']:+.3f}% of run  "
              f"{'same bits' if r['same_bits'] else 'DIFFERENT'}", flush=True)
    print(f"load {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
