"""Element generators for leaves and data movement (constant, iota, broadcast, reshape,
transpose, slice, dynamic-slice, concatenate, pad, reverse, gather, tuples) and for the ops
that inline a called computation per element (reduce, reduce-window, map).

Data movement maps an output index to an operand index; choices between operands
(concatenate, pad) are selects over clamped in-bounds reads, so loops stay branch-free and
vectorizable."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..hlo.dtypes import S64, ElementType
from ..hlo.errors import UnsupportedError
from ..hlo.opcodes import register_elemental
from .elemental import ElementalEmitter, Reading, TupleGenerator, dims_of, reg_type, remap, scalar_constant
from .elemental_branches import branch_chain, branches, pad_branches
from .elemental_convert import bitcast_value, convert_value
from .ir_helpers import I1, I64, Index, const_i64, for_range, load_element


@register_elemental("constant")
def _constant(em: ElementalEmitter, inst):
    lit = inst.literal
    if lit is None:
        raise UnsupportedError(f"constant {inst.name} has an elided value ({{...}}); cannot emit it")
    et = inst.shape.dtype
    lit = np.asarray(lit, dtype=et.numpy)
    flat = lit.reshape(-1)
    if flat.size == 0:
        return _never_read(inst)
    if flat.size == 1 or np.all(flat.view(np.uint8).reshape(flat.size, -1) == flat[:1].view(np.uint8)):
        value = scalar_constant(et, flat[0])
        if et.name == "f16" and em.target.flushes_denormals and _is_denormal(flat[0]):
            return _opaque_half(em, value)
        return lambda idx: value
    data = lit.astype(np.uint8) if et.is_pred else lit
    ptr = em.global_constant(inst, data, et)
    b = em.b
    return lambda idx: load_element(b, b.gep(ptr, [idx.linear], inbounds=True), et)


def _is_denormal(value) -> bool:
    """Whether float scalar `value` is a nonzero denormal of its type."""
    return value != 0 and abs(value) < np.finfo(value.dtype).tiny


def _opaque_half(em: ElementalEmitter, value: ir.Constant):
    """The generator of an f16 denormal literal `value`, read through `llvm.arithmetic.fence`
    so LLVM cannot see the constant. A kernel that flushes denormals carries
    "denormal-fp-math"="preserve-sign,preserve-sign" (kernels/cpu_skeleton.py), and LLVM has
    that attribute for every float type and an override for f32 alone: f64 and bf16 need the
    flush (MXCSR flushes them, bf16 through its f32 denormals), but f16 runs in f32 (vcvtph2ps,
    which DAZ does not touch), where its denormals are normal numbers, as on XLA:CPU. LLVM's
    folder flushed the f16 literal instead: a sum of 33,792 copies of 6e-08 was 0, not
    0.002014 (the large-graph fuzzer, seed 85). The fence costs nothing at run time."""
    b = em.b
    fence = b.module.declare_intrinsic("llvm.arithmetic.fence", [value.type])
    return lambda idx: b.call(fence, [value])


def _never_read(inst):
    """The generator of a zero-element array: no element is ever read (the loops around a read
    run zero times), but the code reading it is still emitted and must be well typed, so it
    gives an undefined value of the register type."""
    value = ir.Constant(reg_type(inst.shape.dtype), ir.Undefined)
    return lambda idx: value


@register_elemental("iota")
def _iota(em: ElementalEmitter, inst):
    d = int(inst.attrs["iota_dimension"])
    et = inst.shape.dtype
    return lambda idx: convert_value(em, idx.multi[d], S64, et)


@register_elemental("broadcast")
def _broadcast(em: ElementalEmitter, inst):
    g = em.operand(inst, 0)
    dims = tuple(inst.attrs.get("dimensions", ()))
    op_dims = dims_of(inst.operands[0])
    if dims == tuple(range(len(dims_of(inst)))) and op_dims == dims_of(inst):
        return g
    return remap(em, g, lambda idx: Index(em.b, op_dims, multi=[idx.multi[d] for d in dims]))


def _reshape(em: ElementalEmitter, inst):
    g = em.operand(inst, 0)
    op_dims = dims_of(inst.operands[0])
    src, dst = inst.operands[0].shape.dtype, inst.shape.dtype
    if src != dst:
        # An XLA bitcast may also reinterpret the element type (same width).
        if src.bits != dst.bits:
            raise UnsupportedError(f"bitcast {inst.name} changes the element width ({src.name} -> {dst.name})")
        finish = lambda v: bitcast_value(em, v, src, dst)  # noqa: E731
    else:
        finish = None
    if op_dims == dims_of(inst) and (inst.opcode == "reshape" or _same_layout(inst.operands[0].shape, inst.shape)):
        return g if finish is None else remap(em, g, lambda idx: idx, finish)
    if inst.opcode == "bitcast" and not (inst.shape.is_row_major() and inst.operands[0].shape.is_row_major()):
        return remap(em, g, _physical_bitcast(em, inst), finish)
    return remap(em, g, lambda idx: Index(em.b, op_dims, linear=idx.linear), finish)


def _same_layout(a, b) -> bool:
    return a.is_row_major() and b.is_row_major() or (a.layout is not None and b.layout is not None
                                               and a.layout.minor_to_major == b.layout.minor_to_major)


def _physical_bitcast(em: ElementalEmitter, inst):
    """XLA's bitcast reinterprets the physical buffer: map the output index to its offset under
    the output layout, then to the operand index under the operand layout (returns that map)."""
    b = em.b
    out_shape, op_shape = inst.shape, inst.operands[0].shape

    def order(shape):
        return tuple(shape.layout.minor_to_major) if shape.layout is not None else tuple(range(shape.rank - 1, -1, -1))

    out_major = order(out_shape)[::-1]
    op_major = order(op_shape)[::-1]
    out_dims, op_dims = dims_of(inst), dims_of(inst.operands[0])

    def mapping(idx: Index) -> Index:
        physical = Index(b, [out_dims[d] for d in out_major], multi=[idx.multi[d] for d in out_major])
        in_phys = Index(b, [op_dims[d] for d in op_major], linear=physical.linear)
        multi = [None] * len(op_dims)
        for k, d in enumerate(op_major):
            multi[d] = in_phys.multi[k]
        return Index(b, op_dims, multi=multi)

    return mapping


register_elemental("reshape", "bitcast")(_reshape)


@register_elemental("transpose")
def _transpose(em: ElementalEmitter, inst):
    g = em.operand(inst, 0)
    perm = tuple(inst.attrs["dimensions"])
    op_dims = dims_of(inst.operands[0])

    def mapping(idx: Index) -> Index:
        multi = [None] * len(perm)
        for i, p in enumerate(perm):
            multi[p] = idx.multi[i]
        return Index(em.b, op_dims, multi=multi)

    return remap(em, g, mapping)


@register_elemental("slice")
def _slice(em: ElementalEmitter, inst):
    g = em.operand(inst, 0)
    spec = inst.attrs["slice"]
    op_dims = dims_of(inst.operands[0])
    b = em.b

    def mapping(idx: Index) -> Index:
        multi = []
        for v, (start, _limit, stride) in zip(idx.multi, spec):
            if stride != 1:
                v = b.mul(v, const_i64(stride))
            multi.append(b.add(v, const_i64(start)) if start else v)
        return Index(b, op_dims, multi=multi)

    return remap(em, g, mapping)


def index_to_i64(em: ElementalEmitter, v, et: ElementType):
    """An index value of integer type `et` as a signed i64, for clamping into bounds.

    Narrower values widen by their signedness. A u64 value of 2**63 or more does not fit:
    read as signed it would be negative and clamp to the first start, where XLA (comparing
    unsigned) clamps it to the last; it saturates to INT64_MAX, which clamps the same way."""
    b = em.b
    if et.kind == "uint" and v.type.width >= 64:
        return b.select(b.icmp_signed("<", v, const_i64(0)), const_i64(2**63 - 1), v)
    if v.type == I64:
        return v
    return b.sext(v, I64) if et.is_signed else b.zext(v, I64)


def clamp_i64(b: ir.IRBuilder, v, lo: int, hi: int):
    """Clamp an i64 value to [lo, hi] (signed)."""
    v = b.select(b.icmp_signed("<", v, const_i64(lo)), const_i64(lo), v)
    return b.select(b.icmp_signed(">", v, const_i64(hi)), const_i64(hi), v)


@register_elemental("dynamic-slice")
def _dynamic_slice(em: ElementalEmitter, inst):
    g = em.operand(inst, 0)
    op_dims = dims_of(inst.operands[0])
    sizes = dims_of(inst)
    starts = inst.operands[1:]
    b = em.b

    def mapping(idx: Index) -> Index:
        multi = []
        for d, (v, s) in enumerate(zip(idx.multi, starts)):
            start = index_to_i64(em, em.scalar(s), s.shape.dtype)
            start = clamp_i64(b, start, 0, op_dims[d] - sizes[d])
            multi.append(b.add(v, start))
        return Index(b, op_dims, multi=multi)

    return remap(em, g, mapping)


def dus_starts(em: ElementalEmitter, inst) -> list:
    """The start indices of dynamic-update-slice `inst` as i64 values, clamped (as XLA does) so
    the update window lies inside the operand."""
    op_dims, upd_dims = dims_of(inst.operands[0]), dims_of(inst.operands[1])
    out = []
    for d, s in enumerate(inst.operands[2:]):
        start = index_to_i64(em, em.scalar(s), s.shape.dtype)
        out.append(clamp_i64(em.b, start, 0, op_dims[d] - upd_dims[d]))
    return out


@register_elemental("dynamic-update-slice")
def _dynamic_update_slice(em: ElementalEmitter, inst):
    """The whole result of a dynamic-update-slice, element by element: the update inside the
    clamped window, the operand elsewhere (a select over a clamped read of the update, so the
    loop stays branch-free). A fusion rooted at a dynamic-update-slice that may write in place
    iterates over the update only instead (codegen/kernels/cpu_dus.py)."""
    g_op, g_upd = em.operand(inst, 0), em.operand(inst, 1)
    upd_dims = dims_of(inst.operands[1])
    b = em.b
    if 0 in upd_dims:
        return remap(em, g_op, lambda idx: idx)

    def plan(idx: Index):
        """(inside-the-window flag, update index, output index)."""
        inside = ir.Constant(I1, 1)
        multi = []
        for v, start, n in zip(idx.multi, dus_starts(em, inst), upd_dims):
            t = b.sub(v, start)
            inside = b.and_(inside, b.icmp_signed(">=", t, const_i64(0)))
            inside = b.and_(inside, b.icmp_signed("<", t, const_i64(n)))
            multi.append(clamp_i64(b, t, 0, n - 1))
        return inside, Index(b, upd_dims, multi=multi), idx

    def compute(_idx: Index, p):
        inside, j, idx = p
        return b.select(inside, g_upd(j), g_op(idx))

    return Reading(em, plan, lambda p: [(g_upd, p[1]), (g_op, p[2])], compute)


@register_elemental("concatenate")
def _concatenate(em: ElementalEmitter, inst):
    dim = int(inst.attrs["dimensions"][0])
    gens = [em.gen(op) for op in inst.operands]
    sizes = [dims_of(op)[dim] for op in inst.operands]
    b = em.b
    if not any(sizes):
        return _never_read(inst)  # every operand is empty, so is the result

    def plan(idx: Index) -> list:
        """(generator, operand index, offset) of each non-empty operand."""
        v = idx.multi[dim]
        reads, offset = [], 0
        for g, op, size in zip(gens, inst.operands, sizes):
            if size:
                multi = list(idx.multi)
                multi[dim] = clamp_i64(b, b.sub(v, const_i64(offset)), 0, size - 1)
                reads.append((g, Index(b, dims_of(op), multi=multi), offset))
            offset += size
        return reads

    if branches(em, inst.operands):  # each operand computed only where it is read
        def branched(idx: Index, reads: list):
            bounds = [offset for _, _, offset in reads[1:]]
            cases = [(b.icmp_signed("<", idx.multi[dim], const_i64(end)), lambda g=g, j=j: g(j))
                     for (g, j, _), end in zip(reads, bounds)]
            g, j, _ = reads[-1]
            return branch_chain(em, cases + [(None, lambda: g(j))])

        return Reading(em, plan, lambda reads: [], branched)

    def compute(idx: Index, reads: list):
        result = None
        for g, j, offset in reads:
            val = g(j)
            if result is None:
                result = val
            else:
                result = b.select(b.icmp_signed(">=", idx.multi[dim], const_i64(offset)), val, result)
        return result

    return Reading(em, plan, lambda reads: [(g, j) for g, j, _ in reads], compute)


@register_elemental("pad")
def _pad(em: ElementalEmitter, inst):
    g, pv = em.operand(inst, 0), em.gen(inst.operands[1])
    config = inst.attrs["padding"]
    op_dims = dims_of(inst.operands[0])
    b = em.b

    def plan(idx: Index):
        """(in-bounds flag, operand index, scalar index of the padding value)."""
        scalar = Index(b, (), multi=())
        if 0 in op_dims:
            return None, None, scalar
        in_bounds = ir.Constant(I1, 1)
        multi = []
        for v, (lo, _hi, interior), n in zip(idx.multi, config, op_dims):
            t = b.sub(v, const_i64(lo)) if lo else v
            if interior:
                q = b.sdiv(t, const_i64(interior + 1))
                in_bounds = b.and_(in_bounds, b.icmp_signed("==", b.srem(t, const_i64(interior + 1)), const_i64(0)))
                t = q
            in_bounds = b.and_(in_bounds, b.icmp_signed(">=", t, const_i64(0)))
            in_bounds = b.and_(in_bounds, b.icmp_signed("<", t, const_i64(n)))
            multi.append(clamp_i64(b, t, 0, max(n - 1, 0)))
        return in_bounds, Index(b, op_dims, multi=multi), scalar

    branched = pad_branches(em, inst)  # the operand computed only where it is read

    def reads(p) -> list:
        in_bounds, j, scalar = p
        return [(pv, scalar)] if j is None or branched else [(g, j), (pv, scalar)]

    def compute(_idx: Index, p):
        in_bounds, j, scalar = p
        if j is None:
            return pv(scalar)
        if branched:
            padding = pv(scalar)  # (computed before the branch: it dominates both)
            return branch_chain(em, [(in_bounds, lambda: g(j)), (None, lambda: padding)])
        return b.select(in_bounds, g(j), pv(scalar))

    return Reading(em, plan, reads, compute)


@register_elemental("reverse")
def _reverse(em: ElementalEmitter, inst):
    g = em.operand(inst, 0)
    rev = set(inst.attrs["dimensions"])
    dims = dims_of(inst)
    b = em.b

    def mapping(idx: Index) -> Index:
        multi = [b.sub(const_i64(dims[d] - 1), v) if d in rev else v for d, v in enumerate(idx.multi)]
        return Index(b, dims, multi=multi)

    return remap(em, g, mapping)


@register_elemental("gather")
def _gather(em: ElementalEmitter, inst):
    """XLA's elemental gather: batch dims of the output pick a start index vector, offset dims
    walk the slice; starts are clamped so the slice stays in bounds."""
    g_op, g_idx = em.operand(inst, 0), em.operand(inst, 1)
    a = inst.attrs
    offset_dims = tuple(a.get("offset_dims", ()))
    collapsed = tuple(a.get("collapsed_slice_dims", ()))
    start_map = tuple(a.get("start_index_map", ()))
    op_batch = tuple(a.get("operand_batching_dims", ()))
    idx_batch = tuple(a.get("start_indices_batching_dims", ()))
    ivd = int(a["index_vector_dim"])
    sizes = tuple(a["slice_sizes"])
    op_dims = dims_of(inst.operands[0])
    idx_shape = inst.operands[1].shape
    idx_dims = tuple(idx_shape.dims)
    idx_et = idx_shape.dtype
    out_rank = len(dims_of(inst))
    batch_out = [d for d in range(out_rank) if d not in offset_dims]
    idx_non_vec = [d for d in range(len(idx_dims)) if d != ivd]
    window_op_dims = [d for d in range(len(op_dims)) if d not in collapsed and d not in op_batch]
    b = em.b

    def gen(idx: Index):
        batch_vals = [idx.multi[d] for d in batch_out]
        by_idx_dim = dict(zip(idx_non_vec, batch_vals))

        def start_component(k):
            multi = []
            for d in range(len(idx_dims)):
                multi.append(const_i64(k) if d == ivd else by_idx_dim[d])
            return index_to_i64(em, g_idx(Index(b, idx_dims, multi=multi)), idx_et)

        multi = []
        for d in range(len(op_dims)):
            v = const_i64(0)
            if d in start_map:
                v = clamp_i64(b, start_component(start_map.index(d)), 0, op_dims[d] - sizes[d])
            if d in op_batch:
                v = by_idx_dim[idx_batch[op_batch.index(d)]]
            elif d in window_op_dims:
                off = idx.multi[offset_dims[window_op_dims.index(d)]]
                v = b.add(v, off)
            multi.append(v)
        return g_op(Index(b, op_dims, multi=multi))

    return gen


@register_elemental("tuple")
def _tuple(em: ElementalEmitter, inst):
    return TupleGenerator([em.gen(op) for op in inst.operands])


@register_elemental("get-tuple-element")
def _gte(em: ElementalEmitter, inst):
    """Element k's own generator where the tuple is made of element generators (a tuple
    instruction, a tuple parameter): the elements may differ in dimensions, so the tuple must
    not be evaluated as a whole at this element's index. Ops computing a tuple at once (a
    variadic reduce) give all elements the same dimensions."""
    g = em.operand(inst, 0)
    k = int(inst.attrs["index"])
    if isinstance(g, TupleGenerator):
        return g.elements[k]
    return Reading(em, None, lambda idx: [(g, idx)], lambda idx, _: g(idx)[k])


# ---- ops with a called computation, inlined per element -------------------------------------
def _accumulate(em: ElementalEmitter, comp, inits: list, body):
    """Allocate accumulators (entry block), run `body(update)` where update(values) folds
    `values` into the accumulators through `comp`, and return the final accumulator values."""
    b = em.b
    slots = []
    with b.goto_entry_block():
        for v in inits:
            slots.append(b.alloca(v.type))
    for s, v in zip(slots, inits):
        b.store(v, s)

    def update(values):
        current = [b.load(s) for s in slots]
        res = em.call_scalar(comp, current + list(values), reduction=True)
        res = list(res) if isinstance(res, tuple) else [res]
        for s, r in zip(slots, res):
            b.store(r, s)

    body(update)
    return [b.load(s) for s in slots]


@register_elemental("reduce")
def _reduce(em: ElementalEmitter, inst):
    """Per output element, loop over the reduced dimensions (innermost = last operand dim)."""
    n = len(inst.operands) // 2
    ins, inits = inst.operands[:n], inst.operands[n:]
    gens = [em.gen(op) for op in ins]
    init_gens = [em.gen(op) for op in inits]
    rdims = sorted(inst.attrs["dimensions"])
    op_dims = dims_of(ins[0])
    kept = [d for d in range(len(op_dims)) if d not in rdims]
    comp = inst.attrs["to_apply"]
    b = em.b

    def gen(idx: Index):
        init_vals = [g(Index(b, (), multi=())) for g in init_gens]

        def body(update):
            def nest(level, fixed):
                if level == len(rdims):
                    multi = [None] * len(op_dims)
                    for d, v in zip(kept, idx.multi):
                        multi[d] = v
                    for d, v in zip(rdims, fixed):
                        multi[d] = v
                    index = Index(b, op_dims, multi=multi)
                    update([g(index) for g in gens])
                    return
                with for_range(b, const_i64(0), const_i64(op_dims[rdims[level]]), f"r{level}") as i:
                    nest(level + 1, fixed + [i])

            nest(0, [])

        out = _accumulate(em, comp, init_vals, body)
        return tuple(out) if n > 1 else out[0]

    return gen


@register_elemental("map")
def _map(em: ElementalEmitter, inst):
    gens = [em.gen(op) for op in inst.operands]
    comp = inst.attrs["to_apply"]
    return lambda idx: em.call_scalar(comp, [g(idx) for g in gens])


# Whether reduce-window's generator leaves out the bounds tests of positions every window
# stays inside (`_reduce_window`; a switch for A/B measurements).
UNTESTED_INSIDE_WINDOWS = True


@register_elemental("reduce-window")
def _reduce_window(em: ElementalEmitter, inst):
    """Per output element, loop over the window; positions in padding or between dilated base
    elements are skipped (as XLA's emitters do). Along a dimension where every window of every
    output stays on real elements (no padding reached, no base dilation: a pool of 2x2 with
    stride 2), no position is tested: the loop body is straight-line code that LLVM need not
    prove in bounds before vectorising it."""
    n = len(inst.operands) // 2
    ins, inits = inst.operands[:n], inst.operands[n:]
    gens = [em.gen(op) for op in ins]
    init_gens = [em.gen(op) for op in inits]
    window = inst.attrs["window"].dimensions
    op_dims = dims_of(ins[0])
    out_dims = tuple(inst.shape.leaves()[0].dims)  # every result of a variadic one alike
    comp = inst.attrs["to_apply"]
    b = em.b
    true = ir.Constant(I1, 1)

    def always_inside(level: int) -> bool:
        w = window[level]
        last = (out_dims[level] - 1) * w.stride + (w.size - 1) * w.window_dilation - w.padding_low
        return (UNTESTED_INSIDE_WINDOWS and out_dims[level] > 0 and w.base_dilation == 1
                and w.padding_low <= 0 and last <= op_dims[level] - 1)

    def gen(idx: Index):
        init_vals = [g(Index(b, (), multi=())) for g in init_gens]

        def body(update):
            def nest(level, pos, ok):
                if level == len(window):
                    if ok is true:
                        update([g(Index(b, op_dims, multi=pos)) for g in gens])
                        return
                    with b.if_then(ok):
                        index = Index(b, op_dims, multi=pos)
                        update([g(index) for g in gens])
                    return
                w = window[level]
                base = b.sub(b.mul(idx.multi[level], const_i64(w.stride)), const_i64(w.padding_low))
                inside = always_inside(level)

                def at(k):
                    p = b.add(base, b.mul(k, const_i64(w.window_dilation)))
                    if inside:
                        return p, ok
                    good = b.and_(b.icmp_signed(">=", p, const_i64(0)),
                                  b.icmp_signed("<", p, const_i64((op_dims[level] - 1) * w.base_dilation + 1)))
                    if w.base_dilation != 1:
                        good = b.and_(good, b.icmp_signed("==", b.srem(p, const_i64(w.base_dilation)), const_i64(0)))
                        p = b.sdiv(p, const_i64(w.base_dilation))
                    return p, b.and_(ok, good)

                if w.size == 1:
                    p, good = at(const_i64(0))
                    nest(level + 1, pos + [p], good)
                else:
                    with for_range(b, const_i64(0), const_i64(w.size), f"w{level}") as k:
                        p, good = at(k)
                        nest(level + 1, pos + [p], good)

            nest(0, [], true)

        out = _accumulate(em, comp, init_vals, body)
        return tuple(out) if n > 1 else out[0]

    return gen
