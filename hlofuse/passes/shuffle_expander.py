"""XLA's ShuffleExpander, for the compiled backends (the interpreter runs `shuffle` itself,
runtime/interpreter/data_movement.py, the oracle of this rewrite; hlo/shuffle.py says what a
shuffle is).

    rotate by s along d:   concatenate(slice(x, [s, n) along d), slice(x, [0, s) along d)), d
                           (once per shuffled dimension; a shift of 0 mod n is nothing)
    permute:               gather(x, C): C a constant holding, for every element of the result,
                           the operand index it reads (every dimension indexed, one element each)

XLA builds the permute's gather indices from the indices attribute with broadcasts, iotas and a
concatenate; here the full index array is computed once, at compile time, from the same
attribute (hlo/shuffle.source_index) and is a constant of the module.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..hlo.dtypes import element_type
from ..hlo.ir import HloInstruction
from ..hlo.shapes import array
from ..hlo.shuffle import mode, shifts, source_index
from .op_expander import OpExpander, add


def _rotate(inst: HloInstruction) -> HloInstruction:
    """The rotate as slices and concatenates (module docstring)."""
    comp = inst.parent
    result = inst.operands[0]
    dims = tuple(int(d) for d in inst.attrs["dimensions"])
    for d, s in zip(dims, shifts(inst)):
        size = result.shape.dims[d]
        shift = s % size if size else 0
        if shift == 0:
            continue
        full = [(0, n, 1) for n in result.shape.dims]
        upper, lower = list(full), list(full)
        upper[d], lower[d] = (shift, size, 1), (0, shift, 1)
        parts = []
        for bounds in (upper, lower):
            dims_out = [hi - lo for lo, hi, _ in bounds]
            parts.append(add(comp, "slice", result.shape.with_dims(dims_out, result.shape.layout), result,
                             slice=tuple(bounds)))
        result = add(comp, "concatenate", result.shape, *parts, dimensions=(d,))
    return result


def _permute(inst: HloInstruction) -> HloInstruction:
    """The permute as a gather of one element per element of the result, at constant indices."""
    comp = inst.parent
    x = inst.operands[0]
    dims = tuple(x.shape.dims)
    index = np.stack(source_index(inst, dims), axis=-1)
    itype = "s32" if not dims or max(dims) <= np.iinfo(np.int32).max else "s64"
    const = HloInstruction("constant", array(itype, index.shape), name="constant")
    const.literal = index.astype(element_type(itype).numpy)
    const = comp.add_instruction(const)
    every = tuple(range(len(dims)))
    attrs = {"offset_dims": (), "collapsed_slice_dims": every, "start_index_map": every,
             "index_vector_dim": len(dims), "slice_sizes": (1,) * len(dims), "indices_are_sorted": False}
    return add(comp, "gather", inst.shape, x, const, **attrs)


@dataclass(frozen=True)
class ShuffleExpander(OpExpander):
    """Every shuffle becomes slices and concatenates (rotate) or a gather (permute). Work: one
    walk of the module; a permute's constant holds an index per element of its result."""

    name: ClassVar[str] = "shuffle-expander"

    def matches(self, inst: HloInstruction) -> bool:
        """A shuffle."""
        return inst.opcode == "shuffle"

    def expand(self, inst: HloInstruction, run: dict) -> HloInstruction:
        """Its rotate or permute (a copy where every shift is a multiple of its dimension)."""
        new = _rotate(inst) if mode(inst) == "rotate" else _permute(inst)
        return add(inst.parent, "copy", inst.shape, new) if new is inst.operands[0] else new
