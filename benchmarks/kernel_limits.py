"""Single kernels of issue 14 beside XLA:CPU: masked and plain row max, causal softmax, GELU-tanh,
a chain of transcendentals, the cost of setting MXCSR per kernel call, and (`--cases
vector_width`) each kernel kind compiled for 256- and 512-bit vectors.

Run:  python benchmarks/kernel_limits.py [--cases a,b] [--rounds 15]

Each case is a JAX function lowered to HLO text; hlofuse and XLA:CPU compile that same text
and run it on the same inputs (24-64 MB unless the case says otherwise) in one process,
timed interleaved (one hlofuse call, one XLA call per round) after two warm-up calls each,
under the malloc settings of benchmarks/real_models.py; the table gives medians and the ratio
hlofuse/XLA, and the load average before and after (these machines are shared).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from real_models import MALLOC_TUNABLES, XlaExecutable, _load, _reexec_with_malloc_settings  # noqa: E402


def _cases() -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)

    def causal(x):  # batch 4 x 6 heads, sequence 512: scores masked below the diagonal
        s = x.shape[-1]
        mask = jnp.arange(s)[:, None] >= jnp.arange(s)[None, :]
        return jnp.where(mask, x, -jnp.inf)

    def gelu_tanh(x):
        return 0.5 * x * (1 + jnp.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))

    scores = rng.standard_normal((24, 512, 512), np.float32)
    return {
        "row_max_64MB": (lambda x: jnp.max(x, axis=1), [rng.standard_normal((4096, 4096), np.float32)]),
        "row_min_64MB": (lambda x: jnp.min(x, axis=1), [rng.standard_normal((4096, 4096), np.float32)]),
        "col_max_64MB": (lambda x: jnp.max(x, axis=0), [rng.standard_normal((4096, 4096), np.float32)]),
        "masked_row_max_25MB": (lambda x: jnp.max(causal(x), axis=-1), [scores]),
        "causal_softmax_25MB": (lambda x: jax.nn.softmax(causal(x), axis=-1), [scores]),
        "gelu_tanh_2048x2048": (gelu_tanh, [rng.standard_normal((2048, 2048), np.float32)]),
        "gelu_tanh_32MB": (gelu_tanh, [rng.standard_normal((4096, 2048), np.float32)]),
        "tanh_32MB": (jnp.tanh, [rng.standard_normal((4096, 2048), np.float32)]),
        "transcendental_chain_32MB": (lambda x: jnp.tanh(jnp.exp(-x * x)) + jax.nn.sigmoid(x) + jnp.log1p(x * x),
                                      [rng.standard_normal((4096, 2048), np.float32)]),
    }


def run_case(name: str, fn, args, rounds: int) -> dict:
    """Compile `fn`'s HLO with hlofuse and XLA, check, time interleaved; a row of the table."""
    import jax
    import numpy as np

    import hlofuse
    from hlofuse.runtime.compare import compare_outputs

    text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    exe = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu")
    xla = XlaExecutable(text)
    args = [np.ascontiguousarray(a) for a in args]
    buffers = xla.place(args)
    ours = exe(*args)
    ok = all(r.ok for r in compare_outputs(list(ours), [np.asarray(o) for o in xla(buffers)]))
    exe(*args)
    xla(buffers)
    t_ours, t_xla = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        exe(*args)
        t1 = time.perf_counter()
        xla(buffers)
        t_xla.append(time.perf_counter() - t1)
        t_ours.append(t1 - t0)
    mb = sum(a.nbytes for a in args) / 1e6
    ours_ms, xla_ms = statistics.median(t_ours) * 1e3, statistics.median(t_xla) * 1e3
    return {"case": name, "input_mb": mb, "hlofuse_ms": ours_ms, "xla_ms": xla_ms, "ratio": ours_ms / xla_ms,
            "match": ok}


def mxcsr_cost_ns(calls: int = 2_000_000) -> tuple[float, float]:
    """Nanoseconds per call of an empty-bodied kernel with and without the MXCSR save/set/restore
    of codegen/kernels/cpu_skeleton.py, called `calls` times from a native loop."""
    import llvmlite.binding as llvm

    from hlofuse.emitters.cpu.target import new_host_target_machine, optimized_module

    def module(with_mxcsr: bool) -> str:
        pre = post = ""
        if with_mxcsr:
            pre = ("  call void @llvm.x86.sse.stmxcsr(ptr %s)\n  %o = load i32, ptr %s\n"
                   "  %n = or i32 %o, 32832\n  store i32 %n, ptr %f\n  call void @llvm.x86.sse.ldmxcsr(ptr %f)\n")
            post = "  call void @llvm.x86.sse.ldmxcsr(ptr %s)\n"
        return f"""
declare void @llvm.x86.sse.stmxcsr(ptr)
declare void @llvm.x86.sse.ldmxcsr(ptr)
define void @kernel(ptr %p) noinline {{
  %s = alloca i32
  %f = alloca i32
{pre}  %v = load volatile float, ptr %p
  %w = fadd float %v, 1.0
  store volatile float %w, ptr %p
{post}  ret void
}}
define void @loop(ptr %p, i64 %n) {{
entry:
  br label %l
l:
  %i = phi i64 [0, %entry], [%j, %l]
  call void @kernel(ptr %p)
  %j = add i64 %i, 1
  %c = icmp eq i64 %j, %n
  br i1 %c, label %e, label %l
e:
  ret void
}}
"""

    out, engines = [], []
    for with_mxcsr in (False, True):
        mod = optimized_module(module(with_mxcsr))
        engine = llvm.create_mcjit_compiler(mod, new_host_target_machine())
        engine.finalize_object()
        loop = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(engine.get_function_address("loop"))
        cell = (ctypes.c_float * 1)()
        best = min(_timed(loop, cell, calls) for _ in range(5))
        out.append(best / calls * 1e9)
        engines.append(engine)  # kept alive until the loop's code is no longer needed
    return out[0], out[1]


def _timed(loop, cell, calls: int) -> float:
    t0 = time.perf_counter()
    loop(ctypes.addressof(cell), calls)
    return time.perf_counter() - t0


_SUM = "red { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b) }\n"
_MAX = "red { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] maximum(a, b) }\n"


def _width_cases() -> dict:
    """name -> (HLO text, input shape, calls per round): one kernel of each kind, in cache
    (calls repeated) and 32 MB."""
    cases = {}
    for n, reps, tag in [(1 << 16, 200, "f32[65536] x200"), (1 << 23, 1, "f32[8M]")]:
        head = f"HloModule m\nENTRY e {{\n p = f32[{n}] parameter(0)\n"
        cases[f"loop a*x+x {tag}"] = (head + f" k = f32[] constant(1.5)\n b = f32[{n}] broadcast(k), dimensions={{}}\n"
                                     f" m = f32[{n}] multiply(p, b)\n ROOT r = f32[{n}] add(m, p)\n}}\n", [n], reps)
        cases[f"loop tanh {tag}"] = (head + f" ROOT r = f32[{n}] tanh(p)\n}}\n", [n], reps)
    for (r, c), reps, tag in [((64, 1024), 200, "[64,1024] x200"), ((2048, 4096), 1, "[2048,4096]")]:
        for name, red, init in [("sum", _SUM, "0"), ("max", _MAX, "-inf")]:
            for kind, dim, out in [("row", 1, r), ("column", 0, c)]:
                cases[f"{kind} {name} {tag}"] = (
                    f"HloModule m\n{red}ENTRY e {{\n p = f32[{r},{c}] parameter(0)\n c = f32[] constant({init})\n"
                    f" ROOT o = f32[{out}] reduce(p, c), dimensions={{{dim}}}, to_apply=red\n}}\n", [r, c], reps)
    return cases


def vector_width_table(rounds: int) -> None:
    """Print, per kernel kind, the CPU time (one thread, medians of `rounds` interleaved rounds)
    with "prefer-vector-width" 256 and 512: CPU time, not wall time, because these hosts are shared."""
    import numpy as np

    import hlofuse
    import hlofuse.codegen.cpu as cpu_codegen
    from hlofuse.codegen.kernels import cpu_skeleton
    from hlofuse.emitters.cpu.target import add_string_attribute
    from hlofuse.runtime.cpu_executor import CpuProgram

    os.environ["HLOFUSE_CPU_THREADS"] = "1"
    rng = np.random.default_rng(0)
    print(f"{'kernel (one thread, CPU ms)':32s} {'256':>8s} {'512':>8s} {'512/256':>8s}", flush=True)
    for name, (text, shape, reps) in _width_cases().items():
        x = rng.standard_normal(shape).astype(np.float32)
        progs = {}
        for width in (256, 512):
            class Skeleton(cpu_skeleton.CpuKernelSkeleton):
                def __init__(self, *a, width=width, **k):
                    super().__init__(*a, **k)  # then the host's width replaced by `width`
                    attrs = self.function.attributes
                    for entry in [e for e in attrs if str(e).startswith('"prefer-vector-width"')]:
                        set.discard(attrs, entry)
                    add_string_attribute(self.function, "prefer-vector-width", str(width))
            saved = cpu_skeleton.CpuKernelSkeleton
            cpu_codegen.CpuKernelSkeleton = Skeleton
            try:
                fused = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu").fused_module
                progs[width] = CpuProgram.compile(fused, cache=False)
            finally:
                cpu_codegen.CpuKernelSkeleton = saved
        times = {w: [] for w in progs}
        for _ in range(rounds):
            for w, p in progs.items():
                t0 = time.process_time()
                for _ in range(reps):
                    p.run([x])
                times[w].append(time.process_time() - t0)
        med = {w: statistics.median(t) * 1e3 for w, t in times.items()}
        print(f"{name:32s} {med[256]:8.2f} {med[512]:8.2f} {med[512] / med[256]:8.2f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the cases and print the table."""
    cases = _cases()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", help=f"comma-separated subset of: {', '.join(cases)}, mxcsr, vector_width")
    p.add_argument("--rounds", type=int, default=15)
    a = p.parse_args(argv)
    names = a.cases.split(",") if a.cases else list(cases) + ["mxcsr", "vector_width"]
    print(f"load average before: {_load()}  (GLIBC_TUNABLES={MALLOC_TUNABLES})", flush=True)
    print(f"{'case':28s} {'in MB':>7s} {'hlofuse ms':>11s} {'XLA ms':>9s} {'ratio':>7s} match", flush=True)
    for name in names:
        if name == "vector_width":
            vector_width_table(a.rounds)
            continue
        if name == "mxcsr":
            plain, flushing = mxcsr_cost_ns()
            print(f"MXCSR save/set/restore per kernel call: {flushing - plain:.1f} ns "
                  f"({plain:.1f} ns a call without, {flushing:.1f} with)", flush=True)
            continue
        fn, args = cases[name]
        r = run_case(name, fn, args, a.rounds)
        print(f"{r['case']:28s} {r['input_mb']:7.1f} {r['hlofuse_ms']:11.2f} {r['xla_ms']:9.2f} {r['ratio']:7.2f} "
              f"{'yes' if r['match'] else 'NO'}", flush=True)
    print(f"load average after: {_load()}")
    return 0


if __name__ == "__main__":
    _reexec_with_malloc_settings()
    sys.exit(main())
