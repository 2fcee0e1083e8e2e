"""Row kernels that fold their first level of max/min reduces one row ahead
(kernels/row_ahead.py `pipelines_first_level`): which kernels do, and that their results are
bit for bit those of the kernel that folds each row's maximum at its start (the switch
PIPELINE_FIRST_LEVEL off) and the interpreter's: rows with NaN, -inf and +inf, a single row,
rows split over two threads (each thread's last row has no next row of its own), f64, causally
masked rows, and the loop that folds ahead being the division loop (softmax)
or the exp loop (where the output rows stream)."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import cpu_row, row_ahead
from hlofuse.codegen.kernels.row_analysis import row_layout
from hlofuse.runtime.compare import compare_outputs
from test_row_kernels import _input, _row_kernels, module

MASKED = """HloModule masked
max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[ROWS,COLS] parameter(0)
  i = s32[ROWS,COLS] iota(), iota_dimension=0
  j = s32[ROWS,COLS] iota(), iota_dimension=1
  keep = pred[ROWS,COLS] compare(j, i), direction=LE
  ninf = f32[] constant(-inf)
  ninfb = f32[ROWS,COLS] broadcast(ninf), dimensions={}
  xm = f32[ROWS,COLS] select(keep, x, ninfb)
  mx = f32[ROWS] reduce(xm, ninf), dimensions={1}, to_apply=max_f32
  mb = f32[ROWS,COLS] broadcast(mx), dimensions={0}
  e = f32[ROWS,COLS] exponential(subtract(xm, mb))
  zero = f32[] constant(0)
  s = f32[ROWS] reduce(e, zero), dimensions={1}, to_apply=add_f32
  sb = f32[ROWS,COLS] broadcast(s), dimensions={0}
  ROOT y = f32[ROWS,COLS] divide(e, sb)
}
"""


def _compile(text: str):
    return hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)


def _special_rows(x: np.ndarray) -> np.ndarray:
    """`x` with a NaN in row 1, row 2 all -inf, a +inf in row 3, row 4 at most -0.0 and row 5
    at most +0.0 (a zero maximum: the fast fold's exact case), where there are such rows."""
    x = x.copy()
    if x.shape[0] > 1:
        x[1, x.shape[1] // 2] = np.nan
    if x.shape[0] > 2:
        x[2] = -np.inf
    if x.shape[0] > 3:
        x[3, 0] = np.inf
    for row, zero in ((4, -0.0), (5, 0.0)):
        if x.shape[0] > row:
            x[row] = -np.abs(x[row])
            x[row, -1] = zero
    return x


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _check_against_unpipelined(monkeypatch, text: str, x: np.ndarray, folds: bool = True):
    """Compile `text` folding ahead (where `folds`) and not; same bits, and the interpreter's results."""
    exe = _compile(text)
    [kernel] = _row_kernels(exe)
    assert row_ahead.pipelines_first_level(row_layout(kernel.comp)) == folds
    got = list(exe(x))
    monkeypatch.setattr(row_ahead, "PIPELINE_FIRST_LEVEL", False)
    plain = list(_compile(text)(x))
    monkeypatch.setattr(row_ahead, "PIPELINE_FIRST_LEVEL", True)
    for g, p in zip(got, plain):
        assert _same_bits(np.asarray(g), np.asarray(p))
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(x)
    for r in compare_outputs(got, list(want)):
        assert r.ok, r
    return exe


@pytest.mark.parametrize("pattern, folds", [("softmax", True), ("log_softmax", True), ("layer_norm", False),
                                             ("rms_norm", False), ("l2_normalize", False)])
def test_which_row_kernels_fold_ahead(pattern, folds):
    """A first level of max reduces (softmax, log-softmax) folds ahead; a first level of sums
    (their order is part of the result) does not."""
    [kernel] = _row_kernels(_compile(module(pattern, (8, 64))))
    assert row_ahead.pipelines_first_level(row_layout(kernel.comp)) == folds


@pytest.mark.parametrize("pattern", ["softmax", "log_softmax"])
def test_exact_and_fast_fold_ahead_same_bits(monkeypatch, pattern):
    """The fast max folded ahead (FAST_FOLD_AHEAD) against llvm.maximum's fold: NaN, infinite
    and zero maxima included."""
    dims = (9, 100)
    text = module(pattern, dims)
    x = _special_rows(_input(dims, "f32", seed=5))
    got = _compile(text)(x)[0]
    monkeypatch.setattr(row_ahead, "FAST_FOLD_AHEAD", False)
    assert _same_bits(np.asarray(got), np.asarray(_compile(text)(x)[0]))


def test_switch_turns_it_off(monkeypatch):
    [kernel] = _row_kernels(_compile(module("softmax", (8, 64))))
    monkeypatch.setattr(row_ahead, "PIPELINE_FIRST_LEVEL", False)
    assert not row_ahead.pipelines_first_level(row_layout(kernel.comp))


@pytest.mark.parametrize("pattern", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dims", [(1, 64), (2, 2), (3, 17), (5, 1000), (64, 130)], ids=lambda d: "x".join(map(str, d)))
def test_same_bits_as_folding_each_row_first(monkeypatch, pattern, dims):
    _check_against_unpipelined(monkeypatch, module(pattern, dims), _special_rows(_input(dims, "f32", seed=dims[1])))


@pytest.mark.parametrize("pattern", ["softmax", "log_softmax"])
@pytest.mark.parametrize("rows", [3, 33, 257])
def test_rows_split_over_two_threads(monkeypatch, pattern, rows):
    """Each thread's range folds its own first row before its loop and its last row again."""
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "2")
    dims = (rows, 1024)
    exe = _check_against_unpipelined(monkeypatch, module(pattern, dims), _special_rows(_input(dims, "f32", seed=rows)))
    assert exe.program.driver is None or exe.program.driver.threads == 2


@pytest.mark.parametrize("pattern", ["softmax", "log_softmax"])
def test_rows_streamed_from_memory(monkeypatch, pattern):
    """The output rows stream where the data exceed L3 (softmax's exp kept in a row buffer):
    the exp loop folds ahead."""
    monkeypatch.setattr(cpu_row, "l3_cache_bytes", lambda: 64 << 10)
    dims = (65, 1024)
    text = module(pattern, dims)
    assert "!nontemporal" in _compile(text).program.llvm_ir()
    _check_against_unpipelined(monkeypatch, text, _special_rows(_input(dims, "f32", seed=3)))


def test_per_row_maximum_output_and_f64(monkeypatch):
    """With the row maxima an output of the module, they are a kernel of their own and the row
    kernel has one level (the sum): nothing to fold ahead, the same results."""
    dims = (9, 40)
    _check_against_unpipelined(monkeypatch, module("softmax", dims, both=True), _special_rows(_input(dims, "f32")),
                               folds=False)
    _check_against_unpipelined(monkeypatch, module("softmax", dims, t="f64"), _special_rows(_input(dims, "f64")))


@pytest.mark.parametrize("rows, n", [(7, 7), (40, 300)])
def test_causally_masked_rows(monkeypatch, rows, n):
    """max(select(mask, x, -inf)) as in causal attention; row 0 keeps one element."""
    text = MASKED.replace("ROWS", str(rows)).replace("COLS", str(n))
    _check_against_unpipelined(monkeypatch, text, _special_rows(_input((rows, n), "f32", seed=n)))
