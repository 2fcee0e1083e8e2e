"""Kernel arguments shared by the CPU and the GPU kernel skeletons.

Every kernel takes one raw i8 pointer per array leaf of the fused computation's parameters
(parameters in order, tuple parameters flattened depth-first), then one per output leaf
(the root's leaves, tuples flattened depth-first: `output_leaves`), then its scratch
buffers. This module lists those leaves and builds the element generators that read a
parameter through its leaf pointers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from ...emitters.elemental import TupleGenerator, mem_type
from ...emitters.ir_helpers import Index, load_element
from ...hlo.dtypes import ElementType
from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.shapes import Shape


def leaf_count(shape: Shape) -> int:
    """Number of array leaves of a shape."""
    return len(shape.leaves()) if shape.is_tuple else 1


def param_leaf_count(comp: HloComputation) -> int:
    """Number of array leaves over the parameters of `comp`."""
    return sum(leaf_count(p.shape) for p in comp.parameters)


def param_leaf_slots(comp: HloComputation) -> dict[int, list[tuple[int, Shape]]]:
    """Per parameter number of `comp`: its leaves as (argument index, leaf shape)."""
    slots: dict[int, list[tuple[int, Shape]]] = {}
    k = 0
    for p in comp.parameters:
        leaves = p.shape.leaves() if p.shape.is_tuple else [p.shape]
        slots[p.parameter_number] = [(k + j, leaf) for j, leaf in enumerate(leaves)]
        k += len(leaves)
    return slots


@dataclass(frozen=True)
class OutputLeaf:
    """One array leaf of a fused computation's result: the instruction computing it and the
    path into its (tuple) value, e.g. a variadic reduce's second result is (reduce, (1,))."""

    inst: HloInstruction
    path: tuple[int, ...]
    shape: Shape  # an array shape

    def select(self, value):
        """This leaf's part of a (tuple) value."""
        for k in self.path:
            value = value[k]
        return value


def output_leaves(comp: HloComputation) -> list[OutputLeaf]:
    """The output leaves of a fused computation, tuple roots flattened depth-first."""
    out: list[OutputLeaf] = []

    def walk(inst: HloInstruction) -> None:
        if inst.opcode == "tuple":
            for op in inst.operands:
                walk(op)
            return

        def leaves(shape, path):
            if shape.is_tuple:
                for k, e in enumerate(shape.elements):
                    leaves(e, path + (k,))
            else:
                out.append(OutputLeaf(inst, path, shape))

        leaves(inst.shape, ())

    walk(comp.root)
    return out


def typed_pointer(builder: ir.IRBuilder, arg: ir.Value, et: ElementType, addrspace: int = 0) -> ir.Value:
    """Raw pointer `arg` cast to a pointer to the memory type of `et`."""
    return builder.bitcast(arg, mem_type(et).as_pointer(addrspace))


def param_generator(builder: ir.IRBuilder, p: HloInstruction, slots: list[tuple[int, Shape]],
                    pointer: Callable[[int, Shape], ir.Value]) -> Callable:
    """Generator reading parameter `p` whose leaves are `slots` (a TupleGenerator of leaf
    loads for a tuple parameter: its leaves may have different dimensions, so each is read
    only at an index of its own); `pointer(k, leaf)` gives the typed pointer of argument `k`."""
    leaves = iter(slots)
    b = builder

    def build(shape: Shape):
        if shape.is_tuple:
            return TupleGenerator([build(e) for e in shape.elements])
        k, leaf = next(leaves)

        def load(idx: Index):
            same = tuple(idx.dims) == tuple(leaf.dims)
            lin = idx.linear if same else Index(b, leaf.dims, multi=idx.multi).linear
            return load_element(b, b.gep(pointer(k, leaf), [lin], inbounds=True), leaf.dtype)

        return load

    return build(p.shape)
