"""ResNet-50's convolution shape classes against the GEMM peak (issue 13): per class, hlofuse's
path as the rules choose it, oneDNN's convolution primitive forced, and oneDNN's sgemm of the
same M x N x K (M = batch x output positions, N = output features, K = taps x input features),
in one process, interleaved.

Run:  python benchmarks/conv_classes.py [--threads 2] [--rounds 15] [--classes a,b] [--batch 4] [--size 128]
                                        [--no-epilogue] [--cpu-time] [--scalar-features]

The convolutions are keras ResNet-50's (NHWC/HWIO, f32; by default at benchmarks/model_zoo.py's
4 images of 128x128: conv2_x over 32x32 positions, conv5_x over 4x4), each with the batch-norm
epilogue the model fuses into it (a per-feature multiply and add, then a ReLU), and "bare", our
path on the convolution alone (the epilogue's cost; `--no-epilogue` times only the bare one). Every case is compiled twice by
hlofuse (no compile cache): "ours", the rules `prefers_onednn` / `prefers_gemm` as they stand,
and "dnnl", `prefers_onednn` forced on (absent where oneDNN cannot run the convolution); both
results are checked against each other. "sgemm" is one dnnl_sgemm call of the same M, N, K on
`--threads` OpenMP threads (oneDNN's own team: the library's best for the shape, no epilogue,
no im2col), and "peak" 1024^3 on the same threads, both timed in the same rounds. Each round
times every path once (reps calls, rotated order); printed are the least (the undisturbed
speed on this shared machine) and the median per call, GFLOP/s from the least, and our
GFLOP/s as a share of the shape's sgemm and of the peak. `--cold` flushes the caches before
each call (64 MiB written, untimed), so that weights and inputs come from memory as in a model,
whose 100 MB of weights do not stay in the 32 MiB L3. `--rows-first` adds "rows", our path with
row tiles where `cpu_conv_gemm.columns_first` cuts column panels. The load average is printed before and
after.

`--weight-gradients` times haiku ResNet-18's training-step weight gradients instead (WGRAD_CLASSES,
jax's `f01b_i01o->01bf` of the forward's input and output gradient, SAME padding; by default its 16
images of 64x64; M = window taps x input features, N = output features, K = batch x output
positions), bare, with "rows" their patch tiles packed row by row
(`cpu_conv_gemm_kernel.BATCH_MINOR_RUNS` off) beside the blocked packing of "ours".
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

# name: (input size divisor, input features, output features, window, stride, padding), the input
# spatial size being the image size over the divisor: ResNet-50's stem (2 = the image itself,
# 7x7 stride 2) and the convolutions of its stages conv2_x .. conv5_x (their inputs at 1/4 ..
# 1/32 of the image; a stride-2 1x1 opens conv3_x .. conv5_x, reading the previous stage's size).
CLASSES = {
    "stem_7x7s2_3-64": (1, 3, 64, 7, 2, 3),
    "conv2_1x1_64-64": (4, 64, 64, 1, 1, 0),
    "conv2_1x1_64-256": (4, 64, 256, 1, 1, 0),
    "conv2_1x1_256-64": (4, 256, 64, 1, 1, 0),
    "conv2_3x3_64": (4, 64, 64, 3, 1, 1),
    "conv3_1x1s2_256-512": (4, 256, 512, 1, 2, 0),
    "conv3_1x1s2_256-128": (4, 256, 128, 1, 2, 0),
    "conv3_3x3_128": (8, 128, 128, 3, 1, 1),
    "conv3_1x1_128-512": (8, 128, 512, 1, 1, 0),
    "conv3_1x1_512-128": (8, 512, 128, 1, 1, 0),
    "conv4_1x1s2_512-1024": (8, 512, 1024, 1, 2, 0),
    "conv4_3x3_256": (16, 256, 256, 3, 1, 1),
    "conv4_1x1_256-1024": (16, 256, 1024, 1, 1, 0),
    "conv4_1x1_1024-256": (16, 1024, 256, 1, 1, 0),
    "conv5_1x1s2_1024-2048": (16, 1024, 2048, 1, 2, 0),
    "conv5_3x3_512": (32, 512, 512, 3, 1, 1),
    "conv5_1x1_512-2048": (32, 512, 2048, 1, 1, 0),
    "conv5_1x1_2048-512": (32, 2048, 512, 1, 1, 0),
}

# haiku ResNet-18's weight gradients: name: (input size divisor, input features, output features,
# window, stride) of the forward convolution (SAME padding), at the model zoo's 64x64 images.
WGRAD_CLASSES = {
    "stem_7x7s2_3-64": (1, 3, 64, 7, 2),
    "s2_3x3_64": (4, 64, 64, 3, 1),
    "s3_3x3s2_64-128": (4, 64, 128, 3, 2),
    "s3_3x3_128": (8, 128, 128, 3, 1),
    "s4_3x3s2_128-256": (8, 128, 256, 3, 2),
    "s4_3x3_256": (16, 256, 256, 3, 1),
    "s5_3x3s2_256-512": (16, 256, 512, 3, 2),
    "s5_3x3_512": (32, 512, 512, 3, 1),
}


def wgrad_text(batch: int, image: int, divisor: int, cin: int, cout: int, k: int, stride: int) -> tuple[str, tuple[int, int, int]]:
    """(HLO text, (M, N, K)) of the weight gradient of a forward NHWC convolution with SAME
    padding, as jax lowers it: the forward input `x` as `f01b` (its batch the contraction) and
    the output gradient `dy` as `i01o` window, the result `[k, k, cin, cout]`."""
    size = image // divisor
    out = -(-size // stride)
    total = max((out - 1) * stride + k - size, 0)
    lo, hi = total // 2, total - total // 2
    text = (f"HloModule wgrad\nENTRY e {{\n  x = f32[{batch},{size},{size},{cin}] parameter(0)\n"
            f"  dy = f32[{batch},{out},{out},{cout}] parameter(1)\n"
            f"  ROOT w = f32[{k},{k},{cin},{cout}] convolution(x, dy), window={{size={out}x{out} "
            f"pad={lo}_{hi}x{lo}_{hi} rhs_dilate={stride}x{stride}}}, dim_labels=f01b_i01o->01bf\n}}\n")
    return text, (k * k * cin, cout, batch * out * out)


def module_text(batch: int, image: int, divisor: int, cin: int, cout: int, k: int, stride: int, pad: int,
                epilogue: bool = True) -> tuple[str, tuple[int, int, int]]:
    """(HLO text, (M, N, K)) of the class at `batch`: x, w and, with `epilogue`, a per-feature
    scale and shift before a ReLU (keras's batch norm in inference, as jax lowers it), for
    images of `image` x `image` pixels."""
    size = image // divisor
    out = (size + 2 * pad - k) // stride + 1
    o = f"f32[{batch},{out},{out},{cout}]"
    conv = (f"convolution(x, w), window={{size={k}x{k} stride={stride}x{stride} pad={pad}_{pad}x{pad}_{pad}}}, "
            f"dim_labels=b01f_01io->b01f")
    body = [f"  x = f32[{batch},{size},{size},{cin}] parameter(0)", f"  w = f32[{k},{k},{cin},{cout}] parameter(1)"]
    if epilogue:
        body += [f"  s = f32[{cout}] parameter(2)", f"  t = f32[{cout}] parameter(3)",
                 f"  c = {o} {conv}", f"  sb = {o} broadcast(s), dimensions={{3}}",
                 f"  tb = {o} broadcast(t), dimensions={{3}}", f"  m = {o} multiply(c, sb)",
                 f"  a = {o} add(m, tb)", "  z = f32[] constant(0)",
                 f"  zb = {o} broadcast(z), dimensions={{}}", f"  ROOT r = {o} maximum(a, zb)"]
    else:
        body.append(f"  ROOT c = {o} {conv}")
    return "HloModule conv\nENTRY e {\n" + "\n".join(body) + "\n}\n", (batch * out * out, cout, k * k * cin)


class Sgemm:
    """One row-major dnnl_sgemm C[M,N] = A[M,K] B[K,N] on `threads` OpenMP threads."""

    def __init__(self, m: int, n: int, k: int, threads: int):
        import numpy as np

        from hlofuse.runtime.gemm_provider import onednn_library

        self.lib = onednn_library()
        self.gomp = ctypes.CDLL("libgomp.so.1")
        rng = np.random.default_rng(1)
        self.a = rng.standard_normal((m, k)).astype(np.float32)
        self.b = rng.standard_normal((k, n)).astype(np.float32)
        self.c = np.empty((m, n), np.float32)
        self.mnk, self.threads = (m, n, k), threads
        fn, dim, ptr = self.lib.dnnl_sgemm, ctypes.c_int64, ctypes.c_void_p
        fn.argtypes = [ctypes.c_char, ctypes.c_char, dim, dim, dim, ctypes.c_float, ptr, dim, ptr, dim,
                       ctypes.c_float, ptr, dim]

    def __call__(self) -> None:
        m, n, k = self.mnk
        saved = self.gomp.omp_get_max_threads()
        self.gomp.omp_set_num_threads(self.threads)
        # Row-major C = A B is column-major C^T = B^T A^T: dnnl_sgemm is row-major already.
        self.lib.dnnl_sgemm(b"N", b"N", m, n, k, 1.0, self.a.ctypes.data, k, self.b.ctypes.data, n, 0.0,
                            self.c.ctypes.data, n)
        self.gomp.omp_set_num_threads(saved)


def compile_paths(text: str) -> dict:
    """{"ours": exe, "dnnl": exe} for HLO `text` ("dnnl" only where oneDNN maps the convolution)."""
    import hlofuse
    from hlofuse.codegen.kernels import cpu_conv_gemm, cpu_conv_onednn

    rule = cpu_conv_gemm.prefers_onednn
    exes = {"ours": hlofuse.compile(hlofuse.parse_hlo(text), cache=False)}
    try:
        cpu_conv_gemm.prefers_onednn = lambda comp: cpu_conv_onednn.onednn_class(comp) is not None
        exes["dnnl"] = hlofuse.compile(hlofuse.parse_hlo(text), cache=False)
    finally:
        cpu_conv_gemm.prefers_onednn = rule
    return exes


def time_rounds(calls: dict, rounds: int, reps: int, clock, evict=None) -> dict[str, list[float]]:
    """Seconds per call of each of `calls` in `rounds` rounds (after one untimed warm-up round),
    each round timing `reps` calls of every one in an order rotated by one per round. With
    `evict` (an array larger than the caches), it is written before each call, untimed."""
    times: dict[str, list[float]] = {p: [] for p in calls}
    order = list(calls)
    for r in range(rounds + 1):
        for p in order[r % len(order):] + order[:r % len(order)]:
            spent = 0.0
            if evict is not None:  # each call alone after the caches were flushed
                for _ in range(reps):
                    evict += 1.0
                    t0 = clock()
                    calls[p]()
                    spent += clock() - t0
            else:
                t0 = clock()
                for _ in range(reps):
                    calls[p]()
                spent = clock() - t0
            if r:  # round 0 warms up
                times[p].append(spent / reps)
    return times


def main(argv=None) -> int:
    """Time each class's paths and print them against the same-shape sgemm and the peak."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--batch", type=int, default=None, help="images (4; 16 with --weight-gradients)")
    ap.add_argument("--size", type=int, default=None,
                    help="image size (the model zoo's 128, 64 with --weight-gradients; ImageNet's 224)")
    ap.add_argument("--classes", default=None, help="comma-separated (default: all of the mode's)")
    ap.add_argument("--weight-gradients", action="store_true",
                    help="haiku ResNet-18's weight gradients (WGRAD_CLASSES), with 'rows' their row-by-row packing")
    ap.add_argument("--no-epilogue", action="store_true")
    ap.add_argument("--rows-first", action="store_true",
                    help="also time our path with row tiles where columns_first cuts column panels")
    ap.add_argument("--cold", action="store_true",
                    help="write 64 MiB between calls (twice the L3): operands come from memory, as in a model")
    ap.add_argument("--scalar-features", action="store_true",
                    help="also time our path with the direct kernel's feature loop left to LLVM (cpu_conv_features "
                         "FEATURE_VECTORS off; the same bits): 'ours/scalar' least and median, direct classes only")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time the process's CPU seconds (for one thread: not counting time descheduled)")
    opts = ap.parse_args(argv)
    wgrad = opts.weight_gradients
    opts.batch = opts.batch or (16 if wgrad else 4)
    opts.size = opts.size or (64 if wgrad else 128)
    opts.classes = opts.classes or ",".join(WGRAD_CLASSES if wgrad else CLASSES)
    opts.no_epilogue = opts.no_epilogue or wgrad
    from real_models import reexec_with_malloc_settings

    reexec_with_malloc_settings()
    os.environ["HLOFUSE_CPU_THREADS"] = str(opts.threads)
    import numpy as np

    import hlofuse
    from hlofuse.codegen.kernels import cpu_conv_gemm, cpu_conv_gemm_kernel

    clock = time.process_time if opts.cpu_time else time.perf_counter
    print(f"load {os.getloadavg()}, {opts.threads} thread(s), batch {opts.batch} x {opts.size}x{opts.size}, "
          f"{'CPU' if opts.cpu_time else 'wall'} time, {'cold caches, ' if opts.cold else ''}"
          f"{'no epilogue' if opts.no_epilogue else 'epilogue scale+shift+relu'}", flush=True)
    print(f"{'class':21s} {'M':>6s} {'N':>5s} {'K':>5s} {'path':10s} {'ours us':>8s} {'dnnl us':>8s} "
          f"{'sgemm us':>8s} {'ours GF':>7s} {'dnnl GF':>7s} {'sgemm GF':>8s} {'peak GF':>7s} "
          f"{'o/sg':>5s} {'o/pk':>5s} {'bare us':>7s} {'rows us':>7s} {'med o/d/s us':>20s}")
    peak = Sgemm(1024, 1024, 1024, opts.threads)
    evict = np.zeros(16 << 20, np.float32)
    for name in opts.classes.split(","):
        if wgrad:
            text, (m, n, k) = wgrad_text(opts.batch, opts.size, *WGRAD_CLASSES[name])
        else:
            text, (m, n, k) = module_text(opts.batch, opts.size, *CLASSES[name], epilogue=not opts.no_epilogue)
        module = hlofuse.parse_hlo(text)
        rng = np.random.default_rng(0)
        args = [rng.standard_normal(tuple(p.shape.dims)).astype(np.float32) for p in module.entry.parameters]
        exes = compile_paths(text)
        results = {p: np.asarray(exe(*args)) for p, exe in exes.items()}
        if "dnnl" in results:
            ref = results["ours"]
            err = float(np.max(np.abs(results["dnnl"] - ref)) / (np.max(np.abs(ref)) + 1e-30))
            assert err < 1e-4, f"{name}: oneDNN and our path differ by {err:.2e}"
        calls = {p: (lambda e=exe: e(*args)) for p, exe in exes.items()}
        if not opts.no_epilogue:  # our path on the bare convolution: the epilogue's cost
            bare = hlofuse.compile(hlofuse.parse_hlo(module_text(opts.batch, opts.size, *CLASSES[name], epilogue=False)[0]),
                                   cache=False)
            calls["bare"] = lambda e=bare: e(*args[:2])
        if wgrad:  # our path with the patch tiles packed row by row: the same bits
            try:
                cpu_conv_gemm_kernel.BATCH_MINOR_RUNS = False
                rows_exe = hlofuse.compile(hlofuse.parse_hlo(text), cache=False)
            finally:
                cpu_conv_gemm_kernel.BATCH_MINOR_RUNS = True
            same = np.asarray(rows_exe(*args)).tobytes() == results["ours"].tobytes()
            assert same, f"{name}: the blocked and row-by-row packings differ"
            calls["rows"] = lambda e=rows_exe: e(*args)
        elif opts.rows_first:  # our path with row tiles where columns_first cuts column panels
            try:
                cpu_conv_gemm.COLUMNS_FIRST = False
                rows_exe = hlofuse.compile(hlofuse.parse_hlo(text), cache=False)
            finally:
                cpu_conv_gemm.COLUMNS_FIRST = True
            calls["rows"] = lambda e=rows_exe: e(*args)
        if opts.scalar_features and _gemm_or_direct(module) == "direct" and not cpu_conv_gemm.prefers_onednn(
                _conv_comp(module)):
            from hlofuse.codegen.kernels import cpu_conv_features

            try:
                cpu_conv_features.FEATURE_VECTORS = False
                scalar_exe = hlofuse.compile(hlofuse.parse_hlo(text), cache=False)
            finally:
                cpu_conv_features.FEATURE_VECTORS = True
            same = np.asarray(scalar_exe(*args)).tobytes() == results["ours"].tobytes()
            assert same, f"{name}: the feature-vector and scalar direct kernels differ"
            calls["scalar"] = lambda e=scalar_exe: e(*args)
        calls["sgemm"] = Sgemm(m, n, k, opts.threads)
        calls["peak"] = peak
        flops = {p: 2.0 * m * n * k for p in calls}
        flops["peak"] = 2.0 * 1024 ** 3
        reps = max(1, int(0.02 / (2.0 * m * n * k / 300e9)))
        times = time_rounds(calls, opts.rounds, reps, clock, evict if opts.cold else None)
        least = {p: min(t) for p, t in times.items()}
        med = {p: statistics.median(t) for p, t in times.items()}
        gf = {p: flops[p] / least[p] / 1e9 for p in least}
        path = "onednn" if cpu_conv_gemm.prefers_onednn(_conv_comp(module)) else _gemm_or_direct(module)
        d = gf.get("dnnl", float("nan"))
        print(f"{name:21s} {m:6d} {n:5d} {k:5d} {path:10s} {least['ours'] * 1e6:8.1f} "
              f"{least.get('dnnl', float('nan')) * 1e6:8.1f} {least['sgemm'] * 1e6:8.1f} {gf['ours']:7.1f} "
              f"{d:7.1f} {gf['sgemm']:8.1f} {gf['peak']:7.1f} {gf['ours'] / gf['sgemm']:5.2f} "
              f"{gf['ours'] / gf['peak']:5.2f} {least.get('bare', float('nan')) * 1e6:7.1f} {least.get('rows', float('nan')) * 1e6:7.1f} {med['ours'] * 1e6:6.0f}/{med.get('dnnl', float('nan')) * 1e6:6.0f}"
              f"/{med['sgemm'] * 1e6:6.0f}" + (f"  ours/scalar {least['ours'] / least['scalar']:.3f} least, "
                                               f"{med['ours'] / med['scalar']:.3f} median" if "scalar" in least else ""),
              flush=True)
    print(f"load {os.getloadavg()}")
    return 0


def _conv_comp(module):
    """The entry's convolution as the one-instruction computation the planner's rules see."""
    from hlofuse.codegen.schedule import wrap_instruction

    conv = next(i for i in module.entry.instructions if i.opcode == "convolution")
    return wrap_instruction(conv)


def _gemm_or_direct(module) -> str:
    """"conv_gemm" where the GEMM rule takes the entry's convolution, else "direct"."""
    from hlofuse.codegen.kernels import cpu_conv_gemm

    conv = next(i for i in module.entry.instructions if i.opcode == "convolution")
    return "conv_gemm" if cpu_conv_gemm.prefers_gemm(conv) and cpu_conv_gemm.gemm_layout(conv) else "direct"


if __name__ == "__main__":
    sys.exit(main())
