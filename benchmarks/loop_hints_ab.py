"""A/B of a switch of hlofuse's code generator (a module attribute set False for A, True for B,
such as codegen/kernels/loop_hints.FOLD_TAILS): for each module, its compile CPU seconds (this
process, no LLVM worker, cache off) and its run time, one thread's CPU time, rounds
interleaved A, B, A, B, ... so that the machine's load drifts over both alike; medians, and
whether both give the same bits.

    HLOFUSE_CPU_THREADS=1 python benchmarks/loop_hints_ab.py MODULE:ATTR [--kernels a,b]
        [--n 4194304] [--hlo F.hlo,...] [--rounds 9]

The kernels are math_approx_ab.KERNELS over f32[n] (flat loops: one dimension); --hlo adds
HLO text files, run on seeded random inputs (runtime/io.random_inputs)."""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

from hlofuse import compiler  # noqa: E402
from hlofuse.hlo.parser import parse_hlo  # noqa: E402
from hlofuse.runtime.cpu_executor import CpuProgram  # noqa: E402
from hlofuse.runtime.io import random_inputs  # noqa: E402
from math_approx_ab import KERNELS  # noqa: E402


def _compile(text: str, owner, attr: str, value: bool) -> tuple[CpuProgram, float]:
    """`text` compiled with `owner.attr` = `value` (cache off), and the compile's CPU seconds."""
    saved = getattr(owner, attr)
    setattr(owner, attr, value)
    try:
        t = time.process_time()
        fused, _ = compiler.optimize(parse_hlo(text))
        prog = CpuProgram.compile(fused, cache=False)
        return prog, time.process_time() - t
    finally:
        setattr(owner, attr, saved)


def _cpu_ms(prog: CpuProgram, args, calls: int) -> float:
    t = time.process_time()
    for _ in range(calls):
        prog.run(args)
    return (time.process_time() - t) / calls * 1e3


def compare(switch: str, modules: dict[str, tuple[str, list]], rounds: int = 9,
            target_s: float = 0.05) -> list[dict]:
    """For each module (name -> (HLO text, inputs)): compile CPU seconds and median run CPU
    ms with `switch` ('module.path:ATTR') False (A) and True (B), rounds interleaved."""
    path, attr = switch.split(":")
    owner = importlib.import_module(path)
    rows = []
    for name, (text, args) in modules.items():
        progs, comp = {}, {}
        for k, value in (("A", False), ("B", True)):
            progs[k], comp[k] = _compile(text, owner, attr, value)
        ra, rb = progs["A"].run(args), progs["B"].run(args)
        same = all(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True) for a, b in zip(ra, rb))
        one = _cpu_ms(progs["A"], args, 1)
        calls = max(1, min(1000, int(target_s * 1e3 / max(one, 1e-3))))
        times: dict[str, list[float]] = {"A": [], "B": []}
        for r in range(rounds):
            for k in (("A", "B") if r % 2 == 0 else ("B", "A")):
                times[k].append(_cpu_ms(progs[k], args, calls))
        rows.append({"module": name, "compile_a_s": comp["A"], "compile_b_s": comp["B"],
                     "a_ms": statistics.median(times["A"]), "b_ms": statistics.median(times["B"]),
                     "same_bits": same, "load": os.getloadavg()[0]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("switch", help="module.path:ATTR, False for A, True for B")
    ap.add_argument("--kernels", default=",".join(KERNELS), help="math_approx_ab kernels ('' for none)")
    ap.add_argument("--n", default=str(1 << 22), help="elements of the kernels' f32[n] (comma-separated sizes)")
    ap.add_argument("--hlo", default="", help="HLO text files, comma-separated")
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    modules: dict[str, tuple[str, list]] = {}
    rng = np.random.default_rng(0)
    for n in (int(s) for s in a.n.split(",")):
        x = rng.standard_normal(n).astype(np.float32)
        for k in filter(None, a.kernels.split(",")):
            modules[f"{k}[{n}]"] = (KERNELS[k].replace("NELEM", str(n)), [x])
    for path in filter(None, a.hlo.split(",")):
        text = open(path).read()
        modules[os.path.basename(path)] = (text, random_inputs(parse_hlo(text), seed=1))
    print(f"threads {os.environ.get('HLOFUSE_CPU_THREADS', 'all')}, load {os.getloadavg()[0]:.2f}, "
          f"{a.switch}: A False, B True")
    for r in compare(a.switch, modules, a.rounds):
        print(f"{r['module']:26s} compile CPU A {r['compile_a_s']:6.3f} s  B {r['compile_b_s']:6.3f} s  "
              f"run A {r['a_ms']:8.3f} ms  B {r['b_ms']:8.3f} ms  B/A {r['b_ms'] / r['a_ms']:5.3f}  "
              f"same bits {r['same_bits']}  (load {r['load']:.2f})", flush=True)


if __name__ == "__main__":
    main()
