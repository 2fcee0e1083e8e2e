"""Plane-mode loop kernels walked flat, their channel broadcasts read from pattern buffers.

A plane-mode loop kernel (cpu_loop.py: rank >= 3, a last dimension of up to 4, such as an NHWC
image's RGB channels) walks each plane [m, n] with a loop over its m rows and the n columns
unrolled. LLVM vectorizes the row loop, so every array the kernel reads or writes becomes an
*interleaved group* of stride n: an f32 image written from 3 channels costs about 15 shuffles
and blends per 24 elements to interleave the vectors again, a u8 one read as 3 channels 9 more
to split them. Those shuffles exist only because a few operands depend on the column: the
per-channel broadcasts (mean[c], std[c]).

Where every other read is at the output's own linear index (elementwise operations on arrays
of the output's dimensions, scalars, broadcasts along the outer dimensions), the plane is
walked as one flat loop over its m*n elements instead, and each broadcast along the plane's
dimensions is read from a *pattern buffer*: its values over one plane, computed once per
kernel call into a stack buffer (a few KB: in L1). Every access is then unit-stride, and LLVM
vectorizes the flat loop without a shuffle. image_normalize (u8[96,224,224,3] to f32, minus
the channel mean, over the channel std) on the Zen 1 AVX2 host is the case measured
(docs/emitters.md).
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from ...emitters.elemental import ElementalEmitter, dims_of, mem_type
from ...emitters.ir_helpers import Index, const_i64, delinearize, for_range, load_element, store_element
from ...hlo.ir import HloComputation, HloInstruction

# A switch for A/B measurements and tests: False keeps every plane-mode kernel on its row loop.
FLAT_PLANES = True
# The pattern buffers of one kernel together stay this small: they are read with every vector
# of the plane, so they must stay in L1 beside the stream buffers (cpu_streaming.py).
PATTERN_BYTES = 16 * 1024


def pattern_broadcasts(comp: HloComputation, roots: list[HloInstruction], dims: tuple[int, ...]) -> list | None:
    """The broadcasts to read from pattern buffers when the planes of a loop kernel over `dims`
    writing `roots` are walked flat, or None when the kernel cannot be walked flat: some value
    is read at an index other than the output's linear one (a transpose, a slice, an iota, a
    broadcast mixing outer and plane dimensions), the patterns exceed PATTERN_BYTES, or there
    is no pattern (then nothing is interleaved that the flat walk would save)."""
    rank = len(dims)
    plane = {rank - 2, rank - 1}
    patterns: list[HloInstruction] = []
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        inst = stack.pop()
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        if not inst.shape.is_array:
            return None
        op = inst.opcode
        if op == "constant" and inst.shape.rank == 0:
            continue
        if op == "parameter":
            if dims_of(inst) != dims and inst.shape.rank != 0:
                return None
            continue
        if op == "broadcast":
            mapped = set(inst.attrs.get("dimensions", ()))
            if not mapped or not (mapped & plane):
                continue  # a scalar, or constant over each plane: read at the outer indices
            if not mapped <= plane:
                return None
            patterns.append(inst)
            continue
        if not inst.info.elementwise or dims_of(inst) != dims:
            return None
        for operand in inst.operands:
            if operand.shape.is_array and operand.shape.rank != 0 and dims_of(operand) != dims:
                return None
            stack.append(operand)
    plane_elements = dims[-2] * dims[-1]
    if not patterns or sum(plane_elements * p.shape.dtype.byte_size for p in patterns) > PATTERN_BYTES:
        return None
    return patterns


class PlanePatterns:
    """The pattern buffers of one kernel, filled (`fill_patterns`), and the flat walk of its
    planes that reads them: a reader takes its element's offset in the plane as its linear
    index less the first linear index of the plane being walked (`base`)."""

    def __init__(self) -> None:
        self.base: ir.Value | None = None

    def walk(self, b: ir.IRBuilder, dims: tuple[int, ...], outer: list, base: ir.Value, put: Callable) -> None:
        """The plane starting at linear index `base` (outer indices `outer`) as one loop over its
        elements; `put(at, index)` emits element `at` of the plane."""
        m, n = dims[-2], dims[-1]
        self.base = base
        with for_range(b, const_i64(0), const_i64(m * n), "plane.elem") as k:
            # The plane's own indices are divisions of k that only a pattern's fill would read:
            # LLVM removes them as dead code.
            inner = delinearize(b, k, (m, n))
            put(k, Index(b, dims, multi=list(outer) + list(inner), linear=b.add(base, k, flags=["nuw", "nsw"])))


def fill_patterns(b: ir.IRBuilder, em: ElementalEmitter, dims: tuple[int, ...], patterns: list) -> PlanePatterns:
    """Emit, before the loop over planes, the fill of one stack buffer per pattern broadcast
    with its values over a plane (its generator at outer index 0), and make each broadcast's
    generator read its buffer (`em.override`) in the planes `PlanePatterns.walk` walks."""
    m, n = dims[-2], dims[-1]
    outer = [const_i64(0)] * (len(dims) - 2)
    walk = PlanePatterns()
    for inst in patterns:
        dtype = inst.shape.dtype
        with b.goto_entry_block():
            buffer = b.alloca(ir.ArrayType(mem_type(dtype), m * n), name="plane.pattern")
            buffer.align = 64
        gen = em.gen(inst)
        # rolled: it runs once a call, and LLVM unrolled image_normalize's into 450 stores
        with for_range(b, const_i64(0), const_i64(m), "pattern.row", unroll=False) as i:
            row = b.mul(i, const_i64(n), flags=["nuw", "nsw"])
            for j in range(n):
                at = b.add(row, const_i64(j), flags=["nuw", "nsw"])
                value = gen(Index(b, dims, multi=outer + [i, const_i64(j)], linear=at))
                store_element(b, value, b.gep(buffer, [const_i64(0), at], inbounds=True), dtype)

        def read(idx: Index, buffer=buffer, dtype=dtype) -> ir.Value:
            at = b.sub(idx.linear, walk.base, flags=["nuw", "nsw"])
            return load_element(b, b.gep(buffer, [const_i64(0), at], inbounds=True), dtype)

        em.override(inst, read)
    return walk
