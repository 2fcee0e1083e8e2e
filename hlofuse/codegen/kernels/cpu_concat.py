"""Concatenate outputs of CPU loop kernels, one operand at a time.

The element generator of concatenate (emitters/elemental_data.py) is a select over clamped
reads of every operand: right inside a fusion, where a concatenate is one value among others,
but as a kernel's output it computes every operand at every element and hides the addresses
from LLVM (scan_rnn's concat of x and h, [128,64] ++ [128,64], was read with gathers). Here the
loop over the output is split by operand instead, as XLA's concatenate emitters do (XLA:CPU's
fast concatenate copies each operand's part, XLA:GPU's concatenate fusion loops over each
operand's shape):

  * concatenated along the last dimension, in rows mode: each row is written part by part,
    one inner loop per operand reading that operand at its own column;
  * concatenated along a dimension outside the unit (the rows or planes the threads share
    out): the unit's index in that dimension picks the one operand the whole unit reads (a
    branch per unit), and the unit's loops read only it.

Other loop shapes (flat mode, plane mode concatenating inside the plane) keep the select.
"""
from __future__ import annotations

import math

from llvmlite import ir

from ...emitters.elemental import ElementalEmitter, dims_of
from ...emitters.ir_helpers import Index, const_i64, delinearize, for_range, linearize, store_element


def _inner_loops(b: ir.IRBuilder, dims: tuple[int, ...], body, idx: list | None = None) -> None:
    """Nested loops over `dims`; `body(multi)` gets the loop variables."""
    idx = idx or []
    if len(idx) == len(dims):
        body(idx)
        return
    with for_range(b, const_i64(0), const_i64(dims[len(idx)]), f"c{len(idx)}") as i:
        _inner_loops(b, dims, body, idx + [i])


def emit_concat_loop(skel, ls, em: ElementalEmitter, leaf, ptr: ir.Value) -> bool:
    """Emit the loop of loop shape `ls` writing output `leaf` (a concatenate) through `ptr`,
    operand by operand; False (nothing emitted) when the shape keeps the select."""
    inst = leaf.inst
    if leaf.path or inst.opcode != "concatenate" or not ls.rows_mode:
        return False
    dims, rank = ls.dims, len(ls.dims)
    first_inner = rank - ls.inner
    dim = int(inst.attrs["dimensions"][0])
    if not (dim < first_inner or (dim == rank - 1 and ls.inner == 1)):
        return False
    parts, offset = [], 0
    for op in inst.operands:
        size = dims_of(op)[dim]
        if size:
            parts.append((em.gen(op), offset, size, dims_of(op)))
        offset += size
    if not parts:
        return False
    b = skel.builder
    et = leaf.shape.dtype
    inner_dims = dims[first_inner:]
    with for_range(b, skel.begin, skel.end, "unit") as r:
        outer = list(delinearize(b, r, dims[:first_inner]))
        base = b.mul(r, const_i64(math.prod(inner_dims)), flags=["nuw", "nsw"])
        if dim == rank - 1:  # one row, part by part
            for g, off, size, op_dims in parts:
                with for_range(b, const_i64(0), const_i64(size), "col") as j:
                    lin = b.add(base, b.add(j, const_i64(off), flags=["nuw", "nsw"]), flags=["nuw", "nsw"])
                    store_element(b, g(Index(b, op_dims, multi=outer + [j])), b.gep(ptr, [lin], inbounds=True), et)
        else:
            _by_unit(b, parts, outer, base, dim, inner_dims, ptr, et)
    skel.finish()
    return True


def _by_unit(b: ir.IRBuilder, parts: list, outer: list, base: ir.Value, dim: int, inner_dims: tuple[int, ...],
             ptr: ir.Value, et) -> None:
    """The loops of one unit whose index `outer[dim]` picks the operand it reads."""
    done = b.append_basic_block("concat.done")
    for k, (g, off, size, op_dims) in enumerate(parts):
        if k < len(parts) - 1:  # the unit's index along `dim` picks the operand
            here = b.append_basic_block(f"concat.part{k}")
            later = b.append_basic_block(f"concat.after{k}")
            b.cbranch(b.icmp_signed("<", outer[dim], const_i64(off + size)), here, later)
            b.position_at_end(here)
        multi = list(outer)
        multi[dim] = b.sub(outer[dim], const_i64(off), flags=["nsw"])

        def body(idx, g=g, multi=multi, op_dims=op_dims):
            lin = b.add(base, linearize(b, idx, inner_dims), flags=["nuw", "nsw"])
            store_element(b, g(Index(b, op_dims, multi=multi + idx)), b.gep(ptr, [lin], inbounds=True), et)

        _inner_loops(b, inner_dims, body)
        b.branch(done)
        if k < len(parts) - 1:
            b.position_at_end(later)
    b.position_at_end(done)
