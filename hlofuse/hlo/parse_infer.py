"""What XLA's parser fills in after reading a module: the shapes of instructions written
without one (`ROOT sum = add(a, b)`, nested `add(f32[2] parameter(0), ...)`), `dimensions={}`
of a broadcast of a scalar, the computations of `op-start` shorthands, and the check that
computation signatures agree with their bodies.
"""
from __future__ import annotations

from typing import Callable

from .attributes import Raw
from .errors import HloParseError, VerifierError
from .ir import HloComputation, HloInstruction, HloModule
from .opcodes import opcodes_where
from .shapes import ArrayShape, Shape, TupleShape

# error(message, offset) -> HloParseError, and the source offset of an instruction's name.
ErrorAt = Callable[[str, int], HloParseError]
ASYNC_OPCODES = frozenset(opcodes_where(lambda info: info.name.startswith("async-")))
# Attributes of an `op-start` shorthand that belong to the async-start, not to the wrapped op.
_ASYNC_START_KEEPS = frozenset({"async_execution_thread", "async_group_id", "metadata", "sharding",
                                "frontend_attributes", "statistics", "origin"})


def with_default_layouts(shape: Shape) -> Shape:
    """`shape` with XLA's default layout on every array that has none."""
    if isinstance(shape, ArrayShape):
        return shape if shape.layout is not None else shape.with_default_layout()
    if isinstance(shape, TupleShape):
        return TupleShape(tuple(with_default_layouts(e) for e in shape.elements))
    return shape


def complete_instructions(module: HloModule, error: ErrorAt, name_pos: Callable[[HloInstruction], int]) -> None:
    """Infer missing shapes (callees first, operands before users) and default broadcast
    dimensions; raise through `error` when XLA would refuse the instruction."""
    from .shape_inference import infer_shape  # the rules are only needed for shape-less text

    for comp in module.computations_post_order():
        for inst in comp.instructions:
            if inst.opcode == "broadcast" and "dimensions" not in inst.attrs:
                _default_broadcast_dimensions(inst, error, name_pos)
            if inst.shape is None:
                try:
                    inst.shape = with_default_layouts(_infer(inst, infer_shape))
                except VerifierError as e:
                    raise error(f"cannot infer the shape of '{inst.name}': {e}", name_pos(inst)) from None


def _infer(inst: HloInstruction, infer_shape) -> Shape:
    """The inferred shape of a shape-less `inst`. Some rules (dot, convolution) take only the
    element type from the declared shape; they get the first array operand's type, as XLA does
    when the operands agree. A rule that merely echoes the declared shape (reshape, iota,
    custom-call) is recognised by the impossible stand-in coming back: XLA cannot infer those."""
    try:
        shape = infer_shape(inst)
        if shape is None:  # a rule that returns the declared shape, of which there is none
            raise VerifierError(f"{inst.opcode}: the shape must be written out", instruction=inst.name)
        return shape
    except VerifierError as first:
        arrays = [o.shape for o in inst.operands if isinstance(o.shape, ArrayShape)]
        if not arrays:
            raise
        stand_in = ArrayShape(arrays[0].dtype, (0,) * 9)
        inst.shape = stand_in
        try:
            shape = infer_shape(inst)
        except VerifierError:
            raise first from None
        finally:
            inst.shape = None
        if shape == stand_in:
            raise first
        return shape


def _default_broadcast_dimensions(inst: HloInstruction, error: ErrorAt, name_pos) -> None:
    operand = inst.operands[0] if inst.operands else None
    if operand is not None and operand.shape is not None and getattr(operand.shape, "rank", None) == 0:
        inst.attrs["dimensions"] = ()  # XLA's parser allows leaving it out for a scalar operand
        return
    raise error(f"broadcast '{inst.name}' needs dimensions={{...}} (its operand is not a scalar)", name_pos(inst))


def check_signature(comp: HloComputation, result: Shape, pos: int, error: ErrorAt) -> None:
    """Like XLA, refuse a signature `(...) -> result` whose result disagrees with the body's
    root (layouts aside). XLA's parser (HloParserImpl::ParseComputation) reads the parameter
    list and compares nothing in it, so a parameter declared with another shape, or another
    count, is accepted as there: the parameter instructions' own shapes count."""
    root = comp.root
    if not same_ignoring_layout(result, root.shape):
        raise error(f"computation '{comp.name}' is declared to return {result.to_text(False)} but its "
                    f"root '{root.name}' has shape {root.shape.to_text(False)}", pos)


def same_ignoring_layout(a: Shape, b: Shape) -> bool:
    """Equal element types and dimensions (XLA's ShapeUtil::Compatible), layouts aside."""
    if isinstance(a, ArrayShape) and isinstance(b, ArrayShape):  # the common case, without text
        return a.dtype == b.dtype and a.dims == b.dims and a.dynamic == b.dynamic
    return a.equal_ignoring_layout(b)


def build_async_computations(module: HloModule, starts: list[tuple[HloInstruction, str, int]],
                             error: ErrorAt) -> None:
    """Give each `op-start` shorthand (instruction, wrapped opcode, offset) its explicit
    computation: parameters for the start's operands and the wrapped op (with the start's
    op-specific attributes) as root."""
    for start, opcode, op_pos in starts:
        shape = start.shape
        if not isinstance(shape, TupleShape) or len(shape.elements) < 2:
            raise error(f"'{opcode}-start' must have a tuple shape (operands, result, ...) "
                        f"but '{start.name}' has {shape}", op_pos)
        comp = HloComputation(module.unique_name(f"{start.name}.async_computation"))
        comp.parent = module
        for i, op in enumerate(start.operands):
            p = HloInstruction("parameter", op.shape, name=module.unique_name(f"param_{i}"))
            p.parameter_number = i
            p.parent = comp
            comp.instructions.append(p)
        moved = {k: v for k, v in start.attrs.items() if k not in _ASYNC_START_KEEPS}
        root = HloInstruction(opcode, shape.elements[1], list(comp.instructions), moved,
                              module.unique_name(f"{start.name}.wrapped"))
        root.parent = comp
        comp.instructions.append(root)
        comp.root = root
        thread = start.attrs.get("async_execution_thread")
        if isinstance(thread, Raw) and thread.text.startswith('"'):
            comp.execution_thread = thread.text[1:-1]
        start.attrs = {k: v for k, v in start.attrs.items() if k in _ASYNC_START_KEEPS}
        start.attrs["calls"] = comp
        module.computations.insert(module.computations.index(start.parent), comp)


def check_async_chains(ops: list[tuple[HloInstruction, str | None, int]], error: ErrorAt) -> None:
    """The checks XLA's parser makes on async ops (instruction, op named by a shorthand or None,
    offset): a start's shape is ((operands), outputs, state...); an update or done takes the
    start or update of its chain; an update keeps its operand's shape; a shorthand names the
    op its start wraps; one computation is wrapped by one start only."""
    wrapped_by: dict[HloComputation, HloInstruction] = {}
    for inst, named, pos in ops:
        if inst.opcode == "async-start":
            shape = inst.shape
            if not (isinstance(shape, TupleShape) and len(shape.elements) >= 2
                    and isinstance(shape.elements[0], TupleShape)):
                raise error(f"async-start '{inst.name}' must have shape ((operands...), outputs, state...) but "
                            f"has {shape}", pos)
            comp = inst.attrs.get("calls")
            if isinstance(comp, HloComputation):
                other = wrapped_by.setdefault(comp, inst)
                if other is not inst:
                    raise error(f"computation '{comp.name}' is wrapped by two async ops ('{other.name}' and "
                                f"'{inst.name}')", pos)
            continue
        start = inst.operands[0] if len(inst.operands) == 1 else None
        while start is not None and start.opcode == "async-update":
            start = start.operands[0] if len(start.operands) == 1 else None
        if start is None or start.opcode != "async-start":
            raise error(f"{inst.opcode} '{inst.name}' must take the async-start or async-update of its chain "
                        f"as its only operand", pos)
        if inst.opcode == "async-update" and not same_ignoring_layout(inst.shape, inst.operands[0].shape):
            raise error(f"async-update '{inst.name}' must have its operand's shape {inst.operands[0].shape}", pos)
        comp = start.attrs.get("calls")
        if isinstance(comp, HloComputation):
            own = inst.attrs.get("calls")
            if isinstance(own, HloComputation) and own is not comp:
                raise error(f"{inst.opcode} '{inst.name}' calls '{own.name}' but its async-start "
                            f"'{start.name}' wraps '{comp.name}'", pos)
            if named is not None and comp.root is not None and comp.root.opcode != named:
                raise error(f"'{inst.name}' is written {named}-{inst.opcode[6:]} but its async-start "
                            f"'{start.name}' wraps {comp.root.opcode}", pos)
