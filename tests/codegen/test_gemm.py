"""GEMM kernels (codegen/kernels/cpu_gemm.py): dots of every dimension-number layout and float
type through BLAS called from LLVM code, against the reference interpreter (the tolerance
runtime/compare.py gives every float comparison: a blocked BLAS sum is not the interpreter's
float64 or in-order one); how operands are read (in place through transpose flags and leading
dimensions, or packed); work units that split deterministically over threads."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels.cpu_gemm import (
    find_gemm_dot, lhs_matrix, needs_packing, dot_dims, rhs_matrix,
)
from hlofuse.codegen.kernels.gemm_partition import panel_rows
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_arrays
from hlofuse.runtime.cpu_executor import CpuProgram

NP = {"f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128,
      "bf16": ml_dtypes.bfloat16, "f16": np.float16}


def _random(rng: np.random.Generator, dims, dtype: str) -> np.ndarray:
    x = rng.standard_normal(dims)
    if dtype.startswith("c"):
        x = x + 1j * rng.standard_normal(dims)
    return x.astype(NP[dtype])


def _dot_module(ldims, rdims, lb, lc, rb, rc, dtype: str, out_dtype: str | None = None) -> str:
    out_dtype = out_dtype or dtype
    lf = [d for d in range(len(ldims)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rdims)) if d not in rb and d not in rc]
    odims = [ldims[d] for d in lb] + [ldims[d] for d in lf] + [rdims[d] for d in rf]

    def t(dims):
        return ",".join(str(d) for d in dims)

    def s(dims):
        return "{" + ",".join(str(d) for d in dims) + "}"

    return (f"HloModule d\nENTRY e {{\n  a = {dtype}[{t(ldims)}] parameter(0)\n  b = {dtype}[{t(rdims)}] parameter(1)\n"
            f"  ROOT d = {out_dtype}[{t(odims)}] dot(a, b), lhs_batch_dims={s(lb)}, lhs_contracting_dims={s(lc)}, "
            f"rhs_batch_dims={s(rb)}, rhs_contracting_dims={s(rc)}\n}}\n")


def _check(text: str, args: list) -> CpuProgram:
    """Run `text` on the CPU and the interpreter; assert they agree; return the CPU program."""
    module = parse_hlo(text)
    prog = CpuProgram.compile(module)
    got = prog.run(args)
    want = hlofuse.compile(parse_hlo(text), target="interpreter")(*args)
    for k, (g, w) in enumerate(zip(got, want)):
        c = compare_arrays(g, w, k)
        assert c.ok, c.line()
    return prog


def _gemm_kernels(prog: CpuProgram) -> list:
    return [k for s in prog._entry.steps for k in s.kernels if getattr(k, "custom", None) == "gemm"]


# (lhs dims, rhs dims, lhs batch, lhs contracting, rhs batch, rhs contracting, packs expected)
LAYOUTS = [
    ((96, 80), (80, 112), [], [1], [], [0], 0),  # plain row-major
    ((80, 96), (80, 112), [], [0], [], [0], 0),  # lhs transposed: transb flag
    ((96, 80), (112, 80), [], [1], [], [1], 0),  # rhs transposed: transa flag
    ((80, 96), (112, 80), [], [0], [], [1], 0),  # both transposed
    ((4, 70, 33), (4, 33, 90), [0], [2], [0], [1], 0),  # batched
    ((70, 4, 33), (4, 33, 90), [1], [2], [0], [1], 0),  # batch dimension in the middle: leading dims
    ((2, 3, 40, 5, 7), (2, 3, 5, 7, 60), [0, 1], [3, 4], [0, 1], [2, 3], 0),  # two batch, two contracting dims
    ((3, 40, 5, 7), (3, 7, 60, 5), [0], [2, 3], [0], [3, 1], 1),  # rhs contracting dims out of order: pack
    ((5, 40, 7), (5, 7, 60), [], [0, 2], [], [0, 1], 1),  # lhs contracting dims around a free one: pack
    ((2, 30, 9, 5), (2, 5, 11, 12), [0], [3], [0], [1], 0),  # several free dims on both sides
    ((600, 1), (1, 120), [], [1], [], [0], 0),  # K = 1 (outer product)
    ((1, 300), (300, 100), [], [1], [], [0], 0),  # M = 1 (vector-matrix), large K
    ((300,), (300, 100), [], [0], [], [0], 0),  # rank-1 lhs
    ((100, 300), (300,), [], [1], [], [0], 0),  # matrix-vector
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=[str(i) for i in range(len(LAYOUTS))])
def test_dimension_numbers_f32(layout):
    ld, rd, lb, lc, rb, rc, packs = layout
    rng = np.random.default_rng(len(ld) * 7 + sum(ld))
    text = _dot_module(ld, rd, lb, lc, rb, rc, "f32")
    prog = _check(text, [_random(rng, ld, "f32"), _random(rng, rd, "f32")])
    steps = [s for s in prog._entry.steps if s.kind == "kernel"]
    assert len(steps) == 1
    assert [k.custom for k in steps[0].kernels][-1] == "gemm"
    assert len(steps[0].kernels) - 1 == packs  # one packing loop kernel per operand BLAS cannot read


@pytest.mark.parametrize("dtype,out", [("f64", "f64"), ("c64", "c64"), ("c128", "c128"), ("bf16", "bf16"),
                                       ("f16", "f16"), ("bf16", "f32"), ("f16", "f32")])
@pytest.mark.parametrize("layout", [LAYOUTS[0], LAYOUTS[3], LAYOUTS[5], LAYOUTS[7]], ids=["plain", "tt", "mid", "pack"])
def test_types(dtype, out, layout):
    """f64 and complex go to dgemm/cgemm/zgemm; bf16 and f16 operands are packed into f32 and
    computed by sgemm (as XLA:CPU upcasts them), the result converted back."""
    ld, rd, lb, lc, rb, rc, _ = layout
    rng = np.random.default_rng(3)
    text = _dot_module(ld, rd, lb, lc, rb, rc, dtype, out)
    prog = _check(text, [_random(rng, ld, dtype), _random(rng, rd, dtype)])
    kernels = _gemm_kernels(prog)
    assert len(kernels) == 1
    dot = find_gemm_dot(kernels[0].comp)
    assert dot.operands[0].shape.dtype.name == {"bf16": "f32", "f16": "f32"}.get(dtype, dtype)


def _random_layout(rng: np.random.Generator):
    """A random dot: batch, free and contracting dims of random sizes in random positions."""
    nb, nlf, nrf, nc = (int(rng.integers(0, 3)), int(rng.integers(0, 3)), int(rng.integers(0, 3)),
                        int(rng.integers(1, 3)))
    batch = [int(rng.integers(1, 4)) for _ in range(nb)]
    contract = [int(rng.integers(1, 24)) for _ in range(nc)]
    lfree = [int(rng.integers(1, 30)) for _ in range(nlf)]
    rfree = [int(rng.integers(1, 30)) for _ in range(nrf)]
    lperm = rng.permutation(nb + nlf + nc)
    rperm = rng.permutation(nb + nrf + nc)
    lsizes = batch + lfree + contract  # logical roles, placed by the permutation
    rsizes = batch + contract + rfree
    ldims = [0] * len(lsizes)
    rdims = [0] * len(rsizes)
    for role, pos in enumerate(lperm):
        ldims[pos] = lsizes[role]
    for role, pos in enumerate(rperm):
        rdims[pos] = rsizes[role]
    lb = [int(lperm[i]) for i in range(nb)]
    lc = [int(lperm[nb + nlf + i]) for i in range(nc)]
    rb = [int(rperm[i]) for i in range(nb)]
    rc = [int(rperm[nb + i]) for i in range(nc)]
    return ldims, rdims, lb, lc, rb, rc


@pytest.mark.parametrize("seed", range(24))
def test_random_dimension_numbers(seed):
    """Random dimension numbers (every role anywhere) on f32 and f64, large enough to take the
    GEMM path where the work allows."""
    rng = np.random.default_rng(1000 + seed)
    ld, rd, lb, lc, rb, rc = _random_layout(rng)
    dtype = "f64" if seed % 3 == 0 else "f32"
    text = _dot_module(ld, rd, lb, lc, rb, rc, dtype)
    _check(text, [_random(rng, ld, dtype), _random(rng, rd, dtype)])


def test_operand_matrices_use_flags_not_copies():
    """The lhs transposed is read in place (unit row stride), the rhs in place; a dot whose
    contracting dims straddle a free dim needs packing."""
    dot = parse_hlo(_dot_module((80, 96), (80, 112), [], [0], [], [0], "f32")).entry.root
    m = lhs_matrix(dot)
    assert (m.rows, m.cols, m.row_stride, m.col_stride) == (96, 80, 1, 96)
    assert not needs_packing(dot, 0) and not needs_packing(dot, 1)
    mid = parse_hlo(_dot_module((70, 4, 33), (4, 33, 90), [1], [2], [0], [1], "f32")).entry.root
    m = lhs_matrix(mid)
    assert (m.batch_strides, m.row_stride, m.col_stride) == ((33,), 4 * 33, 1)
    assert rhs_matrix(mid).batch_strides == (33 * 90,)
    straddle = parse_hlo(_dot_module((5, 40, 7), (5, 7, 60), [], [0, 2], [], [0, 1], "f32")).entry.root
    assert lhs_matrix(straddle) is None and needs_packing(straddle, 0)


def test_row_panels_and_threads_are_deterministic():
    """A large single matrix is cut into row panels (the last one partial); the result is the
    same bits whichever thread count the runtime's tuner picks for each call."""
    text = _dot_module((1000, 64), (64, 72), [], [1], [], [0], "f32")
    rng = np.random.default_rng(5)
    args = [_random(rng, (1000, 64), "f32"), _random(rng, (64, 72), "f32")]
    prog = _check(text, args)
    (k,) = _gemm_kernels(prog)
    dd = dot_dims(find_gemm_dot(k.comp))
    assert panel_rows(dd) == 250 and k.units == 4  # MAX_PANELS (4) panels of >= 64 rows
    first = prog.run(args)[0]
    for _ in range(10):  # the tuner tries 1 and 2 threads on its first calls
        np.testing.assert_array_equal(prog.run(args)[0], first)
    # (The panel cut depends only on the shape: BLAS's rounding depends on a row's place in
    # its micro-tile, so a different cut could change low bits, and the thread count never does.)


def test_zero_sized_and_integer_dots_keep_their_library_rule():
    for text, args in [
        (_dot_module((4, 0), (0, 3), [], [1], [], [0], "f32"), [np.zeros((4, 0), np.float32), np.zeros((0, 3), np.float32)]),
        (_dot_module((64, 300), (300, 40), [], [1], [], [0], "s32"),
         [np.arange(64 * 300, dtype=np.int32).reshape(64, 300) % 7, np.ones((300, 40), np.int32)]),
    ]:
        prog = _check(text, args)
        assert not _gemm_kernels(prog)
        assert prog._entry.steps[-1].kind == "library"


def test_blas_routines_are_registered_for_the_jit():
    import llvmlite.binding as llvm

    from hlofuse.runtime.jit_builtins import GEMM_ROUTINES, blas_symbol, register_builtins

    register_builtins()
    for routine in GEMM_ROUTINES:
        assert llvm.address_of_symbol(blas_symbol(routine))


def test_gemm_kernel_ir_verifies():
    """The emitted module (BLAS declarations, panel loop, epilogue) is valid LLVM IR."""
    import llvmlite.binding as llvm

    from hlofuse.codegen.cpu import emit_kernel_module
    from hlofuse.emitters.cpu.target import CpuTarget

    text = _dot_module((4, 70, 33), (4, 33, 90), [0], [2], [0], [1], "c64")
    prog = CpuProgram.compile(parse_hlo(text))
    (k,) = _gemm_kernels(prog)
    mod = llvm.parse_assembly(str(emit_kernel_module(k, CpuTarget(), "gemm_test")))
    mod.verify()
    assert "hlofuse_blas_cgemm" in str(mod)
    assert math.prod((4, 70, 90)) == prog.run([np.ones((4, 70, 33), np.complex64), np.ones((4, 33, 90), np.complex64)])[0].size


def test_work_units_count_multiply_adds_for_the_thread_rule():
    """A GEMM unit reports its multiply-adds, which the driver's thread rule
    (codegen/region_cost.py) prices as BLAS work: a large GEMM is split over the cores, one
    under two shares of a region's wake-up (scan_rnn's step dot, 4.2 M multiply-adds) is not."""
    from hlofuse.codegen.region_cost import MULTIPLY_ADD_NS, REGION_NS, region_threads

    def kernel(m, k, n):
        prog = CpuProgram.compile(parse_hlo(_dot_module([m, k], [k, n], [], [1], [], [0], "f32")))
        (step,) = [s for s in prog._entry.steps if s.kind == "kernel"]
        return step.kernels[-1]

    big = kernel(1024, 1024, 512)  # 4 row panels of 256 (gemm_partition), columns whole
    assert big.units == 4 and big.unit_elements == 256 * 512 * 1024
    assert region_threads(big) == 4  # 537 M multiply-adds: 4.5 ms of BLAS, far over 4 shares
    step = kernel(128, 128, 256)
    assert step.units * step.unit_elements == 128 * 128 * 256
    assert step.units * step.unit_elements * MULTIPLY_ADD_NS < 2 * REGION_NS and region_threads(step) == 1
    assert region_threads(kernel(70, 100, 20)) == 1