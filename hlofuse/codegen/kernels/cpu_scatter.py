"""Scatter kernels: a loop over the update elements with the combiner inlined.

    planned = plan_scatter(comp, name)   # (kernels, inplace) or None
    emit_scatter_kernel(skel, plan)      # CUSTOM_EMITTERS["scatter"]

`comp` is an unfused scatter wrapped into a computation, or an input fusion rooted at a
scatter whose index and update producers are fused in (passes/fusion: never its operands or
anything reading them). The output buffers already hold the operands when the kernel runs
(`Step.inplace`), so the kernel only visits the updates, XLA's scatter semantics:

  * a *scatter position* p runs over the update dimensions that are not update_window_dims;
    the index vector at p (along index_vector_dim of the indices) gives the start in the
    operand dimensions scatter_dims_to_operand_dims; input_batching_dims take the position's
    index along the matching scatter_indices_batching_dims;
  * the window (update_window_dims, mapped in order onto the operand dimensions that are neither
    inserted_window_dims nor input_batching_dims) is written whole or skipped whole: a window
    that does not lie inside the operand is dropped (starts are not clamped);
  * each element becomes to_apply(current output values..., update values...), inlined through
    the element generators (variadic scatters combine several operands at once).

Positions run in order, each window in row-major order (a loop per window dimension, so the
innermost is affine and LLVM vectorizes it), as the reference interpreter applies them, so
duplicate indices combine in the same order and give the same bits. The kernel's work units:
positions, where the scatter says unique_indices (they write disjoint windows); else the
indices of the outermost window dimension where its operand dimension takes no scattered start
(`window_split`: every position writes index w of that dimension at w, so units write
disjoint elements, each in the positions' order: the same bits); else one unit. An embedding
bag's gradient or segment sum (a DLRM's eight tables of [2048, 64] summed from 8,192 gathered
rows each) runs its tables on both cores that way.
"""
from __future__ import annotations

import math

from llvmlite import ir

from ...emitters.elemental import ElementalEmitter
from ...emitters.elemental_data import index_to_i64
from ...emitters.ir_helpers import I1, Index, const_i64, delinearize, for_range, linearize, load_element, store_element
from ...hlo.ir import HloComputation, HloInstruction
from .args import output_leaves, param_leaf_slots


def scatter_root(comp: HloComputation) -> tuple[HloInstruction, list[HloInstruction]] | None:
    """(the scatter, its updated parameters) when `comp` is rooted at a scatter whose updated
    operands are distinct parameters that nothing else in `comp` reads, else None."""
    root = comp.root
    if root.opcode != "scatter":
        return None
    n = (len(root.operands) - 1) // 2
    params = root.operands[:n]
    if any(p.opcode != "parameter" for p in params) or len(set(params)) != n:
        return None
    if any(u is not root or sum(op is p for op in root.operands) != 1 for p in params for u in p.users):
        return None
    return root, list(params)


def _positions(scatter: HloInstruction) -> tuple[list[int], list[int]]:
    """(scatter dimensions, window dimensions) of the updates."""
    window = [int(d) for d in scatter.attrs.get("update_window_dims", ())]
    rank = scatter.operands[-1].shape.rank
    return [d for d in range(rank) if d not in window], window


def window_split(scatter: HloInstruction) -> bool:
    """Whether a scatter's units are the indices of its outermost window dimension: not
    unique_indices (positions are the units then), that dimension longer than 1, and its
    operand dimension not one the indices give starts in."""
    if scatter.attrs.get("unique_indices", False):
        return False
    _sdims, wdims = _positions(scatter)
    if not wdims:
        return False
    upd_dims = scatter.operands[-1].shape.dims
    rank = scatter.operands[0].shape.rank
    inserted = {int(d) for d in scatter.attrs.get("inserted_window_dims", ())}
    batch = {int(d) for d in scatter.attrs.get("input_batching_dims", ())}
    window_op_dims = [d for d in range(rank) if d not in inserted and d not in batch]
    scattered = {int(d) for d in scatter.attrs.get("scatter_dims_to_operand_dims", ())}
    return upd_dims[wdims[0]] > 1 and window_op_dims[0] not in scattered


def plan_scatter(comp: HloComputation, name: str) -> tuple[list, dict[int, int]] | None:
    """The scatter kernel of `comp` and the Step.inplace map (output leaf -> operand leaf), or
    None when `comp` is not a scatter that can run in place."""
    from ..planning import KernelPlan  # planning imports the kernel modules

    found = scatter_root(comp)
    if found is None:
        return None
    scatter, params = found
    upd_dims = scatter.operands[-1].shape.dims
    sdims, wdims = _positions(scatter)
    positions = math.prod(upd_dims[d] for d in sdims)
    window = math.prod(upd_dims[d] for d in wdims)
    parallel = bool(scatter.attrs.get("unique_indices", False))
    split = window_split(scatter)
    if parallel:
        units, per_unit = positions, window
    elif split and positions and window:
        units = upd_dims[wdims[0]]
        per_unit = positions * (window // units)
    else:
        units, per_unit = min(positions, 1) * (1 if window else 0), window * positions
    slots = param_leaf_slots(comp)
    n_in = sum(len(s) for s in slots.values())
    n_out = len(output_leaves(comp))
    kernel = KernelPlan(comp, list(range(n_out)), units, per_unit, None,
                        name=f"{name}_scatter", inputs=[("in", i) for i in range(n_in)],
                        results=[("out", q) for q in range(n_out)], custom="scatter")
    return [kernel], {k: slots[p.parameter_number][0][0] for k, p in enumerate(params)}


def emit_scatter_kernel(skel, plan) -> None:
    """Fill CPU kernel skeleton `skel` with scatter kernel `plan` (custom="scatter")."""
    scatter, _params = scatter_root(plan.comp)
    a = scatter.attrs
    n = (len(scatter.operands) - 1) // 2
    indices, updates = scatter.operands[n], scatter.operands[n + 1:]
    op_dims = tuple(scatter.operands[0].shape.dims)
    upd_dims = tuple(updates[0].shape.dims)
    idx_dims = tuple(indices.shape.dims)
    ivd = int(a["index_vector_dim"])
    to_operand = [int(d) for d in a.get("scatter_dims_to_operand_dims", ())]
    inserted = [int(d) for d in a.get("inserted_window_dims", ())]
    op_batch = [int(d) for d in a.get("input_batching_dims", ())]
    idx_batch = [int(d) for d in a.get("scatter_indices_batching_dims", ())]
    sdims, wdims = _positions(scatter)
    window_op_dims = [d for d in range(len(op_dims)) if d not in inserted and d not in op_batch]
    sizes = [1] * len(op_dims)
    for od, ud in zip(window_op_dims, wdims):
        sizes[od] = upd_dims[ud]
    pos_dims = [upd_dims[d] for d in sdims]
    win_dims = [upd_dims[d] for d in wdims]
    idx_scatter_dims = [d for d in range(len(idx_dims)) if d != ivd]
    positions = math.prod(pos_dims)
    parallel = bool(a.get("unique_indices", False))

    b = skel.builder
    em = ElementalEmitter(b, skel.target, skel.param_gen)
    g_idx = em.gen(indices)
    g_upd = [em.gen(u) for u in updates]
    leaves = output_leaves(plan.comp)
    outs = [skel.output_ptr(k) for k in range(len(leaves))]
    combiner = a["to_apply"]
    split = window_split(scatter)
    any_unit = b.icmp_signed(">", skel.end, skel.begin)
    lo, hi = (skel.begin, skel.end) if parallel else (const_i64(0), b.select(any_unit, const_i64(positions),
                                                                             const_i64(0)))

    with for_range(b, lo, hi, "pos") as p:
        pos = delinearize(b, p, pos_dims) if pos_dims else []
        by_idx_dim = dict(zip(idx_scatter_dims, pos))
        starts = [const_i64(0)] * len(op_dims)
        for k, od in enumerate(to_operand):
            multi = [const_i64(k) if d == ivd else by_idx_dim[d] for d in range(len(idx_dims))]
            starts[od] = index_to_i64(em, g_idx(Index(b, idx_dims, multi=multi)), indices.shape.dtype)
        for od, idim in zip(op_batch, idx_batch):
            starts[od] = by_idx_dim[idim]
        inside = ir.Constant(I1, 1)
        for od in range(len(op_dims)):
            inside = b.and_(inside, b.icmp_signed(">=", starts[od], const_i64(0)))
            inside = b.and_(inside, b.icmp_signed("<=", starts[od], const_i64(op_dims[od] - sizes[od])))
        with b.if_then(inside):
            def element(win: list) -> None:
                upd_multi = [None] * len(upd_dims)
                for d, v in zip(sdims, pos):
                    upd_multi[d] = v
                for d, v in zip(wdims, win):
                    upd_multi[d] = v
                upd_index = Index(b, upd_dims, multi=upd_multi)
                target = list(starts)
                for od, v in zip(window_op_dims, win):
                    target[od] = b.add(target[od], v, flags=["nsw"])
                lin = linearize(b, target, op_dims)
                ptrs = [b.gep(o, [lin], inbounds=True) for o in outs]
                current = [load_element(b, q, leaf.shape.dtype) for q, leaf in zip(ptrs, leaves)]
                result = em.call_scalar(combiner, current + [g(upd_index) for g in g_upd])
                result = list(result) if isinstance(result, tuple) else [result]
                for v, q, leaf in zip(result, ptrs, leaves):
                    store_element(b, v, q, leaf.shape.dtype)

            def window(k: int, win: list) -> None:
                """Window dimensions k.. in row-major order, one loop each."""
                if k == len(win_dims):
                    element(win)
                    return
                first, last = ((skel.begin, skel.end) if k == 0 and split else (const_i64(0), const_i64(win_dims[k])))
                with for_range(b, first, last, f"win{k}") as v:
                    window(k + 1, win + [v])

            window(0, [])
    skel.finish()
