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


def unroll_count(induction: ir.PhiInstr, count: int) -> None:
    """Ask LLVM to unroll the loop of `induction` (the value a finished `for_range` yielded,
    not marked `unroll=False`) `count` times (`llvm.loop.unroll.count`), a runtime trip count
    included."""
    _add_hint(induction, ("llvm.loop.unroll.count", ir.Constant(ir.IntType(32), count)))
