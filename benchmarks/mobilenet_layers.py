"""MobileNetV2's layer classes at the model's shapes: hlofuse beside IREE, one layer at a time
(issue 13: where the model's time goes against IREE's; docs/convolutions.md, "MobileNetV2
against IREE").

Run (needs jax and the `iree` extra):

    HLOFUSE_CPU_THREADS=1 python benchmarks/mobilenet_layers.py [--layers a,b] [--rounds 7] [--threads 1]
    HLOFUSE_CPU_THREADS=1 python benchmarks/mobilenet_layers.py --vector-ab [--layers a,b] [--rounds 15]
    HLOFUSE_CPU_THREADS=1 python benchmarks/mobilenet_layers.py --features-ab [--layers a,b] [--call-time]

Each layer is a JAX function as keras's MobileNetV2 (8 images of 160x160) computes it: a
depthwise 3x3 (stride 2 after keras's zero padding), a 1x1 expansion (batch norm, relu6) or
projection (batch norm), or the 3-channel stem, with the inference batch norm written out
((y - mean) * gamma * rsqrt(var + eps) + beta). hlofuse compiles the lowering's HLO text and
IREE its StableHLO (benchmarks/iree_reference.py), both on `--threads` threads (set
HLOFUSE_CPU_THREADS to the same count before running: hlofuse reads it when it loads); both
outputs are checked against JAX's. Timing is interleaved, CPU time per call with one thread
(wall time with more), medians; a second hlofuse column gives the time of its kernels alone
(the native per-step profile), since a call also allocates its output, which for these large
outputs is a good part of a small layer's call. The load average is printed.

`--vector-ab` (no IREE needed) compares, for each depthwise layer, the kernel whose channel loop
is emitted as vectors (codegen/kernels/cpu_conv_vector.py) with the scalar loop LLVM vectorises:
the same output bits, LLVM CPU milliseconds of each kernel (compiled alone on this thread, least
of 3), and kernel time per call (least and median of interleaved rounds; CPU time with one
thread), with a second compile of the vector kernel as a control: identical code, whose ratio
shows what placement and the machine alone make of the comparison (up to 8% at load 4.5).
`--features-ab` does the same for the dense layers (stem, 1x1 expansions and projections) that
run the direct kernel, whose feature loop is emitted as vectors (cpu_conv_features.py) or left
to LLVM (`FEATURE_VECTORS` off); `--switch-ab MODULE:NAME[,...]` with either compares against
the kernels compiled with those boolean switches False instead of the scalar loop (the columns'
"scalar" is then the switches off); `--call-time` times whole calls (CPU time) instead of the
kernels alone (the per-step profile, whose own timers move single figures by up to 30% on a
loaded machine).
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

# name: (kind, input spatial size, input features, output features, stride)
LAYERS = {
    "dw s1 80x80x32": ("dw", 80, 32, 32, 1), "dw s2 80x80x96": ("dw", 80, 96, 96, 2),
    "dw s1 40x40x144": ("dw", 40, 144, 144, 1), "dw s2 40x40x144": ("dw", 40, 144, 144, 2),
    "dw s1 20x20x192": ("dw", 20, 192, 192, 1), "dw s2 20x20x192": ("dw", 20, 192, 192, 2),
    "dw s1 10x10x384": ("dw", 10, 384, 384, 1), "dw s1 10x10x576": ("dw", 10, 576, 576, 1),
    "dw s2 10x10x576": ("dw", 10, 576, 576, 2), "dw s1 5x5x960": ("dw", 5, 960, 960, 1),
    "proj 80x80 32->16": ("proj", 80, 32, 16, 1), "proj 40x40 144->24": ("proj", 40, 144, 24, 1),
    "proj 20x20 192->32": ("proj", 20, 192, 32, 1), "proj 10x10 576->96": ("proj", 10, 576, 96, 1),
    "exp 80x80 16->96": ("expand", 80, 16, 96, 1), "exp 40x40 24->144": ("expand", 40, 24, 144, 1),
    "exp 10x10 96->576": ("expand", 10, 96, 576, 1), "exp 5x5 160->960": ("expand", 5, 160, 960, 1),
    "stem 160 3->32": ("stem", 160, 3, 32, 2),
}
BATCH = 8


def layer(kind: str, size: int, cin: int, cout: int, stride: int):
    """(JAX function, its arguments) of one layer class (module docstring)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, size, size, cin), np.float32)
    bn = [rng.uniform(0.5, 1.5, cout).astype(np.float32) for _ in range(4)]  # gamma, beta, mean, var
    window = 1 if kind in ("proj", "expand") else 3
    w = (rng.standard_normal((window, window, 1 if kind == "dw" else cin, cout)) * 0.3).astype(np.float32)
    groups = cin if kind == "dw" else 1

    def fn(x, w, gamma, beta, mean, var):
        if stride == 2:  # keras's ZeroPadding2D before a stride-2 convolution
            x = jnp.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0)))
        pad = "SAME" if window == 3 and stride == 1 else "VALID"
        y = jax.lax.conv_general_dilated(x, w, (stride, stride), pad, dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                         feature_group_count=groups)
        y = (y - mean) * (gamma * jax.lax.rsqrt(var + 1e-3)) + beta
        return y if kind == "proj" else jnp.clip(y, 0, 6)

    return fn, [x, w, *bn]


def kernel_seconds(exe, args: list, runs: int) -> float:
    """Seconds per call of hlofuse program `exe`'s kernels alone (native per-step profile)."""
    from hlofuse.runtime.io import check_arguments

    steps, seconds, calls, _ = exe.program.profile(check_arguments(exe.program.module, args), runs)
    return sum(float(seconds[ns.id]) for ns in steps if ns.kind == "kernel") / runs


def run_layer(name: str, rounds: int, threads: int) -> dict:
    """Compile, check and time one layer on both sides; a row of the table."""
    import jax
    import numpy as np

    import hlofuse
    from iree_reference import IreeExecutable

    fn, args = layer(*LAYERS[name])
    lowered = jax.jit(fn).lower(*args)
    exe = hlofuse.compile(hlofuse.parse_hlo(lowered.as_text(dialect="hlo")), target="cpu")
    iree = IreeExecutable(lowered.as_text(), threads=threads)
    buffers = iree.place(args)
    want = np.asarray(jax.jit(fn)(*args))
    ours, theirs = np.asarray(exe(*args)[0]), IreeExecutable.to_numpy(iree(buffers))[0]
    ok = all(np.allclose(got, want, rtol=1e-4, atol=1e-4) for got in (ours, theirs))
    clock = time.process_time if threads == 1 else time.perf_counter
    sides = {"hlofuse": lambda: exe(*args), "iree": lambda: iree(buffers)}
    times: dict[str, list[float]] = {k: [] for k in sides}
    kernels = []
    for r in range(rounds):
        for k in (("hlofuse", "iree") if r % 2 == 0 else ("iree", "hlofuse")):
            start = clock()
            for _ in range(3):
                sides[k]()
            times[k].append((clock() - start) / 3)
        kernels.append(kernel_seconds(exe, args, 3))
    out = want.size * (9 if LAYERS[name][0] == "dw" else args[1].size // args[1].shape[3])
    row = {"layer": name, "match": ok, "gflop": 2 * out / 1e9}
    row.update({k: statistics.median(v) for k, v in times.items()})
    row["kernels"] = statistics.median(kernels)
    return row


def _llvm_ms(exe) -> float:
    """LLVM CPU milliseconds (least of 3) of program `exe`'s conv kernel, compiled alone."""
    from hlofuse.codegen.cpu import distinct_kernels, emit_kernel_module
    from hlofuse.codegen.llvm_pool import compile_timed
    from hlofuse.emitters.cpu.target import CpuTarget

    target = CpuTarget()
    (o,) = [o for o in distinct_kernels(exe.program._planner.kernels, target) if o.kernels[0].custom == "conv"]
    text = str(emit_kernel_module(o.kernels[0], target, o.symbol))
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        compile_timed(text, o.speed_level)
        best = min(best, time.process_time() - start)
    return 1e3 * best


class _Scalar:
    """Within it, the kernels of `kind` ("dw": depthwise channel vectors, cpu_conv_vector.py;
    "dense": feature vectors, cpu_conv_features.py) are compiled with the scalar loop LLVM
    vectorises."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __enter__(self) -> None:
        from hlofuse.codegen.kernels import cpu_conv, cpu_conv_features

        if self.kind == "dw":
            self.saved = cpu_conv.channel_lanes
            cpu_conv.channel_lanes = lambda geo, target: None
        else:
            self.saved = cpu_conv_features.FEATURE_VECTORS
            cpu_conv_features.FEATURE_VECTORS = False

    def __exit__(self, *exc) -> None:
        from hlofuse.codegen.kernels import cpu_conv, cpu_conv_features

        if self.kind == "dw":
            cpu_conv.channel_lanes = self.saved
        else:
            cpu_conv_features.FEATURE_VECTORS = self.saved


class _SwitchOff:
    """Within it, the module attributes of `spec` ("module:NAME,...", boolean switches) are False:
    the kernels compiled inside are the "before" side of `--switch-ab`."""

    def __init__(self, spec: str) -> None:
        import importlib

        self.switches = [(importlib.import_module(m), name) for m, name in (s.split(":") for s in spec.split(","))]

    def __enter__(self) -> None:
        self.saved = [getattr(m, name) for m, name in self.switches]
        for m, name in self.switches:
            setattr(m, name, False)

    def __exit__(self, *exc) -> None:
        for (m, name), value in zip(self.switches, self.saved):
            setattr(m, name, value)


def _call_seconds(exe, args: list, runs: int) -> float:
    """CPU seconds per whole call of `exe` (one thread: the process's CPU time)."""
    start = time.process_time()
    for _ in range(runs):
        exe(*args)
    return (time.process_time() - start) / runs


def vector_ab(names: list[str], rounds: int, kind: str = "dw", call_time: bool = False,
              switch: str | None = None) -> None:
    """The `--vector-ab` table (module docstring) for layers `names`: depthwise (`kind` "dw") or
    dense ones (`kind` "dense", `--features-ab`); with `switch` ("module:NAME", `--switch-ab`),
    the "scalar" side is the kernels compiled with that switch False instead."""
    import jax
    import numpy as np

    import hlofuse

    print(f"load average before: {os.getloadavg()}")
    print(f"{'layer':22s} {'bits':5s} {'LLVM ms vec':>11s} {'scalar':>7s} {'us vec':>13s} {'scalar':>7s} "
          f"{'vec/scalar least':>16s} {'median':>6s} {'vec/control least':>17s} {'median':>6s}")
    timer = _call_seconds if call_time else kernel_seconds
    for name in names:
        fn, args = layer(*LAYERS[name])
        text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
        exes = {}
        for side in ("vec", "scalar", "control"):
            if side == "scalar":
                with (_SwitchOff(switch) if switch else _Scalar(kind)):
                    exes[side] = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)
            else:
                exes[side] = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)
        if "conv" not in [k.custom for k in exes["vec"].program._planner.kernels]:
            print(f"{name:22s} not a direct kernel (the GEMM kernel runs it)")
            continue
        outs = {k: np.asarray(e(*args)[0]) for k, e in exes.items()}
        same = outs["vec"].tobytes() == outs["scalar"].tobytes() == outs["control"].tobytes()
        llvm = {"vec": _llvm_ms(exes["vec"])}
        with (_SwitchOff(switch) if switch else _Scalar(kind)):
            llvm["scalar"] = _llvm_ms(exes["scalar"])
        times: dict[str, list[float]] = {k: [] for k in exes}
        for r in range(rounds):
            for k in (("vec", "scalar", "control") if r % 2 == 0 else ("control", "scalar", "vec")):
                times[k].append(timer(exes[k], args, 5))
        least = {k: min(v) for k, v in times.items()}
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{name:22s} {str(same):5s} {llvm['vec']:11.1f} {llvm['scalar']:7.1f} {med['vec'] * 1e6:13.1f} "
              f"{med['scalar'] * 1e6:7.1f} {least['vec'] / least['scalar']:16.3f} {med['vec'] / med['scalar']:6.3f} "
              f"{least['vec'] / least['control']:17.3f} {med['vec'] / med['control']:6.3f}",
              flush=True)
    print(f"load average after: {os.getloadavg()}")


def main() -> None:
    from iree_reference import iree_status

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="", help="comma-separated names (default: all)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vector-ab", action="store_true", help="depthwise kernels: vector channel loop against scalar")
    parser.add_argument("--features-ab", action="store_true", help="dense direct kernels: feature vectors against scalar")
    parser.add_argument("--call-time", action="store_true", help="with --*-ab: whole calls' CPU time, not the kernels'")
    parser.add_argument("--switch-ab", default="", metavar="MODULE:NAME",
                        help="with --*-ab: the other side is the kernels compiled with these switches False")
    a = parser.parse_args()
    if a.vector_ab or a.features_ab:
        dense = {"stem", "proj", "expand"}
        names = [n for n in (a.layers.split(",") if a.layers else LAYERS)
                 if (LAYERS[n][0] in dense) == bool(a.features_ab)]
        vector_ab(names, a.rounds, "dense" if a.features_ab else "dw", a.call_time, a.switch_ab or None)
        return
    note = iree_status()
    if note is not None:
        print(note)
        return
    if os.environ.get("HLOFUSE_CPU_THREADS") != str(a.threads):
        print(f"note: HLOFUSE_CPU_THREADS is {os.environ.get('HLOFUSE_CPU_THREADS')!r}, IREE runs {a.threads} thread(s)")
    print(f"load average before: {os.getloadavg()}  ({'CPU' if a.threads == 1 else 'wall'} time, {a.threads} thread(s))")
    print(f"{'layer':22s} {'match':5s} {'hlofuse us':>10s} {'kernels us':>10s} {'IREE us':>9s} {'hf/IREE':>7s} "
          f"{'kern/IREE':>9s} {'hf GF/s':>8s} {'IREE GF/s':>9s}")
    for name in (a.layers.split(",") if a.layers else LAYERS):
        r = run_layer(name, a.rounds, a.threads)
        print(f"{name:22s} {str(r['match']):5s} {r['hlofuse'] * 1e6:10.1f} {r['kernels'] * 1e6:10.1f} "
              f"{r['iree'] * 1e6:9.1f} {r['hlofuse'] / r['iree']:7.2f} {r['kernels'] / r['iree']:9.2f} "
              f"{r['gflop'] / r['hlofuse']:8.1f} {r['gflop'] / r['iree']:9.1f}", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
