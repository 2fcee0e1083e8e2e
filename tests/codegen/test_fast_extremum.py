"""Fast max/min folds (kernels/fast_extremum.py) in row reductions (cpu_reduction.py) and row
kernels (cpu_row.py): `llvm.maxnum`/`minnum` with `nnan nsz` and a NaN tracker, folded again
with the reducer where that is not decisive (a NaN, a zero extremum). The results must be the
bits the reducer's own fold (`llvm.maximum`, FAST_FOLDS off) gives, NaN payloads and signs of
zero included, and the interpreter's values (NaN where it has one, the same sign of zero), for
rows built to take every path; and the fast fold must be the one compiled where it applies."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import fast_extremum
from hlofuse.runtime.output_pool import aligned_empty

REDUCER = """{name} {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT m = {t}[] {op}(a, b)
}}
"""


def row_reduce(op: str, t: str, rows: int, n: int, init: str = "-inf") -> str:
    """`op` (maximum/minimum) over the rows of a [rows, n] array, from `init`."""
    return (f"HloModule r\n{REDUCER.format(name='red', t=t, op=op)}ENTRY e {{\n"
            f"  x = {t}[{rows},{n}] parameter(0)\n  i = {t}[] constant({init})\n"
            f"  ROOT r = {t}[{rows}] reduce(x, i), dimensions={{1}}, to_apply=red\n}}\n")


def row_kernel(op: str, t: str, rows: int, n: int) -> str:
    """x - max(x) (or min) per row: a row kernel (a reduce broadcast back along its row)."""
    return (f"HloModule k\n{REDUCER.format(name='red', t=t, op=op)}ENTRY e {{\n"
            f"  x = {t}[{rows},{n}] parameter(0)\n  i = {t}[] constant({'-inf' if op == 'maximum' else 'inf'})\n"
            f"  r = {t}[{rows}] reduce(x, i), dimensions={{1}}, to_apply=red\n"
            f"  rb = {t}[{rows},{n}] broadcast(r), dimensions={{0}}\n"
            f"  ROOT d = {t}[{rows},{n}] subtract(x, rb)\n}}\n")


def masked_row_max(rows: int, n: int) -> str:
    """A causal-mask row max: select(column <= row, x, -inf), as in masked attention."""
    return (f"HloModule m\n{REDUCER.format(name='red', t='f32', op='maximum')}ENTRY e {{\n"
            f"  x = f32[{rows},{n}] parameter(0)\n  c = s32[{rows},{n}] iota(), iota_dimension=1\n"
            f"  r = s32[{rows},{n}] iota(), iota_dimension=0\n"
            f"  keep = pred[{rows},{n}] compare(c, r), direction=LE\n  ninf = f32[] constant(-inf)\n"
            f"  nb = f32[{rows},{n}] broadcast(ninf), dimensions={{}}\n"
            f"  s = f32[{rows},{n}] select(keep, x, nb)\n"
            f"  ROOT m = f32[{rows}] reduce(s, ninf), dimensions={{1}}, to_apply=red\n}}\n")


def special_rows(rows: int, n: int, dtype, is_min: bool = False) -> np.ndarray:
    """Random rows, and rows made to take the exact fold: a NaN (quiet, negative, with a
    payload), a zero extremum of either sign or both, infinities, a row of -inf (+inf), a
    denormal extremum."""
    x = aligned_empty((rows, n), dtype)
    x[...] = np.random.default_rng(rows + n).standard_normal((rows, n)).astype(dtype)
    s = -1 if is_min else 1  # rows whose extremum is a zero: every other value on the far side
    uint = np.uint32 if dtype == np.float32 else np.uint64
    neg_nan = np.array([-np.nan], dtype).view(uint)[0] | uint(5)  # a negative NaN with a payload
    x[1, n // 2] = np.nan
    x[2, 3] = np.array([neg_nan], uint).view(dtype)[0]
    for r in (3, 4, 5):
        x[r] = -s * (np.abs(x[r]) + 1)
    x[3, 7] = 0.0
    x[4, 9] = -0.0
    x[5, 1], x[5, n - 1] = -0.0, 0.0
    x[6, 0] = s * np.inf
    x[7] = -s * np.inf
    x[8, n - 1] = np.nan
    x[8, 0] = np.inf
    x[9] = -s * (np.abs(x[9]) + 1)  # the extremum a denormal (read as a zero: XLA's DAZ)
    x[9, 11] = s * np.finfo(dtype).smallest_subnormal * 3
    return x


def _compile(text: str, fast: bool, monkeypatch):
    monkeypatch.setattr(fast_extremum, "FAST_FOLDS", fast)
    return hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _check(text: str, x: np.ndarray, monkeypatch) -> None:
    """Same bits with and without the fast fold; the interpreter's values and signs of zero."""
    (fast,) = _compile(text, True, monkeypatch)(x)
    (slow,) = _compile(text, False, monkeypatch)(x)
    fast, slow = np.asarray(fast), np.asarray(slow)
    assert np.array_equal(_bits(fast), _bits(slow))
    (want,) = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(x)
    want = np.asarray(want)
    assert np.array_equal(np.isnan(fast), np.isnan(want))
    # A denormal extremum reads as a zero in both (XLA:CPU's DAZ; jax's jnp.max of
    # [3 * 2^-149, -1, ...] is 0.0; the interpreter's FlushingCombiner).
    ok = ~np.isnan(want)
    assert np.array_equal(fast[ok], want[ok])
    assert np.array_equal(np.signbit(fast[ok]), np.signbit(want[ok]))


@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("t,dtype", [("f32", np.float32), ("f64", np.float64)])
@pytest.mark.parametrize("n", [1000, 2048])
def test_row_reduction_is_bit_for_bit_the_reducers(op, t, dtype, n, monkeypatch):
    rows = 16
    _check(row_reduce(op, t, rows, n), special_rows(rows, n, dtype, is_min=op == "minimum"), monkeypatch)


@pytest.mark.parametrize("init", ["nan", "0", "-0"])
def test_init_value_takes_part(init, monkeypatch):
    # A NaN init makes every row NaN; a zero init decides rows whose values are all below it.
    rows, n = 12, 512
    x = special_rows(rows, n, np.float32)
    x[10] = -np.abs(x[10]) - 1  # a row below zero: the result is the init itself
    _check(row_reduce("maximum", "f32", rows, n, init=init), x, monkeypatch)


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_row_kernel_is_bit_for_bit_the_reducers(op, monkeypatch):
    rows, n = 16, 1024
    _check(row_kernel(op, "f32", rows, n), special_rows(rows, n, np.float32, is_min=op == "minimum"), monkeypatch)


def test_masked_row_max(monkeypatch):
    rows, n = 64, 512
    x = special_rows(rows, n, np.float32)
    x[20, :21] = -np.abs(x[20, :21]) - 1
    x[20, 5] = 0.0  # a zero maximum among the kept columns
    _check(masked_row_max(rows, n), x, monkeypatch)


def test_split_full_reduction(monkeypatch):
    # One output over 2^20 elements: the planner splits it into slices over the cores, each
    # folded fast and checked, then combined by the reducer.
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "2")
    n = 1 << 20
    text = (f"HloModule f\n{REDUCER.format(name='red', t='f32', op='maximum')}ENTRY e {{\n"
            f"  x = f32[{n}] parameter(0)\n  i = f32[] constant(-inf)\n"
            f"  ROOT r = f32[] reduce(x, i), dimensions={{0}}, to_apply=red\n}}\n")
    x = -np.abs(np.random.default_rng(3).standard_normal(n).astype(np.float32)) - 1
    for zero in (0.0, -0.0):
        y = x.copy()
        y[n // 3] = zero
        _check(text, y, monkeypatch)
    y = x.copy()
    y[n - 5] = np.nan
    _check(text, y, monkeypatch)


def _ir(text: str, fast: bool, monkeypatch) -> str:
    return _compile(text, fast, monkeypatch).program.llvm_ir()


def test_the_fast_fold_is_compiled_where_it_applies(monkeypatch):
    assert "llvm.maxnum.v" in _ir(row_reduce("maximum", "f32", 64, 2048), True, monkeypatch)
    assert "llvm.minnum.v" in _ir(row_kernel("minimum", "f32", 64, 2048), True, monkeypatch)
    assert "llvm.maxnum" not in _ir(row_reduce("maximum", "f32", 64, 2048), False, monkeypatch)
    # Not where a loop computes an expensive op per element (cpu_row.fast_folds): softmax, its
    # max folded at the start of each row. (Folded a row ahead, row_ahead.FAST_FOLD_AHEAD, it is.)
    from hlofuse.codegen.kernels import row_ahead

    monkeypatch.setattr(row_ahead, "PIPELINE_FIRST_LEVEL", False)
    softmax = (f"HloModule s\n{REDUCER.format(name='mx', t='f32', op='maximum')}"
               "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
               "ENTRY e {\n  x = f32[64,2048] parameter(0)\n  ninf = f32[] constant(-inf)\n"
               "  m = f32[64] reduce(x, ninf), dimensions={1}, to_apply=mx\n"
               "  mb = f32[64,2048] broadcast(m), dimensions={0}\n  d = f32[64,2048] subtract(x, mb)\n"
               "  ex = f32[64,2048] exponential(d)\n  z = f32[] constant(0)\n"
               "  s = f32[64] reduce(ex, z), dimensions={1}, to_apply=add\n"
               "  sb = f32[64,2048] broadcast(s), dimensions={0}\n  ROOT o = f32[64,2048] divide(ex, sb)\n}\n")
    assert "llvm.maxnum" not in _ir(softmax, True, monkeypatch)
    monkeypatch.setattr(row_ahead, "PIPELINE_FIRST_LEVEL", True)
    assert "llvm.maxnum.v" in _ir(softmax, True, monkeypatch)


def test_reducers_recognised():
    from hlofuse.codegen.kernels.reduction_groups import ReduceHero
    from hlofuse.emitters.cpu.target import CpuTarget
    from hlofuse.emitters.elemental import ElementalEmitter
    from llvmlite import ir

    def hero(text):
        module = hlofuse.parse_hlo(text)
        fn = ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), []), "f")
        em = ElementalEmitter(ir.IRBuilder(fn.append_basic_block()), CpuTarget(), lambda *a: None)
        return ReduceHero(em, module.entry.root)

    assert fast_extremum.fast_extremum(hero(row_reduce("maximum", "f32", 2, 32))) == "max"
    assert fast_extremum.fast_extremum(hero(row_reduce("minimum", "f64", 2, 32))) == "min"
    assert fast_extremum.fast_extremum(hero(row_reduce("maximum", "bf16", 2, 32))) is None
    add = row_reduce("maximum", "f32", 2, 32).replace("maximum(a, b)", "add(a, b)")
    assert fast_extremum.fast_extremum(hero(add)) is None
