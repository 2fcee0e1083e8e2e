"""Calling BLAS `?gemm_` from a CPU kernel: its declaration, its by-reference arguments, and
the mapping of row-major strided matrices onto its transpose flags and leading dimensions.

Shared by the GEMM kernels of dots (cpu_gemm.py) and of convolutions (cpu_conv_gemm.py).

    call = GemmCall(builder, module, element_type)
    swapped, first, second, ldc = blas_operands(lhs, rhs, c)   # Matrix strides -> BLAS flags
    call.gemm(first, second, ldc, rows, cols, k, a_ptr, b_ptr, c_ptr, swapped)

The Fortran ABI passes every argument by reference: scalars live in stack slots allocated once
in the kernel's entry block (not per loop iteration).
"""
from __future__ import annotations

from llvmlite import ir

from ...emitters.elemental import mem_type
from ...hlo.dtypes import ElementType
from ...runtime.jit_builtins import blas_symbol
from .gemm_layout import GEMM_ROUTINE, Matrix

I8P = ir.IntType(8).as_pointer()
I32 = ir.IntType(32)


def gemm_function(module: ir.Module, routine: str) -> ir.Function:
    """The declaration of BLAS routine `routine` (Fortran ABI: 13 pointers) in `module`."""
    name = blas_symbol(routine)
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I8P] * 13), name)
    fn.attributes.add("nounwind")
    return fn


def blas_operands(lm: Matrix, rm: Matrix, cm: Matrix) -> tuple[bool, tuple[int, int], tuple[int, int], int]:
    """How BLAS (column-major) computes C = lhs x rhs into C matrices `cm`: (swapped, (trans,
    ld) of BLAS's first matrix, (trans, ld) of its second, ldc). Unit column stride in C (the
    usual row-major result) is column-major C^T = rhs^T lhs^T, rhs first; unit row stride (a
    transposed output) is column-major C = lhs rhs, lhs first ('swapped')."""
    def flag(x: Matrix, unit_rows: bool) -> tuple[int, int]:
        # x as a column-major (rows x cols) matrix when unit_rows, else its transpose.
        if unit_rows:
            return (ord("N"), x.col_stride) if x.row_stride == 1 else (ord("T"), x.row_stride)
        return (ord("N"), x.row_stride) if x.col_stride == 1 else (ord("T"), x.col_stride)

    if cm.col_stride == 1:
        return False, flag(rm, False), flag(lm, False), cm.row_stride
    return True, flag(lm, True), flag(rm, True), cm.col_stride


class GemmCall:
    """Emits calls of the `?gemm_` of element type `et` (a key of GEMM_ROUTINE) through
    builder `b`, whose function's entry block receives the argument slots."""

    def __init__(self, b: ir.IRBuilder, module: ir.Module, et: ElementType) -> None:
        self.b, self.et = b, et
        self.elem = mem_type(et)
        self.fn = gemm_function(module, GEMM_ROUTINE[et.name])
        self.alpha, self.beta = self.slot(self.elem, self.scalar(1.0)), self.slot(self.elem, self.scalar(0.0))

    def slot(self, ty: ir.Type, value: ir.Value) -> ir.Value:
        """An i8* to a stack slot (allocated in the entry block) holding `value`."""
        b = self.b
        with b.goto_entry_block():
            p = b.alloca(ty)
        b.store(value, p)
        return b.bitcast(p, I8P)

    def i32(self, v: ir.Value | int) -> ir.Value:
        """A slot holding the i32 `v` (an int, or an i32 value)."""
        return self.slot(I32, v if isinstance(v, ir.Value) else ir.Constant(I32, int(v)))

    def char(self, c: int) -> ir.Value:
        """A slot holding the character `c` (a transpose flag)."""
        return self.slot(ir.IntType(8), ir.Constant(ir.IntType(8), c))

    def scalar(self, x: float) -> ir.Constant:
        """The constant `x` of the GEMM's element type (a complex one with zero imaginary part)."""
        if self.et.is_complex:
            return ir.Constant(self.elem, [ir.Constant(self.elem.elements[0], x), ir.Constant(self.elem.elements[1], 0.0)])
        return ir.Constant(self.elem, x)

    def call(self, trans: tuple[ir.Value, ir.Value], sizes: tuple[ir.Value, ir.Value, ir.Value],
             first: tuple[ir.Value, ir.Value], second: tuple[ir.Value, ir.Value], c: tuple[ir.Value, ir.Value]) -> None:
        """?gemm_(trans..., m, n, k, 1, first, ld1, second, ld2, 0, c, ldc): each argument a
        slot (`trans`, `sizes`, the leading dimensions) or a typed pointer (the matrices)."""
        b = self.b
        (a, lda), (bb, ldb), (cc, ldc) = first, second, c
        b.call(self.fn, [*trans, *sizes, self.alpha, b.bitcast(a, I8P), lda, b.bitcast(bb, I8P), ldb,
                         self.beta, b.bitcast(cc, I8P), ldc])
