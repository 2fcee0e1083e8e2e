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

A reduce into a float narrower than f32 is the exception to reassociation: it rounds to its
type after every step, as XLA:CPU does, so its order is part of its result. Kernel planning
has rewritten it into XLA:CPU's tree of reduce-windows (codegen/planning.py), and its
kernel is emitted without reassociation (`in_order_target`) and never split across cores, so
each output is folded exactly in XLA's order.

Only outputs that read the reduces at their own output index can be an epilogue: the kernel
holds one output element's accumulated value at a time (`reads_heroes_at_output_index`);
others (a reverse, a transpose, a slice ... of the reduce) leave the reduction kernel.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

from ..hlo.ir import HloComputation
from .elemental import ElementalEmitter, dims_of, mem_type, reg_type
from .ir_helpers import Index, const_i64, delinearize, for_range, load_element, store_element
from .loop_emitter import output_leaves

COLUMN_BLOCK = 512


@dataclass
class ReductionGroup:
    """Output leaves written by one reduction kernel: reduce heroes (reducing inputs of
    `in_dims` over `rdims`), outputs computed from them by an elementwise epilogue at the
    output index (the reduces themselves are the trivial epilogue), and elementwise outputs
    of the input's dimensions (`extras`)."""

    heroes: list  # reduce instructions
    epilogue: list[int]  # output leaves computed from the heroes at the output index
    extras: list[int]  # elementwise output leaves with the input's dimensions
    in_dims: tuple[int, ...]
    rdims: tuple[int, ...]

    @property
    def is_row(self) -> bool:
        """Whether the minor input dimension is reduced (or all are): register accumulators."""
        return not self.in_dims or (len(self.in_dims) - 1) in self.rdims

    @property
    def kept(self) -> list[int]:
        """Input dimensions that are not reduced."""
        return [d for d in range(len(self.in_dims)) if d not in self.rdims]

    @property
    def out_dims(self) -> tuple[int, ...]:
        """Dimensions of the reduce results."""
        return tuple(self.in_dims[d] for d in self.kept)

    @property
    def units(self) -> int:
        """Work units (outputs, or column blocks)."""
        if self.is_row:
            return math.prod(self.out_dims)
        return math.prod(self.out_dims[:-1]) * self.blocks

    @property
    def blocks(self) -> int:
        """Column blocks per row of kept dimensions (column case)."""
        return max(1, -(-self.in_dims[-1] // COLUMN_BLOCK)) if self.in_dims else 1

    @property
    def unit_elements(self) -> int:
        """Input elements visited per unit."""
        if self.is_row:
            return math.prod(self.in_dims[d] for d in self.rdims)
        return math.prod(self.in_dims[d] for d in self.rdims) * min(COLUMN_BLOCK, self.in_dims[-1])

    @property
    def outputs(self) -> list[int]:
        """Output leaves this kernel writes."""
        return self.epilogue + self.extras


def reduce_heroes(inst) -> list:
    """The reduce instructions `inst` depends on through non-reduce instructions."""
    out, seen, stack = [], set(), [inst]
    while stack:
        i = stack.pop()
        if id(i) in seen:
            continue
        seen.add(id(i))
        if i.opcode == "reduce":
            out.append(i)
            continue
        stack.extend(i.operands)
    return out


def _signature(r) -> tuple:
    return dims_of(r.operands[0]), tuple(sorted(r.attrs["dimensions"]))


def _minor_to_major(shape) -> tuple[int, ...]:
    layout = shape.layout
    return tuple(layout.minor_to_major) if layout is not None else tuple(range(shape.rank - 1, -1, -1))


def _passes_index_through(inst) -> bool:
    """Whether `inst` reads each operand at its own output index (its generator hands the
    index on unchanged): elementwise ops, tuple plumbing, and the identity forms of reshape,
    bitcast, copy, broadcast and transpose."""
    if inst.info.elementwise or inst.opcode in ("tuple", "get-tuple-element", "copy"):
        return True
    if not inst.shape.is_array or len(inst.operands) != 1 or not inst.operands[0].shape.is_array:
        return False
    same = dims_of(inst) == dims_of(inst.operands[0])
    if inst.opcode == "reshape":
        return same
    if inst.opcode == "bitcast":  # the physical reinterpretation is the identity only under one layout
        return same and _minor_to_major(inst.shape) == _minor_to_major(inst.operands[0].shape)
    if inst.opcode == "broadcast":
        return same and tuple(inst.attrs.get("dimensions", ())) == tuple(range(len(dims_of(inst))))
    if inst.opcode == "transpose":
        return tuple(inst.attrs["dimensions"]) == tuple(range(len(dims_of(inst))))
    return False


def reads_heroes_at_output_index(inst, heroes) -> bool:
    """Whether `inst`, evaluated at output index i, reads every reduce of `heroes` at index i.

    A reduction kernel holds one output element's accumulated value at a time (registers in a
    row, one column block in a column), and its epilogue generators see a hero as that value
    whatever index they ask for. So an epilogue may only reach a hero through ops that pass the
    index through unchanged; a reverse, slice, transpose, pad, concatenate, dynamic-slice, or a
    reshape or broadcast that moves elements would read another output element's value. A
    scalar hero (a full reduction) has one element, so every path to it is fine."""
    targets = {id(h) for h in heroes if dims_of(h) != ()}
    if not targets:
        return True
    # Post order of what `inst` reads, not entering reduces; then, bottom-up, which of those
    # reach a hero: each that does (other than the hero) must pass the index through.
    order, seen, stack = [], set(), [(inst, False)]
    while stack:
        i, done = stack.pop()
        if done:
            order.append(i)
            continue
        if id(i) in seen:
            continue
        seen.add(id(i))
        stack.append((i, True))
        if i.opcode != "reduce":
            stack.extend((op, False) for op in i.operands)
    reaches: set[int] = set()
    for i in order:
        if id(i) in targets:
            reaches.add(id(i))
        elif i.opcode != "reduce" and any(id(op) in reaches for op in i.operands):
            if not _passes_index_through(i):
                return False
            reaches.add(id(i))
    return True


def reduction_groups(comp: HloComputation) -> tuple[list[ReductionGroup], list[int]]:
    """Split the output leaves of `comp` into reduction groups and the rest (loop outputs)."""
    leaves = output_leaves(comp)
    groups: dict[tuple, ReductionGroup] = {}
    rest = []
    for k, leaf in enumerate(leaves):
        heroes = reduce_heroes(leaf.inst)
        sigs = {_signature(h) for h in heroes}
        if len(sigs) == 1:
            in_dims, rdims = next(iter(sigs))
            g = groups.get((in_dims, rdims)) or ReductionGroup([], [], [], in_dims, rdims)
            if tuple(leaf.shape.dims) == g.out_dims and reads_heroes_at_output_index(leaf.inst, heroes):
                groups[(in_dims, rdims)] = g
                g.epilogue.append(k)
                g.heroes.extend(h for h in heroes if all(h is not o for o in g.heroes))
                continue
        rest.append(k)
    loops = []
    for k in rest:
        leaf = leaves[k]
        home = next((g for g in groups.values() if g.in_dims and tuple(leaf.shape.dims) == g.in_dims), None)
        if home is not None and not reduce_heroes(leaf.inst):
            home.extras.append(k)
        else:
            loops.append(k)
    return list(groups.values()), loops


def is_order_sensitive_reduce(inst) -> bool:
    """Whether `inst` is a non-variadic reduce into a float narrower than f32 (bf16, f16, f8):
    every step rounds to that type, so the order of the steps is part of the result and must
    be XLA:CPU's (kernel planning rewrites it into XLA's tree of reduce-windows; the kernels
    fold each output sequentially, see `in_order_target`)."""
    return (inst.opcode == "reduce" and inst.shape.is_array and inst.shape.dtype.is_float
            and inst.shape.dtype.bits < 32)


def in_order_target(target, heroes):
    """The target to emit a reduction kernel of `heroes` (reduce instructions) with: `target`
    itself, or, when a hero is order-sensitive, a copy that does not reassociate reductions.
    Reassociation would let LLVM reorder a chain of per-step-rounded folds where the narrow
    type is native (the GPU's f16 adds became f16x2 vector sums), and that changes the bits."""
    if not any(is_order_sensitive_reduce(h) for h in heroes):
        return target
    ordered = copy.copy(target)
    ordered.reassociate_reductions = False
    return ordered


class ReduceHero:
    """Generators and accumulator plumbing of one reduce (used by the CPU and the GPU reduction emitters)."""

    def __init__(self, em: ElementalEmitter, inst) -> None:
        n = len(inst.operands) // 2
        self.inst = inst
        self.n = n
        self.inputs = [em.gen(op) for op in inst.operands[:n]]
        self.inits = [em.gen(op) for op in inst.operands[n:]]
        self.comp = inst.attrs["to_apply"]
        self.types = [op.shape.dtype for op in inst.operands[n:]]
        self.reg_types = [reg_type(et) for et in self.types]

    def init_values(self, b):
        """The init values of the reduce (rank-0 generators)."""
        return [g(Index(b, (), multi=())) for g in self.inits]

    def fold(self, em: ElementalEmitter, accs: list, index: Index) -> list:
        """Fold the input values at `index` into accumulators `accs` with the reducer."""
        values = [g(index) for g in self.inputs]
        res = em.call_scalar(self.comp, list(accs) + values, reduction=True)
        return list(res) if isinstance(res, tuple) else [res]


def emit_reduction_kernel(skel, comp: HloComputation, group: ReductionGroup, stage: str = "single",
                          parts: int = 1) -> None:
    """Fill kernel skeleton `skel` with the loops of reduction group `group`.

    `stage` "partial" and "combine" split a row reduction with few outputs over `parts` slices
    of its outermost reduced dimension, so the cores share it: the partial kernel writes each
    slice's accumulators to the skeleton's scratch buffers (one per accumulator, laid out
    [part][output]); the combine kernel folds the slices with the reducer and runs the epilogue."""
    b = skel.builder
    em = ElementalEmitter(b, in_order_target(skel.target, group.heroes), skel.param_gen)
    heroes = [ReduceHero(em, h) for h in group.heroes]
    leaves = output_leaves(comp)
    extras = [(skel.output_ptr(k), em.gen(leaves[k].inst), leaves[k]) for k in group.extras]
    epilogue_ptrs = [skel.output_ptr(k) for k in group.epilogue]
    if stage != "single":
        types = [et for h in heroes for et in h.types]
        scratch = [skel.scratch_ptr(i, et) for i, et in enumerate(types)]
        if stage == "partial":
            _emit_row(skel, em, group, heroes, extras, [], [], parts=parts, scratch=scratch)
        else:
            _emit_combine(skel, em, group, heroes, epilogue_ptrs, [leaves[k] for k in group.epilogue], parts, scratch)
        skel.finish()
        return
    if group.is_row:
        _emit_row(skel, em, group, heroes, extras, epilogue_ptrs, [leaves[k] for k in group.epilogue])
    else:
        _emit_column(skel, em, group, heroes, extras, epilogue_ptrs, [leaves[k] for k in group.epilogue])
    skel.finish()


def _store_extras(b, index: Index, extras) -> None:
    for ptr, g, leaf in extras:
        store_element(b, leaf.select(g(index)), b.gep(ptr, [index.linear], inbounds=True), leaf.shape.dtype)


def _input_index(b, group: ReductionGroup, kept_vals, reduced_vals) -> Index:
    multi = [None] * len(group.in_dims)
    for d, v in zip(group.kept, kept_vals):
        multi[d] = v
    for d, v in zip(group.rdims, reduced_vals):
        multi[d] = v
    return Index(b, group.in_dims, multi=multi)


def _reduced_loops(b, group: ReductionGroup, body, level: int = 0, fixed=(), outer=None) -> None:
    """Nested loops over the reduced dimensions, outermost first; body(values) inside.
    `outer` = (lo, hi) restricts the outermost one (a slice of a split reduction)."""
    if level == len(group.rdims):
        body(list(fixed))
        return
    size = group.in_dims[group.rdims[level]]
    lo, hi = outer if (level == 0 and outer is not None) else (const_i64(0), const_i64(size))
    with for_range(b, lo, hi, f"r{level}") as i:
        _reduced_loops(b, group, body, level + 1, tuple(fixed) + (i,))


def override_heroes(em: ElementalEmitter, heroes, current, at) -> None:
    """Make each hero's generator return its accumulated value (`current(hero)` at emission time),
    so epilogue generators created afterwards read the accumulators.

    That value is the hero's element at the output index `at()` the epilogue is being evaluated
    at, and no other: `reduction_groups` only puts outputs that read the heroes there in the
    epilogue (`reads_heroes_at_output_index`), and a generator asking for another index is a
    compiler bug, stopped here rather than silently given the wrong element."""
    for h in heroes:
        def gen(idx: Index, h=h):
            expected = at()
            if idx.dims and (idx.dims != expected.dims or idx.key() != expected.key()):
                raise RuntimeError(f"internal error: reduction epilogue reads {h.inst.name} away from the output index")
            vals = current(h)
            return tuple(vals) if h.n > 1 else vals[0]

        em.override(h.inst, gen)


def _emit_row(skel, em, group, heroes, extras, epilogue_ptrs, epilogue_leaves, parts: int = 1,
              scratch=None) -> None:
    b = skel.builder
    n_out = math.prod(group.out_dims)
    slots = {}
    with b.goto_entry_block():
        for h in heroes:
            slots[id(h)] = [b.alloca(reg) for reg in h.reg_types]
    at = {}
    override_heroes(em, heroes, lambda h: [b.load(s) for s in slots[id(h)]], lambda: at["index"])
    epilogue_gens = [em.gen(leaf.inst) for leaf in epilogue_leaves]
    with for_range(b, skel.begin, skel.end, "out") as unit:
        outer = None
        u = unit
        if scratch is not None:  # unit = part * n_out + output
            part, u = b.udiv(unit, const_i64(n_out)), b.urem(unit, const_i64(n_out))
            r0 = group.in_dims[group.rdims[0]]
            outer = (b.udiv(b.mul(part, const_i64(r0)), const_i64(parts)),
                     b.udiv(b.mul(b.add(part, const_i64(1)), const_i64(r0)), const_i64(parts)))
        out_index = at["index"] = Index(b, group.out_dims, linear=u)
        for h in heroes:
            for s, v in zip(slots[id(h)], h.init_values(b)):
                b.store(v, s)

        def body(reduced):
            index = _input_index(b, group, out_index.multi, reduced)
            for h in heroes:
                ss = slots[id(h)]
                for s, r in zip(ss, h.fold(em, [b.load(s) for s in ss], index)):
                    b.store(r, s)
            _store_extras(b, index, extras)

        _reduced_loops(b, group, body, outer=outer)
        if scratch is not None:
            values = [(s, et) for h in heroes for s, et in zip(slots[id(h)], h.types)]
            for (s, et), ptr in zip(values, scratch):
                store_element(b, b.load(s), b.gep(ptr, [unit], inbounds=True), et)
        for g, leaf, ptr in zip(epilogue_gens, epilogue_leaves, epilogue_ptrs):
            store_element(b, leaf.select(g(out_index)), b.gep(ptr, [u], inbounds=True), leaf.shape.dtype)


def _emit_combine(skel, em, group, heroes, epilogue_ptrs, epilogue_leaves, parts: int, scratch) -> None:
    """Fold the partial accumulators of a split reduction, then write the epilogue outputs."""
    b = skel.builder
    n_out = math.prod(group.out_dims)
    finals = {}
    at = {}
    override_heroes(em, heroes, lambda h: finals[id(h)], lambda: at["index"])
    epilogue_gens = [em.gen(leaf.inst) for leaf in epilogue_leaves]
    with for_range(b, skel.begin, skel.end, "out") as u:
        k = 0
        for h in heroes:
            ptrs = scratch[k:k + len(h.types)]
            k += len(h.types)

            def partial(p, ptrs=ptrs, h=h):
                at = b.add(b.mul(const_i64(p), const_i64(n_out)), u)
                return [load_element(b, b.gep(ptr, [at], inbounds=True), et) for ptr, et in zip(ptrs, h.types)]

            acc = partial(0)
            for p in range(1, parts):
                res = em.call_scalar(h.comp, acc + partial(p), reduction=True)
                acc = list(res) if isinstance(res, tuple) else [res]
            finals[id(h)] = acc
        out_index = at["index"] = Index(b, group.out_dims, linear=u)
        for g, leaf, ptr in zip(epilogue_gens, epilogue_leaves, epilogue_ptrs):
            store_element(b, leaf.select(g(out_index)), b.gep(ptr, [u], inbounds=True), leaf.shape.dtype)


def _emit_column(skel, em, group, heroes, extras, epilogue_ptrs, epilogue_leaves) -> None:
    b = skel.builder
    last = group.in_dims[-1]
    nb = group.blocks
    scratch = {}
    with b.goto_entry_block():
        for h in heroes:
            scratch[id(h)] = [b.alloca(mem_type(et), size=COLUMN_BLOCK) for et in h.types]
    position = {}

    def current(h):
        return [load_element(b, b.gep(p, [position["j"]], inbounds=True), et)
                for p, et in zip(scratch[id(h)], h.types)]

    override_heroes(em, heroes, current, lambda: position["index"])
    epilogue_gens = [em.gen(leaf.inst) for leaf in epilogue_leaves]
    with for_range(b, skel.begin, skel.end, "unit") as u:
        o = b.udiv(u, const_i64(nb))
        j0 = b.mul(b.urem(u, const_i64(nb)), const_i64(COLUMN_BLOCK))
        j1 = b.add(j0, const_i64(COLUMN_BLOCK))
        j1 = b.select(b.icmp_signed("<", j1, const_i64(last)), j1, const_i64(last))
        outer = delinearize(b, o, group.out_dims[:-1])
        row = b.mul(o, const_i64(last))
        inits = [h.init_values(b) for h in heroes]
        with for_range(b, j0, j1, "init") as j:
            slot = b.sub(j, j0)
            for h, vals in zip(heroes, inits):
                for v, p, et in zip(vals, scratch[id(h)], h.types):
                    store_element(b, v, b.gep(p, [slot], inbounds=True), et)

        def body(reduced):
            with for_range(b, j0, j1, "col") as j:
                index = _input_index(b, group, list(outer) + [j], reduced)
                slot = b.sub(j, j0)
                for h in heroes:
                    addrs = [b.gep(p, [slot], inbounds=True) for p in scratch[id(h)]]
                    accs = [load_element(b, a, et) for a, et in zip(addrs, h.types)]
                    for a, r, et in zip(addrs, h.fold(em, accs, index), h.types):
                        store_element(b, r, a, et)
                _store_extras(b, index, extras)

        _reduced_loops(b, group, body)
        with for_range(b, j0, j1, "epilogue") as j:
            position["j"] = b.sub(j, j0)
            out_index = position["index"] = Index(b, group.out_dims, multi=list(outer) + [j], linear=b.add(row, j))
            for g, leaf, ptr in zip(epilogue_gens, epilogue_leaves, epilogue_ptrs):
                store_element(b, leaf.select(g(out_index)), b.gep(ptr, [out_index.linear], inbounds=True),
                              leaf.shape.dtype)
