"""Reference rules of the collective and asynchronous ops for ONE replica and ONE partition.

A module run by hlofuse runs on a single participant (replica_count=1, num_partitions=1), and
XLA defines what every collective computes in that case:

- replica-id / partition-id are u32 0;
- all-reduce (and its -start form) over one participant is its operand(s): nothing is
  combined, so the reducer is never applied (XLA's AllReduceSimplifier replaces an all-reduce
  whose groups have one member by its operand);
- all-gather, reduce-scatter, all-to-all and collective-broadcast with one participant are the
  identity, and their declared result must equal the operand's shape (a result of another size
  declares more participants: refused);
- collective-permute gives the operand when `source_target_pairs` sends 0 to 0, and zeros
  when nothing is sent to participant 0 (XLA's value for a target that receives nothing);
- the -start/-done pairs carry the tuples XLA declares for them: all-gather-start
  (operand(s), result(s)), collective-permute-start (operand(s), result(s), context...),
  copy-start (destination, source, context), async-start ((operands...), result, context...);
  context elements are zero (their contents are backend bookkeeping).

A collective whose `replica_groups` / `source_target_pairs` name a participant other than 0,
or whose module header declares several replicas or partitions, is refused with
UnsupportedError naming the instruction.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ...hlo.attributes import Raw
from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloInstruction
from ...hlo.opcodes import mark_unsupported, register_reference
from ...hlo.shapes import ArrayShape, Shape, TokenShape, TupleShape
from .core import TOKEN, Value

_ONE = "hlofuse runs one replica and one partition"


# ---- attribute readers ----------------------------------------------------------------------
def _attr_text(inst: HloInstruction, key: str) -> str | None:
    value = inst.attrs.get(key)
    if value is None:
        return None
    return value.text if isinstance(value, Raw) else str(value)


_IOTA_GROUPS = re.compile(r"\[\s*(\d+)\s*,\s*(\d+)\s*\]\s*<=\s*\[([\d\s,]*)\](?:\s*T\(([\d\s,]*)\))?")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def read_groups(text: str | None, where: str) -> list[list[int]]:
    """The groups of a `replica_groups` value: `{{0,1},{2,3}}`, `{}` or the iota form
    `[G,S]<=[d0,d1..]T(perm)` (G groups of S ids from iota(d) transposed by perm)."""
    if text is None:
        return []
    text = text.strip()
    m = _IOTA_GROUPS.fullmatch(text)
    if m is not None:
        count, size = int(m.group(1)), int(m.group(2))
        dims = _ints(m.group(3))
        ids = np.arange(int(np.prod(dims, dtype=np.int64))).reshape(dims)
        if m.group(4) is not None:
            ids = ids.transpose(_ints(m.group(4)))
        if ids.size != count * size:
            raise UnsupportedError(f"{where}: replica_groups {text} has {ids.size} ids for {count}x{size} groups")
        return ids.reshape(count, size).tolist()
    if not (text.startswith("{") and text.endswith("}")):
        raise UnsupportedError(f"{where}: cannot read replica_groups {text}")
    groups = []
    for body in re.findall(r"\{([^{}]*)\}", text[1:-1]):
        try:
            groups.append(_ints(body))
        except ValueError:
            raise UnsupportedError(f"{where}: cannot read replica_groups {text}") from None
    return groups


def read_pairs(text: str | None, where: str) -> list[tuple[int, int]]:
    """The (source, target) pairs of a `source_target_pairs` value `{{0,1},{1,0}}`."""
    if text is None:
        return []
    groups = read_groups(text, where)
    if any(len(g) != 2 for g in groups):
        raise UnsupportedError(f"{where}: source_target_pairs {text} must list pairs {{source,target}}")
    return [(g[0], g[1]) for g in groups]


# ---- participant checks ---------------------------------------------------------------------
def _where(inst: HloInstruction) -> str:
    return f"{inst.opcode} (instruction {inst.name})"


def _declared_device_counts(inst: HloInstruction) -> dict[str, int]:
    """replica_count / num_partitions from the module header, where given."""
    comp = inst.parent
    module = comp.parent if comp is not None else None
    counts = {}
    for key in ("replica_count", "num_partitions"):
        value = module.attrs.get(key) if module is not None else None
        if value is not None:
            try:
                counts[key] = int(str(value))
            except ValueError:
                pass
    return counts


def check_one_participant(inst: HloInstruction) -> None:
    """Refuse `inst` unless each of its replica groups is just participant 0."""
    where = _where(inst)
    text = _attr_text(inst, "replica_groups")
    groups = read_groups(text, where)
    if not groups:  # every replica (or partition): the module header says how many
        many = {k: v for k, v in _declared_device_counts(inst).items() if v > 1}
        if many:
            declared = ", ".join(f"{k}={v}" for k, v in many.items())
            raise UnsupportedError(f"{where}: the module declares {declared} and the collective spans them all; "
                                   f"{_ONE}")
        return
    named = sorted({i for g in groups for i in g})
    if named != [0] or any(len(g) != 1 for g in groups):
        raise UnsupportedError(f"{where}: replica_groups={text} name participants {named} "
                               f"(groups of up to {max(len(g) for g in groups)}); {_ONE}")


def _leaves(shape: Shape, value: Value) -> list[tuple[ArrayShape, np.ndarray]]:
    if isinstance(shape, TupleShape):
        out = []
        for s, v in zip(shape.elements, value):
            out.extend(_leaves(s, v))
        return out
    return [(shape, value)] if isinstance(shape, ArrayShape) else []


def expect_unchanged(inst: HloInstruction, shape: Shape, value: Value, why: str) -> Value:
    """`value` as the result of declared `shape`, refusing `inst` when one participant cannot give it."""
    leaves = _leaves(shape, value)
    declared = len(shape.elements) if isinstance(shape, TupleShape) else 1
    got = len(value) if isinstance(value, tuple) else 1
    if declared != got:
        raise UnsupportedError(f"{_where(inst)}: the result {shape} has {declared} parts for {got} operand(s); {why}")
    for s, v in leaves:
        if tuple(s.dims) != v.shape or s.dtype.numpy != v.dtype:
            raise UnsupportedError(f"{_where(inst)}: the declared result {s.to_text(False)} differs from the "
                                   f"operand's {v.dtype}{list(v.shape)}, which is what one participant gives; {why}")
    return value


def _operands_value(args: Sequence[Value]) -> Value:
    """One operand as itself, several as a tuple (the shape XLA gives variadic collectives)."""
    return args[0] if len(args) == 1 else tuple(args)


def zeros(shape: Shape) -> Value:
    """A Value of `shape` with every element zero (tokens for token shapes)."""
    if isinstance(shape, TupleShape):
        return tuple(zeros(s) for s in shape.elements)
    if isinstance(shape, TokenShape):
        return TOKEN
    return np.zeros(tuple(shape.dims), dtype=shape.dtype.numpy)


def _tuple_elements(inst: HloInstruction, minimum: int) -> tuple[Shape, ...]:
    shape = inst.shape
    if not isinstance(shape, TupleShape) or len(shape.elements) < minimum:
        raise UnsupportedError(f"{_where(inst)}: expected a tuple shape of at least {minimum} elements, "
                               f"declared {shape}")
    return shape.elements


# ---- ids ------------------------------------------------------------------------------------
@register_reference("replica-id", "partition-id")
def _replica_id(inst: HloInstruction, args: list, interp) -> Value:
    """The only replica and partition is number 0."""
    return np.zeros((), np.uint32)


# ---- collectives ----------------------------------------------------------------------------
@register_reference("all-reduce", "all-reduce-start")
def _all_reduce(inst: HloInstruction, args: list, interp) -> Value:
    """The operand(s): one participant's contribution is the reduction (the reducer is not applied)."""
    check_one_participant(inst)
    return expect_unchanged(inst, inst.shape, _operands_value(args), "an all-reduce keeps the operands' shapes")


@register_reference("all-gather", "reduce-scatter", "collective-broadcast")
def _identity_collective(inst: HloInstruction, args: list, interp) -> Value:
    """The operand(s): gathering from, scattering to or broadcasting over one participant."""
    check_one_participant(inst)
    return expect_unchanged(inst, inst.shape, _operands_value(args), "it declares more than one participant")


@register_reference("all-to-all")
def _all_to_all(inst: HloInstruction, args: list, interp) -> Value:
    """Array form (dimensions={d}): the operand; tuple form: one operand per participant, so one."""
    check_one_participant(inst)
    if "dimensions" not in inst.attrs and isinstance(inst.shape, TupleShape):
        if len(args) != 1:
            raise UnsupportedError(f"{_where(inst)}: the tuple form takes one operand per participant, this one "
                                   f"has {len(args)}; {_ONE}")
        return expect_unchanged(inst, inst.shape, tuple(args), "the tuple form takes one operand per participant")
    return expect_unchanged(inst, inst.shape, _operands_value(args), "it declares more than one participant")


@register_reference("all-gather-start")
def _all_gather_start(inst: HloInstruction, args: list, interp) -> Value:
    """(operand(s), gathered result(s)); with one participant both are the operands."""
    check_one_participant(inst)
    elements = _tuple_elements(inst, 2)
    operands = _operands_value(args)
    expect_unchanged(inst, elements[0], operands, "element 0 of all-gather-start holds the operands")
    result = expect_unchanged(inst, elements[1], operands, "it declares more than one participant")
    return (operands, result) + tuple(zeros(s) for s in elements[2:])


@register_reference("all-reduce-done")
def _all_reduce_done(inst: HloInstruction, args: list, interp) -> Value:
    """The result of the matching all-reduce-start (its value, unchanged)."""
    return args[0]


@register_reference("all-gather-done", "collective-permute-done", "async-done")
def _done_result(inst: HloInstruction, args: list, interp) -> Value:
    """Element 1 of the start's tuple: the result."""
    return args[0][1]


def _permuted(inst: HloInstruction, args: list) -> Value:
    """collective-permute's data on participant 0: the operand(s) if 0 sends to 0, else zeros."""
    where = _where(inst)
    if "slice_sizes" in inst.attrs or "dynamic_slice_sizes" in inst.attrs or (
            len(args) == 4 and any(isinstance(a, tuple) for a in args[2:])):
        raise UnsupportedError(f"{where}: the in-place form (buffers, offsets, slice_sizes) is not supported")
    text = _attr_text(inst, "source_target_pairs")
    pairs = read_pairs(text, where)
    named = sorted({i for p in pairs for i in p} - {0})
    if named:
        raise UnsupportedError(f"{where}: source_target_pairs={text} name participants {named}; {_ONE}")
    operands = _operands_value(args)
    if (0, 0) in pairs:
        return operands
    return tuple(np.zeros_like(a) for a in args) if len(args) > 1 else np.zeros_like(args[0])


@register_reference("collective-permute")
def _collective_permute(inst: HloInstruction, args: list, interp) -> Value:
    """The operand(s) when source_target_pairs contains {0,0}; zeros when 0 receives nothing."""
    return expect_unchanged(inst, inst.shape, _permuted(inst, args), "collective-permute keeps the operands' shapes")


@register_reference("collective-permute-start")
def _collective_permute_start(inst: HloInstruction, args: list, interp) -> Value:
    """(operand(s), received data, context...)."""
    elements = _tuple_elements(inst, 2)
    operands = _operands_value(args)
    expect_unchanged(inst, elements[0], operands, "element 0 of collective-permute-start holds the operands")
    received = expect_unchanged(inst, elements[1], _permuted(inst, args), "element 1 holds the received data")
    return (operands, received) + tuple(zeros(s) for s in elements[2:])


@register_reference("copy-start")
def _copy_start(inst: HloInstruction, args: list, interp) -> Value:
    """(destination, source, context): the destination is a copy of the source."""
    elements = _tuple_elements(inst, 2)
    source = args[0]
    expect_unchanged(inst, elements[1], source, "element 1 of copy-start is the source")
    dest = expect_unchanged(inst, elements[0], np.array(source, copy=True), "element 0 of copy-start is the copy")
    return (dest, source) + tuple(zeros(s) for s in elements[2:])


@register_reference("copy-done")
def _copy_done(inst: HloInstruction, args: list, interp) -> Value:
    """Element 0 of copy-start's tuple: the destination."""
    return args[0][0]


# ---- generic asynchronous pairs -------------------------------------------------------------
@register_reference("async-start")
def _async_start(inst: HloInstruction, args: list, interp) -> Value:
    """((operands...), the wrapped computation's result, context...), evaluated at once."""
    elements = _tuple_elements(inst, 2)
    comp = inst.attrs.get("calls")
    if comp is None:
        raise UnsupportedError(f"{_where(inst)}: no wrapped computation (calls=)")
    result = interp.call(comp, list(args))
    operands = tuple(args) if isinstance(elements[0], TupleShape) else _operands_value(args)
    return (operands, result) + tuple(zeros(s) for s in elements[2:])


@register_reference("async-update")
def _async_update(inst: HloInstruction, args: list, interp) -> Value:
    """The start's tuple, unchanged: the work was done at async-start."""
    return args[0]


mark_unsupported("reference", "ragged-all-to-all is not modelled: its single-participant copy has no "
                 "independent oracle (XLA:CPU does not implement the op)", "ragged-all-to-all")
