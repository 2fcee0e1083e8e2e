"""What the small kernels' cheap LLVM level costs at run time and saves in LLVM time
(codegen/kernel_work.py, llvm_pool.SMALL_KERNEL): each module compiled twice in this process,
A with every kernel at O3 (kernel_work.SMALL_KERNEL_NS = 0) and B as chosen (or with
--threshold NS, --codegen N), then

- LLVM's CPU seconds (optimization + code generation, no worker process, cache off) of each,
- B's small kernels (distinct, and calls per run), and the LLVM CPU ms of those distinct
  kernels each compiled alone at O3 and at the small level (the two alternating, the least of
  three each: `kernels_llvm_ms`), steadier than the two whole compiles' difference,
- whether B's outputs are A's bits, else within runtime/compare's tolerance,
- the run time per call, A and B interleaved (medians): one thread's CPU time where the process
  may use one thread (HLOFUSE_CPU_THREADS=1), else wall time,
- the steps that run B's small kernels, timed by the driver's per-step timers
  (CpuProgram.profile) in both programs: their ms per run in A and B (`small_steps_ms`), and the
  difference as a share of A's run time, which is what the slower code costs (steadier than
  the difference of two whole-run medians, which on a shared machine moves by more than it).

    HLOFUSE_CPU_THREADS=1 python benchmarks/small_level_ab.py --hlo F.hlo,... [--threshold NS]
        [--codegen N] [--rounds 15] [--profile-runs 20] [--profiles 5] [--least]
    python benchmarks/small_level_ab.py --cold --hlo F.hlo,... [--rounds 2]
    HLOFUSE_CPU_THREADS=1 python benchmarks/small_level_ab.py --library --hlo F.hlo,...

`--library` compares library kernels (GEMMs, oneDNN primitives' kernels) judged by their own
loops (B, as chosen) against judged by their whole work (A, kernel_work.LIBRARY_KERNELS off),
the rest of the rule as chosen in both: B's small kernels above are then those small in B only.

`--cold` instead times each module's cold compile both ways as benchmarks/compile_time.py does
(`measure`: a fresh cache directory, the LLVM worker pool as configured), A and B alternating
for `--rounds` rounds, with XLA:CPU's compile of the same text once: wall and CPU seconds,
LLVM's seconds, and the ratio to XLA's (medians).
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

import numpy as np  # noqa: E402
from cold_ab import compiled_under, module_settings  # noqa: E402

from hlofuse.codegen import kernel_work, llvm_pool  # noqa: E402
from hlofuse.hlo.parser import parse_hlo  # noqa: E402
from hlofuse.runtime.compare import compare_outputs  # noqa: E402
from hlofuse.runtime.cpu_executor import CpuProgram  # noqa: E402
from hlofuse.runtime.cpu_threads import cpu_threads  # noqa: E402
from hlofuse.runtime.io import random_inputs  # noqa: E402


def compiled(text: str, settings: dict) -> tuple[CpuProgram, float]:
    """`text` compiled (cache off) with kernel_work's `settings` (e.g. SMALL_KERNEL_NS), and
    LLVM's seconds (optimization + code generation)."""
    return compiled_under(text, kernel_work, settings)


def small_names(prog: CpuProgram) -> set[str]:
    """Names of `prog`'s kernels compiled at llvm_pool.SMALL_KERNEL."""
    return {k.name for o in prog.code.objects if o.speed_level == llvm_pool.SMALL_KERNEL for k in o.kernels}


def kernels_llvm_ms(prog: CpuProgram, names: set[str], rounds: int = 3) -> tuple[float, float, int]:
    """LLVM CPU ms (llvm_pool.compile_timed: parse, optimize, generate code) of `prog`'s distinct
    kernels named in `names`, each compiled alone at O3 and at llvm_pool.SMALL_KERNEL, the two
    levels alternating, the least of `rounds` each; summed (O3, small), and how many of those
    kernels the two middle ends optimize to the same IR (their code then differs only by the
    code generator's level: a GEMM kernel without an epilogue, a oneDNN call sequence)."""
    from hlofuse.codegen.cpu import emit_kernel_module
    from hlofuse.emitters.cpu.target import CpuTarget

    target = CpuTarget()
    total = {3: 0.0, llvm_pool.SMALL_KERNEL: 0.0}
    same_ir = 0
    for i, o in enumerate(o for o in prog.code.objects if o.kernels[0].name in names):
        text = str(emit_kernel_module(o.kernels[0], target, o.symbol))
        same_ir += str(llvm_pool.optimized_kernel(text, 3)) == str(llvm_pool.optimized_kernel(text, llvm_pool.SMALL_KERNEL))
        best = {level: float("inf") for level in total}
        for r in range(rounds):
            for level in ((3, llvm_pool.SMALL_KERNEL) if (i + r) % 2 == 0 else (llvm_pool.SMALL_KERNEL, 3)):
                t = time.process_time()
                llvm_pool.compile_timed(text, level)
                best[level] = min(best[level], time.process_time() - t)
        for level in total:
            total[level] += 1e3 * best[level]
    return total[3], total[llvm_pool.SMALL_KERNEL], same_ir


def step_times(prog: CpuProgram, args, runs: int, names: set[str]) -> list[float]:
    """Microseconds per run of each of `prog`'s steps that run a kernel of `names` (the driver's
    per-step timers over `runs` runs), in the program's step order."""
    steps, seconds, _, _ = prog.profile(args, runs)
    return [1e6 * s / runs for ns, s in zip(steps, seconds) if any(k.name in names for k in (ns.step.kernels or ()))]


def small_steps_ms(a: CpuProgram, b: CpuProgram, args, runs: int, names: set[str],
                   profiles: int = 5, stat=statistics.median) -> tuple[float, float]:
    """Milliseconds per run of the steps running `names`' kernels in `a` and in `b` (the same
    steps: both programs come from one module): each step's median over `profiles` profiles
    (the two programs alternating), summed. A step's median, not the sum's: one preemption in a
    profile adds hundreds of microseconds to whichever step it lands in. `stat` (min, say)
    replaces the median: on a loaded machine the least of a step's profiles is the steadier
    figure for steps of milliseconds (a library call's), which preemptions only lengthen."""
    samples: dict[str, list[list[float]]] = {"a": [], "b": []}
    for r in range(profiles):
        for key, prog in ((("a", a), ("b", b)) if r % 2 == 0 else (("b", b), ("a", a))):
            samples[key].append(step_times(prog, args, runs, names))
    return tuple(sum(stat(per_step) for per_step in zip(*samples[key])) / 1e3 for key in ("a", "b"))


def compare(name: str, text: str, rules: tuple[dict, dict], rounds: int, profile_runs: int,
            profiles: int = 5, stat=statistics.median) -> dict:
    """The A/B row of one module (see the module's doc): A compiled with kernel_work's settings
    `rules[0]`, B with `rules[1]`."""
    module = parse_hlo(text)
    args = random_inputs(module, seed=1)
    a, llvm_a = compiled(text, rules[0])
    b, llvm_b = compiled(text, rules[1])
    names = small_names(b) - small_names(a)
    distinct = sum(o.speed_level == llvm_pool.SMALL_KERNEL and o.kernels[0].name in names for o in b.code.objects)
    out_a, out_b = a.run(args), b.run(args)
    same = all(np.array_equal(x, y, equal_nan=True) for x, y in zip(out_a, out_b))
    close = same or all(r.ok for r in compare_outputs(list(out_b), list(out_a)))
    calls = max(1, int(0.02 / max(_cpu_s(a, args, 1), 1e-6)))  # ~20 ms of calls per sample
    times: dict[str, list[float]] = {"a": [], "b": []}
    for r in range(rounds):
        for key, prog in ((("a", a), ("b", b)) if r % 2 == 0 else (("b", b), ("a", a))):
            times[key].append(_cpu_s(prog, args, calls) * 1e3)
    ma, mb = statistics.median(times["a"]), statistics.median(times["b"])
    sa, sb = small_steps_ms(a, b, args, profile_runs, names, profiles, stat)
    o3_ms, small_ms, same_ir = kernels_llvm_ms(b, names)
    return {"kernels_o3_ms": o3_ms, "kernels_small_ms": small_ms, "same_ir": same_ir, "module": name, "llvm_a": llvm_a, "llvm_b": llvm_b, "small_distinct": distinct,
            "distinct": len(b.code.objects), "small_calls": sum(k.name in names for k in b.code.kernels),
            "same_bits": same, "close": close, "run_a_ms": ma, "run_b_ms": mb,
            "small_a_ms": sa, "small_b_ms": sb, "cost_pct": 100 * (sb - sa) / ma}


def _cpu_s(prog: CpuProgram, args, calls: int) -> float:
    """Seconds per call of `prog` over `calls` calls: CPU time on one thread, else wall time."""
    clock = time.process_time if cpu_threads() == 1 else time.perf_counter
    t = clock()
    for _ in range(calls):
        prog.run(args)
    return (clock() - t) / calls


def cold_rows(texts: dict[str, str], rules: tuple[dict, dict], rounds: int) -> None:
    """Print each module's cold compile with kernel_work's settings `rules[0]` (A: e.g. every
    kernel at O3) and `rules[1]` (B), alternating, medians of `rounds`, beside XLA:CPU's
    compile (cold_ab.cold_ab_rows)."""
    from cold_ab import cold_ab_rows

    cold_ab_rows(texts, rounds, lambda key: module_settings(kernel_work, rules[0] if key == "a" else rules[1]))



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hlo", required=True, help="HLO text files, comma-separated (seeded random inputs)")
    ap.add_argument("--threshold", type=float, default=None, help="B's SMALL_KERNEL_NS (default: the chosen)")
    ap.add_argument("--codegen", type=int, default=None, help="B's SMALL_CODEGEN_LEVEL (default: the chosen)")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved whole-run samples of each")
    ap.add_argument("--profile-runs", type=int, default=20, help="runs per profile")
    ap.add_argument("--profiles", type=int, default=5, help="profiles of each program (alternating)")
    ap.add_argument("--least", action="store_true", help="each step's least over the profiles, not its median")
    ap.add_argument("--cold", action="store_true", help="time cold compiles both ways instead (see the doc)")
    ap.add_argument("--library", action="store_true",
                    help="A: library kernels judged by their whole work; B: by their own loops (see the doc)")
    args = ap.parse_args(argv)
    if not args.cold:  # LLVM's CPU time measured in this process (read at each compile)
        os.environ.setdefault("HLOFUSE_LLVM_PROCESSES", "0")
    if args.codegen is not None:
        llvm_pool.SMALL_CODEGEN_LEVEL = args.codegen
    threshold = kernel_work.SMALL_KERNEL_NS if args.threshold is None else args.threshold
    if args.library:
        rules = ({"SMALL_KERNEL_NS": threshold, "LIBRARY_KERNELS": False},
                 {"SMALL_KERNEL_NS": threshold, "LIBRARY_KERNELS": True})
    else:
        rules = ({"SMALL_KERNEL_NS": 0.0}, {"SMALL_KERNEL_NS": threshold})
    print(f"load {os.getloadavg()}, threshold {threshold:.0f} ns, {llvm_pool.level_tag(llvm_pool.SMALL_KERNEL)}, "
          f"threads {os.environ.get('HLOFUSE_CPU_THREADS', 'all')}, A {rules[0]}, B {rules[1]}", flush=True)
    texts = {}
    for path in args.hlo.split(","):
        with open(path) as f:
            texts[os.path.splitext(os.path.basename(path))[0]] = f.read()
    if args.cold:
        cold_rows(texts, rules, args.rounds)
        print(f"load {os.getloadavg()}")
        return 0
    for name, text in texts.items():
        r = compare(name, text, rules, args.rounds, args.profile_runs, args.profiles,
                    min if args.least else statistics.median)
        print(f"{r['module']:26s} LLVM {r['llvm_a']:6.3f} -> {r['llvm_b']:6.3f} s ({r['llvm_b'] / r['llvm_a']:.2f})  "
              f"small {r['small_distinct']:3d}/{r['distinct']:3d} distinct ({r['kernels_o3_ms']:6.1f} -> "
              f"{r['kernels_small_ms']:6.1f} ms alone, {r['same_ir']} the same IR), {r['small_calls']:3d} calls  "
              f"run {r['run_a_ms']:8.3f} -> {r['run_b_ms']:8.3f} ms ({r['run_b_ms'] / r['run_a_ms']:.3f})  "
              f"small steps {r['small_a_ms']:7.4f} -> {r['small_b_ms']:7.4f} ms = {r['cost_pct']:+.3f}% of run  "
              f"{'same bits' if r['same_bits'] else 'close' if r['close'] else 'DIFFERENT'}", flush=True)
    print(f"load {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
