"""GPU loop kernels: each thread of the grid writes `unroll` consecutive elements of every output.

Thread t handles linear indices [t * unroll, (t + 1) * unroll). When the element count is a
multiple of `unroll` a thread's elements are all in bounds or all out, so one bounds check
guards straight-line code over consecutive addresses; with 16-byte aligned kernel arguments
LLVM's load/store vectorizer turns the accesses into `ld.global.v4`/`st.global.v4` (XLA's
unrolled loop emitter does the same). Otherwise every element is checked.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...emitters.elemental import ElementalEmitter
from ...emitters.ir_helpers import Index, const_i64, store_element
from ...hlo.ir import HloComputation
from .args import output_leaves
from .gpu_skeleton import LaunchDims, launch_for

MAX_UNROLL = 4


@dataclass(frozen=True)
class LoopPlan:
    """How a loop kernel covers `dims`: elements per thread and the launch."""

    dims: tuple[int, ...]
    unroll: int
    launch: LaunchDims

    @property
    def elements(self) -> int:
        """Elements of the output (the product of its dimensions)."""
        return math.prod(self.dims)


def plan_loop(dims, max_element_bytes: int = 4) -> LoopPlan:
    """Unroll by 4 when the element count allows it and elements are at most 4 bytes (so a
    thread's chunk is at most 16 bytes, one vector access)."""
    dims = tuple(int(d) for d in dims)
    n = math.prod(dims)
    unroll = MAX_UNROLL if n % MAX_UNROLL == 0 and n >= 4 * MAX_UNROLL and max_element_bytes <= 4 else 1
    return LoopPlan(dims, unroll, launch_for(-(-n // unroll)))


def emit_loop_kernel(skel, comp: HloComputation, outputs: list[int], plan: LoopPlan) -> None:
    """Fill `skel` with the per-thread code writing output leaves `outputs` (same dims)."""
    b = skel.builder
    leaves = output_leaves(comp)
    chosen = [leaves[k] for k in outputs]
    em = ElementalEmitter(b, skel.target, skel.param_gen)
    gens = [em.gen(leaf.inst) for leaf in chosen]
    ptrs = [skel.output_ptr(k) for k in outputs]
    n = plan.elements
    first = b.mul(skel.global_thread_idx, const_i64(plan.unroll), flags=["nuw", "nsw"])

    def elements(lins) -> None:
        # All loads first (parameters read at the output index), then all values, then all
        # stores: math between the accesses (libdevice's inline asm) would otherwise keep
        # LLVM's load/store vectorizer from merging them into vector accesses.
        indices = [Index(b, plan.dims, linear=lin) for lin in lins]
        for p in comp.parameters:
            if p.shape.is_array and tuple(p.shape.dims) == plan.dims:
                for index in indices:
                    em.gen(p)(index)
        values = [[leaf.select(g(index)) for g, leaf in zip(gens, chosen)] for index in indices]
        for lin, vals in zip(lins, values):
            for v, leaf, ptr in zip(vals, chosen, ptrs):
                store_element(b, v, b.gep(ptr, [lin], inbounds=True), leaf.shape.dtype)

    if n % plan.unroll == 0:
        with b.if_then(b.icmp_signed("<", first, const_i64(n)), likely=True):
            elements([first if k == 0 else b.add(first, const_i64(k), flags=["nuw", "nsw"])
                      for k in range(plan.unroll)])
    else:
        for k in range(plan.unroll):
            lin = first if k == 0 else b.add(first, const_i64(k), flags=["nuw", "nsw"])
            with b.if_then(b.icmp_signed("<", lin, const_i64(n))):
                elements([lin])
    skel.finish()
