"""Streaming (non-temporal) stores for CPU kernels that write large outputs once.

A plain store first reads its cache line for ownership: a kernel that reads N bytes and
writes N moves 3N through memory, not 2N. A streaming store (x86 `vmovntps`, LLVM's
`!nontemporal` store of a whole aligned vector) writes the line without reading it and
without keeping it in cache. That pays only where the output goes to memory anyway (the
kernel's data exceed L3; in cache a streaming store only evicts what the next kernel would
read) and is written once (a value read back after its store would come from memory).

The row kernels (cpu_row.py: the output loop of a layer norm row) and the loop kernels
(cpu_loop.py: rows of an elementwise loop) decide *whether* by their own rules and share the
rest here: which element types and row lengths can stream (`streamable`), the loop that writes
a row a vector at a time (`streaming_row_loop`) and the fence every streaming kernel ends with
(`fence`, streaming stores being weakly ordered).
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from llvmlite import ir

from ...emitters.elemental import reg_type
from ...emitters.ir_helpers import I32, I64, Index, const_i64
from .cpu_skeleton import is_x86

# The vector a streaming store writes: a cache line, one AVX-512 register.
VECTOR_BYTES = 64


def streamable(target, dtypes: list, row_elements: int) -> bool:
    """Whether rows of `row_elements` elements of output types `dtypes` can be written with
    streaming stores on `target`: x86, every type a 32- or 64-bit number of one size (a vector
    holds the same lanes of each output), and a row a whole number of 64-byte vectors (so a row
    that starts on a vector boundary ends on one and no element is left to a scalar store)."""
    if not dtypes or not is_x86(target):
        return False
    if any(t.is_pred or t.is_complex or t.bits not in (32, 64) for t in dtypes):
        return False
    sizes = {t.byte_size for t in dtypes}
    return len(sizes) == 1 and (row_elements * sizes.pop()) % VECTOR_BYTES == 0


def streaming_row_loop(b: ir.IRBuilder, base: ir.Value, index_at: Callable[[ir.Value], Index], row_gens: list,
                       plain: Callable[[], None], loop: Callable[[int], AbstractContextManager]) -> None:
    """Write a row at linear index `base` with streaming stores of 64-byte vectors where every
    output's row starts on a 64-byte boundary, else by `plain()`, the kernel's usual loop.
    `row_gens` holds (element generator, output leaf, typed output pointer) per output;
    `index_at(j)` is the Index of the row's element j; `loop(step)` opens the loop over the row
    a vector (`step` elements) at a time and yields j.

    LLVM's loop vectorizer does not vectorise a loop of non-temporal scalar stores (it would
    need their addresses aligned to the vector), so the loop steps a vector at a time: each
    output's lanes are computed by its element generator one by one, gathered into a vector
    (the SLP vectorizer turns the lanes' arithmetic into vector instructions) and stored with
    `!nontemporal`. The values are the plain loop's, element by element."""
    aligned = None
    for _, _, ptr in row_gens:
        row = b.gep(ptr, [base], inbounds=True)
        ok = b.icmp_unsigned("==", b.and_(b.ptrtoint(row, I64), const_i64(VECTOR_BYTES - 1)), const_i64(0))
        aligned = ok if aligned is None else b.and_(aligned, ok)
    nontemporal = b.module.add_metadata([ir.Constant(I32, 1)])
    with b.if_else(aligned) as (vectors, scalars):
        with vectors:
            lanes = VECTOR_BYTES // row_gens[0][1].shape.dtype.byte_size
            with loop(lanes) as j0:
                for g, leaf, ptr in row_gens:
                    vty = ir.VectorType(reg_type(leaf.shape.dtype), lanes)
                    vec = ir.Constant(vty, ir.Undefined)
                    for k in range(lanes):
                        index = index_at(b.add(j0, const_i64(k), flags=["nuw", "nsw"]))
                        vec = b.insert_element(vec, leaf.select(g(index)), ir.Constant(I32, k))
                    at = b.gep(ptr, [b.add(base, j0, flags=["nuw", "nsw"])], inbounds=True)
                    store = b.store(vec, b.bitcast(at, vty.as_pointer()), align=VECTOR_BYTES)
                    store.set_metadata("nontemporal", nontemporal)
        with scalars:
            plain()


def fence(b: ir.IRBuilder) -> None:
    """`sfence`: the kernel's streaming stores are done (visible to every thread) before it returns."""
    b.call(b.module.declare_intrinsic("llvm.x86.sse.sfence", fnty=ir.FunctionType(ir.VoidType(), [])), [])
