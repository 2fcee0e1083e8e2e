"""GPU tree reduction rewriter (XLA's GpuTreeReductionRewriter): a reduction over more
elements than one GPU kernel folds well becomes two reductions, each over about the square
root of them.

hlofuse's GPU reduction kernels (codegen/kernels/gpu_reduction.py) let each thread fold a
tile of ROW_TILE (row) or COLUMN_TILE (column) elements and then combine its partial into the
output by an atomic (or by a finish kernel folding the partials in order). Over R reduced
elements that is R / tile partials added one after another into one accumulator: a sum of
654,704,640 ones in f32 stalled at 2^27 = 134,217,728 (each partial of 8 ones is half an ulp
of that total), 79% low (XLA's constant folding test module, gpu-emulated); on a real GPU the
same 82 million atomics on one address would also serialise the kernel. So, as XLA's GPU
compiler does before fusion, a reduce whose reduced dimensions are one contiguous run of R >
bound elements (ROW_BOUND when nothing follows them, COLUMN_BOUND when kept dimensions do) is
rewritten:

    x: [a..., R, b...]  ->  pad to R' = k * m with the init value (when m does not divide R)
                        ->  reshape [a..., k, m, b...]
                        ->  inner reduce over m  ->  [a..., k, b...]
                        ->  outer reduce over k  ->  the original result

with m about sqrt(R) (at most the bound) chosen, as XLA chooses it, for the least padding
and then a power of two; an outer reduce still over the bound is split again. Each
accumulator then takes about sqrt(R) / tile partials. Both reduces fold contiguous runs in
position order, so a reducer the kernels fold in order (variadic ones, jax's argmax) keeps
the interpreter's answer; the init value enters every run, which HLO's reduce allows (the
init is the reducer's identity, as for XLA). Not rewritten, as in XLA: max and min reducers
(their result does not depend on the order); also reduces into floats narrower than f32
(planning.tree_reduction_rewrite gives them XLA:CPU's order of windows of 32 on every
target), inputs in a layout other than row-major, reduced dimensions that are not one run,
and an init whose type differs from its input's (the padding is the init).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..hlo.ir import HloComputation, HloInstruction
from ..hlo.shapes import TupleShape, array
from .op_expander import OpExpander, add

# Reduced elements beyond which a reduce is split: 1,024 tiles of gpu_reduction.ROW_TILE (8)
# per row accumulator, 128 of COLUMN_TILE (32) per column accumulator (XLA's own bounds are of
# the same order: a warp squared times 8 for rows, a warp times 128 for columns).
ROW_BOUND = 8192
COLUMN_BOUND = 4096


@dataclass(frozen=True)
class TreeReductionRewriter(OpExpander):
    """Split each reduction over more than the bound's elements into two (module docstring).
    Work: one walk of the module, plus the instructions each split adds."""

    name = "tree-reduction-rewriter"

    def matches(self, inst: HloInstruction) -> bool:
        """A reduce over one contiguous run of more than the bound's reduced elements."""
        return inst.opcode == "reduce" and _run_over_bound(inst) is not None

    def expand(self, inst: HloInstruction, run: dict) -> HloInstruction:
        """The reduces replacing `inst`: inner ones over about sqrt(R) each, then the outer."""
        n = len(inst.operands) // 2
        first, last = _run_over_bound(inst)
        return _tree(inst.parent, list(inst.operands[:n]), list(inst.operands[n:]), first, last, inst.shape,
                     inst.attrs["to_apply"])


def _bound(dims: tuple, last: int) -> int:
    """The split bound of a reduced run ending at dimension `last` of `dims`."""
    return COLUMN_BOUND if last < len(dims) - 1 else ROW_BOUND


def _run_over_bound(inst: HloInstruction) -> tuple[int, int] | None:
    """(first, last) of the reduced dimensions of a reduce the pass splits: one contiguous run
    of more than the bound's elements, inputs it can pad and reshape; else None."""
    rdims = sorted(int(d) for d in inst.attrs.get("dimensions", ()))
    if not rdims or rdims != list(range(rdims[0], rdims[-1] + 1)):
        return None
    if inst.attrs["to_apply"].root.opcode in ("maximum", "minimum"):
        return None
    n = len(inst.operands) // 2
    inputs, inits = inst.operands[:n], inst.operands[n:]
    for x, init in zip(inputs, inits):
        shape = x.shape
        if shape.is_tuple or not shape.is_static() or not shape.is_row_major():
            return None
        if shape.dtype != init.shape.dtype or shape.dims != inputs[0].shape.dims:
            return None
        if shape.dtype.kind == "float" and shape.dtype.bits < 32:
            return None
    dims = tuple(inputs[0].shape.dims)
    if math.prod(dims[rdims[0]:rdims[-1] + 1]) <= _bound(dims, rdims[-1]):
        return None
    return rdims[0], rdims[-1]


def _split_size(n: int, bound: int) -> tuple[int, int]:
    """(k, m) with k * m >= n the least such product over m between about sqrt(n) / 2 and
    min(sqrt(n), bound), a power of two m preferred among equal paddings (XLA's choice)."""
    m = min(math.isqrt(n), bound)
    best_pad, best_m = (m - n % m) % m, m
    for i in range(m - 1, m // 2, -1):
        pad = (i - n % i) % i
        if pad < best_pad or (pad == best_pad and i & (i - 1) == 0):
            best_pad, best_m = pad, i
    return (n + best_pad) // best_m, best_m


def _tree(comp: HloComputation, inputs: list, inits: list, first: int, last: int, shape, reducer) -> HloInstruction:
    """The reduce of `inputs` over dimensions first..last into `shape`, added to `comp`: one
    reduce where the run is within the bound, else an inner reduce over m of R = k * m (padded
    with the init) and the tree of the k partials."""
    dims = tuple(inputs[0].shape.dims)
    before, after = dims[:first], dims[last + 1:]
    total = math.prod(dims[first:last + 1])
    bound = _bound(dims, last)
    if total <= bound:
        return add(comp, "reduce", shape, *inputs, *inits, dimensions=tuple(range(first, last + 1)),
                   to_apply=reducer)
    k, m = _split_size(total, bound)
    inner_inputs = []
    for x, init in zip(inputs, inits):
        t = x.shape.dtype
        flat = x if last == first else add(comp, "reshape", array(t, (*before, total, *after)), x)
        if k * m != total:
            padding = tuple((0, k * m - total, 0) if d == len(before) else (0, 0, 0)
                            for d in range(len(before) + 1 + len(after)))
            flat = add(comp, "pad", array(t, (*before, k * m, *after)), flat, init, padding=padding)
        inner_inputs.append(add(comp, "reshape", array(t, (*before, k, m, *after)), flat))
    partial_shapes = [array(init.shape.dtype, (*before, k, *after)) for init in inits]
    inner_shape = partial_shapes[0] if len(inputs) == 1 else TupleShape(elements=tuple(partial_shapes))
    inner = add(comp, "reduce", inner_shape, *inner_inputs, *inits, dimensions=(len(before) + 1,),
                to_apply=reducer)
    partials = [inner] if len(inputs) == 1 else [add(comp, "get-tuple-element", s, inner, index=i)
                                                 for i, s in enumerate(partial_shapes)]
    return _tree(comp, partials, inits, len(before), len(before), shape, reducer)
