"""Library rules of the collective and asynchronous ops for a single participant.

The compiled backends run one replica of one partition. With one participant XLA's
collectives degenerate: ids are 0, an all-reduce is its operand (a one-member group combines
nothing, which is why XLA's AllReduceSimplifier removes it), all-gather / reduce-scatter /
all-to-all / collective-broadcast hand the operand back, collective-permute copies the operand
when participant 0 sends to itself and gives zeros when nothing arrives. Start/done pairs
carry the tuples XLA declares (copy-start: (destination, source, context); the other starts:
(operands, result, context...)); the work happens at the start, context slots are zeros.

Anything that names a second participant (replica groups, source-target pairs, a module
header with replica_count or num_partitions above 1) or declares a result one participant
cannot produce is refused with UnsupportedError naming the instruction. Written
independently of the interpreter (runtime/interpreter/single_replica.py), the oracle.
"""
from __future__ import annotations

import re

import numpy as np

from ..hlo.attributes import Raw
from ..hlo.errors import UnsupportedError
from ..hlo.ir import HloInstruction
from ..hlo.opcodes import register_library
from ..hlo.shapes import ArrayShape, Shape, TupleShape

_SINGLE = "the compiled backends run a single replica and partition"
_IOTA = re.compile(r"\[([\d\s,]+)\]\s*<=\s*\[([\d\s,]*)\]")


def _text(inst: HloInstruction, key: str) -> str | None:
    v = inst.attrs.get(key)
    if v is None:
        return None
    return v.text if isinstance(v, Raw) else str(v)


def _header_count(inst: HloInstruction) -> int:
    """Devices the module header declares (replica_count x num_partitions; 1 when absent)."""
    module = inst.parent.parent if inst.parent is not None else None
    total = 1
    for key in ("replica_count", "num_partitions"):
        raw = module.attrs.get(key) if module is not None else None
        if raw is not None:
            try:
                total *= int(str(raw))
            except ValueError:
                pass
    return total


def _refuse(inst: HloInstruction, why: str) -> UnsupportedError:
    return UnsupportedError(f"{inst.opcode} instruction {inst.name}: {why}; {_SINGLE}")


def _groups_are_single(inst: HloInstruction, key: str, pairs: bool = False) -> None:
    """Refuse `inst` unless attribute `key` names participant 0 only (or is absent/empty and the
    module declares one device)."""
    text = _text(inst, key)
    body = (text or "").strip()
    if body in ("", "{}", "{{}}"):
        if _header_count(inst) > 1:
            raise _refuse(inst, f"the module declares {_header_count(inst)} devices and {key} spans them all")
        return
    m = _IOTA.fullmatch(body)
    if m is not None:
        sizes = [int(x) for x in m.group(1).split(",") if x.strip()]
        if int(np.prod(sizes)) != 1:
            raise _refuse(inst, f"{key}={body} lists {int(np.prod(sizes))} participants")
        return
    groups = [[int(x) for x in g.split(",") if x.strip()] for g in re.findall(r"\{([^{}]*)\}", body)]
    ids = {i for g in groups for i in g}
    if ids - {0} or (not pairs and any(len(g) > 1 for g in groups)):
        raise _refuse(inst, f"{key}={body} names participants {sorted(ids)}")


def _as_value(args: list, shape: Shape | None = None):
    """The operands as one value: a tuple of them, or the lone operand itself unless `shape`
    declares a tuple (`(f32[8]) all-to-all(x)`, the tuple form with one operand)."""
    return args[0] if len(args) == 1 and not isinstance(shape, TupleShape) else tuple(args)


def _matches(shape: Shape, value) -> bool:
    if isinstance(shape, TupleShape):
        return isinstance(value, tuple) and len(value) == len(shape.elements) and all(
            _matches(s, v) for s, v in zip(shape.elements, value))
    if isinstance(shape, ArrayShape):
        return not isinstance(value, tuple) and tuple(value.shape) == tuple(shape.dims) and \
            np.dtype(value.dtype) == shape.dtype.numpy
    return True


def _checked(inst: HloInstruction, shape: Shape, value, what: str):
    if not _matches(shape, value):
        raise _refuse(inst, f"{what} is declared {shape}, which a single participant cannot produce from its operands")
    return value


def _zero(shape: Shape):
    if isinstance(shape, TupleShape):
        return tuple(_zero(s) for s in shape.elements)
    if isinstance(shape, ArrayShape):
        return np.zeros(tuple(shape.dims), shape.dtype.numpy)
    return ()  # token


def _start_tuple(inst: HloInstruction, operands, result) -> tuple:
    parts = inst.shape.elements if isinstance(inst.shape, TupleShape) else ()
    if len(parts) < 2:
        raise _refuse(inst, f"a start op has shape (operands, result, ...), declared {inst.shape}")
    _checked(inst, parts[0], operands, "element 0 (the operands)")
    _checked(inst, parts[1], result, "element 1 (the result)")
    return (operands, result) + tuple(_zero(s) for s in parts[2:])


@register_library("replica-id", "partition-id")
def device_id(inst, args, ctx):
    """Participant number 0."""
    return np.zeros((), inst.shape.dtype.numpy)


@register_library("all-reduce", "all-gather", "reduce-scatter", "collective-broadcast", "all-to-all")
def identity_collective(inst, args, ctx):
    """One participant: the operand(s) unchanged (the reducer never runs)."""
    _groups_are_single(inst, "replica_groups")
    return _checked(inst, inst.shape, _as_value(args, inst.shape), "the result")


@register_library("all-reduce-start")
def all_reduce_start(inst, args, ctx):
    """All-reduce-start has the all-reduce's result shape (the operands)."""
    _groups_are_single(inst, "replica_groups")
    return _checked(inst, inst.shape, _as_value(args, inst.shape), "the result")


@register_library("all-gather-start")
def all_gather_start(inst, args, ctx):
    """(operands, gathered = operands)."""
    _groups_are_single(inst, "replica_groups")
    value = _as_value(args)
    return _start_tuple(inst, value, value)


def _permute(inst, args):
    if "slice_sizes" in inst.attrs or "dynamic_slice_sizes" in inst.attrs:
        raise _refuse(inst, "the in-place form with offsets is not supported")
    _groups_are_single(inst, "source_target_pairs", pairs=True)
    text = _text(inst, "source_target_pairs") or ""
    sends_to_self = re.search(r"\{\s*0\s*,\s*0\s*\}", text) is not None
    if sends_to_self:
        return _as_value(args)
    return _as_value([np.zeros_like(a) for a in args])


@register_library("collective-permute")
def collective_permute(inst, args, ctx):
    """The operand if 0 sends to 0, else zeros (nothing received)."""
    return _checked(inst, inst.shape, _permute(inst, args), "the result")


@register_library("collective-permute-start")
def collective_permute_start(inst, args, ctx):
    """(operands, received data, context...)."""
    return _start_tuple(inst, _as_value(args), _permute(inst, args))


@register_library("all-reduce-done", "async-update")
def pass_through(inst, args, ctx):
    """The operand: the work was done by the start."""
    return args[0]


@register_library("all-gather-done", "collective-permute-done", "async-done")
def done_result(inst, args, ctx):
    """Element 1 of the start's tuple."""
    return args[0][1]


@register_library("copy-start")
def copy_start(inst, args, ctx):
    """(destination: a copy of the source, source, context...)."""
    parts = inst.shape.elements if isinstance(inst.shape, TupleShape) else ()
    if len(parts) < 2:
        raise _refuse(inst, f"copy-start has shape (destination, source, ...), declared {inst.shape}")
    src = args[0]
    _checked(inst, parts[1], src, "element 1 (the source)")
    dest = _checked(inst, parts[0], np.array(src, copy=True), "element 0 (the destination)")
    return (dest, src) + tuple(_zero(s) for s in parts[2:])


@register_library("copy-done")
def copy_done(inst, args, ctx):
    """Element 0 of copy-start's tuple."""
    return args[0][0]


@register_library("async-start")
def async_start(inst, args, ctx):
    """((operands), result of the wrapped computation, context...), run at once."""
    comp = inst.attrs.get("calls")
    if comp is None:
        raise _refuse(inst, "async-start names no wrapped computation (calls=)")
    result = ctx.call(comp, list(args))
    parts = inst.shape.elements if isinstance(inst.shape, TupleShape) else ()
    operands = tuple(args) if parts and isinstance(parts[0], TupleShape) else _as_value(args)
    return _start_tuple(inst, operands, result)
