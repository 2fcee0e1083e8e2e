"""How a GEMM kernel sees its dot: element type, sizes, operands and result as BLAS matrices.

The analysis half of the GEMM kernels (codegen/kernels/cpu_gemm.py emits and plans them). All
buffers are row-major. A dot's result, in XLA's order [batch..., lhs free..., rhs free...], is
[B][M][N]; each operand is read as strided matrices per batch element (`Matrix`), and the
result is written through an `OutputMap`: the dot's own row-major layout, or, when the fused
computation's root is a transpose of the dot's value (attention's `bhqd -> bqhd` after its
second dot, perhaps under a reshape to `[b, q, h*d]`: a row-major reshape moves no element),
the transposed layout, so that BLAS (or the epilogue) writes each element where the transpose
would have put it and no transpose kernel runs afterwards.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...emitters.ir_helpers import row_major_strides
from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.shapes import ArrayShape

# The BLAS routine per GEMM element type; other float types compute in the first they widen to.
GEMM_ROUTINE = {"f32": "sgemm", "f64": "dgemm", "c64": "cgemm", "c128": "zgemm"}
INT32_MAX = (1 << 31) - 1


def _dims(inst: HloInstruction, key: str) -> list[int]:
    return [int(d) for d in inst.attrs.get(key, ())]


def gemm_dtype(dot: HloInstruction) -> str | None:
    """The element type the BLAS call computes `dot` in, or None when it has no BLAS routine
    (integer or predicate dots, f8 types)."""
    types = [dot.shape.dtype] + [op.shape.dtype for op in dot.operands]
    if any(not (t.is_float or t.is_complex) for t in types):
        return None
    if any(not t.is_complex and t.name not in ("f16", "bf16", "f32", "f64") for t in types):
        return None
    wide = any(t.name in ("f64", "c128") for t in types)
    if any(t.is_complex for t in types):
        return "c128" if wide else "c64"
    return "f64" if wide else "f32"


@dataclass(frozen=True)
class Matrix:
    """One operand of a GEMM seen as matrices [batch][rows][cols] in a row-major buffer:
    element (b, r, c) of the dot's order (rows = free dims for the lhs, contracting for the
    rhs) at `batch_offset(b) + r * row_stride + c * col_stride` elements."""

    batch_sizes: tuple[int, ...]
    batch_strides: tuple[int, ...]
    rows: int
    cols: int
    row_stride: int
    col_stride: int


def collapse(dims: tuple[int, ...], strides: list[int], group: list[int]) -> tuple[int, int | None] | None:
    """(size, stride) of dimensions `group` (in that order) of an array of `dims` and element
    `strides` collapsed into one, stride None when the size is 1; None when they do not collapse."""
    kept = [d for d in group if dims[d] != 1]
    size = math.prod(dims[d] for d in group)
    if not kept or size == 0:
        return size, None
    for outer, inner in zip(kept, kept[1:]):
        if strides[outer] != strides[inner] * dims[inner]:
            return None
    return size, strides[kept[-1]]


def strided_matrix(dims: tuple[int, ...], strides: list[int], batch: list[int], rows: list[int],
                   cols: list[int]) -> Matrix | None:
    """The array of `dims` and `strides` as BLAS matrices (batch dims `batch`, row dims `rows`,
    column dims `cols`, each in the dot's order), or None when BLAS cannot address it (one of
    the row or column groups must have unit stride, the other a stride past the first's extent)."""
    r, c = collapse(dims, strides, rows), collapse(dims, strides, cols)
    if r is None or c is None:
        return None
    (nr, sr), (nc, sc) = r, c
    if sc in (None, 1) and (sr is None or sr >= max(nc, 1)):
        sc, sr = 1, sr if sr is not None else max(nc, 1)
    elif sr in (None, 1) and (sc is None or sc >= max(nr, 1)):
        sr, sc = 1, sc if sc is not None else max(nr, 1)
    else:
        return None
    if max(sr, sc, nr, nc) > INT32_MAX:
        return None
    return Matrix(tuple(dims[d] for d in batch), tuple(strides[d] for d in batch), nr, nc, sr, sc)


def operand_matrix(shape: ArrayShape, batch: list[int], rows: list[int], cols: list[int]) -> Matrix | None:
    """The row-major operand of `shape` as BLAS matrices (see `strided_matrix`), or None when
    BLAS cannot read it in place."""
    dims = tuple(shape.dims)
    return strided_matrix(dims, row_major_strides(dims), batch, rows, cols)


@dataclass(frozen=True)
class DotDims:
    """A dot's dimension numbers with the free dimensions, and its GEMM sizes."""

    lb: list[int]
    lc: list[int]
    lf: list[int]
    rb: list[int]
    rc: list[int]
    rf: list[int]
    batch: int
    m: int
    n: int
    k: int


def dot_dims(dot: HloInstruction) -> DotDims:
    """The dimension numbers and GEMM sizes (batch, M, N, K) of `dot`."""
    lhs, rhs = (op.shape.dims for op in dot.operands)
    lb, lc = _dims(dot, "lhs_batch_dims"), _dims(dot, "lhs_contracting_dims")
    rb, rc = _dims(dot, "rhs_batch_dims"), _dims(dot, "rhs_contracting_dims")
    lf = [d for d in range(len(lhs)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rhs)) if d not in rb and d not in rc]
    return DotDims(lb, lc, lf, rb, rc, rf, math.prod(lhs[d] for d in lb), math.prod(lhs[d] for d in lf),
                   math.prod(rhs[d] for d in rf), math.prod(lhs[d] for d in lc))


# ---- where the result goes ----------------------------------------------------------------------

@dataclass(frozen=True)
class OutputChain:
    """How a GEMM computation's root is reached from the value its epilogue computes at the
    dot's index: through a root transpose (its permutation `perm`) and/or a root reshape (a
    row-major reshape keeps every element's linear index: the buffer is the same), `members`
    the transpose and reshape themselves; `value` is the root when there are none."""

    value: HloInstruction
    perm: tuple[int, ...] | None
    members: tuple[HloInstruction, ...]


def output_chain(comp: HloComputation) -> OutputChain:
    """The OutputChain of `comp`'s root (see OutputChain)."""
    inst, members, perm = comp.root, [], None
    if inst.opcode == "reshape" and inst.shape.is_array:
        members.append(inst)
        inst = inst.operands[0]
    if inst.opcode == "transpose" and inst.shape.is_array and (not members or len(inst.users) == 1):
        members.append(inst)
        perm = tuple(int(d) for d in inst.attrs["dimensions"])
        inst = inst.operands[0]
    if members and len(inst.users) != 1:  # the value is read elsewhere too: no chain
        return OutputChain(comp.root, None, ())
    return OutputChain(inst, perm, tuple(members))


@dataclass(frozen=True)
class OutputMap:
    """Where element (b, m, n) of a dot's result [B][M][N] lands in the output buffer: the
    result's dimensions (XLA's order: batch, lhs free, rhs free) with each one's element stride
    in the output. The identity map is the dot's own row-major layout; a root transpose
    permutes the strides."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    nb: int  # batch dimensions
    nm: int  # lhs free dimensions; the rest are the rhs's

    @property
    def is_identity(self) -> bool:
        """Whether the output is the dot's own row-major layout."""
        return list(self.strides) == row_major_strides(self.dims)

    def groups(self) -> tuple[list[int], list[int], list[int]]:
        """The batch, row (M) and column (N) dimensions of the result."""
        n = len(self.dims)
        return list(range(self.nb)), list(range(self.nb, self.nb + self.nm)), list(range(self.nb + self.nm, n))

    def matrix(self) -> Matrix | None:
        """The output as BLAS's C matrices [batch][M][N], or None when BLAS cannot write it in
        place (the epilogue then writes it through this map from a scratch result)."""
        batch, rows, cols = self.groups()
        return strided_matrix(self.dims, list(self.strides), batch, rows, cols)


def output_map(comp: HloComputation, dot: HloInstruction) -> OutputMap:
    """The OutputMap of GEMM computation `comp` (whose dot is `dot`)."""
    dd = dot_dims(dot)
    dims = tuple(dot.shape.dims)
    chain = output_chain(comp)
    perm = chain.perm
    if perm is None:
        strides = row_major_strides(dims)
    else:
        transpose = next(m for m in chain.members if m.opcode == "transpose")
        out_strides = row_major_strides(tuple(transpose.shape.dims))
        strides = [0] * len(dims)
        for i, d in enumerate(perm):  # output dimension i is the dot's dimension perm[i]
            strides[d] = out_strides[i]
    return OutputMap(dims, tuple(strides), len(dd.lb), len(dd.lf))
