"""CPU select-and-scatter kernels (the gradient of max pooling), compiled.

    plans = plan_select_scatter(comp, name)   # two KernelPlans, custom="select_and_scatter"
    emit_select_scatter_kernel(skel, plan)

`select-and-scatter(operand, source, init)` fills the result with `init`, then for each
source element (one window of the operand) selects an operand element of the window - the
first real element (padding is never selected) is the pick, and each next one replaces it
unless `select(pick, next)` is true - and combines the source element into the result at the
pick: result[pick] = scatter(source, result[pick]), the order XLA's evaluator and the
interpreter (runtime/interpreter/windows.py) use. The select and scatter computations are
inlined by the elemental emitter (any scalar computation with element generators).

Two kernels: stage "init" fills the result (rows of its last dimension are the work units);
stage "scatter" walks the source. Windows that overlap (a stride smaller than the window in
some dimension) may pick the same result element from several windows, which must combine in
the source's row-major order, the interpreter's. Where windows of different source rows (the
outermost dimension, a pooled batch) cannot overlap, the units are the source's rows, split
across threads, each walking its windows in that order (a 3x3 max pool of stride 2 over a batch:
its windows overlap along the image, never across images); otherwise the kernel is one unit.
"""
from __future__ import annotations

import math

from llvmlite import ir

from ...emitters.elemental import ElementalEmitter, mem_type, supported_type
from ...emitters.ir_helpers import I1, const_i64, for_range, load_element, row_major_strides, store_element
from ...hlo.ir import HloComputation, HloInstruction
from .args import typed_pointer


def _emittable(comp: HloComputation) -> bool:
    return all(i.opcode == "parameter" or i.info.elemental is not None for i in comp.instructions)


def find_select_scatter(comp: HloComputation) -> HloInstruction | None:
    """The select-and-scatter a kernel computes for `comp` (its root, on parameters, with
    undilated windows, real or integer types and emittable select/scatter), or None."""
    root = comp.root
    if root.opcode != "select-and-scatter" or any(op.opcode != "parameter" for op in root.operands):
        return None
    operand, source, init = (op.shape for op in root.operands)
    if not (operand.is_array and source.is_array and init.is_array and root.shape.is_array):
        return None
    if any(not supported_type(s.dtype) or s.dtype.is_complex for s in (operand, source, init, root.shape)):
        return None
    window = root.attrs.get("window")
    if window is None or len(window.dimensions) != len(operand.dims):
        return None
    if any(d.base_dilation != 1 or d.window_dilation != 1 for d in window.dimensions):
        return None
    if not (_emittable(root.attrs["select"]) and _emittable(root.attrs["scatter"])):
        return None
    return root


def _overlapping_rows(inst: HloInstruction) -> bool:
    """Whether windows of different source rows (indices of the outermost dimension) can
    overlap: a stride smaller than the window along it. Where they cannot, the rows write
    disjoint parts of the result, and each row walks its windows in row-major order, overlapping
    or not among themselves, so the rows are work units for several threads and every result
    element still combines its picks in the interpreter's order."""
    d = inst.attrs["window"].dimensions[0]
    return d.stride < d.size


def plan_select_scatter(comp: HloComputation, name: str):
    """The init and scatter kernel plans for `comp`, or None."""
    from ..planning import KernelPlan

    inst = find_select_scatter(comp)
    if inst is None:
        return None
    dims = tuple(inst.shape.dims)
    rows, row = (math.prod(dims[:-1]), dims[-1]) if dims else (1, 1)
    src = tuple(inst.operands[1].shape.dims)
    taps = math.prod(d.size for d in inst.attrs["window"].dimensions)
    if not src or _overlapping_rows(inst):
        units, per_unit = (1 if math.prod(src) else 0), math.prod(src) * taps
    else:
        units, per_unit = src[0], math.prod(src[1:]) * taps
    io = dict(inputs=[("in", 0), ("in", 1), ("in", 2)], results=[("out", 0)], custom="select_and_scatter")
    return [KernelPlan(comp, [0], rows if math.prod(dims) else 0, row, None, name=f"{name}_fill", stage="init", **io),
            KernelPlan(comp, [0], units, max(per_unit, 1), None, name=f"{name}_sas", stage="scatter", **io)]


def emit_select_scatter_kernel(skel, plan) -> None:
    """Fill CPU kernel skeleton `skel` with the init or scatter stage of `plan`."""
    inst = find_select_scatter(plan.comp)
    if inst is None:
        raise ValueError(f"kernel {plan.name}: its computation is not a select-and-scatter the kernel handles")
    b = skel.builder
    operand, source, init = inst.operands
    args = skel.function.args
    out_t = inst.shape.dtype
    out = skel.output_ptr(0)
    dims = tuple(inst.shape.dims)
    if plan.stage == "init":
        row = dims[-1] if dims else 1
        value = load_element(b, typed_pointer(b, args[init.parameter_number], init.shape.dtype), init.shape.dtype)
        # One flat loop over the units' elements (contiguous rows): LLVM vectorizes it as it
        # is, where a loop over rows of a short constant row was fully unrolled inside and then
        # vectorized across rows (haiku's 64-wide pooling gradient: 62 ms of LLVM for a fill).
        first = b.mul(skel.begin, const_i64(row), flags=["nuw", "nsw"])
        last = b.mul(skel.end, const_i64(row), flags=["nuw", "nsw"])
        with for_range(b, first, last, "fill") as lin:
            store_element(b, value, b.gep(out, [lin], inbounds=True), out_t)
        skel.finish()
        return
    if _channels_in_vectors(inst):
        _emit_channel_scatter(skel, inst, out)
    else:
        _emit_scatter(skel, inst, out)


# The most elements of the source's last dimension whose picks the channel kernel keeps in
# stack rows (`_channels_in_vectors`): two rows of this many, a value and an index each.
CHANNEL_ROW = 4096


def _channels_in_vectors(inst: HloInstruction) -> bool:
    """Whether the scatter stage selects a whole row of the last dimension at once
    (`_emit_channel_scatter`): a source of rank 2 or more whose window along the last dimension
    is one element with stride 1 and no padding (channels-last pooling), so every window's taps
    are whole rows of the operand."""
    window = inst.attrs["window"].dimensions
    sdims = tuple(inst.operands[1].shape.dims)
    if len(sdims) < 2:
        return False
    last = window[-1]
    return (last.size == 1 and last.stride == 1 and last.padding_low == 0 and last.padding_high == 0
            and 0 < sdims[-1] <= CHANNEL_ROW)


def _emit_channel_scatter(skel, inst: HloInstruction, out: ir.Value) -> None:
    """The scatter stage a row of the last dimension (channels) at a time: per source position
    but the last index, the window's taps are walked once, each tap a loop over the channels
    that keeps or replaces each channel's pick (its value, and the tap's number: the tap's row
    of the operand starts at `tap_row[number]`), compares and selects without a branch, which
    LLVM vectorises across the channels; then one loop combines each channel's source element
    at its pick. Per channel the taps come in row-major order (the first real element, then
    `select(pick, next)` decides) and the picks are combined in the source's order: the
    element-at-a-time kernel's results, bit for bit.

    The element-at-a-time kernel branched on every tap's compare, a branch the data decides
    (the gradient of a 3x3/2 max pool over f32[16,112,112,64]: 34 ns a source element). A pick
    is a tap's number, not the element's index: a 64-bit index computed in the vectorised loop
    cost LLVM's induction-variable passes 0.3 s for one kernel when narrowed to 32 bits."""
    b, em = skel.builder, ElementalEmitter(skel.builder, skel.target, skel.param_gen)
    x, s, op_t, src_t, out_t, window, odims, sdims, ostr, sstr = _scatter_operands(skel, inst)
    channels = sdims[-1]
    sizes = [d.size for d in window[:-1]]
    tap_strides = row_major_strides(tuple(sizes))
    i32, i64 = ir.IntType(32), ir.IntType(64)
    with b.goto_entry_block():
        best = b.alloca(mem_type(op_t), size=channels, name="best")
        pick = b.alloca(i32, size=channels, name="pick")
        tap_row = b.alloca(i64, size=max(math.prod(sizes), 1), name="tap_row")
        have = b.alloca(I1, name="have")

    def per_position(spos: list) -> None:
        b.store(ir.Constant(I1, 0), have)

        def taps(level: int, base, tap) -> None:
            if level == len(window) - 1:  # the last dimension: the row of channels at `base`
                b.store(base, b.gep(tap_row, [tap], inbounds=True))
                number = b.trunc(tap, i32)
                first = b.not_(b.load(have))
                with b.if_else(first) as (then, otherwise):
                    with then:
                        with for_range(b, const_i64(0), const_i64(channels), "first") as c:
                            v = load_element(b, b.gep(x, [b.add(base, c)], inbounds=True), op_t)
                            store_element(b, v, b.gep(best, [c], inbounds=True), op_t)
                            b.store(number, b.gep(pick, [c], inbounds=True))
                    with otherwise:
                        with for_range(b, const_i64(0), const_i64(channels), "next") as c:
                            v = load_element(b, b.gep(x, [b.add(base, c)], inbounds=True), op_t)
                            slot = b.gep(best, [c], inbounds=True)
                            held = load_element(b, slot, op_t)
                            keep = em.call_scalar(inst.attrs["select"], [held, v])
                            store_element(b, b.select(keep, held, v), slot, op_t)
                            where = b.gep(pick, [c], inbounds=True)
                            b.store(b.select(keep, b.load(where), number), where)
                b.store(ir.Constant(I1, 1), have)
                return
            d = window[level]
            with for_range(b, const_i64(0), const_i64(d.size), f"k{level}") as k:
                q, inside = _tap_position(b, spos[level], k, d, odims[level])
                with b.if_then(inside):
                    taps(level + 1, b.add(base, b.mul(q, const_i64(ostr[level]))),
                         b.add(tap, b.mul(k, const_i64(tap_strides[level]))))

        taps(0, const_i64(0), const_i64(0))
        with b.if_then(b.load(have)):
            row = const_i64(0)
            for p, st in zip(spos, sstr):
                row = b.add(row, b.mul(p, const_i64(st)))
            with for_range(b, const_i64(0), const_i64(channels), "combine") as c:
                sv = load_element(b, b.gep(s, [b.add(row, c)], inbounds=True), src_t)
                number = b.zext(b.load(b.gep(pick, [c], inbounds=True)), i64)
                at = b.add(b.load(b.gep(tap_row, [number], inbounds=True)), c)
                dst = b.gep(out, [at], inbounds=True)
                store_element(b, em.call_scalar(inst.attrs["scatter"], [sv, load_element(b, dst, out_t)]), dst, out_t)

    _walk_source(skel, inst, len(sdims) - 1, per_position)


def _scatter_operands(skel, inst: HloInstruction) -> tuple:
    """What both scatter stages read: the operand and source pointers, the three element types,
    the window's dimensions, and the operand's and source's dimensions and row-major strides."""
    b = skel.builder
    operand, source, _ = inst.operands
    op_t, src_t, out_t = operand.shape.dtype, source.shape.dtype, inst.shape.dtype
    x = typed_pointer(b, skel.function.args[operand.parameter_number], op_t)
    s = typed_pointer(b, skel.function.args[source.parameter_number], src_t)
    odims, sdims = tuple(operand.shape.dims), tuple(source.shape.dims)
    return (x, s, op_t, src_t, out_t, inst.attrs["window"].dimensions, odims, sdims,
            row_major_strides(odims), row_major_strides(sdims))


def _tap_position(b: ir.IRBuilder, source_index: ir.Value, k: ir.Value, d, size: int) -> tuple:
    """The operand index of tap `k` of window dimension `d` for source index `source_index`,
    and whether it is a real element (not padding) of an operand dimension of `size`."""
    q = b.add(b.mul(source_index, const_i64(d.stride)), b.sub(k, const_i64(d.padding_low)))
    return q, b.and_(b.icmp_signed(">=", q, const_i64(0)), b.icmp_signed("<", q, const_i64(size)))


def _walk_source(skel, inst: HloInstruction, depth: int, body) -> None:
    """Loops over the first `depth` source dimensions within the kernel's units (the rows of
    the outermost one, or everything in one unit where rows' windows overlap), row-major;
    `body(indices)` emits the work at each position. Then the kernel's end."""
    b = skel.builder
    sdims = tuple(inst.operands[1].shape.dims)

    def nest(level: int, spos: list) -> None:
        if level == depth:
            body(spos)
            return
        with for_range(b, const_i64(0), const_i64(sdims[level]), f"s{level}") as i:
            nest(level + 1, spos + [i])

    with for_range(b, skel.begin, skel.end, "unit") as u:
        if not sdims or _overlapping_rows(inst):
            nest(0, [])
        else:
            nest(1, [u])
    skel.finish()


def _emit_scatter(skel, inst: HloInstruction, out: ir.Value) -> None:
    """The scatter stage: per source element, select in its window, combine at the pick."""
    b, em = skel.builder, ElementalEmitter(skel.builder, skel.target, skel.param_gen)
    x, s, op_t, src_t, out_t, window, odims, sdims, ostr, sstr = _scatter_operands(skel, inst)
    # Per-window state, allocated once in the entry block.
    have = b.alloca(I1, name="have")
    best = b.alloca(mem_type(op_t), name="best")
    pick = b.alloca(ir.IntType(64), name="pick")

    def per_source(spos: list) -> None:
        b.store(ir.Constant(I1, 0), have)
        b.store(const_i64(0), pick)

        def taps(level: int, lin, ok) -> None:
            if level == len(window):
                with b.if_then(ok):
                    v = load_element(b, b.gep(x, [lin], inbounds=True), op_t)
                    had = b.load(have)
                    with b.if_else(had) as (then, otherwise):
                        with then:
                            keep = em.call_scalar(inst.attrs["select"], [load_element(b, best, op_t), v])
                            with b.if_then(b.not_(keep)):
                                store_element(b, v, best, op_t)
                                b.store(lin, pick)
                        with otherwise:
                            store_element(b, v, best, op_t)
                            b.store(lin, pick)
                            b.store(ir.Constant(I1, 1), have)
                return
            d = window[level]
            with for_range(b, const_i64(0), const_i64(d.size), f"k{level}") as k:
                q, inside = _tap_position(b, spos[level], k, d, odims[level])
                taps(level + 1, b.add(lin, b.mul(q, const_i64(ostr[level]))), b.and_(ok, inside))

        taps(0, const_i64(0), ir.Constant(I1, 1))
        with b.if_then(b.load(have)):
            slin = const_i64(0)
            for p, st in zip(spos, sstr):
                slin = b.add(slin, b.mul(p, const_i64(st)))
            sv = load_element(b, b.gep(s, [slin], inbounds=True), src_t)
            dst = b.gep(out, [b.load(pick)], inbounds=True)
            new = em.call_scalar(inst.attrs["scatter"], [sv, load_element(b, dst, out_t)])
            store_element(b, new, dst, out_t)

    _walk_source(skel, inst, len(sdims), per_source)
