"""Float max/min row reductions in 3 vector instructions an element, results bit for bit the same.

A reduce whose reducer is `maximum` or `minimum` of its two parameters (a row max, causal
attention's masked max, x - max(x)) folds with `llvm.maximum` (emitters/elemental_math: NaN
propagates, -0 < +0), which LLVM vectorises but lowers on x86 to six instructions a vector
(the sign of the accumulator to a mask, a blend, a masked move, an unordered compare, `vmaxps`
and a masked move).

`fold_fast` folds instead with `llvm.maxnum` carrying `nnan nsz` (one `vmaxps`) and, beside it,
whether any input was a NaN (the largest of the inputs' bits without their sign: an integer
`and` and max). That value is the exact result wherever it is decisive: no NaN was folded
(with one, the nnan fold's value is poison) and it is not a zero (nsz leaves the sign of a zero
extremum undecided). `exact_needed` says when it is not, and the kernel then folds the row
again with the reducer itself (`llvm.maximum`), the value it computed before: rare (a row with
a NaN, or whose extremum is a zero), and each row's result is the same bits as before, NaN
payloads included (tests/codegen/test_fast_extremum.py).

Used by row reductions (cpu_reduction.py) and row kernels (cpu_row.py) whose loops compute no
expensive elementwise op (reduction_groups.computes_expensive_elements; cpu_row.fast_folds
says why not softmax). One thread, CPU time, A/B interleaved in one process against
FAST_FOLDS = False, load 9-11 (ms): row max of f32[4096,4096] 1.91 vs 2.11, row min 1.97 vs
2.11, causal masked row max of f32[24,512,512] 0.57-0.79 vs 0.99-1.04, row max of f32[128,2048]
(in cache) 0.021-0.059 vs 0.036-0.080, x - max(x) over f32[3072,2048] (a row kernel, bound by
its stores) 1.19 vs 1.18.
"""
from __future__ import annotations

from llvmlite import ir

from ...emitters.ir_helpers import freeze
from ...hlo.reducers import binary_reducer_opcode
from .reduction_groups import ReduceHero

# The fast fold's flags: no NaN operands (tracked beside it) and no sign of zero (checked after).
FAST_FLAGS = ("nnan", "nsz")
# Accumulator registers a fast fold is counted as per interleaved vector (reduction_groups.
# row_accumulators halves the interleave to fit 16): its value and its NaN tracker, doubled for
# the tracker's masked temporaries and what computes the input. Counted as 2, a causal masked
# row max (f32[24,512,512], its mask from two iotas) got 8 vectors and spilled: 1.48 ms against
# 0.99 for llvm.maximum; as 4, 0.57 (row max of f32[4096,4096] 1.85 vs 2.02 ms, of
# f32[128,2048] 0.021 vs 0.036; one thread, CPU time, interleaved, load 9.8-10.9).
FAST_ACCUMULATORS = 4
# False: every max/min reduce folds with its reducer (the code before this module; for A/B runs).
FAST_FOLDS = True


def fast_extremum(h: ReduceHero) -> str | None:
    """"max" or "min" where reduce `h` reduces one f32 or f64 value with exactly `maximum` or
    `minimum` of its reducer's two parameters, else None (folded with the reducer)."""
    if not FAST_FOLDS or h.n != 1 or not h.types[0].is_float or h.types[0].bits not in (32, 64):
        return None
    return {"maximum": "max", "minimum": "min"}.get(binary_reducer_opcode(h.comp))


def _magnitude_type(value: ir.Value) -> tuple[ir.IntType, int, int]:
    """The integer type of a float's bits, the mask of all but its sign, and the bits of +inf."""
    if isinstance(value.type, ir.DoubleType):
        return ir.IntType(64), (1 << 63) - 1, 0x7FF0000000000000
    return ir.IntType(32), (1 << 31) - 1, 0x7F800000


def magnitude_bits(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """The bits of float `value` without its sign: above +inf's bits exactly for a NaN."""
    ty, mask, _ = _magnitude_type(value)
    return b.and_(b.bitcast(value, ty), ir.Constant(ty, mask))


def fold_fast(b: ir.IRBuilder, kind: str, acc: ir.Value, largest: ir.Value, value: ir.Value) -> tuple[ir.Value, ir.Value]:
    """One element `value` folded into accumulator `acc` (maxnum/minnum, FAST_FLAGS) and into
    `largest`, the unsigned maximum of the folded values' `magnitude_bits` (a NaN was folded
    exactly when it exceeds +inf's bits: an integer `and` and `vpmaxud` beside the `vmaxps`; a
    flag of `fcmp uno` compares lives in mask registers, of which AVX-512 has 7, and with 8
    interleaved accumulators LLVM spilled and rotated them, slower than `llvm.maximum`). Both
    new values. `value` is frozen first, as row_ahead._frozen_fold freezes a max's inputs (a
    masked max stays a plain reduction)."""
    value = freeze(b, value)
    name = "llvm.maxnum" if kind == "max" else "llvm.minnum"
    fn = b.module.declare_intrinsic(name, [value.type], ir.FunctionType(value.type, [value.type, value.type]))
    folded = b.call(fn, [acc, value], fastmath=FAST_FLAGS)
    bits = magnitude_bits(b, value)
    umax = b.module.declare_intrinsic("llvm.umax", [bits.type], ir.FunctionType(bits.type, [bits.type, bits.type]))
    return folded, b.call(umax, [largest, bits])


def exact_needed(b: ir.IRBuilder, acc: ir.Value, largest: ir.Value) -> ir.Value:
    """Whether the fast fold's result `acc` is not decisive: a NaN was folded (`largest`, the
    folded values' largest `magnitude_bits`, is above +inf's), or `acc` is a zero (of either
    sign). With a NaN folded `acc` is poison, so the test is a logical or (`select`: a poison
    operand it does not select does not make it poison), not an `or`; nor is `acc` frozen,
    which InstCombine pushes into the loop's recurrence, dropping the fold's `nnan` (the loop
    then stays scalar)."""
    _, _, inf = _magnitude_type(acc)
    nan_seen = b.icmp_unsigned(">", largest, ir.Constant(largest.type, inf))
    zero = b.fcmp_ordered("==", acc, ir.Constant(acc.type, 0.0))
    return b.select(nan_seen, ir.Constant(ir.IntType(1), 1), zero)
