"""Calling a GEMM library from a CPU kernel: the Fortran BLAS `?gemm_` of scipy's OpenBLAS, or
oneDNN's `dnnl_sgemm` for f32 (runtime/gemm_provider.py chooses), their declarations and
arguments, and the mapping of row-major strided matrices onto transpose flags and leading
dimensions.

Shared by the GEMM kernels of dots (cpu_gemm.py) and of convolutions (cpu_conv_gemm_kernel.py).

    call = GemmCall(builder, module, element_type)
    swapped, (t1, ld1), (t2, ld2), ldc = blas_operands(lhs, rhs, c)   # Matrix strides -> flags
    call.call((call.char(t1), call.char(t2)), (call.dim(m), call.dim(n), call.dim(k)),
              (a_ptr, call.dim(ld1)), (b_ptr, call.dim(ld2)), (c_ptr, call.dim(ldc)))

Callers always describe the product the column-major way (BLAS's): C (m x n, column-major,
leading dimension ldc) = op(first) op(second). The Fortran ABI passes every argument by
reference: scalars live in stack slots allocated once in the kernel's entry block (not per loop
iteration), so `char` and `dim` return slots. `dnnl_sgemm` is row-major and takes its arguments
by value (64-bit dimensions): the same memory read row-major is C^T (n x m) = op(second)^T
op(first)^T, and a column-major matrix with flag N (T) is the row-major transpose with the same
flag, so the call is dnnl_sgemm(t2, t1, n, m, k, 1, second, ld2, first, ld1, 0, C, ldc): the
operands swap, the flags and leading dimensions stay. No copy either way.
"""
from __future__ import annotations

from llvmlite import ir

from ...emitters.elemental import mem_type
from ...hlo.dtypes import ElementType
from ...runtime.gemm_provider import gemm_provider
from ...runtime.jit_builtins import ONEDNN_GET_THREADS, ONEDNN_SET_THREADS, blas_symbol, onednn_symbol
from .gemm_layout import GEMM_ROUTINE, Matrix

I8 = ir.IntType(8)
I8P = I8.as_pointer()
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()


def declare(module: ir.Module, name: str, ty: ir.FunctionType) -> ir.Function:
    """External library function `name` of type `ty`, declared (nounwind) once per `module`
    (LLVM intrinsics: llvmlite's Module.declare_intrinsic)."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ty, name)
        fn.attributes.add("nounwind")
    return fn


def trap_if(b: ir.IRBuilder, module: ir.Module, failed: ir.Value) -> None:
    """Stop the process (llvm.trap) where the i1 `failed` holds: a library call that could not
    do its work (a failed allocation), after which the kernel would return garbage."""
    with b.if_then(failed, likely=False):
        b.call(module.declare_intrinsic("llvm.trap", fnty=ir.FunctionType(ir.VoidType(), [])), [])


def gemm_function(module: ir.Module, routine: str) -> ir.Function:
    """The declaration of BLAS routine `routine` (Fortran ABI: 13 pointers) in `module`."""
    return declare(module, blas_symbol(routine), ir.FunctionType(ir.VoidType(), [I8P] * 13))


def onednn_sgemm_function(module: ir.Module) -> ir.Function:
    """The declaration of `dnnl_status_t dnnl_sgemm(char transa, char transb, dnnl_dim_t M, N, K,
    float alpha, const float *A, dnnl_dim_t lda, const float *B, dnnl_dim_t ldb, float beta,
    float *C, dnnl_dim_t ldc)` (dnnl_dim_t is int64_t, the status an int) in `module`."""
    name = onednn_symbol()
    if name in module.globals:
        return module.globals[name]
    fp = F32.as_pointer()
    fn = declare(module, name, ir.FunctionType(I32, [I8, I8, I64, I64, I64, F32, fp, I64, fp, I64, F32, fp, I64]))
    for arg in fn.args[:2]:
        arg.add_attribute("signext")  # C's char, extended by the caller as the x86-64 ABI's callers do
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
    """Emits GEMM calls of element type `et` (a key of GEMM_ROUTINE) through builder `b`: to
    `dnnl_sgemm` when runtime/gemm_provider.py says "onednn" for it, else to BLAS's `?gemm_`
    (whose argument slots go to the entry block of `b`'s function)."""

    def __init__(self, b: ir.IRBuilder, module: ir.Module, et: ElementType) -> None:
        self.b, self.et, self.module = b, et, module
        self.elem = mem_type(et)
        self.provider = gemm_provider(et.name)
        self.saved_threads: ir.Value | None = None
        if self.provider == "onednn":
            self.fn = onednn_sgemm_function(module)
            self._single_thread()
            return
        self.fn = gemm_function(module, GEMM_ROUTINE[et.name])
        self.alpha, self.beta = self.slot(self.elem, self.scalar(1.0)), self.slot(self.elem, self.scalar(0.0))

    def _single_thread(self) -> None:
        """Make oneDNN compute each call on the calling thread: outside the driver's parallel
        region (a kernel run serially) it would start its own OpenMP team of
        omp_get_max_threads() threads, and its split of the work (of K, for some shapes) would
        make the bits depend on the thread count. The calling thread's count is saved here and
        put back by `finish`."""
        b = self.b
        get = declare(self.module, ONEDNN_GET_THREADS, ir.FunctionType(I32, []))
        self.saved_threads = b.call(get, [])
        b.call(declare(self.module, ONEDNN_SET_THREADS, ir.FunctionType(ir.VoidType(), [I32])), [ir.Constant(I32, 1)])

    def finish(self) -> None:
        """After the kernel's last call: restore the calling thread's OpenMP thread count."""
        if self.saved_threads is not None:
            set_threads = declare(self.module, ONEDNN_SET_THREADS, ir.FunctionType(ir.VoidType(), [I32]))
            self.b.call(set_threads, [self.saved_threads])

    @property
    def by_value(self) -> bool:
        """Whether the callee takes its scalars by value (oneDNN) rather than by reference."""
        return self.provider == "onednn"

    def slot(self, ty: ir.Type, value: ir.Value) -> ir.Value:
        """An i8* to a stack slot (allocated in the entry block) holding `value`."""
        b = self.b
        with b.goto_entry_block():
            p = b.alloca(ty)
        b.store(value, p)
        return b.bitcast(p, I8P)

    def dim(self, v: ir.Value | int) -> ir.Value:
        """The size or leading dimension `v` (an int, or an i64 value under 2**31) as the callee
        takes it: an i64 for oneDNN, a slot holding an i32 for BLAS."""
        value = v if isinstance(v, ir.Value) else ir.Constant(I64, int(v))
        if self.by_value:
            return value
        return self.slot(I32, self.b.trunc(value, I32) if isinstance(v, ir.Value) else ir.Constant(I32, int(v)))

    def char(self, c: int) -> ir.Value:
        """The character `c` (a transpose flag) as the callee takes it (a slot for BLAS)."""
        value = ir.Constant(I8, c)
        return value if self.by_value else self.slot(I8, value)

    def scalar(self, x: float) -> ir.Constant:
        """The constant `x` of the GEMM's element type (a complex one with zero imaginary part)."""
        if self.et.is_complex:
            return ir.Constant(self.elem, [ir.Constant(self.elem.elements[0], x), ir.Constant(self.elem.elements[1], 0.0)])
        return ir.Constant(self.elem, x)

    def call(self, trans: tuple[ir.Value, ir.Value], sizes: tuple[ir.Value, ir.Value, ir.Value],
             first: tuple[ir.Value, ir.Value], second: tuple[ir.Value, ir.Value], c: tuple[ir.Value, ir.Value],
             accumulate: bool = False) -> None:
        """Column-major C = op(first) op(second) (sizes m, n, k; see the module docstring), or
        C += that with `accumulate` (beta 1): each argument made by `char` / `dim` (`trans`,
        `sizes`, the leading dimensions) or a typed pointer (the matrices)."""
        b = self.b
        (a, lda), (bb, ldb), (cc, ldc) = first, second, c
        if not self.by_value:
            beta = self.alpha if accumulate else self.beta  # alpha's slot holds 1
            b.call(self.fn, [*trans, *sizes, self.alpha, b.bitcast(a, I8P), lda, b.bitcast(bb, I8P), ldb,
                             beta, b.bitcast(cc, I8P), ldc])
            return
        fp = F32.as_pointer()
        m, n, k = sizes
        status = b.call(self.fn, [trans[1], trans[0], n, m, k, ir.Constant(F32, 1.0), b.bitcast(bb, fp), ldb,
                                  b.bitcast(a, fp), lda, ir.Constant(F32, 1.0 if accumulate else 0.0),
                                  b.bitcast(cc, fp), ldc])
        # Only invalid arguments (a bug here) or a failed allocation of oneDNN's packing
        # buffers return an error, and C is then unwritten: stop rather than return garbage.
        trap_if(b, self.module, b.icmp_signed("!=", status, ir.Constant(I32, 0)))
