"""Reduction kernels for input fusions (XLA's kInput with reduce heroes).

A group of root reduces that read inputs of the same dimensions and reduce the same
dimensions is emitted in one pass over the input, together with root elementwise outputs
of the input's dimensions (multi-output fusion: each input element is visited once, so
those outputs are written from the same loop).

Two loop orders, chosen so the innermost loop is contiguous in memory:
  * row (the last input dimension is reduced, or every dimension is): a unit of work is
    one output element; its reduced elements are folded into register accumulators,
    innermost loop over the last dimension. The reducer's float adds/multiplies carry
    `reassoc` (XLA reassociates reductions too), so LLVM vectorizes the loop with several
    vector accumulators: results differ from a sequential sum by rounding only.
  * column (the last input dimension is kept): a unit of work is a block of `COLUMN_BLOCK`
    output columns for one value of the other kept dimensions; accumulators live in the
    output row itself, and for each reduced position the block is updated with a
    contiguous, vectorizable loop (no reassociation needed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from ..hlo.ir import HloComputation
from .elemental import ElementalEmitter, Index, const_i64, delinearize, dims_of, load_element, store_element
from .loop_emitter import OutputLeaf, for_range, output_leaves

COLUMN_BLOCK = 512


@dataclass
class ReductionGroup:
    """Output leaves written by one reduction kernel."""

    heroes: list  # reduce instructions
    hero_outputs: list[list[int]]  # per hero, its output leaf positions (one per result)
    extras: list[int]  # elementwise output leaves with the input's dimensions
    in_dims: tuple[int, ...]
    rdims: tuple[int, ...]

    @property
    def is_row(self) -> bool:
        return not self.in_dims or (len(self.in_dims) - 1) in self.rdims

    @property
    def kept(self) -> list[int]:
        return [d for d in range(len(self.in_dims)) if d not in self.rdims]

    @property
    def out_dims(self) -> tuple[int, ...]:
        return tuple(self.in_dims[d] for d in self.kept)

    @property
    def units(self) -> int:
        if self.is_row:
            return math.prod(self.out_dims)
        return math.prod(self.out_dims[:-1]) * self.blocks

    @property
    def blocks(self) -> int:
        return max(1, -(-self.in_dims[-1] // COLUMN_BLOCK)) if self.in_dims else 1

    @property
    def unit_elements(self) -> int:
        if self.is_row:
            return math.prod(self.in_dims[d] for d in self.rdims)
        return math.prod(self.in_dims[d] for d in self.rdims) * min(COLUMN_BLOCK, self.in_dims[-1])

    @property
    def outputs(self) -> list[int]:
        return [k for ks in self.hero_outputs for k in ks] + self.extras


def reduction_groups(comp: HloComputation) -> tuple[list[ReductionGroup], list[int]]:
    """Split the output leaves of `comp` into reduction groups and the rest (loop outputs)."""
    leaves = output_leaves(comp)
    groups: list[ReductionGroup] = []
    taken: set[int] = set()
    for k, leaf in enumerate(leaves):
        inst = leaf.inst
        if inst.opcode != "reduce" or k in taken:
            continue
        in_dims = dims_of(inst.operands[0])
        rdims = tuple(sorted(inst.attrs["dimensions"]))
        group = next((g for g in groups if g.in_dims == in_dims and g.rdims == rdims), None)
        if group is None:
            group = ReductionGroup([], [], [], in_dims, rdims)
            groups.append(group)
        positions = [j for j, other in enumerate(leaves) if other.inst is inst]
        group.heroes.append(inst)
        group.hero_outputs.append(positions)
        taken.update(positions)
    rest = []
    for k, leaf in enumerate(leaves):
        if k in taken:
            continue
        home = next((g for g in groups if tuple(leaf.shape.dims) == g.in_dims and g.in_dims), None)
        if home is not None and leaf.inst.opcode != "reduce":
            home.extras.append(k)
        else:
            rest.append(k)
    return groups, rest


class _Hero:
    """Generators and accumulator plumbing of one reduce."""

    def __init__(self, em: ElementalEmitter, inst) -> None:
        n = len(inst.operands) // 2
        self.inst = inst
        self.n = n
        self.inputs = [em.gen(op) for op in inst.operands[:n]]
        self.inits = [em.gen(op) for op in inst.operands[n:]]
        self.comp = inst.attrs["to_apply"]
        self.types = [op.shape.dtype for op in inst.operands[n:]]

    def init_values(self, b):
        return [g(Index(b, (), multi=())) for g in self.inits]

    def fold(self, em: ElementalEmitter, accs: list, index: Index) -> list:
        values = [g(index) for g in self.inputs]
        res = em.call_scalar(self.comp, list(accs) + values, reduction=True)
        return list(res) if isinstance(res, tuple) else [res]


def emit_reduction_kernel(skel, comp: HloComputation, group: ReductionGroup) -> None:
    """Fill kernel skeleton `skel` with the loops of reduction group `group`."""
    b = skel.builder
    em = ElementalEmitter(b, skel.target, skel.param_gen)
    heroes = [_Hero(em, h) for h in group.heroes]
    leaves = output_leaves(comp)
    hero_ptrs = [[skel.output_ptr(k) for k in ks] for ks in group.hero_outputs]
    extra_ptrs = [skel.output_ptr(k) for k in group.extras]
    extra_gens = [em.gen(leaves[k].inst) for k in group.extras]
    if group.is_row:
        _emit_row(skel, em, group, heroes, hero_ptrs, extra_ptrs, extra_gens, [leaves[k] for k in group.extras])
    else:
        _emit_column(skel, em, group, heroes, hero_ptrs, extra_ptrs, extra_gens, [leaves[k] for k in group.extras])
    skel.finish()


def _store_extras(b, index: Index, ptrs, gens, leaves: list[OutputLeaf]) -> None:
    for ptr, g, leaf in zip(ptrs, gens, leaves):
        store_element(b, leaf.select(g(index)), b.gep(ptr, [index.linear], inbounds=True), leaf.shape.dtype)


def _emit_row(skel, em, group, heroes, hero_ptrs, extra_ptrs, extra_gens, extra_leaves) -> None:
    b = skel.builder
    in_dims, rdims, kept = group.in_dims, list(group.rdims), group.kept
    with for_range(b, skel.begin, skel.end, "out") as u:
        out_multi = delinearize(b, u, group.out_dims)
        slots = []
        inits = [h.init_values(b) for h in heroes]
        with b.goto_entry_block():
            for vals in inits:
                slots.append([b.alloca(v.type) for v in vals])
        for ss, vals in zip(slots, inits):
            for s, v in zip(ss, vals):
                b.store(v, s)

        def nest(level, fixed):
            if level == len(rdims):
                multi = [None] * len(in_dims)
                for d, v in zip(kept, out_multi):
                    multi[d] = v
                for d, v in zip(rdims, fixed):
                    multi[d] = v
                index = Index(b, in_dims, multi=multi)
                for h, ss in zip(heroes, slots):
                    res = h.fold(em, [b.load(s) for s in ss], index)
                    for s, r in zip(ss, res):
                        b.store(r, s)
                _store_extras(b, index, extra_ptrs, extra_gens, extra_leaves)
                return
            with for_range(b, const_i64(0), const_i64(in_dims[rdims[level]]), f"r{level}") as i:
                nest(level + 1, fixed + [i])

        nest(0, [])
        for h, ss, ptrs in zip(heroes, slots, hero_ptrs):
            for s, ptr, et in zip(ss, ptrs, h.types):
                store_element(b, b.load(s), b.gep(ptr, [u], inbounds=True), et)


def _emit_column(skel, em, group, heroes, hero_ptrs, extra_ptrs, extra_gens, extra_leaves) -> None:
    b = skel.builder
    in_dims, rdims, kept = group.in_dims, list(group.rdims), group.kept
    last = in_dims[-1]
    nb = group.blocks
    with for_range(b, skel.begin, skel.end, "unit") as u:
        o = b.udiv(u, const_i64(nb))
        j0 = b.mul(b.urem(u, const_i64(nb)), const_i64(COLUMN_BLOCK))
        j1 = b.add(j0, const_i64(COLUMN_BLOCK))
        j1 = b.select(b.icmp_signed("<", j1, const_i64(last)), j1, const_i64(last))
        outer = delinearize(b, o, group.out_dims[:-1])
        row = b.mul(o, const_i64(last))
        inits = [h.init_values(b) for h in heroes]
        with for_range(b, j0, j1, "init") as j:
            lin = b.add(row, j)
            for h, vals, ptrs in zip(heroes, inits, hero_ptrs):
                for v, ptr, et in zip(vals, ptrs, h.types):
                    store_element(b, v, b.gep(ptr, [lin], inbounds=True), et)

        def nest(level, fixed):
            if level == len(rdims):
                with for_range(b, j0, j1, "col") as j:
                    multi = [None] * len(in_dims)
                    for d, v in zip(kept, list(outer) + [j]):
                        multi[d] = v
                    for d, v in zip(rdims, fixed):
                        multi[d] = v
                    index = Index(b, in_dims, multi=multi)
                    lin = b.add(row, j)
                    for h, ptrs in zip(heroes, hero_ptrs):
                        addrs = [b.gep(ptr, [lin], inbounds=True) for ptr in ptrs]
                        accs = [load_element(b, a, et) for a, et in zip(addrs, h.types)]
                        for a, r, et in zip(addrs, h.fold(em, accs, index), h.types):
                            store_element(b, r, a, et)
                    _store_extras(b, index, extra_ptrs, extra_gens, extra_leaves)
                return
            with for_range(b, const_i64(0), const_i64(in_dims[rdims[level]]), f"r{level}") as i:
                nest(level + 1, fixed + [i])

        nest(0, [])
