"""A/B timing of two versions of hlofuse/emitters/math_approx.py on transcendental-bound
kernels, in one process: CPU time of one thread (HLOFUSE_CPU_THREADS=1), rounds interleaved
A, B, A, B, ... so that the machine's load drifts over both alike; medians per kernel.

    HLOFUSE_CPU_THREADS=1 python benchmarks/math_approx_ab.py OLD.py [--rounds 9]

OLD.py is a copy of math_approx.py (e.g. `git show HEAD~1:hlofuse/emitters/math_approx.py`);
B is the working tree's. Each version's functions replace target.APPROX_F32's entries while
its programs compile (cache off), so the two differ only in the math they emit."""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time

import numpy as np

from hlofuse.emitters import target
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.cpu_executor import CpuProgram
from hlofuse import compiler

GELU = """HloModule gelu

ENTRY main {
  x = f32[NELEM] parameter(0)
  c3 = f32[] constant(0.044715)
  b3 = f32[NELEM] broadcast(c3), dimensions={}
  x2 = f32[NELEM] multiply(x, x)
  x3 = f32[NELEM] multiply(x2, x)
  t = f32[NELEM] multiply(b3, x3)
  u = f32[NELEM] add(x, t)
  ck = f32[] constant(0.7978845608)
  bk = f32[NELEM] broadcast(ck), dimensions={}
  v = f32[NELEM] multiply(bk, u)
  th = f32[NELEM] tanh(v)
  one = f32[] constant(1)
  b1 = f32[NELEM] broadcast(one), dimensions={}
  w = f32[NELEM] add(b1, th)
  half = f32[] constant(0.5)
  bh = f32[NELEM] broadcast(half), dimensions={}
  hx = f32[NELEM] multiply(bh, x)
  ROOT r = f32[NELEM] multiply(hx, w)
}
"""


def _unary(op: str) -> str:
    return f"HloModule m\nENTRY e {{\n  x = f32[NELEM] parameter(0)\n  ROOT r = f32[NELEM] {op}(x)\n}}\n"


KERNELS = {
    "negate": _unary("negate"),  # the memory-bound floor: one read, one write, no math
    "gelu_tanh": GELU,
    "tanh": _unary("tanh"),
    "logistic": _unary("logistic"),
    "erf": _unary("erf"),
    # run.py's transcendental_chain: erf(logistic(log1p(exp(tanh x))))
    "chain": """HloModule chain
ENTRY e {
  x = f32[NELEM] parameter(0)
  a = f32[NELEM] tanh(x)
  b = f32[NELEM] exponential(a)
  c = f32[NELEM] log-plus-one(b)
  d = f32[NELEM] logistic(c)
  ROOT r = f32[NELEM] erf(d)
}
""",
}


def _load(path: str):
    # a module of hlofuse.emitters, so that its relative imports (ir_helpers) resolve
    spec = importlib.util.spec_from_file_location("hlofuse.emitters.math_approx_old", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _compile(text: str, module) -> CpuProgram:
    saved = dict(target.APPROX_F32)
    try:
        for name, fn in list(target.APPROX_F32.items()):
            if fn.__module__ == "hlofuse.emitters.math_approx":  # not math_trig's functions
                target.APPROX_F32[name] = getattr(module, fn.__name__)
        fused, _ = compiler.optimize(parse_hlo(text))
        return CpuProgram.compile(fused, cache=False)
    finally:
        target.APPROX_F32.update(saved)


def _cpu_time(prog: CpuProgram, args, calls: int) -> float:
    t = time.process_time()
    for _ in range(calls):
        prog.run(args)
    return (time.process_time() - t) / calls * 1e3


def compare(old_path: str, kernels: list[str], n: int = 1 << 22, rounds: int = 9, calls: int = 5) -> list[dict]:
    """For each kernel of `kernels` (KERNELS' names) over f32[n] standard normal input: the
    median CPU time (ms) of version A (`old_path`) and B (the working tree's math_approx),
    rounds interleaved, and how many results differ bitwise between them."""
    from hlofuse.emitters import math_approx as new

    old = _load(old_path)
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    rows = []
    for name in kernels:
        text = KERNELS[name].replace("NELEM", str(n))
        progs = {"A": _compile(text, old), "B": _compile(text, new)}
        ra, rb = progs["A"].run([x])[0], progs["B"].run([x])[0]
        times: dict[str, list[float]] = {"A": [], "B": []}
        for _ in range(rounds):
            for k in ("A", "B"):
                times[k].append(_cpu_time(progs[k], [x], calls))
        rows.append({"kernel": name, "a_ms": statistics.median(times["A"]), "b_ms": statistics.median(times["B"]),
                     "differing": int(np.count_nonzero(ra.view(np.int32) != rb.view(np.int32))),
                     "load": os.getloadavg()[0]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", help="path to the A version of math_approx.py")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--n", type=int, default=1 << 22, help="elements (default 4M f32: 16 MB)")
    ap.add_argument("--calls", type=int, default=5, help="calls per timed round")
    ap.add_argument("--kernels", default=",".join(KERNELS))
    a = ap.parse_args()
    print(f"threads {os.environ.get('HLOFUSE_CPU_THREADS', 'all')}, load {os.getloadavg()[0]:.2f}")
    for r in compare(a.old, a.kernels.split(","), a.n, a.rounds, a.calls):
        print(f"{r['kernel']:10s} A {r['a_ms']:7.3f} ms  B {r['b_ms']:7.3f} ms  B/A {r['b_ms'] / r['a_ms']:5.3f}  "
              f"(differing results: {r['differing']} of {a.n}; load {r['load']:.2f})", flush=True)


if __name__ == "__main__":
    main()
