"""Algebraic simplifier: the rewrites of XLA's AlgebraicSimplifier that matter for fusion.

Every rewrite preserves results bit for bit. Where XLA trades exactness away, hlofuse does
not: XLA folds `A + 0 => A` for any zero, which turns `-0.0 + 0.0` (= +0.0) into -0.0; here a
float `A + C` folds only when every element of C is -0.0 (the additive identity of IEEE
arithmetic), and `A - C` only when C is +0.0. `A * 1` and `A / 1` are not folded for complex
types, where the product with (1 + 0i) can change the sign of a zero component. (The one
exception, as in XLA: arithmetic quiets a signaling NaN, and `A * 1 => A` or a float round
trip `convert(convert(A))` => A keep it signaling. Values computed by HLO are never signaling
NaNs, only inputs can be.)

Rewrites (a rule per opcode, tried in post order until nothing changes):
  no-ops removed: reshape/broadcast/transpose/convert/copy/slice/pad/reverse that keep the value;
  reshape(reshape), broadcast(broadcast), transpose(transpose), convert(convert) composed;
  reshape(broadcast(scalar)) => broadcast(scalar); a constant of equal elements => broadcast(scalar);
  max(A, A), min(A, A), A & A, A | A => A;
  A*1, 1*A, A+0, 0+A, A-0, A/1 (see above); select(constant p, A, B) and select(p, A, A);
  op(broadcast(c1), broadcast(c2)...) => broadcast(op(c1, c2...)) for scalar constants
  (the folded constant stays a scalar behind the broadcast); constant folding (constant_folding.py);
  get-tuple-element(tuple(...)) => the element;
  compares, and/or, max/min whose result the operand type's range fixes (simplifier_logic.py);
  transpose(dot(a, b)) => dot(b, a), dot(transpose(a), b) => dot(a, b) and a transpose of
  size-1 dimensions => reshape (simplifier_transpose.py);
  convolution(pad(x, 0), w) => convolution(x, w) with the pad in its window, and
  convolution(x, reverse(w)) => convolution(x, w) with the window reversed (simplifier_conv.py).
  simplifier_base.py has what the rule modules share.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..hlo.opcodes import op_info
from ..hlo.shapes import ArrayShape, Layout
from . import simplifier_conv, simplifier_logic, simplifier_transpose
from .constant_folding import DEFAULT_MAX_ELEMENTS, can_fold_opcode, fold, fold_instruction, literal_array, literal_of
from .pass_base import HloPass
from .rewrite import Rewriter
from .simplifier_base import Rule, compatible, if_compatible, new_instruction, scalar_constant, splat

_RULES: dict[str, list[Rule]] = {}


def _rule(*opcodes: str):
    def deco(fn: Rule) -> Rule:
        for opcode in opcodes:
            op_info(opcode)
            _RULES.setdefault(opcode, []).append(fn)
        return fn

    return deco


# ---- helpers ----------------------------------------------------------------------------------

def _operand_if_noop(inst: HloInstruction) -> HloInstruction | None:
    op = inst.operands[0]
    return op if compatible(op.shape, inst.shape) else None


def _is_identity(inst: HloInstruction, which: str) -> bool:
    """Whether `inst` holds the neutral element `which` ("zero+", "zero-", "zero", "one")."""
    value = scalar_constant(inst)
    if value is None:
        return False
    t = inst.shape.dtype
    if which == "one":
        return t.kind in ("sint", "uint", "float", "pred") and bool(value == 1)
    if t.kind in ("sint", "uint"):
        return bool(value == 0)
    if t.kind not in ("float", "complex"):
        return False
    parts = [value.real, value.imag] if t.kind == "complex" else [value]
    floats = [np.asarray(p, dtype=np.float64) for p in parts]
    if not all(f == 0 for f in floats):
        return False
    want_negative = which == "zero-"
    return all(bool(np.signbit(f)) == want_negative for f in floats)


# ---- data movement ----------------------------------------------------------------------------

@_rule("reshape", "copy", "convert", "slice")
def _noop_same_shape(inst):
    # A reshape, copy or convert to an identical shape, or a slice that takes everything.
    return _operand_if_noop(inst)


@_rule("reshape")
def _reshape_of_reshape(inst):
    op = inst.operands[0]
    if op.opcode == "reshape":
        inner = op.operands[0]
        if compatible(inner.shape, inst.shape):
            return inner
        return new_instruction(inst, "reshape", [inner], {})
    if op.opcode == "broadcast" and op.operands[0].shape.is_array and op.operands[0].shape.rank == 0:
        return new_instruction(inst, "broadcast", [op.operands[0]], {"dimensions": ()})
    return None


@_rule("reduce")
def _reduce_of_single_elements(inst):
    """A reduce whose output has as many elements as each input (every reduced dimension of
    size 1) is a reshape of its input, or a tuple of them for a variadic reduce: XLA's
    simplifier rewrites it so, taking the init value to be the reducer's identity whatever it
    is (measured with jaxlib 0.10: a sum of f32[4,1] over dimension 1 with init 5 gives the
    input, and -0 keeps its sign where init + -0 would be +0), and the interpreter evaluates
    it so. The kernels added the init (the HLO graph fuzzer, seed 38: atan2 of such a sum of -0
    gave 0 where XLA gives -pi)."""
    n = len(inst.operands) // 2
    inputs = inst.operands[:n]
    leaves = inst.shape.leaves()
    if n == 0 or len(leaves) != n:
        return None
    for x, leaf in zip(inputs, leaves):
        if not x.shape.is_array or x.shape.dtype != leaf.dtype or x.shape.element_count() != leaf.element_count():
            return None
    reshapes = [new_instruction(inst, "reshape", [x], {}, shape=leaf) for x, leaf in zip(inputs, leaves)]
    return new_instruction(inst, "tuple", reshapes, {}) if inst.shape.is_tuple else reshapes[0]


@_rule("broadcast")
def _broadcast(inst):
    op = inst.operands[0]
    dims = tuple(inst.attrs.get("dimensions", ()))
    if dims == tuple(range(inst.shape.rank)) and compatible(op.shape, inst.shape):
        return op
    if op.opcode == "broadcast":
        inner_dims = tuple(op.attrs.get("dimensions", ()))
        composed = tuple(dims[d] for d in inner_dims)
        return new_instruction(inst, "broadcast", [op.operands[0]], {"dimensions": composed})
    return None


@_rule("transpose")
def _transpose(inst):
    op = inst.operands[0]
    perm = tuple(inst.attrs["dimensions"])
    if perm == tuple(range(len(perm))) and compatible(op.shape, inst.shape):
        return op
    if op.opcode == "transpose":
        inner = tuple(op.attrs["dimensions"])
        composed = tuple(inner[p] for p in perm)
        source = op.operands[0]
        if composed == tuple(range(len(composed))) and compatible(source.shape, inst.shape):
            return source
        return new_instruction(inst, "transpose", [source], {"dimensions": composed})
    return None


def _widens_exactly(src, mid) -> bool:
    if src.kind == "float" and mid.kind == "float":
        return mid.bits > src.bits and not (src.name == "bf16" and mid.name == "f16")
    if src.kind in ("sint", "uint") and mid.kind in ("sint", "uint"):
        return mid.bits > src.bits and (src.kind == mid.kind or src.kind == "uint")
    return False


@_rule("convert")
def _convert_pair(inst):
    # convert(convert(x: T) -> wider U) -> T is x: the round trip through U loses nothing.
    op = inst.operands[0]
    if op.opcode != "convert":
        return None
    source = op.operands[0]
    if compatible(source.shape, inst.shape) and _widens_exactly(source.shape.dtype, op.shape.dtype):
        return source
    return None


@_rule("pad")
def _pad(inst):
    config = inst.attrs.get("padding", ())
    if all(tuple(c) == (0, 0, 0) for c in config):
        return _operand_if_noop(inst)
    return None


@_rule("reverse")
def _reverse(inst):
    op = inst.operands[0]
    if all(op.shape.dims[d] == 1 for d in inst.attrs.get("dimensions", ())):
        return _operand_if_noop(inst)
    return None


# ---- arithmetic identities --------------------------------------------------------------------

@_rule("add")
def _add_zero(inst):
    lhs, rhs = inst.operands
    zero = "zero-" if inst.shape.dtype.kind in ("float", "complex") else "zero"
    if _is_identity(rhs, zero):
        return if_compatible(inst, lhs)
    if _is_identity(lhs, zero):
        return if_compatible(inst, rhs)
    return None


@_rule("subtract")
def _sub_zero(inst):
    lhs, rhs = inst.operands
    zero = "zero+" if inst.shape.dtype.kind in ("float", "complex") else "zero"
    return if_compatible(inst, lhs) if _is_identity(rhs, zero) else None


@_rule("multiply")
def _mul_one(inst):
    lhs, rhs = inst.operands
    if _is_identity(rhs, "one"):
        return if_compatible(inst, lhs)
    if _is_identity(lhs, "one"):
        return if_compatible(inst, rhs)
    return None


@_rule("divide")
def _div_one(inst):
    lhs, rhs = inst.operands
    return if_compatible(inst, lhs) if _is_identity(rhs, "one") else None


@_rule("maximum", "minimum", "and", "or")
def _idempotent(inst):
    # max(A, A), min(A, A), A & A, A | A are A (NaN payloads and signed zeros included).
    lhs, rhs = inst.operands
    return if_compatible(inst, lhs) if lhs is rhs else None


@_rule("select")
def _select(inst):
    pred, on_true, on_false = inst.operands
    if on_true is on_false:
        return if_compatible(inst, on_true)
    value = scalar_constant(pred)
    if value is None:
        return None
    return if_compatible(inst, on_true if bool(value) else on_false)


@_rule("constant")
def _splat_constant(inst):
    # A constant whose elements are all equal becomes broadcast(scalar), as in XLA: fusion
    # then reads one scalar instead of an array.
    if not inst.shape.is_array or inst.shape.element_count() <= 1:
        return None
    value = scalar_constant(inst)
    return None if value is None else splat(inst.shape, value)


@_rule("get-tuple-element")
def _element_of_tuple(inst):
    # get-tuple-element(tuple(a0, a1, ...), index=i) is a_i (XLA's TupleSimplifier): what a call
    # returning a tuple leaves once inlined.
    op = inst.operands[0]
    if op.opcode != "tuple":
        return None
    return if_compatible(inst, op.operands[int(inst.attrs["index"])])


# rules of their own modules: compares, and/or, max/min fixed by the type's range; transposes;
# a zero pad folded into a convolution's window
for _opcode, _fn in (*simplifier_logic.RULES, *simplifier_transpose.RULES, *simplifier_conv.RULES):
    _rule(_opcode)(_fn)


# ---- folding ----------------------------------------------------------------------------------

def _broadcast_scalar_constant(inst: HloInstruction) -> np.ndarray | None:
    if inst.opcode != "broadcast":
        return None
    op = inst.operands[0]
    if op.opcode != "constant" or not op.shape.is_array or op.shape.rank != 0:
        return None
    return literal_array(op)


def sink_broadcasts(rewriter: Rewriter, inst: HloInstruction) -> bool:
    """op(broadcast(c1), ..., broadcast(cn)) => broadcast(op(c1, ..., cn)) for an elementwise
    op of scalar constants: the folded value stays a scalar behind one broadcast."""
    if not inst.info.elementwise or not can_fold_opcode(inst.opcode) or not inst.shape.is_array:
        return False
    if inst.control_predecessors or not inst.operands:
        return False
    scalars = [_broadcast_scalar_constant(o) for o in inst.operands]
    if any(s is None for s in scalars):
        return False
    scalar_shape = ArrayShape(inst.shape.dtype, (), (), Layout(()))
    probe = HloInstruction(inst.opcode, scalar_shape, [], dict(inst.attrs), name=inst.name)
    for o in inst.operands:  # the fold rules read operand types
        probe.operands.append(o.operands[0])
    value = fold(probe, scalars)
    if value is None:
        return False
    const = HloInstruction("constant", scalar_shape, name="constant")
    const.literal = literal_of(value, scalar_shape)
    rewriter.replace(inst, HloInstruction("broadcast", inst.shape, [const], {"dimensions": ()}, name="broadcast"))
    return True


# ---- the pass ---------------------------------------------------------------------------------

def _blocked(inst: HloInstruction, control_successors: set[HloInstruction]) -> bool:
    # Like XLA, leave instructions tied by control edges alone: the edges order side effects.
    return bool(inst.control_predecessors) or inst in control_successors


def simplify_instruction(rewriter: Rewriter, inst: HloInstruction, fold_constants: bool = True,
                         max_fold_elements: int = DEFAULT_MAX_ELEMENTS) -> bool:
    """Apply the first rule that rewrites `inst`; True if one did."""
    for rule in _RULES.get(inst.opcode, ()):
        new = rule(inst)
        if new is not None and new is not inst:
            rewriter.replace(inst, new)
            return True
    if fold_constants:
        if sink_broadcasts(rewriter, inst):
            return True
        if fold_instruction(rewriter, inst, max_fold_elements):
            return True
    return False


def simplify_computation(comp: HloComputation, fold_constants: bool = True,
                         max_fold_elements: int = DEFAULT_MAX_ELEMENTS, max_rounds: int = 32) -> bool:
    """Rewrite `comp` until no rule applies (or `max_rounds` sweeps); True if anything changed."""
    changed = False
    for _ in range(max_rounds):
        control_successors = {p for i in comp.instructions for p in i.control_predecessors}
        round_changed = False
        rewriter = Rewriter(comp)
        order = comp.post_order()
        for inst in order:
            if _blocked(inst, control_successors):
                continue
            round_changed |= simplify_instruction(rewriter, inst, fold_constants, max_fold_elements)
        rewriter.finish()
        if not round_changed:
            if changed:  # the last round changed nothing: its post order is the sorted list
                if len(comp.instructions) == len(order):
                    comp.instructions = order
                else:  # (a rule that added an instruction without saying so)
                    comp.sort_instructions()
            return changed
        changed = True
    if changed:  # (changed in every round)
        comp.sort_instructions()
    return changed


@dataclass(frozen=True)
class AlgebraicSimplifier(HloPass):
    """The simplifier over every non-fused computation (fused ones are the fusion's business)."""

    fold_constants: bool = True
    max_fold_elements: int = DEFAULT_MAX_ELEMENTS
    name: ClassVar[str] = "simplifier"

    def run(self, module: HloModule) -> bool:
        """Simplify every computation; True if anything changed."""
        changed = False
        for comp in module.computations_post_order():
            if not comp.is_fusion_computation():
                changed |= simplify_computation(comp, self.fold_constants, self.max_fold_elements)
        return changed

