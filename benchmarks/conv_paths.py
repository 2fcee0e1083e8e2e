"""Dense convolutions on the CPU: the direct kernel (codegen/kernels/cpu_conv.py) against the
tiled im2col + GEMM kernel (cpu_conv_gemm.py), per shape class: the measurements behind the
rule `prefers_gemm` (docs/convolutions.md).

Run:  python benchmarks/conv_paths.py [--rounds N] [--batches 1,8] [--threads 1] [--shapes a,b]
      python benchmarks/conv_paths.py --from-hlo MODEL.hlo   # every distinct convolution of a model

Each case (ResNet-like NHWC/HWIO convolutions, f32) is compiled twice by hlofuse, the rule
forced each way (no compile cache), and timed in interleaved rounds on `--threads` kernel
threads (HLOFUSE_CPU_THREADS, set before hlofuse loads); medians, GFLOP/s counting 2 multiply-add
terms per tap. The load average is printed before and after (the machine may be shared).
`--cpu-time` times the process's CPU seconds instead of wall seconds (GFLOP per CPU-second):
on a shared machine a call descheduled for part of its run counts only the time it ran, so
the two paths compare by their own work (docs/dots.md: wall-clock rates at load ~10 fell to
40% of the CPU-time ones).
"""
from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

# name: (input spatial, input features, output features, window, stride, padding)
SHAPES = {
    "3x3_56x56x64": (56, 64, 64, 3, 1, 1),
    "3x3_28x28x128": (28, 128, 128, 3, 1, 1),
    "3x3_14x14x256": (14, 256, 256, 3, 1, 1),
    "3x3_7x7x512": (7, 512, 512, 3, 1, 1),
    "7x7s2_224x224x3": (224, 3, 64, 7, 2, 3),
    "1x1_56x56x64-256": (56, 64, 256, 1, 1, 0),
    "1x1_14x14x1024-256": (14, 1024, 256, 1, 1, 0),
    "1x1s2_56x56x256-512": (56, 256, 512, 1, 2, 0),
    "3x3_28x28x16": (28, 16, 16, 3, 1, 1),
    "3x3_28x28x8": (28, 8, 8, 3, 1, 1),
    "3x3_28x28x3-32": (28, 3, 32, 3, 1, 1),
    "3x3_14x14x32-4": (14, 32, 4, 3, 1, 1),
}


def module_text(batch: int, size: int, cin: int, cout: int, k: int, stride: int, pad: int) -> str:
    out = (size + 2 * pad - k) // stride + 1
    return (f"HloModule conv\nENTRY e {{\n  x = f32[{batch},{size},{size},{cin}] parameter(0)\n"
            f"  w = f32[{k},{k},{cin},{cout}] parameter(1)\n"
            f"  ROOT c = f32[{batch},{out},{out},{cout}] convolution(x, w), window={{size={k}x{k} "
            f"stride={stride}x{stride} pad={pad}_{pad}x{pad}_{pad}}}, dim_labels=b01f_01io->b01f\n}}\n"), out


def model_convolutions(path: str) -> list[tuple[str, str]]:
    """(label, module text) of each distinct dense-or-not convolution of the module at `path`,
    its operands made parameters (attributes as the model has them, metadata dropped)."""
    import hlofuse

    found: dict[str, str] = {}
    for comp in hlofuse.load(path).computations_post_order():
        for inst in comp.instructions:
            if inst.opcode != "convolution":
                continue
            lhs, rhs = (op.shape for op in inst.operands)
            text = inst.to_text()
            attrs = text[text.index("), ", text.index("convolution(")) + 3:]
            attrs = re.sub(r",? ?metadata=\{[^}]*\}", "", attrs)
            body = (f"HloModule conv\nENTRY e {{\n  x = {lhs} parameter(0)\n  w = {rhs} parameter(1)\n"
                    f"  ROOT c = {inst.shape} convolution(x, w), {attrs}\n}}\n")
            label = f"{lhs}*{rhs}".replace("f32", "").replace("{3,2,1,0}", "")
            found.setdefault(body, label[:40])
    return [(label, body) for body, label in found.items()]


def conv_flops(conv) -> float:
    """2 x output elements x taps x input features per group."""
    from hlofuse.codegen.kernels.cpu_conv import conv_geometry

    geo = conv_geometry(conv)
    return 2.0 * math.prod(conv.shape.dims) * geo.group_inputs * math.prod(d.size for d in geo.window)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--from-hlo", default=None, help="time every convolution of this HLO module instead")
    ap.add_argument("--tile", type=int, default=0, help="force the GEMM kernel's tile rows (exploration)")
    ap.add_argument("--cpu-time", action="store_true", help="time CPU seconds of the process, not wall seconds")
    args = ap.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    os.environ["HLOFUSE_CPU_THREADS"] = args.threads
    import numpy as np

    import hlofuse
    from hlofuse.codegen.kernels import cpu_conv_gemm

    rule = cpu_conv_gemm.prefers_gemm
    if args.tile:
        cpu_conv_gemm.MIN_TILE_ROWS = cpu_conv_gemm.MAX_TILE_ROWS = args.tile
        cpu_conv_gemm.SCRATCH_BYTES = 256 << 20
    print(f"load {os.getloadavg()}, {args.threads} thread(s), {'CPU' if args.cpu_time else 'wall'} time", flush=True)
    print(f"{'case':40s} {'batch':>5s} {'direct ms':>10s} {'gemm ms':>9s} {'direct GF/s':>11s} {'gemm GF/s':>9s} "
          f"{'gemm/direct':>11s} rule")
    cases = []
    if args.from_hlo:
        cases = [(label, 0, text) for label, text in model_convolutions(args.from_hlo)]
    else:
        for name in args.shapes.split(","):
            size, cin, cout, k, stride, pad = SHAPES[name]
            cases.extend((name, int(b), module_text(int(b), size, cin, cout, k, stride, pad)[0])
                         for b in args.batches.split(","))
    for name, batch, text in cases:
        if True:
            rng = np.random.default_rng(0)
            x, w = (rng.standard_normal(tuple(p.shape.dims)).astype(np.float32)
                    for p in hlofuse.parse_hlo(text).entry.parameters)
            exes = {}
            for path in ("direct", "gemm"):
                cpu_conv_gemm.prefers_gemm = (lambda conv: path == "gemm")
                exes[path] = hlofuse.compile(hlofuse.parse_hlo(text), cache=False)
            cpu_conv_gemm.prefers_gemm = rule
            chosen = "gemm" if rule(hlofuse.parse_hlo(text).entry.root) else "direct"
            flops = conv_flops(hlofuse.parse_hlo(text).entry.root)
            reps = max(1, int(0.05 / max(flops / 50e9, 1e-6)))
            times = {p: [] for p in exes}
            for p in exes:
                exes[p](x, w)
            for _ in range(args.rounds):
                for p, exe in exes.items():
                    t0 = clock()
                    for _ in range(reps):
                        exe(x, w)
                    times[p].append((clock() - t0) / reps)
            med = {p: statistics.median(t) for p, t in times.items()}
            print(f"{name:40s} {batch:5d} {med['direct'] * 1e3:10.3f} {med['gemm'] * 1e3:9.3f} "
                  f"{flops / med['direct'] / 1e9:11.1f} {flops / med['gemm'] / 1e9:9.1f} "
                  f"{med['gemm'] / med['direct']:11.2f} {chosen}", flush=True)
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
