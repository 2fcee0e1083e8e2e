"""Reference rules for control flow and structure: while, scan, conditional, call, map, fusion,
tuple, get-tuple-element, parameter, constant, opt-barrier, tokens, and the ops the
interpreter refuses (custom-call, i/o). Collectives and async ops: single_replica.py."""
from __future__ import annotations

import numpy as np

from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloInstruction
from ...hlo.lapack_calls import lapack_call
from ...hlo.opcodes import mark_unsupported, opcodes_where, register_reference
from .core import TOKEN, Value, is_elementwise_computation
from .linalg import lapack_reference


@register_reference("parameter")
def _parameter(inst: HloInstruction, args: list, interp) -> Value:
    """The argument bound to this parameter in the current call."""
    return interp.parameter_value(inst)


@register_reference("constant")
def _constant(inst: HloInstruction, args: list, interp) -> Value:
    """The literal, in the instruction's element type and dimensions."""
    if inst.literal is None:
        raise UnsupportedError(f"constant {inst.name} has an elided value ({{...}}); the interpreter needs its data")
    return _literal_value(inst.shape, inst.literal, inst.name)


def _literal_value(shape, literal, name: str) -> Value:
    if shape.is_tuple:
        return tuple(_literal_value(s, v, name) for s, v in zip(shape.elements, literal))
    arr = np.asarray(literal)
    if arr.dtype != shape.dtype.numpy:
        arr = arr.astype(shape.dtype.numpy)
    return arr.reshape(shape.dims)


@register_reference("tuple")
def _tuple(inst: HloInstruction, args: list, interp) -> Value:
    """A tuple of the operand values."""
    return tuple(args)


@register_reference("get-tuple-element")
def _gte(inst: HloInstruction, args: list, interp) -> Value:
    """Element `index` of the tuple operand."""
    return args[0][int(inst.attrs["index"])]


@register_reference("opt-barrier", "domain")
def _identity(inst: HloInstruction, args: list, interp) -> Value:
    """The operand, unchanged."""
    return args[0]


@register_reference("add-dependency")
def _add_dependency(inst: HloInstruction, args: list, interp) -> Value:
    """The first operand; the token only orders evaluation."""
    return args[0]


@register_reference("after-all")
def _after_all(inst: HloInstruction, args: list, interp) -> Value:
    """A fresh token."""
    return TOKEN


@register_reference("call")
def _call(inst: HloInstruction, args: list, interp) -> Value:
    """The called computation applied to the operands."""
    return interp.call(inst.attrs["to_apply"], args)


@register_reference("fusion")
def _fusion(inst: HloInstruction, args: list, interp) -> Value:
    """The fused computation applied to the operands."""
    return interp.call(inst.attrs["calls"], args)


@register_reference("while")
def _while(inst: HloInstruction, args: list, interp) -> Value:
    """Run `body` on the state while `condition` holds."""
    cond, body = inst.attrs["condition"], inst.attrs["body"]
    state = args[0]
    limit = interp.max_while_iterations
    count = 0
    while bool(interp.call(cond, [state])):
        if limit is not None and count >= limit:
            raise UnsupportedError(f"while {inst.name} ran more than {limit} iterations")
        state = interp.call(body, [state])
        count += 1
    return state


@register_reference("scan")
def _scan(inst: HloInstruction, args: list, interp) -> Value:
    """to_apply on each index of the scan dimension in turn (from the last with is_reverse),
    given the inputs' slices at that index and the carries; its outputs are stacked at that
    index and its carries passed on; the result is (the stacked outputs..., the last carries...)."""
    carries = int(inst.attrs["num_carries"])
    d = int(inst.attrs["dimensions"][0])
    comp = inst.attrs["to_apply"]
    inputs = [np.asarray(a) for a in args[:len(args) - carries]]
    state = list(args[len(args) - carries:])
    shapes = inst.shape.elements[:len(inst.shape.elements) - carries]
    outs = [np.empty(s.dims, s.dtype.numpy) for s in shapes]
    length = inputs[0].shape[d]
    for i in (reversed(range(length)) if inst.attrs.get("is_reverse", False) else range(length)):
        parts = interp.call(comp, [np.asarray(np.take(x, i, axis=d)) for x in inputs] + state)
        at = (slice(None),) * d + (i,)
        for out, value in zip(outs, parts):
            out[at] = value
        state = list(parts[len(outs):])
    return tuple(outs) + tuple(state)


@register_reference("conditional")
def _conditional(inst: HloInstruction, args: list, interp) -> Value:
    """Pred form: true/false computation; index form: branch i, out-of-range -> last branch."""
    selector = np.asarray(args[0])
    if "branch_computations" in inst.attrs:
        branches = list(inst.attrs["branch_computations"])
    else:
        branches = [inst.attrs["true_computation"], inst.attrs["false_computation"]]
    if selector.dtype == np.bool_:
        # A pred selector picks the first (true) computation when set.
        index = 0 if bool(selector) else 1
    else:
        index = int(selector)
        if index < 0 or index >= len(branches):
            index = len(branches) - 1
    operand = args[1 + index]
    return interp.call(branches[index], [operand])


@register_reference("map")
def _map(inst: HloInstruction, args: list, interp) -> Value:
    """`to_apply` applied to corresponding elements of the operands."""
    comp = inst.attrs["to_apply"]
    shape = tuple(inst.shape.dims)
    if is_elementwise_computation(comp):
        out = interp.call_batched(comp, [np.asarray(a) for a in args])
        return np.broadcast_to(out, shape).copy()
    out = np.empty(shape, dtype=inst.shape.dtype.numpy)
    for idx in np.ndindex(*shape):
        out[idx] = interp.call(comp, [np.asarray(a[idx]) for a in args])
    return out


@register_reference("custom-call")
def _custom_call(inst: HloInstruction, args: list, interp) -> Value:
    """JAX's LAPACK calls (hlo/lapack_calls.py) as LAPACK defines them (linalg.lapack_reference);
    any other custom call is refused: its meaning lives in a library the interpreter does not
    have."""
    if lapack_call(inst) is not None:
        return lapack_reference(inst, args)
    target = inst.attrs.get("custom_call_target", "?")
    raise UnsupportedError(f"the interpreter does not support custom-call (instruction {inst.name}): "
                           f"target {str(target)!r} is an external library call")


mark_unsupported("reference", "side effects through the host (infeed/outfeed/send/recv) are not modelled",
                 *opcodes_where(lambda i: i.kind == "io"))
