"""Constant folding with numpy on the literals (not through the interpreter).

Only operations whose numpy result is bit-exactly what XLA computes are folded: integer
arithmetic wraps like XLA's, float arithmetic is IEEE in both, and the cases where numpy and
XLA disagree (float -> int conversion saturation, integer division by zero, the sign of
max(-0, +0), complex products with infinities, transcendental functions that differ by an ulp
between libm and XLA's approximations) are left alone.

Limits follow XLA's HloConstantFolding rules, with a smaller size budget: no folding of
broadcast or iota on their own (they stay cheap to describe), at least one operand must be a
plain constant, the others constants, broadcasts of constants or iotas; and neither the result
nor the operands together may exceed `max_elements` elements. XLA allows 45 million; hlofuse
defaults to 64 because a folded literal is printed in full in the module text and fusion has
nothing to gain from materializing big constants.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from ..hlo.dtypes import ElementType
from ..hlo.ir import HloInstruction, HloModule
from ..hlo.opcodes import op_info
from ..hlo.shapes import ArrayShape
from .rewrite import Rewriter, has_side_effect
from .pass_base import HloPass

DEFAULT_MAX_ELEMENTS = 64

Folder = Callable[[HloInstruction, list], "np.ndarray | None"]
_FOLDERS: dict[str, Folder] = {}


def _folds(*opcodes: str):
    """Attach a numpy folding rule to opcodes of the registry."""

    def deco(fn: Folder) -> Folder:
        for opcode in opcodes:
            op_info(opcode)  # an unknown opcode is a typo here
            _FOLDERS[opcode] = fn
        return fn

    return deco


def can_fold_opcode(opcode: str) -> bool:
    """Whether a numpy folding rule exists for `opcode`."""
    return opcode in _FOLDERS


# ---- literals ---------------------------------------------------------------------------------

def literal_array(inst: HloInstruction) -> np.ndarray | None:
    """The value of a constant as an array of its shape, or None (elided or not an array)."""
    if inst.opcode != "constant" or inst.literal is None or not inst.shape.is_array:
        return None
    shape: ArrayShape = inst.shape
    return np.asarray(inst.literal, dtype=shape.dtype.numpy).reshape(shape.dims)


def materialize(inst: HloInstruction) -> np.ndarray | None:
    """The value of a constant, a broadcast of a constant or an iota; None for anything else."""
    if inst.opcode == "constant":
        return literal_array(inst)
    if inst.opcode == "broadcast" and inst.operands[0].opcode == "constant" and inst.shape.is_array:
        value = literal_array(inst.operands[0])
        if value is None:
            return None
        dims = tuple(inst.attrs.get("dimensions", ()))
        out_shape = inst.shape.dims
        expand = [1] * len(out_shape)
        for k, d in enumerate(dims):
            expand[d] = value.shape[k]
        # operand dims appear in increasing output order in valid HLO
        return np.broadcast_to(value.reshape(expand), out_shape).copy()
    if inst.opcode == "iota" and inst.shape.is_array:
        dims = inst.shape.dims
        d = inst.attrs.get("iota_dimension", 0)
        ramp = np.arange(dims[d]).astype(inst.shape.dtype.numpy)
        view = [1] * len(dims)
        view[d] = dims[d]
        return np.broadcast_to(ramp.reshape(view), dims).copy()
    return None


def _out(inst: HloInstruction, value) -> np.ndarray | None:
    shape: ArrayShape = inst.shape
    arr = np.asarray(value)
    if arr.shape != tuple(shape.dims):
        return None
    return arr.astype(shape.dtype.numpy, copy=False)


# ---- elementwise rules ------------------------------------------------------------------------

def _types(inst: HloInstruction) -> list[ElementType]:
    return [o.shape.dtype for o in inst.operands if o.shape.is_array]


def _narrow(t: ElementType) -> bool:
    # 4-bit integers and 8-bit floats: XLA computes them through wider types with its own
    # rounding steps, which numpy/ml_dtypes arithmetic does not reproduce exactly.
    return t.bits < 8 or (t.kind == "float" and t.bits == 8)


@_folds("add", "subtract")
def _add_sub(inst, args):
    t = inst.shape.dtype
    if t.kind not in ("sint", "uint", "float", "complex"):
        return None
    fn = np.add if inst.opcode == "add" else np.subtract
    return _out(inst, fn(args[0], args[1]))


@_folds("multiply")
def _mul(inst, args):
    if inst.shape.dtype.kind not in ("sint", "uint", "float"):
        return None
    return _out(inst, np.multiply(args[0], args[1]))


@_folds("divide")
def _div(inst, args):
    # Integer division has XLA-specific results for x/0 and INT_MIN/-1.
    if inst.shape.dtype.kind != "float":
        return None
    return _out(inst, np.divide(args[0], args[1]))


@_folds("negate")
def _neg(inst, args):
    if inst.shape.dtype.kind not in ("sint", "uint", "float", "complex"):
        return None
    return _out(inst, np.negative(args[0]))


@_folds("abs")
def _abs(inst, args):
    if _types(inst)[0].kind not in ("sint", "float"):
        return None
    return _out(inst, np.abs(args[0]))


@_folds("maximum", "minimum")
def _max_min(inst, args):
    a, b = args
    kind = inst.shape.dtype.kind
    if kind == "complex":
        return None
    if kind == "float" and np.any((a == 0) & (b == 0)):
        return None  # which zero max(-0, +0) returns is target specific
    fn = np.maximum if inst.opcode == "maximum" else np.minimum
    return _out(inst, fn(a, b))


@_folds("and", "or", "xor")
def _bitwise(inst, args):
    if inst.shape.dtype.kind not in ("pred", "sint", "uint"):
        return None
    fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[inst.opcode]
    return _out(inst, fn(args[0], args[1]))


@_folds("not")
def _not(inst, args):
    kind = inst.shape.dtype.kind
    if kind == "pred":
        return _out(inst, np.logical_not(args[0]))
    if kind in ("sint", "uint"):
        return _out(inst, np.invert(args[0]))
    return None


_COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
            "GT": np.greater, "GE": np.greater_equal}


@_folds("compare")
def _compare(inst, args):
    direction = inst.attrs.get("direction")
    kind = _types(inst)[0].kind
    if direction not in _COMPARE or inst.attrs.get("type") == "TOTALORDER":
        return None
    if kind == "complex" and direction not in ("EQ", "NE"):
        return None
    return _out(inst, _COMPARE[direction](args[0], args[1]))


@_folds("select")
def _select(inst, args):
    if not inst.shape.is_array:
        return None
    pred, on_true, on_false = args
    return _out(inst, np.where(pred, on_true, on_false))


def _convert_is_exact_in_numpy(src: ElementType, dst: ElementType) -> bool:
    if src == dst or dst.kind == "pred":
        return True  # x != 0, as XLA
    if src.kind == "pred":
        return dst.kind != "complex"
    if src.kind in ("sint", "uint") and dst.kind in ("sint", "uint"):
        return True  # both wrap modulo 2^bits
    if src.kind in ("sint", "uint") and dst.name in ("f32", "f64"):
        return True  # one correctly rounded conversion
    if src.kind == "float" and dst.kind == "float":
        # Widening is exact; from f32/f64 numpy and ml_dtypes round once, to nearest even.
        return dst.bits >= src.bits or src.name in ("f32", "f64")
    return False  # float -> int saturates in XLA; complex conversions are left alone


@_folds("convert")
def _convert(inst, args):
    src, dst = _types(inst)[0], inst.shape.dtype
    if not _convert_is_exact_in_numpy(src, dst):
        return None
    if dst.kind == "pred":
        return _out(inst, args[0] != 0)
    with np.errstate(over="ignore", invalid="ignore"):
        return _out(inst, args[0].astype(dst.numpy))


# ---- data movement rules ----------------------------------------------------------------------

@_folds("reshape")
def _reshape(inst, args):
    return _out(inst, args[0].reshape(inst.shape.dims))


@_folds("transpose")
def _transpose(inst, args):
    return _out(inst, np.transpose(args[0], inst.attrs["dimensions"]))


@_folds("slice")
def _slice(inst, args):
    index = tuple(slice(lo, hi, st) for lo, hi, st in inst.attrs["slice"])
    return _out(inst, args[0][index])


@_folds("concatenate")
def _concatenate(inst, args):
    (dim,) = inst.attrs["dimensions"]
    return _out(inst, np.concatenate(args, axis=dim))


@_folds("reverse")
def _reverse(inst, args):
    return _out(inst, np.flip(args[0], axis=tuple(inst.attrs["dimensions"])))


@_folds("pad")
def _pad(inst, args):
    operand, value = args
    config = inst.attrs["padding"]
    result = np.full(inst.shape.dims, value.reshape(()), dtype=inst.shape.dtype.numpy)
    # Place operand element i of each dimension at lo + i * (interior + 1); negative padding
    # crops, which the range check below does.
    index = np.indices(operand.shape).reshape(operand.ndim, -1) if operand.size else None
    if index is None:
        return _out(inst, result)
    targets = []
    keep = np.ones(index.shape[1], dtype=bool)
    for d, (lo, _hi, interior) in enumerate(config):
        t = lo + index[d] * (interior + 1)
        keep &= (t >= 0) & (t < inst.shape.dims[d])
        targets.append(t)
    flat_values = operand.reshape(-1)
    result[tuple(t[keep] for t in targets)] = flat_values[keep]
    return _out(inst, result)


# ---- folding instructions ---------------------------------------------------------------------

def fold(inst: HloInstruction, args: list[np.ndarray]) -> np.ndarray | None:
    """`inst` applied to operand values `args` with numpy, or None where not exactly foldable."""
    rule = _FOLDERS.get(inst.opcode)
    if rule is None or not inst.shape.is_array:
        return None
    if inst.info.kind != "data" and any(_narrow(t) for t in [inst.shape.dtype, *_types(inst)]):
        return None
    with np.errstate(all="ignore"):
        try:
            return rule(inst, args)
        except (ValueError, TypeError, KeyError, IndexError):
            return None  # malformed attributes: leave it to the verifier


def _foldable(inst: HloInstruction, max_elements: int) -> list[np.ndarray] | None:
    if inst.opcode in ("constant", "parameter", "tuple", "broadcast", "iota"):
        return None
    if not can_fold_opcode(inst.opcode) or not inst.shape.is_array or not inst.operands:
        return None
    if inst.control_predecessors or has_side_effect(inst):
        return None
    if not any(o.opcode == "constant" for o in inst.operands):
        return None
    total = sum(o.shape.element_count() for o in inst.operands if o.shape.is_array)
    if max(total, inst.shape.element_count()) > max_elements:
        return None
    args = [materialize(o) for o in inst.operands]
    if any(a is None for a in args):
        return None
    return args


def fold_instruction(rewriter: Rewriter, inst: HloInstruction, max_elements: int = DEFAULT_MAX_ELEMENTS) -> bool:
    """Replace `inst` by a constant if all its operands are (broadcast) constants; True if done."""
    args = _foldable(inst, max_elements)
    if args is None:
        return False
    value = fold(inst, args)
    if value is None:
        return False
    const = HloInstruction("constant", inst.shape, name="constant")
    const.literal = np.ascontiguousarray(value)
    rewriter.replace(inst, const)
    return True


@dataclass(frozen=True)
class ConstantFolding(HloPass):
    """Fold instructions whose operands are all constants (see the module docstring)."""

    max_elements: int = DEFAULT_MAX_ELEMENTS
    name: ClassVar[str] = "constant-folding"

    def run(self, module: HloModule) -> bool:
        """Fold everywhere except inside fused computations; True if anything was folded."""
        changed = False
        for comp in module.computations_post_order():
            if comp.is_fusion_computation():
                continue
            rewriter = Rewriter(comp)
            folded = False
            for inst in comp.post_order():
                folded |= fold_instruction(rewriter, inst, self.max_elements)
            rewriter.finish()
            if folded:
                comp.sort_instructions()
            changed |= folded
        return changed

