"""XLA's `shuffle` (kShuffle, newer than jaxlib 0.10's XLA): what its attributes say, read once
for the shape rule, the interpreter and the expander alike.

    shuffle(x), dimensions={d0,...}, mode=rotate, shifts={s0,...}
        result[i] = x[i with i[dk] replaced by (i[dk] + sk) mod size(dk)]       (for every k)
    shuffle(x), dimensions={d0,...}, mode=permute, indices=<shape> <literal>
        result[i] = x[i with i[dk] replaced by I[i][k]]

A rotate moves element i + s of each rotated dimension to i (XLA's ShuffleExpander: the
concatenation of the slices [s, n) and [0, s), the shift taken modulo the size). A permute's
indices I hold, for every element of the result, the coordinates of the shuffled dimensions
in the operand, in the order of `dimensions`: a literal of shape [*x's dimensions, len(d)],
where any dimension may be 1 (its coordinates shared along it) and trailing dimensions may be
left out (the coordinate dimension, for one shuffled dimension) -- XLA's expander reshapes the
size-1 dimensions away and broadcasts them back.
"""
from __future__ import annotations

import numpy as np

from .attributes import Raw
from .lexer import Lexer
from .literals import parse_literal
from .parse_shapes import ShapeReader

MODES = ("rotate", "permute")


def mode(inst) -> str:
    """The shuffle's mode, as written (checked against MODES by the shape rule)."""
    value = inst.attrs.get("mode")
    return str(value.text if isinstance(value, Raw) else value or "")


def shifts(inst) -> tuple[int, ...]:
    """A rotate's shifts, one per shuffled dimension."""
    return tuple(int(s) for s in inst.attrs.get("shifts", ()))


def indices_literal(inst) -> np.ndarray:
    """A permute's `indices` attribute (`s32[3,1]{1,0} { {2}, {0}, {1} }`) as an integer array;
    ValueError naming what is wrong."""
    raw = inst.attrs.get("indices")
    if raw is None:
        raise ValueError("a permute shuffle needs indices=<shape> <literal>")
    text = raw.text if isinstance(raw, Raw) else str(raw)
    lex = Lexer(text)
    shape = ShapeReader(lex).parse()
    if not shape.is_array or shape.dtype.kind not in ("sint", "uint"):
        raise ValueError(f"shuffle indices must be an integer array, not {text.split(' ')[0]}")
    return np.asarray(parse_literal(text[lex.pos:].strip(), shape)).reshape(shape.dims).astype(np.int64)


def permute_coordinates(inst, dims: tuple[int, ...]) -> np.ndarray:
    """The coordinates a permute reads for every element of its result, [*dims, len(shuffled)]
    (module docstring); ValueError where the indices do not fit the operand."""
    shuffled = tuple(int(d) for d in inst.attrs.get("dimensions", ()))
    target = (*dims, len(shuffled))
    indices = indices_literal(inst)
    if indices.ndim > len(target):
        raise ValueError(f"shuffle indices of rank {indices.ndim} for an operand of rank {len(dims)}")
    for k, size in enumerate(indices.shape):
        if size not in (1, target[k]):
            raise ValueError(f"shuffle indices dimension {k} has size {size}, not 1 or {target[k]}")
    full = np.broadcast_to(indices.reshape(indices.shape + (1,) * (len(target) - indices.ndim)), target)
    for k, d in enumerate(shuffled):
        column = full[..., k]
        if column.size and (column.min() < 0 or column.max() >= dims[d]):
            raise ValueError(f"shuffle indices for dimension {d} must be in [0, {dims[d]}), "
                             f"hold {int(column.min())}..{int(column.max())}")
    return full


def source_index(inst, dims: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """For every element of the result, the operand's index it takes its value from: one
    integer array of `dims` per operand dimension (numpy's advanced index)."""
    grid = list(np.indices(dims, dtype=np.int64)) if dims else []
    shuffled = tuple(int(d) for d in inst.attrs.get("dimensions", ()))
    if mode(inst) == "rotate":
        for d, s in zip(shuffled, shifts(inst)):
            if dims[d]:
                grid[d] = (grid[d] + s) % dims[d]
    else:
        coords = permute_coordinates(inst, dims)
        for k, d in enumerate(shuffled):
            grid[d] = coords[..., k]
    return tuple(grid)
