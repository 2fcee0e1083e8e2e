"""Convolutions on the CPU: the direct kernel (codegen/kernels/cpu_conv.py) against the
tiled im2col + GEMM kernel (cpu_conv_gemm.py) and a oneDNN primitive (cpu_conv_onednn.py),
per shape class: the measurements behind the rules `prefers_gemm` and `prefers_onednn`
(docs/convolutions.md). The oneDNN column (and oneDNN's implementation name) appears where
libdnnl is loaded and oneDNN can run the convolution.

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
    # (..., feature groups): depthwise and grouped
    "dw3x3_112x112x96": (112, 96, 96, 3, 1, 1, 96),
    "dw3x3_14x14x960": (14, 960, 960, 3, 1, 1, 960),
    "dw3x3s2_56x56x144": (56, 144, 144, 3, 2, 1, 144),
    "g4_3x3_28x28x128": (28, 128, 128, 3, 1, 1, 4),
    "1x1_1x1x8": (1, 8, 8, 1, 1, 0),
    "3x3_7x7x256": (7, 256, 256, 3, 1, 1),
    "1x1_7x7x2048-512": (7, 2048, 512, 1, 1, 0),
}


def module_text(batch: int, size: int, cin: int, cout: int, k: int, stride: int, pad: int, groups: int = 1) -> str:
    out = (size + 2 * pad - k) // stride + 1
    return (f"HloModule conv\nENTRY e {{\n  x = f32[{batch},{size},{size},{cin}] parameter(0)\n"
            f"  w = f32[{k},{k},{cin // groups},{cout}] parameter(1)\n"
            f"  ROOT c = f32[{batch},{out},{out},{cout}] convolution(x, w), window={{size={k}x{k} "
            f"stride={stride}x{stride} pad={pad}_{pad}x{pad}_{pad}}}, dim_labels=b01f_01io->b01f, "
            f"feature_group_count={groups}\n}}\n"), out


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


def _wrapped(conv):
    """`conv` as the one-instruction computation the kernel planner sees."""
    from hlofuse.codegen.schedule import wrap_instruction

    return wrap_instruction(conv)


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

    from hlofuse.codegen.kernels import cpu_conv_onednn

    rule, dnnl_rule = cpu_conv_gemm.prefers_gemm, cpu_conv_gemm.prefers_onednn
    if args.tile:
        cpu_conv_gemm.MIN_TILE_ROWS = cpu_conv_gemm.MAX_TILE_ROWS = args.tile
        cpu_conv_gemm.SCRATCH_BYTES = 256 << 20
    print(f"load {os.getloadavg()}, {args.threads} thread(s), {'CPU' if args.cpu_time else 'wall'} time", flush=True)
    print(f"{'case':40s} {'batch':>5s} {'direct ms':>10s} {'gemm ms':>9s} {'dnnl ms':>9s} {'direct GF/s':>11s} "
          f"{'gemm GF/s':>9s} {'dnnl GF/s':>9s} {'gemm/dir':>8s} {'dnnl/old':>8s} rule  oneDNN impl")
    cases = []
    if args.from_hlo:
        cases = [(label, 0, text) for label, text in model_convolutions(args.from_hlo)]
    else:
        for name in args.shapes.split(","):
            cases.extend((name, int(b), module_text(int(b), *SHAPES[name])[0]) for b in args.batches.split(","))
    for name, batch, text in cases:
        rng = np.random.default_rng(0)
        x, w = (rng.standard_normal(tuple(p.shape.dims)).astype(np.float32)
                for p in hlofuse.parse_hlo(text).entry.parameters)
        root = hlofuse.parse_hlo(text).entry.root
        dnnl_ok = dnnl_rule(_wrapped(root))
        mapped = cpu_conv_onednn.onednn_convolution(_wrapped(root))
        impl = cpu_conv_onednn.dnnl.implementation(mapped.desc) if mapped is not None else None
        exes = {}
        for path in ("direct", "gemm", "onednn"):
            if path == "onednn" and impl is None:
                continue
            cpu_conv_gemm.prefers_gemm = (lambda conv: path == "gemm")
            cpu_conv_gemm.prefers_onednn = (lambda comp: path == "onednn")
            exes[path] = hlofuse.compile(hlofuse.parse_hlo(text), cache=False)
        cpu_conv_gemm.prefers_gemm, cpu_conv_gemm.prefers_onednn = rule, dnnl_rule
        old = "gemm" if rule(root) and cpu_conv_gemm.gemm_layout(root) is not None else "direct"
        chosen = "onednn" if dnnl_ok else old
        flops = conv_flops(root)
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
        d = med.get("onednn", float("nan"))
        print(f"{name:40s} {batch:5d} {med['direct'] * 1e3:10.3f} {med['gemm'] * 1e3:9.3f} {d * 1e3:9.3f} "
              f"{flops / med['direct'] / 1e9:11.1f} {flops / med['gemm'] / 1e9:9.1f} {flops / d / 1e9:9.1f} "
              f"{med['gemm'] / med['direct']:8.2f} {d / med[old]:8.2f} {chosen:6s} {impl or '-'}", flush=True)
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
