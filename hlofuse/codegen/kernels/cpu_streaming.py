"""Streaming (non-temporal) stores for CPU kernels that write large outputs once.

A plain store first reads its cache line for ownership: a kernel that reads N bytes and
writes N moves 3N through memory, not 2N. A streaming store (x86 `vmovntps`, LLVM's
`!nontemporal` store of a whole aligned vector) writes the line without reading it and
without keeping it in cache. That pays only where the output goes to memory anyway (the
kernel's data exceed L3; in cache a streaming store only evicts what the next kernel would
read) and is written once (a value read back after its store would come from memory).

The row kernels (cpu_row.py: the output loop of a layer norm row) and the loop kernels
(cpu_loop.py: rows of an elementwise loop) decide *whether* by their own rules and share the
rest here: which element types and row lengths can stream (`streamable`), two ways to write a
row with them, and the fence every streaming kernel ends with (`fence`, streaming stores being
weakly ordered).

LLVM's loop vectorizer does not vectorise a loop of non-temporal scalar stores (it would need
their addresses aligned to the vector). `streaming_row_loop` therefore builds each vector lane
by lane (the SLP vectorizer turns the lanes' arithmetic into vector instructions): right for a
cheap element, but an element that is a long chain of math functions then runs one vector at a
time, latency-bound, and the SLP vectorizer may leave parts of it scalar (the chain
erf(logistic(log1p(exp(tanh x)))) over 25 MB: 18 ms with the plain interleaved loop, 52 ms so).
`buffered_streaming_row` keeps the plain loop: it computes a chunk of the row into a buffer in
L1 with the loop LLVM vectorises (and interleaves, cpu_loop.interleave_count), then copies the
chunk out with aligned streaming vector stores, one output after another (copied vector by
vector in turn, three outputs ran 1.2x slower than with plain stores; one after another, as
fast or faster). The loop kernels use it. Measured against the same kernels with plain stores,
in one process, 2 threads, CPU time per call, medians of 41 interleaved rounds, two runs (load
6.4-8.8; box_decode, which does not stream, as the noise control: 1.01-1.02): chain 0.92-0.95x,
gelu_tanh 0.90-1.04x, scaled_add 0.97-1.06x, shared_producer (three outputs) 0.77-0.98x,
resnet_add_relu 0.84-0.97x, iou_matrix 0.79-0.82x. An exception: y = x + y alone over
f32[2048,2048] (50 MB, 1.6x this host's L3) ran 1.21-1.28x slower (with plain stores part of it
stays in L3 from one call to the next); at f32[2048,4096] 0.93x.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from llvmlite import ir

from ...emitters.elemental import mem_type, reg_type
from ...emitters.ir_helpers import I32, I64, Index, const_i64, for_range, store_element
from .cpu_skeleton import is_x86

# The vector a streaming store writes: a cache line, one AVX-512 register.
VECTOR_BYTES = 64
# The buffers of `buffered_streaming_row` (one chunk of every output) take at most this much of
# L1 (48 KiB on this project's znver5 host, 32 KiB on most x86 cores), and a chunk at most
# CHUNK_ELEMENTS elements.
BUFFER_BYTES = 16 << 10
CHUNK_ELEMENTS = 1024
# Vectors per chunk of `buffered_streaming_row` for an element LLVM does not interleave (a
# cheap one, cpu_loop.interleave_count 1): LLVM then unrolls each chunk's loop and its copy-out
# whole and forwards the buffer away, leaving a rolled loop of 4 computed vectors and 4
# streaming stores a step. A row of 64 streaming stores unrolled whole (a chunk of the whole
# row) writes more slowly: f32 copy of 64 MB rows of 1024, one thread, CPU time, cold
# (hlofuse's kernel in a C harness beside C loops, interleaved, load 7.6): hlofuse's row
# unrolled whole 37.4-38.3 GB/s, a C loop of 1 store a step 46.4-48.4, of 4 49.5-53.9, of 16
# 50.9-52.6, the same C loop unrolled whole 39.5; hlofuse with chunks of 4 vectors 49.6 (of 16:
# 35.0). An interleaved element (math functions) keeps whole-row chunks: the interleaved
# vectors must fit a chunk (gelu_tanh 1.60 ms with them, 2.03 in chunks of 64 elements).
CHEAP_CHUNK_VECTORS = 4


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
    nontemporal = b.module.add_metadata([ir.Constant(I32, 1)])
    with b.if_else(_aligned(b, base, row_gens)) as (vectors, scalars):
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


def _aligned(b: ir.IRBuilder, base: ir.Value, row_gens: list) -> ir.Value:
    """Whether every output's row at linear index `base` starts on a VECTOR_BYTES boundary."""
    aligned = None
    for _, _, ptr in row_gens:
        row = b.gep(ptr, [base], inbounds=True)
        ok = b.icmp_unsigned("==", b.and_(b.ptrtoint(row, I64), const_i64(VECTOR_BYTES - 1)), const_i64(0))
        aligned = ok if aligned is None else b.and_(aligned, ok)
    return aligned


def chunk_elements(row_elements: int, row_gens: list, interleaved: int | None = None) -> int:
    """Elements per chunk of `buffered_streaming_row`: a whole number of vectors, the buffers of
    every output together within BUFFER_BYTES, at most CHUNK_ELEMENTS and the row; at most
    CHEAP_CHUNK_VECTORS vectors where the fill loop is known not to be interleaved
    (`interleaved` 1)."""
    size = row_gens[0][1].shape.dtype.byte_size
    lanes = VECTOR_BYTES // size
    fit = BUFFER_BYTES // (size * len(row_gens)) // lanes * lanes
    most = CHEAP_CHUNK_VECTORS * lanes if interleaved == 1 else CHUNK_ELEMENTS
    return max(lanes, min(fit, most, row_elements))


def buffered_streaming_row(b: ir.IRBuilder, n: int, base: ir.Value, row_gens: list, fill: Callable,
                           chunk: int | None = None, interleaved: int | None = None) -> None:
    """Write `n` contiguous elements at linear index `base` (a row, or a plane of rows) a chunk
    at a time: the chunk's elements by the kernel's plain loop into a buffer per output
    (allocas in the entry block, 64-byte aligned, so in L1), then each buffer to its output
    with aligned streaming vector stores, or, where an output's elements do not start on a
    64-byte boundary, with plain vector stores (one copy of the element's code either way: a
    fallback to the plain loop would double the IR LLVM compiles). `row_gens` holds (element
    generator, output leaf, typed output pointer) per output. `fill(c0, m, put)` emits the
    loop computing elements [c0, c0 + m) of the row: for each, `put(j, index)` stores its
    outputs' values at element j of the chunk's buffers (`index`: its Index). `chunk` (a
    whole number of vectors; `chunk_elements` by default, told by `interleaved`, the interleave
    count of `fill`'s loop): elements per chunk. The values are the plain loop's."""
    size = row_gens[0][1].shape.dtype.byte_size
    lanes = VECTOR_BYTES // size
    chunk = chunk or chunk_elements(n, row_gens, interleaved)
    with b.goto_entry_block():
        buffers = [b.alloca(ir.ArrayType(mem_type(leaf.shape.dtype), chunk), name="stream.buffer")
                   for _, leaf, _ in row_gens]
        for buf in buffers:
            buf.align = VECTOR_BYTES

    def put(j: ir.Value, index: Index) -> None:
        for (g, leaf, _), buf in zip(row_gens, buffers):
            store_element(b, leaf.select(g(index)), b.gep(buf, [const_i64(0), j], inbounds=True), leaf.shape.dtype)

    def copy_out(c0: ir.Value, m: ir.Value, streaming: bool) -> None:
        for (_, leaf, ptr), buf in zip(row_gens, buffers):  # one output's lines after another
            vty = ir.VectorType(mem_type(leaf.shape.dtype), lanes)
            with for_range(b, const_i64(0), m, "stream" if streaming else "copy", step=lanes) as v:
                at = b.add(b.add(base, c0, flags=["nuw", "nsw"]), v, flags=["nuw", "nsw"])
                src = b.bitcast(b.gep(buf, [const_i64(0), v], inbounds=True), vty.as_pointer())
                vec = b.load(src, align=VECTOR_BYTES)
                dst = b.bitcast(b.gep(ptr, [at], inbounds=True), vty.as_pointer())
                if streaming:
                    b.store(vec, dst, align=VECTOR_BYTES).set_metadata("nontemporal", nontemporal)
                else:
                    b.store(vec, dst, align=size)

    nontemporal = b.module.add_metadata([ir.Constant(I32, 1)])
    aligned = _aligned(b, base, row_gens)
    with for_range(b, const_i64(0), const_i64(n), "chunk", step=chunk, unroll=False) as c0:
        if n % chunk == 0:
            # Every chunk whole: a constant trip count gives LLVM a fill loop without a
            # remainder and copy loops it unrolls (a variable one cost the vectorizer and the
            # code generator 3-4x the time on a 512-element row: issue 15).
            m = const_i64(chunk)
        else:
            left = b.sub(const_i64(n), c0, flags=["nuw", "nsw"])
            m = b.select(b.icmp_signed("<", left, const_i64(chunk)), left, const_i64(chunk))
        fill(c0, m, put)
        with b.if_else(aligned) as (vectors, unaligned):
            with vectors:
                copy_out(c0, m, True)
            with unaligned:
                copy_out(c0, m, False)


def fence(b: ir.IRBuilder) -> None:
    """`sfence`: the kernel's streaming stores are done (visible to every thread) before it returns."""
    b.call(b.module.declare_intrinsic("llvm.x86.sse.sfence", fnty=ir.FunctionType(ir.VoidType(), [])), [])
