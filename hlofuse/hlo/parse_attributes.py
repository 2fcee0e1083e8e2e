"""Instruction attributes in HLO text: decoding `key=value` text into IR values and back.

Attributes with structure the compiler uses (dimension lists, slices, paddings, windows,
convolution and dot/gather/scatter dimension numbers, comparison direction, fusion kind ...)
become Python values (see the conventions in hlo/ir.py); everything else stays
`attributes.Raw` and prints back verbatim. Computation references are resolved by the parser
once every computation is known, so they come out of `decode_attribute` as `ComputationRef`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .attributes import COMPUTATION_ATTRS, ConvDimensionNumbers, Raw, Window, WindowDimension

INT_LIST_KEYS = frozenset({
    "dimensions", "lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims",
    "offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
    "start_indices_batching_dims", "slice_sizes", "update_window_dims", "inserted_window_dims",
    "scatter_dims_to_operand_dims", "input_batching_dims", "scatter_indices_batching_dims",
    "dynamic_slice_sizes", "fft_length", "shifts", "lhs_ragged_dims", "rhs_group_dims",
})
INT_KEYS = frozenset({
    "index", "iota_dimension", "index_vector_dim", "feature_group_count", "batch_group_count",
    "exponent_bits", "mantissa_bits", "num_carries",
})
BOOL_KEYS = frozenset({"is_stable", "indices_are_sorted", "unique_indices", "is_reverse", "is_associative",
                       "lower", "left_side", "unit_diagonal", "largest"})
WORD_KEYS = frozenset({"direction", "type", "kind", "distribution", "algorithm", "fft_type"})
STRING_KEYS = frozenset({"custom_call_target"})
# The values XLA's parser accepts for the enumerated attributes.
_CHOICES = {
    "direction": ("EQ", "NE", "LT", "LE", "GT", "GE"),
    "type": ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED"),
    "kind": ("kLoop", "kInput", "kOutput", "kCustom"),
    "distribution": ("rng_uniform", "rng_normal"),
    "algorithm": ("rng_default", "rng_three_fry", "rng_philox"),
    "fft_type": ("FFT", "IFFT", "RFFT", "IRFFT"),
}
# Attributes naming several computations: `{%a, %b}`.
COMPUTATION_LIST_KEYS = frozenset({"branch_computations", "called_computations"})
COMPUTATION_KEYS = frozenset(COMPUTATION_ATTRS) | COMPUTATION_LIST_KEYS

# XLA prints op-specific attributes in a fixed order, then the called computations, then the
# attributes every instruction may carry. Keys not listed keep their relative order.
_OP_SPECIFIC_ORDER = (
    "channel_id", "replica_groups", "source_target_pairs", "slice", "padding", "window", "dim_labels",
    "feature_group_count", "batch_group_count",
    "lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims",
    "offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
    "start_indices_batching_dims", "update_window_dims", "inserted_window_dims",
    "scatter_dims_to_operand_dims", "input_batching_dims", "scatter_indices_batching_dims",
    "index_vector_dim", "slice_sizes", "dynamic_slice_sizes", "indices_are_sorted", "unique_indices",
    "operand_precision", "dimensions", "num_carries", "is_reverse", "is_associative", "iota_dimension", "index", "direction", "type", "exponent_bits",
    "mantissa_bits", "fft_type", "fft_length", "distribution", "algorithm", "is_stable", "kind",
    "custom_call_target",
)
_CALLS_ORDER = ("calls", "condition", "body", "select", "scatter", "to_apply", "branch_computations",
                "true_computation", "false_computation", "called_computations")
_GENERIC_ORDER = ("sharding", "parameter_replication", "frontend_attributes", "control-predecessors",
                  "statistics", "origin", "metadata", "backend_config")
_RANK: dict[str, int] = {}
for _i, _k in enumerate(_OP_SPECIFIC_ORDER):
    _RANK[_k] = _i
for _i, _k in enumerate(_CALLS_ORDER):
    _RANK[_k] = 1000 + _i
for _i, _k in enumerate(_GENERIC_ORDER):
    _RANK[_k] = 2000 + _i
_UNLISTED_RANK = 500
_RANK["api_version"] = 999  # custom-call: after its layout constraints and aliasing


def attribute_rank(key: str) -> int:
    """Sort key placing attributes in XLA's printing order (stable for unlisted keys)."""
    return _RANK.get(key, _UNLISTED_RANK)


@dataclass
class ComputationRef:
    """Computation names found in an attribute, resolved by the parser at the end."""

    names: list[tuple[str, int]]  # (name, offset of the name in the source)
    is_list: bool


class AttributeError_(ValueError):
    """A malformed attribute value; `offset` is relative to the start of the value text."""

    def __init__(self, message: str, offset: int = 0) -> None:
        super().__init__(message)
        self.offset = offset


_INT_LIST = re.compile(r"\{\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*\}$")
_INT = re.compile(r"-?\d+$")
# `operand_precision={highest, default}`: XLA's PrecisionConfig values, any case. XLA dropped
# PACKED_NIBBLE (two 4-bit values per s8/u8, a dot's operands unpacked first); a module naming
# it means a computation hlofuse does not do, so it is refused as XLA's parser refuses it.
_PRECISIONS = ("default", "high", "highest")
_PRECISION_LIST = re.compile(r"\{\s*(?:([A-Za-z_]+)(?:\s*,\s*[A-Za-z_]+)*)?\s*\}$")
_SLICE_DIM = re.compile(r"\[\s*(-?\d+)\s*:\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?\]")
_PAD_DIM = re.compile(r"(-?\d+)_(-?\d+)(?:_(-?\d+))?$")
_COMP_NAME = re.compile(r"%?([A-Za-z_][\w.\-]*)")
_WORD = re.compile(r"[A-Za-z_][\w\-]*$")
_WINDOW_FIELD = re.compile(r"(size|stride|pad|lhs_dilate|rhs_dilate|rhs_reversal)=(\S+)")


# Keys that mean one structured thing on some opcodes only; on any other opcode the value is
# kept verbatim (`algorithm=dot_tf32_tf32_f32` on a dot, `slice_sizes={{64,32}}` on a
# collective-permute).
_KEY_OWNERS = {"algorithm": frozenset({"rng-bit-generator"}), "slice_sizes": frozenset({"gather"})}


def decode_attribute(key: str, raw: str, offset: int = 0, opcode: str | None = None) -> Any:
    """The IR value of attribute `key` whose text is `raw` (starting at source `offset`) on an
    instruction with `opcode` (None: any).

    Raises AttributeError_ (with an offset into `raw`) when a structured value is malformed.
    A custom-call's attributes mean nothing to hlofuse, so there a malformed one stays Raw
    (XLA accepts `dim_labels=?b01f_0?1io->b01?f` on a custom-call), except its called
    computations.
    """
    if opcode is not None:  # (the checks are inline: this runs for every attribute)
        if key in _KEY_OWNERS and opcode not in _KEY_OWNERS[key]:
            return Raw(raw)
        if opcode == "custom-call":
            try:
                return decode_attribute(key, raw, offset)
            except AttributeError_:
                if key in COMPUTATION_KEYS:
                    # its called computations are the graph's edges, walked by every pass: a
                    # malformed name is an error, as in XLA (the fuzzer, seed 35: a Raw there
                    # crashed the module's walk)
                    raise
                return Raw(raw)
    if key in INT_LIST_KEYS:
        return _int_list(key, raw)
    if key in INT_KEYS:
        if not _INT.match(raw):
            raise AttributeError_(f"attribute '{key}' expects an integer but found '{raw}'")
        return int(raw)
    if key in BOOL_KEYS:
        if raw not in ("true", "false"):
            raise AttributeError_(f"attribute '{key}' expects true or false but found '{raw}'")
        return raw == "true"
    if key in WORD_KEYS:
        choices = _CHOICES.get(key)
        if choices is not None and raw not in choices:
            raise AttributeError_(f"attribute '{key}' must be one of {', '.join(choices)} but is '{raw}'")
        if not _WORD.match(raw):
            raise AttributeError_(f"attribute '{key}' expects a word but found '{raw}'")
        return raw
    if key in STRING_KEYS:
        if len(raw) < 2 or raw[0] != '"' or raw[-1] != '"':
            raise AttributeError_(f"attribute '{key}' expects a quoted string but found '{raw}'")
        return _unescape(raw[1:-1])
    if key in COMPUTATION_KEYS:
        return _computation_ref(key, raw, offset)
    if key == "slice":
        return _slice(raw)
    if key == "padding":
        return _padding(raw)
    if key == "window":
        return _window(raw)
    if key == "operand_precision":
        return _operand_precision(raw)
    if key == "dim_labels":
        try:
            return ConvDimensionNumbers.from_labels(raw)
        except ValueError as e:
            raise AttributeError_(str(e)) from None
    return Raw(raw)


def _operand_precision(raw: str) -> Raw:
    """`operand_precision`'s text, checked: a list of DEFAULT, HIGH or HIGHEST (any case), kept
    as written (hlofuse computes every dot at its types' own precision)."""
    if _PRECISION_LIST.match(raw):
        words = [w.strip() for w in raw.strip()[1:-1].split(",") if w.strip()]
        bad = next((w for w in words if w.lower() not in _PRECISIONS), None)
        if bad is None:
            return Raw(raw)
        raise AttributeError_(f"attribute 'operand_precision': '{bad}' is not a precision "
                              f"(one of DEFAULT, HIGH, HIGHEST{'; XLA no longer has PACKED_NIBBLE' if bad.upper() == 'PACKED_NIBBLE' else ''})",
                              raw.find(bad))
    raise AttributeError_(f"attribute 'operand_precision' expects a list of precisions like {{highest,default}} "
                          f"but found '{raw}'")


def _int_list(key: str, raw: str) -> tuple[int, ...]:
    m = _INT_LIST.match(raw)
    if m is None:
        raise AttributeError_(f"attribute '{key}' expects a list of integers like {{0,1}} but found '{raw}'")
    body = m.group(1)
    return tuple(int(x) for x in body.split(",")) if body else ()


def _computation_ref(key: str, raw: str, offset: int) -> ComputationRef:
    is_list = key in COMPUTATION_LIST_KEYS
    if is_list:
        if not (raw.startswith("{") and raw.endswith("}")):
            raise AttributeError_(f"attribute '{key}' expects a list of computations like {{%a, %b}} but found '{raw}'")
        names = []
        for m in re.finditer(r"[^,{}\s]+", raw[1:-1]):
            n = _COMP_NAME.fullmatch(m.group())
            if n is None:
                raise AttributeError_(f"attribute '{key}': '{m.group()}' is not a computation name", m.start() + 1)
            names.append((n.group(1), offset + m.start() + 1))
        return ComputationRef(names, True)
    n = _COMP_NAME.fullmatch(raw)
    if n is None:
        raise AttributeError_(f"attribute '{key}' expects a computation name but found '{raw}'")
    return ComputationRef([(n.group(1), offset)], False)


def _slice(raw: str) -> tuple[tuple[int, int, int], ...]:
    if not (raw.startswith("{") and raw.endswith("}")):
        raise AttributeError_(f"attribute 'slice' expects {{[start:limit:stride], ...}} but found '{raw}'")
    body = raw[1:-1]
    dims = []
    pos = 0
    for m in _SLICE_DIM.finditer(body):
        if body[pos:m.start()].strip(" ,"):
            break
        dims.append((int(m.group(1)), int(m.group(2)), int(m.group(3)) if m.group(3) else 1))
        pos = m.end()
    if body[pos:].strip(" ,") or body.count("[") != len(dims):
        raise AttributeError_(f"attribute 'slice' expects {{[start:limit:stride], ...}} but found '{raw}'")
    return tuple(dims)


def _padding(raw: str) -> tuple[tuple[int, int, int], ...]:
    dims = []
    for part in raw.split("x"):
        m = _PAD_DIM.match(part)
        if m is None:
            raise AttributeError_(f"attribute 'padding' expects low_high[_interior] per dimension joined by 'x' "
                                  f"but found '{raw}'")
        dims.append((int(m.group(1)), int(m.group(2)), int(m.group(3)) if m.group(3) else 0))
    return tuple(dims)


def _window(raw: str) -> Window:
    if not (raw.startswith("{") and raw.endswith("}")):
        raise AttributeError_(f"attribute 'window' expects {{size=... ...}} but found '{raw}'")
    body = raw[1:-1].strip()
    if not body:
        return Window(())
    fields: dict[str, list[str]] = {}
    for token in body.split():
        m = _WINDOW_FIELD.fullmatch(token)
        if m is None or m.group(1) in fields:
            raise AttributeError_(f"attribute 'window': unexpected '{token}'")
        fields[m.group(1)] = m.group(2).split("x")
    if "size" not in fields:
        raise AttributeError_("attribute 'window' has no size=")
    rank = len(fields["size"])
    for name, values in fields.items():
        if len(values) != rank:
            raise AttributeError_(f"attribute 'window': {name}= has {len(values)} dimensions but size= has {rank}")
    try:
        def ints(name: str, default: int) -> list[int]:
            return [int(v) for v in fields[name]] if name in fields else [default] * rank

        sizes, strides = ints("size", 1), ints("stride", 1)
        lhs, rhs, rev = ints("lhs_dilate", 1), ints("rhs_dilate", 1), ints("rhs_reversal", 0)
        pads = []
        for p in fields.get("pad", ["0_0"] * rank):
            lo, hi = p.split("_")
            pads.append((int(lo), int(hi)))
    except ValueError:
        raise AttributeError_(f"attribute 'window': malformed numbers in '{raw}'") from None
    return Window(tuple(
        WindowDimension(sizes[i], strides[i], pads[i][0], pads[i][1], rhs[i], lhs[i], bool(rev[i]))
        for i in range(rank)
    ))


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")


def encode_attribute(key: str, value: Any) -> str:
    """The HLO text of attribute value `value` under `key` (the inverse of decode_attribute).
    A called computation (under a COMPUTATION_KEYS key) prints as `%name`."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if key in COMPUTATION_KEYS and key not in COMPUTATION_LIST_KEYS:
        return "%" + value.name
    if key in COMPUTATION_LIST_KEYS:
        return "{" + ", ".join("%" + c.name for c in value) + "}"
    if key in STRING_KEYS and isinstance(value, str):
        return '"' + _escape(value) + '"'
    if isinstance(value, Window):
        return value.to_text()
    if isinstance(value, ConvDimensionNumbers):
        return value.to_labels()
    if key == "slice":
        if all(s == 1 for _, _, s in value):
            return "{" + ", ".join(f"[{a}:{b}]" for a, b, _ in value) + "}"
        return "{" + ", ".join(f"[{a}:{b}:{s}]" for a, b, s in value) + "}"
    if key == "padding":
        if any(i for _, _, i in value):
            return "x".join(f"{lo}_{hi}_{i}" for lo, hi, i in value)
        return "x".join(f"{lo}_{hi}" for lo, hi, _ in value)
    if isinstance(value, (tuple, list)):
        return "{" + ",".join(str(int(v)) for v in value) + "}"
    return str(value)
