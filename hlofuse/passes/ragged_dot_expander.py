"""`ragged-dot` as a dot over a one-hot group dimension, for the compiled backends (the
interpreter computes ragged-dot itself, runtime/interpreter/dot.py, the oracle of this rewrite).

A ragged dot cuts its lhs ragged dimension into consecutive groups of `group_sizes`; a row of
group g meets only group g of the rhs (a ragged non-contracting dimension: mixture-of-experts
layers, `jax.lax.ragged_dot`), or group g sums only its own range of a ragged contracting
dimension into result slice g. Both become one ordinary dot once the lhs carries a group
dimension G that holds each element in the slice of its own group and zeros elsewhere (sizes
that run past the dimension, or are negative, give the interpreter's answer too: membership is
the same range test):

    ends[g]   = sizes[0] + ... + sizes[g]                  (a reduce of a lower-triangular select)
    in[i, g]  = ends[g] - sizes[g] <= i < ends[g]          (position i of the ragged dimension)
    lhs'      = select(in[i, g], lhs, 0)                   [lhs dims..., G]
    non-contracting:  dot(lhs', rhs) contracting G with the rhs group dimension
    contracting:      dot(lhs', rhs) keeping G, transposed to the front of the result
    batch:            the plain dot (batch entries are independent; group sizes change nothing)

A select, not a multiply by the one-hot mask, so that an inf or NaN of another group's rows
does not reach a row (0 * inf is NaN). Each output element sums the products of its own
group plus exact zeros: the interpreter's sums, up to order. Group sizes of rank 1 only (one
grouping for the whole lhs, as jax.lax.ragged_dot makes); a ragged dot with per-batch group
sizes is left, and the backends refuse it by name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.attributes import Raw
from ..hlo.dtypes import PRED
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..hlo.shapes import ArrayShape, Layout
from .pass_base import HloPass
from .rewrite import Rewriter
from .simplifier_base import splat


def _dims(inst: HloInstruction, *names: str) -> tuple[int, ...]:
    """The first of the dimension-list attributes `names` that is present (XLA prints
    lhs_ragged_dims, StableHLO's import may keep the long name as raw text)."""
    for name in names:
        value = inst.attrs.get(name)
        if isinstance(value, Raw):
            value = [v for v in str(value).strip().strip("{}").split(",") if v.strip()]
        if value:
            return tuple(int(d) for d in value)
    return ()


def _array(dtype, dims) -> ArrayShape:
    dims = tuple(int(d) for d in dims)
    return ArrayShape(dtype, dims, (False,) * len(dims), Layout.default(len(dims)))


class _Builder:
    """Adds instructions before a ragged dot in its computation."""

    def __init__(self, comp: HloComputation, adder: HloComputation) -> None:
        self.comp, self.adder = comp, adder

    def op(self, opcode: str, shape, *operands: HloInstruction, **attrs) -> HloInstruction:
        return self.comp.add_instruction(HloInstruction(opcode, shape, list(operands), attrs, name=opcode))

    def splat(self, shape, value) -> HloInstruction:
        out = splat(shape, value)
        self.comp.add_instruction(out.operands[0])
        return self.comp.add_instruction(out)

    def membership(self, sizes: HloInstruction, length: int) -> HloInstruction:
        """pred[length, G]: whether position i of the ragged dimension is in group g, that is
        starts[g] <= i < ends[g] with ends the running sum of the sizes and starts = ends -
        sizes (the interpreter's definition, whatever the sizes hold)."""
        t = sizes.shape.dtype
        groups = sizes.shape.dims[0]
        square = _array(t, (groups, groups))
        h = self.op("iota", square, iota_dimension=0)  # the summed group
        g = self.op("iota", square, iota_dimension=1)  # the group whose end is summed
        upto = self.op("compare", _array(PRED, (groups, groups)), h, g, direction="LE")
        sized = self.op("broadcast", square, sizes, dimensions=(0,))
        terms = self.op("select", square, upto, sized, self.splat(square, 0))
        ends = self.op("reduce", _array(t, (groups,)), terms, self.splat(_array(t, ()), 0), dimensions=(0,),
                       to_apply=self.adder)
        starts = self.op("subtract", _array(t, (groups,)), ends, sizes)
        grid, mask = _array(t, (length, groups)), _array(PRED, (length, groups))
        position = self.op("iota", grid, iota_dimension=0)
        after_start = self.op("compare", mask, position, self.op("broadcast", grid, starts, dimensions=(1,)),
                              direction="GE")
        before_end = self.op("compare", mask, position, self.op("broadcast", grid, ends, dimensions=(1,)),
                             direction="LT")
        return self.op("and", mask, after_start, before_end)

    def grouped_lhs(self, lhs: HloInstruction, ragged: int, member: HloInstruction) -> HloInstruction:
        """lhs with a last dimension of G: each element where its position is in group g, 0
        elsewhere."""
        rank = lhs.shape.rank
        dims = (*lhs.shape.dims, member.shape.dims[1])
        inside = self.op("broadcast", _array(PRED, dims), member, dimensions=(ragged, rank))
        wide = self.op("broadcast", _array(lhs.shape.dtype, dims), lhs, dimensions=tuple(range(rank)))
        return self.op("select", _array(lhs.shape.dtype, dims), inside, wide, self.splat(_array(lhs.shape.dtype, dims), 0))


def expandable(inst: HloInstruction) -> bool:
    """Whether the rewrite handles `inst`: one lhs ragged dimension, rank-1 group sizes, and a
    rhs group dimension exactly when the ragged dimension is a non-contracting one."""
    lhs, rhs, sizes = inst.operands
    lc, lb = _dims(inst, "lhs_contracting_dims"), _dims(inst, "lhs_batch_dims")
    lr = _dims(inst, "lhs_ragged_dims", "lhs_ragged_dimensions")
    rg = _dims(inst, "rhs_group_dims", "rhs_group_dimensions")
    if len(lr) != 1 or len(rg) > 1 or not inst.shape.is_array or sizes.shape.rank != 1:
        return False
    return bool(rg) == (lr[0] not in lc and lr[0] not in lb)


def _expand(inst: HloInstruction, build: _Builder) -> HloInstruction:
    lhs, rhs, sizes = inst.operands
    lc, rc = _dims(inst, "lhs_contracting_dims"), _dims(inst, "rhs_contracting_dims")
    lb, rb = _dims(inst, "lhs_batch_dims"), _dims(inst, "rhs_batch_dims")
    ragged = _dims(inst, "lhs_ragged_dims", "lhs_ragged_dimensions")[0]
    rg = _dims(inst, "rhs_group_dims", "rhs_group_dimensions")
    keep = {k: v for k, v in inst.attrs.items() if k in ("operand_precision", "algorithm")}
    if ragged in lb:  # batch entries are independent: the grouping changes nothing
        return build.op("dot", inst.shape, lhs, rhs, lhs_batch_dims=lb, rhs_batch_dims=rb,
                        lhs_contracting_dims=lc, rhs_contracting_dims=rc, **keep)
    groups = sizes.shape.dims[0]
    grouped = build.grouped_lhs(lhs, ragged, build.membership(sizes, lhs.shape.dims[ragged]))
    g = lhs.shape.rank  # the group dimension of `grouped`
    if rg:  # non-contracting: contract the group dimension with the rhs's
        return build.op("dot", inst.shape, grouped, rhs, lhs_batch_dims=lb, rhs_batch_dims=rb,
                        lhs_contracting_dims=(*lc, g), rhs_contracting_dims=(*rc, rg[0]), **keep)
    # contracting: G stays, the last of the lhs free dimensions; the ragged dot puts it first
    out = inst.shape.dims
    n_batch = len(lb)
    n_lhs_free = lhs.shape.rank - len(lb) - len(lc)  # lhs free dimensions before G
    dot_dims = (*out[1:1 + n_batch + n_lhs_free], groups, *out[1 + n_batch + n_lhs_free:])
    dot = build.op("dot", _array(inst.shape.dtype, dot_dims), grouped, rhs, lhs_batch_dims=lb, rhs_batch_dims=rb,
                   lhs_contracting_dims=lc, rhs_contracting_dims=rc, **keep)
    front = n_batch + n_lhs_free
    permutation = (front, *range(front), *range(front + 1, len(dot_dims)))
    return build.op("transpose", inst.shape, dot, dimensions=permutation)


def _adder(module: HloModule, dtype) -> HloComputation:
    comp = HloComputation("ragged_dot_add")
    module.add_computation(comp)
    x, y = comp.add_parameter(_array(dtype, ()), "x"), comp.add_parameter(_array(dtype, ()), "y")
    comp.root = comp.add_instruction(HloInstruction("add", _array(dtype, ()), [x, y], {}, name="add"))
    return comp


@dataclass(frozen=True)
class RaggedDotExpander(HloPass):
    """Every ragged dot the rewrite handles (`expandable`) becomes a dot over a one-hot group
    dimension (module docstring). Work: one walk of the module; each rewrite adds a handful of
    instructions and a lhs G times its size."""

    name: ClassVar[str] = "ragged-dot-expander"

    def run(self, module: HloModule) -> bool:
        """Expand the ragged dots; True if there was one."""
        changed = False
        adders: dict = {}
        for comp in list(module.computations):
            for inst in [i for i in comp.instructions if i.opcode == "ragged-dot" and expandable(i)]:
                t = inst.operands[2].shape.dtype
                if t not in adders:
                    adders[t] = _adder(module, t)
                new = _expand(inst, _Builder(comp, adders[t]))
                rewriter = Rewriter(comp)
                rewriter.replace(inst, new)
                rewriter.finish()
                changed = True
        if changed:
            for comp in module.computations:
                comp.sort_instructions()
        return changed
