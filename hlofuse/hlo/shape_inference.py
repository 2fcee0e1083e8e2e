"""Shape inference: the result shape of an instruction from its operands and attributes.

The rules live in the op registry (`register_shape_rule`), one module per op family:
shape_inference_elementwise, _data, _indexing, _reduce, _linalg and _control, which
`rule_loader.load_rules("shape")` imports (infer_shape calls it). Layouts are not part of
inference: compare with `shapes_compatible` (or Shape.equal_ignoring_layout).
"""
from __future__ import annotations

from .errors import VerifierError
from .ir import HloInstruction
from .opcodes import is_known, op_info
from .rule_loader import load_rules
from .shape_inference_common import shapes_compatible
from .shapes import Shape

__all__ = ["infer_shape", "shapes_compatible"]


def infer_shape(inst: HloInstruction) -> Shape:
    """The shape `inst` must have, inferred from its operands and attributes (no layout).

    Raises VerifierError naming the instruction when the opcode is unknown, has no shape
    rule, or its operands or attributes are invalid.
    """
    load_rules("shape")
    comp = inst.parent.name if inst.parent is not None else None
    if not is_known(inst.opcode):
        raise VerifierError(f"unknown opcode '{inst.opcode}'", instruction=inst.name, computation=comp)
    info = op_info(inst.opcode)
    if info.shape_rule is None:
        reason = info.unsupported.get("shape", "no shape rule is registered")
        raise VerifierError(f"{inst.opcode}: cannot infer the shape: {reason}", instruction=inst.name,
                            computation=comp)
    try:
        return info.shape_rule(inst)
    except VerifierError:
        raise
    except (IndexError, KeyError, TypeError, ValueError, AttributeError) as e:
        # Malformed IR built by hand (an attribute of the wrong type, missing operands):
        # report it against the instruction rather than as a Python traceback.
        raise VerifierError(f"{inst.opcode}: malformed instruction ({type(e).__name__}: {e})",
                            instruction=inst.name, computation=comp) from e
