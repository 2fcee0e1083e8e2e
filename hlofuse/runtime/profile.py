"""`hlofuse run --profile`: where a CPU program's time goes, step by step.

    text = profile_text(cpu_program, checked_args, runs=10)

The native driver (codegen/driver.py) reads the time-stamp counter around every step when the
program's table has a profile buffer (runtime/native_driver.py `profile`); this module turns
those counters into XLA-profile-like rows: the step's instruction, its kind (the kernel kinds it
launches, the op a callback runs, or while/conditional/call), bytes read and written per call,
time per call, achieved GB/s, GFLOP/s for dots and convolutions, and the share of the run.
Control-flow steps include the steps they run (marked "incl."), so their share is not added to
the total of the others.
"""
from __future__ import annotations

import math

from ..codegen.native_plan import NativeStep, nbytes
from ..hlo.ir import HloInstruction


def step_kind(ns: NativeStep) -> str:
    """What step `ns` runs: kernel kinds, `callback <opcode>`, or the control-flow op."""
    if ns.kind == "kernel":
        kinds = []
        for k in ns.step.kernels:
            kind = k.custom or ("reduction" if k.group is not None else "loop")
            if kind not in kinds:
                kinds.append(kind)
        return "+".join(kinds) if kinds else "kernel"
    if ns.kind == "callback":
        return f"callback {ns.step.inst.opcode}"
    return f"{ns.kind} (incl.)"


def _contraction_flops(inst: HloInstruction) -> int:
    """2 x multiply-adds of a dot or convolution instruction (0 for any other op)."""
    out = math.prod(inst.shape.dims) if not inst.shape.is_tuple else 0
    if inst.opcode == "dot":
        lhs = inst.operands[0].shape.dims
        contracting = inst.attrs.get("lhs_contracting_dims") or ()
        return 2 * out * math.prod(lhs[d] for d in contracting)
    if inst.opcode == "convolution":
        # Each output element sums kernel elements / output features products.
        rhs = inst.operands[1].shape.dims
        out_features = rhs[inst.attrs["dim_labels"].kernel_output_feature]
        return 2 * out * (math.prod(rhs) // max(out_features, 1))
    return 0


def step_flops(ns: NativeStep) -> int:
    """Floating-point operations of the dots and convolutions a step computes per call."""
    inst = ns.step.inst
    if inst.opcode == "fusion":
        return sum(_contraction_flops(i) for i in inst.fused_computation.instructions)
    return _contraction_flops(inst)


def profile_text(program, args: list, runs: int) -> str:
    """The profile table of `runs` calls of CPU program `program` on checked arguments `args`."""
    steps, seconds, calls, wall = program.profile(args, runs)
    rows = []
    for ns in steps:
        n = int(calls[ns.id])
        if n == 0 or ns.kind == "none":
            continue
        moved = sum(nbytes(s) for s in ns.in_shapes) + sum(nbytes(s) for s in ns.out_shapes)
        rows.append((float(seconds[ns.id]), n, ns, moved))
    rows.sort(key=lambda r: -r[0])
    own = sum(t for t, _, ns, _ in rows if ns.kind not in ("while", "conditional", "call"))
    head = (f"{'instruction':32s} {'kind':22s} {'calls':>7s} {'bytes/call':>11s} {'us/call':>10s}"
            f" {'GB/s':>7s} {'GFLOP/s':>8s} {'share':>6s}")
    lines = [f"profile of {runs} runs: {wall / runs * 1e3:.3f} ms per run, "
             f"{own / max(wall, 1e-12) * 100:.0f}% of it in the steps below (the rest: argument and "
             f"result handling)", head, "-" * len(head)]
    for t, n, ns, moved in rows:
        per_call = t / n
        flops = step_flops(ns)
        gbs = moved / per_call / 1e9 if per_call > 0 else 0.0
        gflops = f"{flops / per_call / 1e9:8.1f}" if flops and per_call > 0 else f"{'':8s}"
        lines.append(f"{ns.step.inst.name[:32]:32s} {step_kind(ns)[:22]:22s} {n:7d} {moved:11d} "
                     f"{per_call * 1e6:10.1f} {gbs:7.2f} {gflops} {t / max(wall, 1e-12) * 100:5.1f}%")
    return "\n".join(lines)
