"""The work partition of GEMM kernels (codegen/kernels/gemm_partition.py): batch elements x row
panels x column panels, chosen from the shape alone. The rule on hand-worked shapes; then dots
with few rows (an LSTM step's, a decode step's), which the partition cuts into column panels,
of every operand layout, with and without fused epilogues, written in the dot's layout, through
a root transpose by BLAS (plain and swapped) and through the scratch path: each against the
reference interpreter, and bit for bit the same on 1, 2 and 3 threads."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels.cpu_gemm import find_gemm_dot
from hlofuse.codegen.kernels import gemm_partition as gemm_partition_module
from hlofuse.codegen.kernels.gemm_layout import DotDims, dot_dims, gemm_dtype
from hlofuse.codegen.kernels.gemm_partition import (
    MAX_PANELS, MIN_PANEL_COLS, TARGET_UNITS, column_granule, gemm_partition, min_unit_multiply_adds,
)
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_arrays
from test_gemm_transpose import _module as transposed_dot_module

NP = {"f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128,
      "bf16": ml_dtypes.bfloat16}


def _dd(batch: int, m: int, n: int, k: int) -> DotDims:
    return DotDims([], [], [], [], [], [], batch, m, n, k)


# (batch, M, N, K, type) -> (rows, cols, units), worked by hand from the module's rule; a share is
# 40 us of BLAS multiply-adds (codegen/region_cost.py): f32 4,819,277; f64 (0.034 ns) 1,176,470;
# c128 (0.13 ns) 307,692.
RULE = [
    ((1, 32, 2048, 768, "f32"), (32, 224, 10)),  # an LSTM step: 50.3 M multiply-adds, 10 units of a share
    ((1, 2048, 2048, 2048, "f32"), (512, 2048, 4)),  # 4 row panels: tall, its columns are not cut
    ((1, 150, 2048, 768, "f32"), (64, 352, 18)),  # 3 row panels x 6 column panels (342 -> 352)
    ((3, 32, 2048, 768, "f32"), (32, 352, 18)),  # 3 matrices x 6 column panels
    ((24, 512, 512, 64, "f32"), (512, 512, 24)),  # 24 whole matrices: enough units already
    ((1, 8, 128, 64, "f32"), (8, 128, 1)),  # 65,536 multiply-adds: too small to cut
    ((1, 1, 2304, 768, "f32"), (1, 2304, 1)),  # a decode step's dot: 1.8 M multiply-adds, under a share
    ((1, 32, 1000, 768, "f64"), (32, 80, 13)),  # 20 dgemm shares, 15 by width: 67 columns rounded up to 16s
    ((1, 32, 1000, 768, "c128"), (32, 72, 14)),  # the same in granules of 8 columns
    ((2, 12, 600, 300, "f32"), (12, 600, 2)),  # 2.2 M multiply-adds a matrix: under a share, whole
    ((1, 1000, 72, 64, "f32"), (250, 72, 4)),  # too narrow for two column panels
    ((1, 70, 20, 100, "f32"), (64, 20, 2)),  # row panels as before
]


@pytest.mark.parametrize("shape,want", RULE, ids=[str(s) for s, _ in RULE])
def test_partition_rule(shape, want):
    *sizes, dtype = shape
    p = gemm_partition(_dd(*sizes), dtype)
    assert (p.rows, p.cols, p.units) == want


def test_partition_invariants():
    """Over a sweep of shapes: the panels cover the result, column panels are whole granules
    of at least MIN_PANEL_COLS, a cut never makes a unit under min_unit_multiply_adds nor more
    panels than TARGET_UNITS needs, and no column cut is made once the batch and row panels
    give MAX_PANELS units."""
    for dtype in ("f32", "f64", "c64", "c128"):
        for batch in (1, 2, 3, 5, 16):
            for m in (1, 7, 32, 64, 65, 300):
                for n in (1, 63, 128, 129, 1000, 4096):
                    for k in (1, 64, 768):
                        p = gemm_partition(_dd(batch, m, n, k), dtype)
                        assert p.row_panels * p.rows >= m > (p.row_panels - 1) * p.rows
                        assert p.col_panels * p.cols >= n > (p.col_panels - 1) * p.cols
                        if p.col_panels > 1:
                            assert p.cols % column_granule(dtype) == 0 and p.cols >= MIN_PANEL_COLS
                            assert p.unit_multiply_adds >= min_unit_multiply_adds(dtype)
                            assert batch * p.row_panels < MAX_PANELS
                            assert batch * p.row_panels * (p.col_panels - 1) < TARGET_UNITS


# ---- column panels run: results against the interpreter, the same on every thread count ----------

def _gemm_kernel(exe):
    (kernel,) = [k for s in exe.program._entry.steps for k in s.kernels if getattr(k, "custom", None) == "gemm"]
    return kernel


@pytest.fixture
def small_share(monkeypatch):
    """Cut column panels down to 2^18 multiply-adds a unit (the share before codegen/region_cost.py
    priced a parallel region), so the small dots below exercise every column-panel path; what
    the real share cuts is test_partition_rule's. _check_split compiles without the module
    cache, which does not key on a patched constant."""
    monkeypatch.setattr(gemm_partition_module, "MIN_UNIT_MULTIPLY_ADDS", 1 << 18)


def _check_split(text: str, args: list, min_col_panels: int = 2):
    """Compile `text` for the CPU; assert its GEMM runs in column panels, agrees with the
    interpreter, and gives the same bits on 1, 2 and 3 threads; return the executable."""
    exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    kernel = _gemm_kernel(exe)
    dot = find_gemm_dot(kernel.comp)
    part = gemm_partition(dot_dims(dot), gemm_dtype(dot))
    assert kernel.units == part.units and part.col_panels >= min_col_panels, part
    want = hlofuse.compile(parse_hlo(text), target="interpreter")(*args)
    config = exe.program.driver._config
    first = None
    for threads in (1, 2, 3):
        config[0] = threads
        got = exe(*args)
        for j, (g, w) in enumerate(zip(got, want)):
            c = compare_arrays(g, w, j)
            assert c.ok, f"{threads} threads: {c.line()}"
        if first is None:
            first = got
        for g, f in zip(got, first):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(f))
    return exe


def _random(rng: np.random.Generator, dims, dtype: str) -> np.ndarray:
    x = rng.standard_normal(dims)
    if dtype.startswith("c"):
        x = x + 1j * rng.standard_normal(dims)
    return x.astype(NP[dtype])


def _s(dims) -> str:
    return ",".join(str(d) for d in dims)


def _dot_module(ldims, rdims, lb, lc, rb, rc, dtype: str) -> str:
    lf = [d for d in range(len(ldims)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rdims)) if d not in rb and d not in rc]
    odims = [ldims[d] for d in lb] + [ldims[d] for d in lf] + [rdims[d] for d in rf]
    return (f"HloModule d\nENTRY e {{\n  a = {dtype}[{_s(ldims)}] parameter(0)\n  b = {dtype}[{_s(rdims)}] parameter(1)\n"
            f"  ROOT d = {dtype}[{_s(odims)}] dot(a, b), lhs_batch_dims={{{_s(lb)}}}, lhs_contracting_dims={{{_s(lc)}}}, "
            f"rhs_batch_dims={{{_s(rb)}}}, rhs_contracting_dims={{{_s(rc)}}}\n}}\n")


# (lhs dims, rhs dims, lhs batch, lhs contracting, rhs batch, rhs contracting): M small, N large.
SMALL_M = {
    "plain": ((16, 128), (128, 1000), [], [1], [], [0]),
    "lhs_t": ((128, 16), (128, 1000), [], [0], [], [0]),
    "rhs_t": ((16, 128), (1000, 128), [], [1], [], [1]),
    "both_t": ((128, 16), (1000, 128), [], [0], [], [1]),
    "batch_mid": ((12, 2, 300), (2, 300, 600), [1], [2], [0], [1]),
    "rhs_t_batched": ((2, 12, 300), (2, 600, 300), [0], [2], [0], [2]),
    "two_rhs_free": ((16, 128), (128, 20, 50), [], [1], [], [0]),
    "packed_rhs": ((16, 8, 16), (16, 1000, 8), [], [1, 2], [], [2, 0]),
    "vector": ((300,), (300, 2000), [], [0], [], [0]),
}


@pytest.mark.parametrize("name", list(SMALL_M))
@pytest.mark.usefixtures("small_share")
def test_small_m_layouts_f32(name):
    ld, rd, lb, lc, rb, rc = SMALL_M[name]
    rng = np.random.default_rng(len(name))
    _check_split(_dot_module(ld, rd, lb, lc, rb, rc, "f32"), [_random(rng, ld, "f32"), _random(rng, rd, "f32")])


@pytest.mark.parametrize("dtype", ["f64", "c64", "c128"])
@pytest.mark.parametrize("name", ["plain", "both_t", "batch_mid"])
@pytest.mark.usefixtures("small_share")
def test_small_m_types(name, dtype):
    ld, rd, lb, lc, rb, rc = SMALL_M[name]
    rng = np.random.default_rng(11)
    _check_split(_dot_module(ld, rd, lb, lc, rb, rc, dtype), [_random(rng, ld, dtype), _random(rng, rd, dtype)])


def _mlp(m: int, k: int, n: int, dtype: str, out: str, rhs_t: bool) -> str:
    """x @ w (w [k,n], or [n,k] contracted on its dimension 1) + bias, relu, + residual."""
    w, rc = (f"{dtype}[{n},{k}]", 1) if rhs_t else (f"{dtype}[{k},{n}]", 0)
    return f"""HloModule mlp
ENTRY e {{
  x = {dtype}[{m},{k}] parameter(0)
  w = {w} parameter(1)
  bias = {out}[{n}] parameter(2)
  r = {out}[{m},{n}] parameter(3)
  d = {out}[{m},{n}] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{{rc}}}
  bb = {out}[{m},{n}] broadcast(bias), dimensions={{1}}
  a = {out}[{m},{n}] add(d, bb)
  z = {out}[] constant(0)
  zb = {out}[{m},{n}] broadcast(z), dimensions={{}}
  relu = {out}[{m},{n}] maximum(a, zb)
  ROOT s = {out}[{m},{n}] add(relu, r)
}}
"""


@pytest.mark.parametrize("rhs_t", [False, True], ids=["w", "w_t"])
@pytest.mark.parametrize("dtype,out", [("f32", "f32"), ("f64", "f64"), ("bf16", "bf16"), ("bf16", "f32")])
@pytest.mark.usefixtures("small_share")
def test_small_m_epilogue(dtype, out, rhs_t):
    """Bias (read at the unit's columns), relu and residual on each column panel; bf16 outputs
    take the scratch path (the GEMM's f32 result, then the epilogue converts)."""
    m, k, n = 16, 128, 1000
    rng = np.random.default_rng(21)
    wdims = (n, k) if rhs_t else (k, n)
    args = [_random(rng, (m, k), dtype), _random(rng, wdims, dtype), _random(rng, (n,), out),
            _random(rng, (m, n), out)]
    exe = _check_split(_mlp(m, k, n, dtype, out, rhs_t), args)
    kernel = _gemm_kernel(exe)
    assert "maximum" in {i.opcode for i in kernel.comp.instructions}
    assert bool(kernel.scratch) == (out != "f32" and out != "f64")


# [b,h,m,n] ->: (0,2,1,3) BLAS writes C^T with ldc = h*n; (0,1,3,2) and (1,0,3,2) unit stride
# along M, BLAS swapped; (2,0,3,1) and (3,2,1,0) neither: scratch, the epilogue stores.
PERMS = [(0, 2, 1, 3), (0, 1, 3, 2), (1, 0, 3, 2), (2, 0, 3, 1), (3, 2, 1, 0)]


@pytest.mark.parametrize("scale", [False, True], ids=["plain", "scaled"])
@pytest.mark.parametrize("perm", PERMS, ids=[_s(p) for p in PERMS])
@pytest.mark.usefixtures("small_share")
def test_small_m_transposed_output(perm, scale):
    b, h, m, n, k = 1, 2, 8, 640, 200
    rng = np.random.default_rng(31)
    # with nothing between them, a transpose that exchanges the free dimensions is folded into
    # the dot by the simplifier (dot(w, x): M = 640, cut in row panels)
    folded = not scale and perm[2:] == (3, 2)
    _check_split(transposed_dot_module(b, h, m, n, k, perm, "f32", scale=scale),
                 [_random(rng, (b, m, h, k), "f32"), _random(rng, (b, h, k, n), "f32")],
                 min_col_panels=1 if folded else 2)


@pytest.mark.parametrize("perm", [(0, 1, 3, 2), (2, 0, 3, 1)], ids=["swapped", "scratch"])
@pytest.mark.usefixtures("small_share")
def test_small_m_transposed_output_c64(perm):
    b, h, m, n, k = 1, 2, 8, 640, 200
    rng = np.random.default_rng(32)
    _check_split(transposed_dot_module(b, h, m, n, k, perm, "c64", scale=True),
                 [_random(rng, (b, m, h, k), "c64"), _random(rng, (b, h, k, n), "c64")])


def test_partition_does_not_follow_the_thread_option(monkeypatch):
    """The cut is the shape's: the same kernels whatever HLOFUSE_CPU_THREADS says."""
    text = _dot_module((32, 768), (768, 2048), [], [1], [], [0], "f32")
    units = []
    for threads in ("1", "4"):
        monkeypatch.setenv("HLOFUSE_CPU_THREADS", threads)
        exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
        units.append((_gemm_kernel(exe).units, _gemm_kernel(exe).unit_elements))
    assert units[0] == units[1] == (10, 32 * 224 * 768)
