"""GPU reduction kernels: reduction fusions (kInput with reduce heroes) as tiled grid kernels,
XLA-GPU style.

A reduction group (reduction_groups.py: reduces of the same input dimensions and
reduced dimensions, plus elementwise outputs of the input's dimensions) is viewed as K output
elements, each folding R input elements. Every input element is visited by exactly one
thread, which also writes the group's elementwise outputs there (multi-output fusion).

Kernel shapes (`plan_reduction`):
  * per_output (R <= PER_OUTPUT_MAX, or R == 0, or a reduce into a float narrower than f32,
    whose per-step rounding makes XLA:CPU's sequential order part of the result): one thread
    folds a whole output element, starting from the init value, and stores it. No atomics.
  * row (the last input dimension is reduced, or all are): block b takes output
    o = b / chunks and chunk c = b % chunks of its R reduced elements; lane t of the block
    folds ROW_TILE positions j < ROW_TILE of the chunk: r = c * lanes * ROW_TILE + t + j * lanes
    when its partial is combined by an atomic (consecutive lanes read consecutive addresses),
    r = c * lanes * ROW_TILE + t * ROW_TILE + j when a finish kernel combines it (two passes: a
    contiguous run, see below). Long rows use several blocks (chunks > 1), short rows share a
    block (rows_per_block rows of `lanes` >= 32 threads), full reductions are row reductions
    with K = 1.
  * column (the last dimension is kept): thread i takes column x = i % K and the tile of
    COLUMN_TILE reduced positions y = (i / K) * COLUMN_TILE + j, j < COLUMN_TILE.
Tiles that do not divide R are bounds-checked per element; threads with no element do nothing.

A thread's partial starts from its FIRST element (not from the init value), so the init value
enters the result exactly once even when it is not the reducer's identity. Partials are then
combined in one of two ways (decided per group by atomics.atomic_kind for every reduce):
  * atomic (one pass): an init kernel first stores the init value into every output element,
    then each thread combines its partial with atomicrmw or a compare-and-swap loop;
  * two passes (variadic reducers, 8/16-bit types): each thread stores its partial into a
    scratch buffer [P, K] (P partials per output), and a finish kernel (one thread per
    output) folds init and the valid partials in order.

In two passes every partial is the in-order fold of a contiguous run of positions, and the
finish kernel folds the runs in position order: init, then positions 0, 1, ... R-1, only
bracketed differently. That is the interpreter's fold (the oracle's) for every associative
reducer, commutative or not. jax's argmax is one that is not commutative: the left NaN wins
whatever its index, and of equal values the later one's is kept (the sign of a zero), so
interleaved partials combined lane by lane gave the later NaN's index and the wrong zero. XLA's
GPU emitter (emitters/reduction.cc) folds strided elements per thread, then combines threads by
warp shuffles and shared memory, out of position order: in effect it takes the reducer to be
commutative as well (jax documents only a monoid: associative, init its identity) and fixes
neither that NaN nor that zero; hlofuse's emulated GPU and its PTX give the interpreter's answer.
The price on a real GPU: at each step a warp's loads span 32 runs (ROW_TILE times the cache
lines of the interleaved order, the same lines over the ROW_TILE steps), for two-pass plans only.

Outputs computed from the reduced values at the output index (the group's epilogue, e.g.
`divide(reduce(x), n)`) are evaluated where the reduced values are final: right after the fold
(per_output), in the finish kernel (two passes), or in an epilogue kernel after the atomic
kernel, which reads the accumulators (an output leaf when the reduce is itself an output, a
scratch buffer otherwise).

Warp shuffles and shared memory are not used: the host emulation runs the threads of a block
one after another and could not execute them faithfully, so real and emulated kernels share
this atomic path (documented trade-off: more global atomics than XLA's tree reduction). A
reduce over more than passes/tree_reduction_rewriter's bound is split before fusion into two
of about sqrt(R) each, so no accumulator takes more than about a thousand partials (one took
82 million, 8 ones each, and stalled at 2^27).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from llvmlite import ir

from ...emitters.elemental import ElementalEmitter
from ...emitters.gpu.atomics import atomic_kind, emit_atomic_combine
from ...emitters.ir_helpers import I1, Index, const_i64, delinearize, for_range, load_element, store_element
from ...hlo.ir import HloComputation
from .args import output_leaves
from .gpu_skeleton import LaunchDims, launch_for
from .reduction_groups import ReduceHero, ReductionGroup, in_order_target, is_order_sensitive_reduce, override_heroes

PER_OUTPUT_MAX = 32
ROW_TILE = 8
ROW_MAX_LANES = 256
COLUMN_TILE = 32


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@dataclass
class ReductionPlan:
    """How one reduction group is launched, and where its accumulators live."""

    group: ReductionGroup
    kind: str  # per_output | row | column
    atomic: bool
    outputs_k: int  # K: output elements per reduce result
    reduced_r: int  # R: input elements folded into each
    lanes: int = 1
    tile: int = 1
    chunks: int = 1
    launch: LaunchDims = field(default_factory=lambda: LaunchDims(0, 32))
    # Per hero, per result: the output leaf holding it (a reduce that is itself an output),
    # or None (an accumulator in a scratch buffer, read by the epilogue kernel).
    homes: list = field(default_factory=list)
    trivial: set = field(default_factory=set)  # epilogue leaves that are a hero's result
    rows_per_block: int = 1  # row kind with one chunk: short rows share a block of ROW_MAX_LANES

    @property
    def partials(self) -> int:
        """Partials per output element (P) of the row/column kinds."""
        return self.chunks * self.lanes if self.kind == "row" else self.chunks

    @property
    def two_pass(self) -> bool:
        """Whether partials go to scratch for a finish kernel to combine (row/column kinds without atomics)."""
        return self.kind != "per_output" and not self.atomic

    @property
    def row_step(self) -> int:
        """Distance between the positions one row-kind thread folds: `lanes` (interleaved) when
        atomics combine the partials, 1 (a contiguous run) when the finish kernel combines
        them in position order (module docstring)."""
        return 1 if self.two_pass else self.lanes

    def row_start(self, b: ir.IRBuilder, chunk: ir.Value, lane: ir.Value) -> ir.Value:
        """The first position folded by lane `lane` of chunk `chunk` (row kind); its partial is
        number chunk * lanes + lane."""
        run = self.tile if self.two_pass else 1
        return b.add(b.mul(chunk, const_i64(self.lanes * self.tile)), b.mul(lane, const_i64(run)))

    @property
    def needs_epilogue(self) -> bool:
        """Atomic plans with outputs computed from the reduced values need a last kernel."""
        return self.kind != "per_output" and self.atomic and any(k not in self.trivial for k in self.group.epilogue)

    @property
    def output_launch(self) -> LaunchDims:
        """The launch of the init, finish and epilogue kernels (one thread per output element)."""
        return launch_for(self.outputs_k)

    def _results(self):
        return [(h, j, op.shape.dtype) for h in self.group.heroes
                for j, op in enumerate(h.operands[len(h.operands) // 2:])]

    def scratch(self) -> list[tuple]:
        """(element type, element count) of each scratch buffer: the partials of every reduce
        result (two passes), or the accumulators of results that are not outputs (atomics)."""
        if self.two_pass:
            return [(et, self.partials * self.outputs_k) for _, _, et in self._results()]
        if self.kind == "per_output":
            return []
        homes = [k for ks in self.homes for k in ks]
        return [(et, self.outputs_k) for (_, _, et), home in zip(self._results(), homes) if home is None]

    def scratch_types(self) -> tuple:
        """Element types of the scratch buffers (partials) the kernels take."""
        return tuple(et for et, _ in self.scratch())


def plan_reduction(group: ReductionGroup, leaves: list) -> ReductionPlan:
    """Choose the kernel shape and the combining strategy of `group` (`leaves`: the output
    leaves of its fused computation)."""
    k = group.out_elements
    r = math.prod(group.in_dims[d] for d in group.rdims) if group.in_dims else 1
    atomic = all(
        atomic_kind(h.attrs["to_apply"], op.shape.dtype) is not None if len(h.operands) == 2 else False
        for h in group.heroes for op in h.operands[len(h.operands) // 2:]
    )
    homes, trivial = [], set()
    for h in group.heroes:
        n = len(h.operands) // 2
        found = []
        for j in range(n):
            path = (j,) if n > 1 else ()
            k_out = next((e for e in group.epilogue if leaves[e].inst is h and leaves[e].path == path), None)
            found.append(k_out)
            if k_out is not None:
                trivial.add(k_out)
        homes.append(found)
    common = dict(homes=homes, trivial=trivial)
    # A reduce into a narrow float rounds every step, so its order is its result: one thread
    # folds each output in XLA:CPU's order (kernel planning has already rewritten it into
    # XLA's tree of reduce-windows, so at most 32 elements per reduced dimension remain).
    sequential = any(is_order_sensitive_reduce(h) for h in group.heroes)
    if r <= PER_OUTPUT_MAX or k == 0 or sequential:
        return ReductionPlan(group, "per_output", True, k, r, launch=launch_for(k), **common)
    if group.is_row:
        lanes = min(ROW_MAX_LANES, max(32, _pow2_at_least(-(-r // ROW_TILE))))
        chunks = -(-r // (lanes * ROW_TILE))
        rows = ROW_MAX_LANES // lanes if chunks == 1 else 1
        return ReductionPlan(group, "row", atomic, k, r, lanes, ROW_TILE, chunks,
                             LaunchDims(-(-k // rows) * chunks, lanes * rows), rows_per_block=rows, **common)
    chunks = -(-r // COLUMN_TILE)
    return ReductionPlan(group, "column", atomic, k, r, 1, COLUMN_TILE, chunks, launch_for(k * chunks), **common)


class _Emit:
    """Shared plumbing of the kernels of one plan in one skeleton."""

    def __init__(self, skel, comp: HloComputation, plan: ReductionPlan) -> None:
        self.skel = skel
        self.b = skel.builder
        self.plan = plan
        self.group = plan.group
        self.em = ElementalEmitter(self.b, in_order_target(skel.target, self.group.heroes), skel.param_gen)
        self.heroes = [ReduceHero(self.em, h) for h in self.group.heroes]
        self.leaves = output_leaves(comp)
        self.extra_leaves = [self.leaves[k] for k in self.group.extras]
        self.extra_ptrs = [skel.output_ptr(k) for k in self.group.extras]
        self.extra_gens = [self.em.gen(leaf.inst) for leaf in self.extra_leaves]
        self.red_sizes = [self.group.in_dims[d] for d in self.group.rdims]

    def acc_ptrs(self) -> list[list]:
        """Per hero, per result: the buffer its atomically combined value lives in."""
        s = 0
        out = []
        for homes in self.plan.homes:
            ptrs = []
            for k in homes:
                if k is None:
                    ptrs.append(self.skel.scratch_ptr(s))
                    s += 1
                else:
                    ptrs.append(self.skel.output_ptr(k))
            out.append(ptrs)
        return out

    def input_index(self, out_multi, r) -> Index:
        b = self.b
        multi = [None] * len(self.group.in_dims)
        for d, v in zip(self.group.kept, out_multi):
            multi[d] = v
        for d, v in zip(self.group.rdims, delinearize(b, r, self.red_sizes)):
            multi[d] = v
        return Index(b, self.group.in_dims, multi=multi)

    def slots(self) -> list[list]:
        """Accumulator slots per hero, set to the init values."""
        b = self.b
        inits = [h.init_values(b) for h in self.heroes]
        slots = []
        with b.goto_entry_block():
            for vals in inits:
                slots.append([b.alloca(v.type) for v in vals])
        for ss, vals in zip(slots, inits):
            for s, v in zip(ss, vals):
                b.store(v, s)
        return slots

    def visit(self, slots, out_multi, r, first: ir.Value | None) -> None:
        """Fold input element (out_multi, r) into the slots (replacing them when `first`)
        and write the elementwise outputs there."""
        b = self.b
        index = self.input_index(out_multi, r)
        for h, ss in zip(self.heroes, slots):
            values = [g(index) for g in h.inputs]
            folded = h.fold(self.em, [b.load(s) for s in ss], index)
            for s, f, v in zip(ss, folded, values):
                b.store(f if first is None else b.select(first, v, f), s)
        for ptr, g, leaf in zip(self.extra_ptrs, self.extra_gens, self.extra_leaves):
            store_element(b, leaf.select(g(index)), b.gep(ptr, [index.linear], inbounds=True), leaf.shape.dtype)

    def store_epilogue(self, values, o, only_nontrivial: bool = False) -> None:
        """Store the group's epilogue outputs at output element `o`, the heroes' values
        given by `values(hero) -> list of register values` (the reduce's generator is
        overridden, so outputs computed from a reduce read the reduced value)."""
        b = self.b
        index = Index(b, self.group.out_dims, linear=o)
        override_heroes(self.em, self.heroes, values, lambda: index)
        for k in self.group.epilogue:
            if only_nontrivial and k in self.plan.trivial:
                continue
            leaf = self.leaves[k]
            v = leaf.select(self.em.gen(leaf.inst)(index))
            store_element(b, v, b.gep(self.skel.output_ptr(k), [o], inbounds=True), leaf.shape.dtype)

    def store_from_slots(self, slots, o) -> None:
        by_hero = {h: ss for h, ss in zip(self.heroes, slots)}
        self.store_epilogue(lambda h: [self.b.load(s) for s in by_hero[h]], o)


def emit_reduction_main(skel, comp: HloComputation, plan: ReductionPlan) -> None:
    """The kernel visiting every input element once (see the module docstring)."""
    e = _Emit(skel, comp, plan)
    b = e.b
    k, r_total = plan.outputs_k, plan.reduced_r
    if plan.kind == "per_output":
        o = skel.global_thread_idx
        with b.if_then(b.icmp_signed("<", o, const_i64(k))):
            out_multi = delinearize(b, o, e.group.out_dims)
            slots = e.slots()
            with for_range(b, const_i64(0), const_i64(r_total), "r") as r:
                e.visit(slots, out_multi, r, None)
            e.store_from_slots(slots, o)
        skel.finish()
        return
    if plan.kind == "row" and plan.rows_per_block > 1:
        # rows_per_block rows of `lanes` threads each share a block (one chunk per row).
        lanes = const_i64(plan.lanes)
        part = b.urem(skel.thread_idx, lanes)
        base = plan.row_start(b, const_i64(0), part)
        o = b.add(b.mul(skel.block_idx, const_i64(plan.rows_per_block)), b.udiv(skel.thread_idx, lanes))
        stride = plan.row_step
        active = b.and_(b.icmp_signed("<", o, const_i64(k)), b.icmp_signed("<", base, const_i64(r_total)))
    elif plan.kind == "row":
        o = b.udiv(skel.block_idx, const_i64(plan.chunks))
        c = b.urem(skel.block_idx, const_i64(plan.chunks))
        base = plan.row_start(b, c, skel.thread_idx)
        stride = plan.row_step
        part = b.add(b.mul(c, const_i64(plan.lanes)), skel.thread_idx)
        active = b.icmp_signed("<", base, const_i64(r_total))
    else:
        gid = skel.global_thread_idx
        o = b.urem(gid, const_i64(k))
        part = b.udiv(gid, const_i64(k))
        base = b.mul(part, const_i64(plan.tile))
        stride = 1
        active = b.icmp_signed("<", gid, const_i64(k * plan.chunks))
    with b.if_then(active):
        out_multi = delinearize(b, o, e.group.out_dims)
        slots = e.slots()
        with for_range(b, const_i64(0), const_i64(plan.tile), "j") as j:
            r = b.add(base, b.mul(j, const_i64(stride)))
            with b.if_then(b.icmp_signed("<", r, const_i64(r_total))):
                e.visit(slots, out_multi, r, b.icmp_signed("==", j, const_i64(0)))
        if plan.atomic:
            for h, ss, ptrs in zip(e.heroes, slots, e.acc_ptrs()):
                emit_atomic_combine(e.em, h.comp, h.types[0], b.gep(ptrs[0], [o], inbounds=True), b.load(ss[0]))
        else:
            slot_index = b.add(b.mul(part, const_i64(k)), o)
            s = 0
            for h, ss in zip(e.heroes, slots):
                for acc, et in zip(ss, h.types):
                    store_element(b, b.load(acc), b.gep(skel.scratch_ptr(s), [slot_index], inbounds=True), et)
                    s += 1
    skel.finish()


def emit_reduction_init(skel, comp: HloComputation, plan: ReductionPlan) -> None:
    """One thread per output element stores the init values (before the atomic kernel)."""
    e = _Emit(skel, comp, plan)
    b = e.b
    o = skel.global_thread_idx
    with b.if_then(b.icmp_signed("<", o, const_i64(plan.outputs_k))):
        for h, ptrs in zip(e.heroes, e.acc_ptrs()):
            for v, ptr, et in zip(h.init_values(b), ptrs, h.types):
                store_element(b, v, b.gep(ptr, [o], inbounds=True), et)
    skel.finish()


def emit_reduction_finish(skel, comp: HloComputation, plan: ReductionPlan) -> None:
    """Second pass: one thread per output folds init and the valid partials in position order
    (row partials are contiguous runs in ascending order, column partials tiles of ascending y)."""
    e = _Emit(skel, comp, plan)
    b = e.b
    k = plan.outputs_k
    o = skel.global_thread_idx
    with b.if_then(b.icmp_signed("<", o, const_i64(k))):
        slots = e.slots()
        with for_range(b, const_i64(0), const_i64(plan.partials), "p") as p:
            if plan.kind == "row":  # partial p = chunk * lanes + lane; empty when it starts past R
                lanes = const_i64(plan.lanes)
                start = plan.row_start(b, b.udiv(p, lanes), b.urem(p, lanes))
                valid = b.icmp_signed("<", start, const_i64(plan.reduced_r))
            else:
                valid = ir.Constant(I1, 1)
            with b.if_then(valid):
                slot_index = b.add(b.mul(p, const_i64(k)), o)
                s = 0
                for h, ss in zip(e.heroes, slots):
                    partials = []
                    for et in h.types:
                        ptr = b.gep(skel.scratch_ptr(s), [slot_index], inbounds=True)
                        partials.append(load_element(b, ptr, et))
                        s += 1
                    res = e.em.call_scalar(h.comp, [b.load(x) for x in ss] + partials, reduction=True)
                    res = list(res) if isinstance(res, tuple) else [res]
                    for x, v in zip(ss, res):
                        b.store(v, x)
        e.store_from_slots(slots, o)
    skel.finish()


def emit_reduction_epilogue(skel, comp: HloComputation, plan: ReductionPlan) -> None:
    """After the atomic kernel: one thread per output element computes the outputs that are
    functions of the reduced values (XLA's reduction epilogue), reading the accumulators."""
    e = _Emit(skel, comp, plan)
    b = e.b
    o = skel.global_thread_idx
    with b.if_then(b.icmp_signed("<", o, const_i64(plan.outputs_k))):
        ptrs = {h: ps for h, ps in zip(e.heroes, e.acc_ptrs())}

        def values(h):
            return [load_element(b, b.gep(p, [o], inbounds=True), et) for p, et in zip(ptrs[h], h.types)]

        e.store_epilogue(values, o, only_nontrivial=True)
    skel.finish()
