"""Dots on the CPU: hlofuse's GEMM kernels (codegen/kernels/cpu_gemm.py) against this machine's
measured sgemm peak and against XLA:CPU on the same HLO.

Run:  python benchmarks/gemm_speed.py [--rounds N] [--quick] [--profile]

In one process: the sgemm peak of scipy's OpenBLAS and of oneDNN's `dnnl_sgemm` on one and on
all threads (the libraries the GEMM kernels call: oneDNN for f32 where it is installed,
runtime/gemm_provider.py); then each case (a square f32 GEMM, an MLP block with bias, GELU and a
residual fused as epilogues, causal masked attention) lowered by JAX to HLO, compiled by hlofuse
(kernels on all cores with the default f32 provider and with HLOFUSE_GEMM=openblas, and on one
thread) and by jax.jit, timed in interleaved rounds, medians;
`--profile` adds each case's per-step times (CpuProgram.profile). GFLOP/s count 2*M*N*K per dot. The load
average is printed before and after (the machine may be shared).

On a shared machine wall-clock rates mostly measure the other jobs: a thread descheduled for
half of a call halves its GFLOP/s. So the one-thread runs are also timed in CPU time
(`time.process_time`: the seconds this process ran), and `GF/CPU-s` (GFLOP per CPU-second of
the one-thread hlofuse call) is compared with oneDNN's one-thread sgemm peak timed the same way
(`% CPU peak`): the efficiency of the kernels themselves, what the contention cannot move.
"attention" is the whole causal masked attention (its softmax row kernel included, no flops
counted for it); "attention dots" its two batched dots alone, with the same layouts. The script re-executes itself
with GLIBC_TUNABLES set (as benchmarks/real_models.py does), so large temporaries are not
returned to the kernel and faulted in again on every call.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from kernel_figures import median_seconds  # noqa: E402
from real_models import reexec_with_malloc_settings  # noqa: E402


def _scipy_blas_threads(n: int) -> None:
    """Set scipy's OpenBLAS thread count (hlofuse sets it to 1 for its kernels)."""
    import ctypes
    import glob

    import scipy

    libdir = os.path.join(os.path.dirname(os.path.dirname(scipy.__file__)), "scipy.libs")
    for path in glob.glob(os.path.join(libdir, "*openblas*.so*")):
        fn = getattr(ctypes.CDLL(path), "scipy_openblas_set_num_threads", None)
        if fn is not None:
            fn.argtypes = [ctypes.c_int]
            fn(n)
            return


def blas_core() -> str:
    """The kernel set scipy's OpenBLAS runs (DYNAMIC_ARCH picks it at load; OPENBLAS_CORETYPE
    overrides it: Haswell is AVX2, SkylakeX AVX-512, about twice the flops per cycle)."""
    import ctypes
    import glob

    import scipy

    libdir = os.path.join(os.path.dirname(os.path.dirname(scipy.__file__)), "scipy.libs")
    for path in glob.glob(os.path.join(libdir, "*openblas*.so*")):
        fn = getattr(ctypes.CDLL(path), "scipy_openblas_get_corename", None)
        if fn is not None:
            fn.restype = ctypes.c_char_p
            return fn().decode()
    return "unknown"


def sgemm_peak(n: int, threads: int, repeat: int) -> float:
    """GFLOP/s of scipy's sgemm on n x n x n with `threads` threads."""
    from scipy.linalg import blas

    rng = np.random.default_rng(0)
    a = np.asfortranarray(rng.standard_normal((n, n)).astype(np.float32))
    b = np.asfortranarray(rng.standard_normal((n, n)).astype(np.float32))
    _scipy_blas_threads(threads)
    try:
        t = median_seconds(lambda: blas.sgemm(1.0, a, b), repeat, warmup=1)
    finally:
        _scipy_blas_threads(1)
    return 2 * n ** 3 / t / 1e9


def _onednn_square_gemm(n: int, threads: int, repeat: int, clock=time.perf_counter) -> float | None:
    """Median seconds (by `clock`) of oneDNN's dnnl_sgemm on n x n x n with `threads` OpenMP
    threads (None when libdnnl is not installed)."""
    import ctypes

    from hlofuse.runtime.gemm_provider import onednn_library

    lib = onednn_library()
    if lib is None:
        return None
    gomp = ctypes.CDLL("libgomp.so.1")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    c = np.empty((n, n), np.float32)
    fn, dim, ptr = lib.dnnl_sgemm, ctypes.c_int64, ctypes.c_void_p
    fn.argtypes = [ctypes.c_char, ctypes.c_char, dim, dim, dim, ctypes.c_float, ptr, dim, ptr, dim,
                   ctypes.c_float, ptr, dim]
    saved = gomp.omp_get_max_threads()
    gomp.omp_set_num_threads(threads)
    try:
        return median_seconds(lambda: fn(b"N", b"N", n, n, n, 1.0, a.ctypes.data, n, b.ctypes.data, n, 0.0,
                                         c.ctypes.data, n), repeat, warmup=1, clock=clock)
    finally:
        gomp.omp_set_num_threads(saved)


def onednn_peak(n: int, threads: int, repeat: int) -> float | None:
    """GFLOP/s of oneDNN's dnnl_sgemm on n x n x n with `threads` OpenMP threads (None when
    libdnnl is not installed)."""
    t = _onednn_square_gemm(n, threads, repeat)
    return None if t is None else 2 * n ** 3 / t / 1e9


def onednn_cpu_peak(n: int, repeat: int) -> float | None:
    """GFLOP per CPU-second of oneDNN's dnnl_sgemm on n x n x n on one thread (process CPU
    time, so time descheduled does not count); None when libdnnl is not installed."""
    t = _onednn_square_gemm(n, 1, repeat, time.process_time)
    return None if t is None else 2 * n ** 3 / t / 1e9


def cases(quick: bool):
    """(name, fn, args, flops) per case: the functions JAX lowers to HLO."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(1)

    def f32(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    n = 1024 if quick else 2048
    out = [(f"gemm {n}^3", lambda a, b: a @ b, [f32(n, n), f32(n, n)], 2 * n ** 3)]
    t, d, h = (512, 512, 2048) if quick else (2048, 1024, 4096)

    def mlp(x, w1, b1, w2, b2):
        y = jax.nn.gelu(x @ w1 + b1)
        return y @ w2 + b2 + x

    out.append((f"mlp {t}x{d}x{h}", mlp, [f32(t, d), f32(d, h), f32(h), f32(h, d), f32(d)], 4 * t * d * h))
    b, heads, s, hd = 4, 6, 512, 64

    def attention(q, k, v):
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(hd).astype(np.float32)
        mask = jnp.tril(jnp.ones((s, s), bool))
        logits = jnp.where(mask, logits, -1e9)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, axis=-1), v)

    out.append((f"attention b{b} h{heads} s{s} d{hd}", attention, [f32(b, s, heads, hd) for _ in range(3)],
                4 * b * heads * s * s * hd))

    def attention_dots(q, k, v, probs):
        return (jnp.einsum("bqhd,bkhd->bhqk", q, k), jnp.einsum("bhqk,bkhd->bqhd", probs, v))

    out.append((f"attention dots b{b} h{heads} s{s} d{hd}", attention_dots,
                [f32(b, s, heads, hd) for _ in range(3)] + [f32(b, heads, s, s)], 4 * b * heads * s * s * hd))
    return out


def _compile(hlofuse, text: str, threads: int | None, gemm: str | None = None):
    """hlofuse's executable of `text`, its kernels split over `threads` (None: all cores), its
    f32 GEMMs calling `gemm` (HLOFUSE_GEMM; None: the default provider)."""
    saved = {k: os.environ.pop(k, None) for k in ("HLOFUSE_CPU_THREADS", "HLOFUSE_GEMM")}
    if threads is not None:
        os.environ["HLOFUSE_CPU_THREADS"] = str(threads)
    if gemm is not None:
        os.environ["HLOFUSE_GEMM"] = gemm
    try:
        exe = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu")
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v
    return exe


def _profile(exe, args, runs: int) -> None:
    """Print where the time of `exe` goes (CpuProgram.profile), steps over 1% of a run."""
    steps, secs, _, wall = exe.program.profile(list(args), runs)
    for step, t in sorted(zip(steps, secs), key=lambda st: -st[1]):
        if t > 0.01 * wall:
            kernels = ", ".join(k.name for k in getattr(step.step, "kernels", []))
            name = step.step.inst.name if step.step.inst is not None else "?"
            print(f"    {t / runs * 1e3:9.2f} ms  {name}  [{kernels}]")


def main() -> None:
    """Measure and print the table."""
    reexec_with_malloc_settings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smaller shapes")
    parser.add_argument("--profile", action="store_true", help="per-step times of each case (all threads)")
    opts = parser.parse_args()
    import jax

    import hlofuse

    print(f"load average before: {os.getloadavg()}", flush=True)
    from hlofuse.runtime.gemm_provider import gemm_provider

    cores = len(os.sched_getaffinity(0))
    n = 1024 if opts.quick else 2048
    peaks = {th: sgemm_peak(n, th, 3) for th in sorted({1, cores})}
    core = f"{blas_core()} kernels, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}"
    for th, p in peaks.items():
        print(f"sgemm peak ({n}^3, scipy OpenBLAS, {core}, {th} thread{'s' if th > 1 else ''}): {p:.1f} GFLOP/s")
    for th in sorted({1, cores}):
        p = onednn_peak(n, th, 3)
        if p is not None:
            print(f"sgemm peak ({n}^3, oneDNN dnnl_sgemm, {th} thread{'s' if th > 1 else ''}): {p:.1f} GFLOP/s")
            peaks[f"onednn{th}"] = p
    cpu_peak = onednn_cpu_peak(n, 3)
    if cpu_peak is not None:
        print(f"sgemm peak ({n}^3, oneDNN dnnl_sgemm, 1 thread, CPU time): {cpu_peak:.1f} GFLOP per CPU-second")
    print(f"f32 GEMM provider: {gemm_provider('f32')}; 'OpenBLAS ms' forces HLOFUSE_GEMM=openblas", flush=True)
    print(f"{'case':32} {'hlofuse ms':>11} {'OpenBLAS ms':>11} {'1 thread':>9} {'XLA ms':>9} {'ratio':>6} "
          f"{'OB ratio':>8} {'GFLOP/s':>8} {'% peak':>7} {'GF/CPU-s':>9} {'% CPU peak':>10}")
    for name, fn, args, flops in cases(opts.quick):
        text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
        exe, exe1 = _compile(hlofuse, text, None), _compile(hlofuse, text, 1)
        exe_ob = _compile(hlofuse, text, None, "openblas")
        xla = jax.jit(fn)
        dev = [jax.device_put(a) for a in args]
        mine, single, single_cpu, openblas, theirs = [], [], [], [], []
        for _ in range(opts.rounds):  # interleaved rounds
            mine.append(median_seconds(lambda: exe(*args), 1, warmup=1))
            openblas.append(median_seconds(lambda: exe_ob(*args), 1, warmup=1))
            single.append(median_seconds(lambda: exe1(*args), 1, warmup=1))
            single_cpu.append(median_seconds(lambda: exe1(*args), 1, warmup=1, clock=time.process_time))
            theirs.append(median_seconds(lambda: jax.block_until_ready(xla(*dev)), 1, warmup=1))
        tm, t1, tx = statistics.median(mine), statistics.median(single), statistics.median(theirs)
        tob, tc = statistics.median(openblas), statistics.median(single_cpu)
        rate, cpu_rate = flops / tm / 1e9, flops / tc / 1e9
        cpu_share = f"{100 * cpu_rate / cpu_peak:9.0f}%" if cpu_peak else f"{'-':>10}"
        print(f"{name:32} {tm * 1e3:11.2f} {tob * 1e3:11.2f} {t1 * 1e3:9.2f} {tx * 1e3:9.2f} {tm / tx:6.2f} "
              f"{tob / tx:8.2f} {rate:8.1f} {100 * rate / max(peaks.values()):6.0f}% {cpu_rate:9.1f} {cpu_share}",
              flush=True)
        if opts.profile:
            _profile(exe, args, opts.rounds)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
