"""Batched f32 dots through oneDNN's matmul primitive: the mapping, the plan, the rule and the
kernel (one call of the primitive; the call itself is cpu_conv_onednn_kernel.emit_primitive_call,
shared with the convolutions).

    mapped = onednn_matmul(comp)          # OneDnnMatmul: the description and its buffers, or None
    prefers_onednn_matmul(comp)           # the rule, by shape class (docs/dots.md)
    plans = plan_onednn_matmul(comp, name)  # (kernels, temporaries): custom="onednn_matmul"

A dot fusion maps when it is a dot of two parameters, possibly under a root transpose and/or
reshape (attention's `bhqd -> bqhd`, written through strides: gemm_layout.OutputMap), f32
throughout, and each operand and the result are strided matrices per batch element
(gemm_layout.Matrix: the free dimensions and the contracting ones each collapse into one
strided dimension). The batch dimensions stay separate dimensions of oneDNN's memory
descriptors, with their own strides (they may sit anywhere in the operand); transposes are
strides too: src [batch..., M, K], weights [batch..., K, N] and dst [batch..., M, N] are the
caller's buffers, read and written in place. An epilogue keeps the sgemm kernels
(cpu_gemm.py): no post-ops are mapped.

Threads: the kernel is one work unit; oneDNN splits the call over libgomp's threads itself, on
the thread count its primitive was made for (runtime/onednn_primitives.py), as the
convolution primitives do. With SPLIT_BATCH the kernel has a work unit per element of the
outermost batch dimension instead, each a call of a one-thread primitive on that slice
(`OneDnnMatmul.per_unit`), and the driver's threads share the units (the same bits).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...hlo.ir import HloComputation
from ...runtime import onednn_primitives as dnnl
from ..planning import KernelPlan
from .cpu_conv_onednn import OUTPUT
from .cpu_conv_onednn_kernel import emit_primitive_call
from .gemm_layout import Matrix, dot_dims, operand_matrix, output_chain, output_map


@dataclass(frozen=True)
class OneDnnMatmul:
    """A dot fusion as a oneDNN matmul primitive: its description, and for each execution
    argument (`desc.arguments()` order) a parameter number or OUTPUT; `batch`, `m`, `n`, `k`
    the GEMM sizes (the rule reads them)."""

    desc: dnnl.MatmulDescription
    sources: tuple
    batch: int
    m: int
    n: int
    k: int

    def per_unit(self) -> tuple["OneDnnMatmul", int, tuple[int, ...]] | None:
        """The same product as work units over its outermost batch dimension, which the
        driver's threads share: (this mapping with that dimension cut to one element and a
        primitive made for one thread, the unit count, each argument's bytes per unit); None
        without a batch dimension of two or more elements."""
        d = self.desc
        if len(d.dst.dims) < 3 or d.dst.dims[0] < 2:
            return None
        units = d.dst.dims[0]

        def cut(t: dnnl.Tensor) -> dnnl.Tensor:
            return dnnl.Tensor((1,) + t.dims[1:], t.strides)

        desc = dnnl.MatmulDescription(cut(d.src), cut(d.weights), cut(d.dst), d.post_ops, per_unit=True)
        tensors = {"src": d.src, "weights": d.weights, "dst": d.dst}
        unit_bytes = tuple(4 * tensors[name].strides[0] for _, name in desc.arguments())
        return OneDnnMatmul(desc, self.sources, self.batch // units, self.m, self.n, self.k), units, unit_bytes


def _tensor(mat: Matrix) -> dnnl.Tensor:
    """A Matrix as oneDNN's [batch..., rows, cols] tensor with its element strides."""
    return dnnl.Tensor(mat.batch_sizes + (mat.rows, mat.cols), mat.batch_strides + (mat.row_stride, mat.col_stride))


def why_not_onednn_matmul(comp: HloComputation) -> str | None:
    """Why dot fusion `comp` cannot run as a oneDNN matmul primitive (None: it can)."""
    result = _map(comp)
    return result if isinstance(result, str) else None


def onednn_matmul(comp: HloComputation) -> OneDnnMatmul | None:
    """The oneDNN matmul primitive computing `comp`, or None (`why_not_onednn_matmul`)."""
    result = _map(comp)
    return None if isinstance(result, str) else result


def _map(comp: HloComputation) -> OneDnnMatmul | str:
    dots = [i for i in comp.instructions if i.opcode == "dot"]
    if len(dots) != 1:
        return "not a single dot"
    dot = dots[0]
    chain = output_chain(comp)
    if chain.value is not dot:
        return "an epilogue after the dot"
    rest = [i for i in comp.instructions if i is not dot and i not in chain.members and i.opcode != "parameter"]
    if rest:
        return f"{rest[0].opcode} {rest[0].name} besides the dot"
    lhs, rhs = dot.operands
    if lhs.opcode != "parameter" or rhs.opcode != "parameter":
        return "an operand is not a parameter"
    if any(t.shape.dtype.name != "f32" for t in (lhs, rhs, dot, comp.root)):
        return "not f32 throughout"
    if 0 in tuple(dot.shape.dims) or 0 in tuple(lhs.shape.dims) or 0 in tuple(rhs.shape.dims):
        return "empty"
    dd = dot_dims(dot)
    a = operand_matrix(lhs.shape, dd.lb, dd.lf, dd.lc)
    w = operand_matrix(rhs.shape, dd.rb, dd.rc, dd.rf)
    c = output_map(comp, dot).matrix()
    if a is None or w is None or c is None:
        return "an operand or the result is not a strided matrix per batch element"
    if len(a.batch_sizes) + 2 > dnnl.DNNL_MAX_NDIMS:
        return "too many batch dimensions"
    if c.col_stride == 1 or c.cols == 1:
        desc = dnnl.MatmulDescription(_tensor(a), _tensor(w), _tensor(c))
        return OneDnnMatmul(desc, (lhs.parameter_number, rhs.parameter_number, OUTPUT), dd.batch, dd.m, dd.n, dd.k)
    # A result with unit row stride (jax's p.v, [b,h,d,q] written as [b,q,h,d]): oneDNN has only
    # its reference loops for a column-major dst, so it computes C^T = B^T A^T, row-major.
    desc = dnnl.MatmulDescription(_tensor(_transposed(w)), _tensor(_transposed(a)), _tensor(_transposed(c)))
    return OneDnnMatmul(desc, (rhs.parameter_number, lhs.parameter_number, OUTPUT), dd.batch, dd.n, dd.m, dd.k)


def _transposed(mat: Matrix) -> Matrix:
    """`mat` with rows and columns exchanged (the same elements)."""
    return Matrix(mat.batch_sizes, mat.batch_strides, mat.cols, mat.rows, mat.col_stride, mat.row_stride)


def fast_implementation(desc: dnnl.MatmulDescription) -> bool:
    """Whether oneDNN runs `desc` with its JIT kernels ("brg:..."), not its reference or
    generic GEMM-based ones (not measured)."""
    impl = dnnl.implementation(desc)
    return impl is not None and impl.startswith("brg")


# ---- the rule ----------------------------------------------------------------------------------

# Below this many multiply-adds the call's fixed cost (memory objects, scratchpad, 10-15 us)
# is not amortized.
MIN_MATMUL_MACS = 1 << 22
# The classes that gain (docs/dots.md; one thread, CPU time, p.v-shaped dots of 8M-2G
# multiply-adds), where dnnl_sgemm per matrix is weakest and the primitive's brgemm kernels
# block over the whole batch:
# * a narrow lhs side, M 16-128 (a [d, q] result: jax's p.v when its transpose is not fused):
#   0.23-0.77x the sgemm kernels' time in 7 shapes;
# * a narrow result, N 32-128 (attention's p.v): 0.76-0.93x in 13 of 17 shapes, 0.96-1.05x in
#   the other four; at N 16 it lost up to 1.26x (batch 32, K 1024).
# q.k^T (M = N = 512) was at parity (0.94-0.98x): wide results keep the sgemm kernels.
MIN_MATMUL_BATCH = 2
MIN_MATMUL_M, MIN_MATMUL_N, MAX_MATMUL_NARROW = 16, 32, 128
# Whether the kernel calls a one-thread primitive once per element of the outermost batch
# dimension, as work units the driver's threads take from a shared counter, instead of one
# primitive split statically over the program's threads by oneDNN (where a descheduled thread
# holds up the whole call). Off: measured at parity (the same bits; one thread, CPU time,
# 0.97-1.02x; two threads, wall, 0.86-1.28x at load 7-8, median 1.00: docs/dots.md), and an
# outermost batch of 3 on 2 threads would leave one thread idle for a third of the call.
# benchmarks/onednn_matmul_ab.py --split measures it again.
SPLIT_BATCH = False


def _narrow(mapped: OneDnnMatmul) -> bool:
    """Whether the dot is in one of the measured narrow classes (above)."""
    return (MIN_MATMUL_M <= mapped.m <= MAX_MATMUL_NARROW) or (MIN_MATMUL_N <= mapped.n <= MAX_MATMUL_NARROW)


def prefers_onednn_matmul(comp: HloComputation) -> bool:
    """The rule (docs/dots.md; by shape class, decided at compile time, never timed): dot
    fusion `comp` runs as a oneDNN matmul primitive when f32 GEMMs are oneDNN's
    (runtime/gemm_provider.py), it maps (`onednn_matmul`), oneDNN has a JIT kernel for it, it
    has at least MIN_MATMUL_BATCH batch elements, a narrow side (`_narrow`: M of
    MIN_MATMUL_M to MAX_MATMUL_NARROW, or N of MIN_MATMUL_N to MAX_MATMUL_NARROW, N after the
    C^T form of a column-major result) and at least MIN_MATMUL_MACS multiply-adds. Everything
    else keeps the sgemm kernels (cpu_gemm.py)."""
    from ...runtime.gemm_provider import gemm_provider

    if gemm_provider("f32") != "onednn":
        return False
    mapped = onednn_matmul(comp)
    if mapped is None or mapped.batch < MIN_MATMUL_BATCH or not _narrow(mapped):
        return False
    if macs(mapped) < MIN_MATMUL_MACS:
        return False
    return fast_implementation(mapped.desc)


def plan_onednn_matmul(comp: HloComputation, name: str) -> tuple[list[KernelPlan], list] | None:
    """(kernels, temporaries' shapes) computing `comp` as one oneDNN matmul call (one work
    unit: oneDNN threads the call; with SPLIT_BATCH, one unit per outermost batch element) when
    `prefers_onednn_matmul`, else None."""
    if not prefers_onednn_matmul(comp):
        return None
    inputs = [("in", i) for i in range(len(comp.parameters))]
    mapped = onednn_matmul(comp)
    split = mapped.per_unit() if SPLIT_BATCH else None
    units = 1 if split is None else split[1]
    return [KernelPlan(comp, [0], units, macs(mapped) // units, None, inputs=inputs, results=[("out", 0)],
                       name=f"{name}_dnnl", custom="onednn_matmul")], []


def kernel_matmul(plan) -> tuple[OneDnnMatmul, tuple[int, ...] | None]:
    """The mapping kernel `plan` (custom="onednn_matmul") calls, and each argument's bytes per
    work unit (None: one call of the whole product)."""
    mapped = onednn_matmul(plan.comp)
    if mapped is None:
        raise ValueError(f"kernel {plan.name}: its computation is not a oneDNN matmul")
    if plan.units == 1:
        return mapped, None
    split = mapped.per_unit()
    if split is None or split[1] != plan.units:
        raise ValueError(f"kernel {plan.name}: {plan.units} units, but not as many batch slices")
    return split[0], split[2]


def emit_onednn_matmul_kernel(skel, plan) -> None:
    """Fill CPU kernel skeleton `skel` with the oneDNN matmul kernel of `plan`
    (custom="onednn_matmul"): one call of its primitive (emit_primitive_call), or one per work
    unit of a batch-sliced primitive (`OneDnnMatmul.per_unit`)."""
    mapped, unit_bytes = kernel_matmul(plan)
    emit_primitive_call(skel, mapped.desc, mapped.sources, unit_bytes)


def macs(mapped: OneDnnMatmul) -> int:
    """Multiply-adds of the mapped dot."""
    return math.prod((mapped.batch, mapped.m, mapped.n, mapped.k))
