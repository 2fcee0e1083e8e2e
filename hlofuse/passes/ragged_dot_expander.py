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

from ..hlo.dtypes import PRED
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..hlo.shapes import array
from .op_expander import OpExpander, add, add_splat


def _dims(inst: HloInstruction, name: str) -> tuple[int, ...]:
    return tuple(int(d) for d in inst.attrs.get(name, ()))


class _Builder:
    """Adds instructions before a ragged dot in its computation."""

    def __init__(self, comp: HloComputation, adder: HloComputation) -> None:
        self.comp, self.adder = comp, adder

    def op(self, opcode: str, shape, *operands: HloInstruction, **attrs) -> HloInstruction:
        return add(self.comp, opcode, shape, *operands, **attrs)

    def splat(self, shape, value) -> HloInstruction:
        return add_splat(self.comp, shape, value)

    def membership(self, sizes: HloInstruction, length: int) -> HloInstruction:
        """pred[length, G]: whether position i of the ragged dimension is in group g, that is
        starts[g] <= i < ends[g] with ends the running sum of the sizes and starts = ends -
        sizes (the interpreter's definition, whatever the sizes hold)."""
        t = sizes.shape.dtype
        groups = sizes.shape.dims[0]
        square = array(t, (groups, groups))
        h = self.op("iota", square, iota_dimension=0)  # the summed group
        g = self.op("iota", square, iota_dimension=1)  # the group whose end is summed
        upto = self.op("compare", array(PRED, (groups, groups)), h, g, direction="LE")
        sized = self.op("broadcast", square, sizes, dimensions=(0,))
        terms = self.op("select", square, upto, sized, self.splat(square, 0))
        ends = self.op("reduce", array(t, (groups,)), terms, self.splat(array(t, ()), 0), dimensions=(0,),
                       to_apply=self.adder)
        starts = self.op("subtract", array(t, (groups,)), ends, sizes)
        grid, mask = array(t, (length, groups)), array(PRED, (length, groups))
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
        inside = self.op("broadcast", array(PRED, dims), member, dimensions=(ragged, rank))
        wide = self.op("broadcast", array(lhs.shape.dtype, dims), lhs, dimensions=tuple(range(rank)))
        return self.op("select", array(lhs.shape.dtype, dims), inside, wide, self.splat(array(lhs.shape.dtype, dims), 0))


def expandable(inst: HloInstruction) -> bool:
    """Whether the rewrite handles `inst`: one lhs ragged dimension, rank-1 group sizes, and a
    rhs group dimension exactly when the ragged dimension is a non-contracting one."""
    lhs, rhs, sizes = inst.operands
    lc, lb = _dims(inst, "lhs_contracting_dims"), _dims(inst, "lhs_batch_dims")
    lr = _dims(inst, "lhs_ragged_dims")
    rg = _dims(inst, "rhs_group_dims")
    if len(lr) != 1 or len(rg) > 1 or not inst.shape.is_array or sizes.shape.rank != 1:
        return False
    return bool(rg) == (lr[0] not in lc and lr[0] not in lb)


def _expand(inst: HloInstruction, build: _Builder) -> HloInstruction:
    lhs, rhs, sizes = inst.operands
    lc, rc = _dims(inst, "lhs_contracting_dims"), _dims(inst, "rhs_contracting_dims")
    lb, rb = _dims(inst, "lhs_batch_dims"), _dims(inst, "rhs_batch_dims")
    ragged = _dims(inst, "lhs_ragged_dims")[0]
    rg = _dims(inst, "rhs_group_dims")
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
    dot = build.op("dot", array(inst.shape.dtype, dot_dims), grouped, rhs, lhs_batch_dims=lb, rhs_batch_dims=rb,
                   lhs_contracting_dims=lc, rhs_contracting_dims=rc, **keep)
    front = n_batch + n_lhs_free
    permutation = (front, *range(front), *range(front + 1, len(dot_dims)))
    return build.op("transpose", inst.shape, dot, dimensions=permutation)


def _adder(module: HloModule, dtype) -> HloComputation:
    comp = HloComputation("ragged_dot_add")
    module.add_computation(comp)
    x, y = comp.add_parameter(array(dtype, ()), "x"), comp.add_parameter(array(dtype, ()), "y")
    comp.root = comp.add_instruction(HloInstruction("add", array(dtype, ()), [x, y], {}, name="add"))
    return comp


@dataclass(frozen=True)
class RaggedDotExpander(OpExpander):
    """Every ragged dot the rewrite handles (`expandable`) becomes a dot over a one-hot group
    dimension (module docstring). Work: one walk of the module; each rewrite adds a handful of
    instructions and a lhs G times its size."""

    name: ClassVar[str] = "ragged-dot-expander"

    def matches(self, inst: HloInstruction) -> bool:
        """A ragged dot the rewrite handles."""
        return inst.opcode == "ragged-dot" and expandable(inst)

    def expand(self, inst: HloInstruction, run: dict) -> HloInstruction:
        """Its dot (the running-sum reducer made once per run and group-size type)."""
        t = inst.operands[2].shape.dtype
        if t not in run:
            run[t] = _adder(inst.parent.parent, t)
        return _expand(inst, _Builder(inst.parent, run[t]))
