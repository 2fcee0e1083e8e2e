"""JAX's LAPACK custom calls (hlo/lapack_calls.py) become XLA's linear-algebra ops, for the
compiled backends, which run `cholesky` and `triangular-solve` through their library rules
(runtime/library_linalg.py). The interpreter computes the custom calls themselves
(interpreter/linalg.lapack_reference), the oracle of this rewrite.

    (factor, info) = custom-call(a), custom_call_target="lapack_?potrf_ffi"
      f      = cholesky(a), lower=(uplo == 'L')
      factor = select(mask, f, a)        mask: the `uplo` triangle (LAPACK leaves the other
                                         triangle of its operand in place)
      info   = select(all(is-finite(f)) over each matrix, 0, 1)
    x = custom-call(a, b), custom_call_target="lapack_?trsm_ffi"
      x      = triangular-solve(a, b), left_side, lower, unit_diagonal, transpose_a from
               side, uplo, diag, trans_x
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.dtypes import element_type
from ..hlo.ir import HloComputation, HloInstruction
from ..hlo.lapack_calls import lapack_call
from ..hlo.shapes import array
from .op_expander import OpExpander, add, add_splat
from .rewrite import remove_instructions
from .simplifier_base import new_scalar_constant


def _and_reducer(module) -> HloComputation:
    """A scalar pred `and` computation, added to `module`."""
    pred = array(element_type("pred"), ())
    comp = HloComputation("and_pred")
    module.add_computation(comp)
    a = comp.add_parameter(pred, "lhs")
    b = comp.add_parameter(pred, "rhs")
    comp.root = comp.add_instruction(HloInstruction("and", pred, (a, b), name="and"))
    return comp


def _cholesky(inst: HloInstruction, lower: bool, run: dict) -> HloInstruction:
    comp = inst.parent
    (a,) = inst.operands
    shape = a.shape
    dims = tuple(shape.dims)
    rank = len(dims)
    f = add(comp, "cholesky", shape, a, lower=lower)
    s32, pred = element_type("s32"), element_type("pred")
    rows = add(comp, "iota", array(s32, dims), iota_dimension=rank - 2)
    cols = add(comp, "iota", array(s32, dims), iota_dimension=rank - 1)
    mask = add(comp, "compare", array(pred, dims), rows, cols, direction="GE" if lower else "LE")
    factor = add(comp, "select", shape, mask, f, a)
    finite = add(comp, "is-finite", array(pred, dims), f)
    if "and" not in run:
        run["and"] = _and_reducer(comp.parent)
    true = comp.add_instruction(new_scalar_constant(pred, True))
    batch = dims[:-2]
    ok = add(comp, "reduce", array(pred, batch), finite, true, dimensions=(rank - 2, rank - 1), to_apply=run["and"])
    info_type = inst.shape.elements[1].dtype
    info = add(comp, "select", array(info_type, batch), ok, add_splat(comp, array(info_type, batch), 0),
               add_splat(comp, array(info_type, batch), 1))
    return add(comp, "tuple", inst.shape, factor, info)


@dataclass(frozen=True)
class LapackCallExpander(OpExpander):
    """Every LAPACK custom call hlo/lapack_calls.py reads becomes XLA's op (module docstring).
    Work: one walk of the module."""

    name: ClassVar[str] = "lapack-call-expander"

    def matches(self, inst: HloInstruction) -> bool:
        """A ?potrf or ?trsm call of JAX's (the others have no XLA op: library rules run them)."""
        call = lapack_call(inst)
        return call is not None and call.op in ("cholesky", "triangular-solve")

    def run(self, module) -> bool:
        """Expand every call, then remove the calls (a custom call counts as side-effecting,
        so the rewriter keeps it once unused; these compute values and nothing else)."""
        changed = super().run(module)
        for comp in module.computations:
            dead = [i for i in comp.instructions if self.matches(i) and not i.users and not i.is_root()]
            for inst in dead:
                inst.detach_operands()
            remove_instructions(comp, dead)
        return changed

    def expand(self, inst: HloInstruction, run: dict) -> HloInstruction:
        """Its XLA op(s)."""
        call = lapack_call(inst)
        if call.op == "cholesky":
            return _cholesky(inst, call.lower, run)
        a, b = inst.operands
        return add(inst.parent, "triangular-solve", inst.shape, a, b, left_side=call.left_side, lower=call.lower,
                   unit_diagonal=call.unit_diagonal, transpose_a=call.transpose_a)
