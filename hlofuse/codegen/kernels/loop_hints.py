"""Loop hints for LLVM (`!llvm.loop` metadata) on loops built with `emitters.ir_helpers.for_range`.

A reduction kernel's loop over its outputs (or a row kernel's over its rows) around a short
constant inner loop is a trap for LLVM: it fully unrolls the inner loop first, and the outer
loop, now innermost, is what its loop vectorizer vectorizes: each vector lane takes another
output, whose elements lie a row apart, so every vector of input is gathered by an interleaved
group of strided loads and shuffles (f32 row sums of 16 elements: 0.74 ns an element on one
thread, 0.05 with the row itself vectorised; layer norm over 32 features: 2.1 ns against 0.2).
`forbid_vectorization` tells the vectorizer to leave such an outer loop alone; the unrolled row
is then vectorised by the SLP vectorizer or stays a vectorised inner loop.

The opposite case: a loop whose element is a long chain of dependent operations (several
transcendental functions, each a Horner chain of fused multiply-adds and a divide) is bound by
that chain's latency, not by the core's throughput. LLVM's vectorizer interleaves (unrolls the
vector loop, so independent vectors are in flight together) only small bodies; for large ones
its cost model picks one vector per iteration, and the core waits on each FMA's latency.
`interleave` asks for `llvm.loop.interleave.count` copies (cpu_loop.py decides how many).

A vectorised loop whose trip count LLVM does not know (a flat loop kernel's range of elements,
which the driver passes) becomes three copies of its body: the vector loop, a narrower vector
epilogue loop and a scalar remainder loop. `fold_tail` asks for one vector loop whose last
partial vector is masked instead, for loops short enough that masking costs nothing measurable.
"""
from __future__ import annotations

from llvmlite import ir

from ...emitters.ir_helpers import loop_id

# Length of an inner loop from which the loops around it are kept rolled (`for_range`'s
# `unroll=False`): the direct convolution's window and input-feature loops around its
# output-feature loop (cpu_conv `_ConvEmitter.unroll_taps`), a column reduction's reduced loops
# around its block of columns (cpu_reduction.rolls_reduced_loops), a GEMM epilogue's row loop
# around its column panel (cpu_gemm._emit_epilogue). Eight 512-bit vectors of f32: the outer
# loops' branches and address arithmetic are well under 1% of the inner loop's work.
ROLLED_AROUND = 128
# Whether a long vectorised loop that each element passes once, with no loop inside it, stays
# rolled (`stays_rolled`; a switch for A/B measurements: benchmarks/loop_hints_ab.py).
ROLL_LONG_LOOPS = True


def stays_rolled(units: int) -> bool:
    """Whether an innermost loop of a constant `units` iterations that LLVM vectorizes is kept
    rolled (`for_range`'s `unroll=False`): from ROLLED_AROUND units, where LLVM interleaved 4
    vectors and then fully unrolled the vector loop (a 512-column GEMM epilogue: 32 copies of
    its body, 331 instructions after O3 against 50 rolled, 17 -> 12 ms of LLVM) for loops
    that load, compute and store each element once. `llvm.loop.unroll.disable` alone also makes
    LLVM's vectorizer interleave one vector an iteration: the callers ask for ROLLED_INTERLEAVE
    (docs/compile_time.md, "Transformer kernels: long loops kept rolled")."""
    return ROLL_LONG_LOOPS and units >= ROLLED_AROUND


# Whether a loop kernel's loop over transposed rows stays rolled (`rolls_transposed_rows`; a
# switch for A/B measurements: benchmarks/loop_hints_ab.py).
ROLL_TRANSPOSED_ROWS = True


def rolls_transposed_rows(inst) -> bool:
    """Whether a rows-mode loop kernel (cpu_loop.emit_loop) writing HLO instruction `inst` keeps
    its loop over rows rolled (`for_range`'s `unroll=False`): `inst` is a transpose (under
    converts) that moves its last dimension, so each output row is a strided copy (the GEMM
    packing kernels, cpu_gemm.plan_gemm). LLVM unrolls such a row fully (64 columns read 256
    elements apart in GPT-2's and BERT's) and then runtime-unrolls the loop over rows around
    the unrolled copy, below ROLLED_AROUND: kept rolled, 12.5 -> 7.4 ms of LLVM per packing
    kernel (docs/compile_time.md, "Transformer kernels: long loops kept rolled")."""
    while inst.opcode == "convert":
        inst = inst.operands[0]
    if not ROLL_TRANSPOSED_ROWS or inst.opcode != "transpose" or not inst.shape.is_array:
        return False
    return tuple(inst.attrs["dimensions"])[-1] != inst.shape.rank - 1


# Vectors an iteration of a loop kept rolled by `stays_rolled` and given no count of its own
# (`interleave`): about what LLVM chose for them before unrolling. One (what
# `llvm.loop.unroll.disable` alone gives) ran softmax's cold-path maximum over 256 (taken on
# every row of random inputs) 1.27x slower, and BERT's GEMM kernels 1.005-1.017x (one thread,
# medians of 7 interleaved profiles, load 1-3).
ROLLED_INTERLEAVE = 4


def _add_hint(induction: ir.PhiInstr, hint: tuple[str, ir.Constant]) -> None:
    """Give the loop of `induction` (the value a finished `for_range` yielded) `hint` besides
    the hints it has already (`for_range`'s `llvm.loop.unroll.disable`): a loop has one loop ID."""
    latch = induction.incomings[-1][1]  # the back edge comes last (for_range adds it at the end)
    branch = latch.terminator
    new = loop_id(induction.parent.parent.module, hint)
    old = branch.metadata.get("llvm.loop")
    if old is not None:
        new.operands = (new, *old.operands[1:], *new.operands[1:])
    branch.set_metadata("llvm.loop", new)


def forbid_vectorization(induction: ir.PhiInstr) -> None:
    """Mark the loop of `induction` (the value a finished `for_range` yielded) as not to be
    vectorised or interleaved by LLVM (`llvm.loop.vectorize.enable` false)."""
    _add_hint(induction, ("llvm.loop.vectorize.enable", ir.Constant(ir.IntType(1), 0)))


def interleave(induction: ir.PhiInstr, count: int) -> None:
    """Ask LLVM to interleave the vectorised loop of `induction` (the value a finished
    `for_range` yielded) `count` times (`llvm.loop.interleave.count`): `count` independent
    vectors per iteration, whose dependency chains the core overlaps."""
    _add_hint(induction, ("llvm.loop.interleave.count", ir.Constant(ir.IntType(32), count)))


# Loops over at most this many units have their tail folded (`fold_tail`). Measured (one thread,
# CPU time, medians of 15 interleaved rounds, load 6.3-6.6, znver5, flat f32[n] kernels, folded
# over unfolded): n = 1024 negate 1.01, GELU-tanh 1.03, a chain of five math functions 1.00;
# n = 4096 1.04, 1.11, 1.03; n = 4M 2.4, 3.6, 1.7 (per-lane i64 compares and masked loads and
# stores in every iteration of a loop interleaved 8 times). Compile CPU of those kernels
# 12-22% less; benchmarks/compile_time.py's chain of 1,000 instructions (f32[8,8], three
# kernels, exp inlined 250 times in each of two) 1.20 -> 0.76 s (docs/compile_time.md).
FOLD_TAIL_UNITS = 1024
# Whether `fold_tail` marks loops (a switch for A/B measurements: benchmarks/loop_hints_ab.py).
FOLD_TAILS = True


def fold_tail(induction: ir.PhiInstr, units: int) -> None:
    """Ask LLVM to vectorize the loop of `induction` (the value a finished `for_range` yielded),
    which runs at most `units` iterations, with its last partial vector masked
    (`llvm.loop.vectorize.predicate.enable`) instead of after it, when `units` is at most
    FOLD_TAIL_UNITS: one vector loop, where LLVM otherwise emits the vector loop, a narrower
    vector epilogue loop and a scalar remainder loop, each a copy of the body that it optimizes
    and generates code for. Longer loops keep the three: their masked form ran up to 3.6x
    slower (FOLD_TAIL_UNITS)."""
    if FOLD_TAILS and units <= FOLD_TAIL_UNITS:
        _add_hint(induction, ("llvm.loop.vectorize.predicate.enable", ir.Constant(ir.IntType(1), 1)))


def unroll_count(induction: ir.PhiInstr, count: int) -> None:
    """Ask LLVM to unroll the loop of `induction` (the value a finished `for_range` yielded,
    not marked `unroll=False`) `count` times (`llvm.loop.unroll.count`), a runtime trip count
    included."""
    _add_hint(induction, ("llvm.loop.unroll.count", ir.Constant(ir.IntType(32), count)))
