"""Argmax/argmin row reductions (codegen/kernels/arg_reduction.py): the reducer recognised by
its behaviour, the row kernel vectorised, and its (value, index) results bit for bit those of
the interpreter (and XLA) with NaN first, last and in the middle of rows, all-NaN rows, -0
beside +0 in both orders, ties, all -inf rows, index inputs that are not an iota, init values
that are not the identity, rows split across cores, and reducers that are not argmax; and the
emulated GPU's (value, index) results, folded in position order by every kernel kind
(gpu_reduction.py), bit for bit those of the interpreter on the same rows."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hlofuse
from backend_oracle import HAS_XLA, bits_equal, run
from xla_oracle import run_on_xla
from hlofuse.codegen.gpu import launch_summary
from hlofuse.codegen.kernels.arg_reduction import recognize
from hlofuse.emitters.gpu.ptxas import assemble, assembler
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.cpu_executor import CpuProgram
from hlofuse.runtime.gpu_executor import GpuProgram

# jax 0.10's argmax reducer (argmin: LT for GT); {NAN} is the float NaN test, empty for ints.
REDUCER = """
cmp {{
  a = {t}[] parameter(0)
  ai = {i}[] parameter(1)
  b = {t}[] parameter(2)
  bi = {i}[] parameter(3)
  gt = pred[] compare(a, b), direction={dir}
  {nan_def}
  take = pred[] {take}
  v = {t}[] select(take, a, b)
  eq = pred[] compare({eq_lhs}, {eq_rhs}), direction=EQ
  {eq_extra}
  lt = pred[] compare(ai, bi), direction={tie}
  tie = pred[] and({eq_name}, lt)
  takei = pred[] or(take, tie)
  i = {i}[] select(takei, ai, bi)
  ROOT t = ({t}[], {i}[]) tuple(v, i)
}}
"""


def _reducer(t="f32", i="s32", is_min=False, tie="LT", both_nan_equal=False, eq_swapped=False) -> str:
    is_float = t.startswith("f")
    nan_def = "anan = pred[] compare(a, a), direction=NE" if is_float else ""
    eq_extra, eq_name = "", "eq"
    if both_nan_equal:  # newer jax: equal, or both NaN
        eq_extra = ("bnan = pred[] compare(b, b), direction=NE\n  nn = pred[] and(anan, bnan)\n"
                    "  eqn = pred[] or(eq, nn)")
        eq_name = "eqn"
    return REDUCER.format(t=t, i=i, dir="LT" if is_min else "GT", nan_def=nan_def,
                          take="or(gt, anan)" if is_float else "and(gt, gt)",
                          eq_lhs="b" if eq_swapped else "a", eq_rhs="a" if eq_swapped else "b",
                          eq_extra=eq_extra, eq_name=eq_name, tie=tie)


def _module(rows: int, cols: int, t="f32", i="s32", init="-inf", init_index=0, index_param=False, **kw) -> str:
    index = (f"  io = {i}[{rows},{cols}] parameter(1)\n" if index_param
             else f"  io = {i}[{rows},{cols}] iota(), iota_dimension=1\n")
    return ("HloModule m\n" + _reducer(t, i, **kw) + "\nENTRY e {\n"
            f"  p = {t}[{rows},{cols}] parameter(0)\n{index}"
            f"  c = {t}[] constant({init})\n  z = {i}[] constant({init_index})\n"
            f"  r = ({t}[{rows}], {i}[{rows}]) reduce(p, io, c, z), dimensions={{1}}, to_apply=cmp\n"
            f"  v = {t}[{rows}] get-tuple-element(r), index=0\n"
            f"  x = {i}[{rows}] get-tuple-element(r), index=1\n"
            f"  ROOT out = ({t}[{rows}], {i}[{rows}]) tuple(v, x)\n}}\n")


def _edges(rows: int, cols: int, seed: int, dtype=np.float32) -> np.ndarray:
    """Rows with NaN at the first, last, middle and vector-block edges, all NaN, -0 then +0 and
    +0 then -0 as the maximum and as the minimum, all -inf, all inf, denormals beside a zero;
    values drawn from a few integers so ties are common."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, (rows, cols)).astype(dtype)
    if np.dtype(dtype).kind != "f":
        return x
    special = {
        0: lambda r: r.__setitem__(0, np.nan),
        1: lambda r: r.__setitem__(cols - 1, np.nan),
        2: lambda r: (r.__setitem__(cols // 2, np.nan), r.__setitem__(min(16, cols - 1), -np.nan)),
        3: lambda r: r.fill(np.nan),
        4: lambda r: (r.fill(-1), r.__setitem__(slice(0, None, 3), -0.0), r.__setitem__(cols - 1, 0.0)),
        5: lambda r: (r.fill(-1), r.__setitem__(slice(0, None, 3), 0.0), r.__setitem__(cols - 1, -0.0)),
        6: lambda r: r.fill(-np.inf),
        7: lambda r: r.fill(np.inf),
        8: lambda r: (r.fill(-1), r.__setitem__(slice(1, None, 2), np.float32(1e-40)),
                      r.__setitem__(0, 0.0)),
        9: lambda r: (r.fill(1), r.__setitem__(slice(0, None, 3), -0.0), r.__setitem__(cols - 1, 0.0)),
        10: lambda r: (r.fill(1), r.__setitem__(slice(0, None, 3), 0.0), r.__setitem__(cols - 1, -0.0)),
    }
    for k in range(min(rows, len(special))):
        special[k](x[k])
    return x


def check_cpu(text: str, args: list, with_xla: bool = True) -> None:
    """The CPU backend (fused and unfused) gives the interpreter's and XLA's outputs bit for
    bit (check_gpu: the emulated GPU)."""
    refs = {"interpreter": run(text, args, "interpreter")}
    if HAS_XLA and with_xla:
        refs["xla"] = run_on_xla(text, args)
    for fusion in (True, False):
        got = run(text, args, "cpu", fusion)
        for name, want in refs.items():
            for k, (g, w) in enumerate(zip(got, want)):
                bad = np.flatnonzero(~bits_equal(g, w))
                assert bad.size == 0, f"cpu fusion={fusion} vs {name}, out{k} at {bad[:5]}: {g[bad[:5]]} vs {w[bad[:5]]}"


SHAPES = [(11, 3), (11, 15), (11, 16), (12, 17), (11, 130), (11, 1000)]


@pytest.mark.parametrize("is_min", [False, True], ids=["argmax", "argmin"])
@pytest.mark.parametrize("rows,cols", SHAPES, ids=[f"{r}x{c}" for r, c in SHAPES])
def test_float_rows(is_min, rows, cols):
    init = "inf" if is_min else "-inf"
    check_cpu(_module(rows, cols, init=init, is_min=is_min), [_edges(rows, cols, rows * cols)])


@pytest.mark.parametrize("t,i,dtype", [("f64", "s64", np.float64), ("s32", "s32", np.int32),
                                       ("u8", "s32", np.uint8), ("s64", "u32", np.int64)])
@pytest.mark.parametrize("is_min", [False, True], ids=["argmax", "argmin"])
def test_other_types(t, i, dtype, is_min):
    if np.dtype(dtype).kind == "f":
        init = "inf" if is_min else "-inf"
    else:
        info = np.iinfo(dtype)
        init = str(info.max if is_min else info.min)
    x = _edges(11, 77, 5, dtype)
    check_cpu(_module(11, 77, t=t, i=i, init=init, is_min=is_min), [x])


def test_index_input_not_an_iota_and_init_not_the_identity():
    """Ties go to the smallest index VALUE (here a shuffled one), the init value (0.5, index 9)
    joins as the first operand: rows below 0.5 give it, rows equal to it take the smaller index."""
    rows, cols = 10, 70
    x = _edges(rows, cols, 3)
    x[9, :] = -2.0
    x[9, 5] = 0.5
    idx = np.stack([np.random.default_rng(r).permutation(cols) for r in range(rows)]).astype(np.int32)
    idx[9, 5] = 4
    check_cpu(_module(rows, cols, init="0.5", init_index=9, index_param=True), [x, idx])


@pytest.mark.parametrize("shape", [(1, 300_000), (3, 70_001)], ids=["one_row", "three_rows"])
def test_long_rows_split_across_cores(shape):
    """Few long rows: the kernel is split into slices folded by partial and combine kernels."""
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    x[0, 1000] = x[0, 250_000 % shape[1]] = 9.0  # a tie across slices: the first wins
    if shape[0] > 1:
        x[1, 60_000] = np.nan
        x[1, 5] = np.nan
        x[2, :] = -0.0
        x[2, 40_000] = 0.0
    check_cpu(_module(*shape), [x])


@pytest.mark.parametrize("variant", [dict(both_nan_equal=True), dict(eq_swapped=True)], ids=["both_nan", "swapped"])
def test_equivalent_reducers_are_recognised(variant):
    inst = next(i for i in parse_hlo(_module(4, 8, **variant)).entry.instructions if i.opcode == "reduce")
    spec = recognize(inst)
    assert spec is not None and not spec.is_min


@pytest.mark.parametrize("tie", ["GT", "LE"], ids=["last_index_wins", "le"])
def test_other_reducers_are_not_recognised_and_stay_correct(tie):
    """A reducer whose ties take the larger index is not argmax: the scalar fold runs."""
    text = _module(10, 130, tie=tie)
    inst = next(i for i in parse_hlo(text).entry.instructions if i.opcode == "reduce")
    assert recognize(inst) is None
    check_cpu(text, [_edges(10, 130, 9)], with_xla=False)


def test_recognised_kinds():
    for t, is_min in [("f32", False), ("f32", True), ("s32", False), ("u8", True)]:
        inst = next(i for i in parse_hlo(_module(4, 8, t=t, init="0", is_min=is_min)).entry.instructions
                    if i.opcode == "reduce")
        spec = recognize(inst)
        assert spec is not None and spec.is_min == is_min and spec.value.name == t


@pytest.mark.parametrize("t,init", [("f32", "-inf"), ("s32", "-2147483648")])
def test_row_kernel_is_vectorised(t, init):
    """Both passes fold whole vectors: a vector max of the values and vector integer min/max
    reductions of the positions (the scalar fold had none: ~7 ns an element)."""
    fused = hlofuse.compile(parse_hlo(_module(64, 512, t=t, init=init)), target="cpu").fused_module
    ir = CpuProgram.compile(fused).llvm_ir()
    value_max = r"@llvm\.(maximum|smax)\.v(8|16)(f32|i32)"
    assert re.search(value_max, ir), ir[:3000]
    assert re.search(r"@llvm\.vector\.reduce\.smin\.v(8|16)i32", ir), ir[:3000]
    assert re.search(r"@llvm\.vector\.reduce\.smax\.v(8|16)i32", ir), ir[:3000]


def check_gpu(text: str, args: list, kinds: set[tuple[str, str]] | None = None) -> None:
    """The emulated GPU (fused and unfused) gives the interpreter's outputs bit for bit; with
    `kinds`, the fused program launches exactly those (role, kernel kind) pairs, so the case
    covers the kernel it is meant to. Where an assembler is installed, ptxas assembles the
    same kernels' PTX."""
    want = run(text, args, "interpreter")
    for fusion in (True, False):
        got = run(text, args, "gpu-emulated", fusion)
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            bad = np.flatnonzero(~bits_equal(g, w))
            assert bad.size == 0, (f"gpu-emulated fusion={fusion}, out{k} at {bad[:5]}: "
                                   f"{g.reshape(-1)[bad[:5]]} vs {w.reshape(-1)[bad[:5]]}")
    fused = hlofuse.compile(parse_hlo(text), target="gpu-emulated").fused_module
    prog = GpuProgram.compile(fused, emulated=True, build_only=True)
    if kinds is not None:
        assert {(r["role"], r["kind"]) for r in launch_summary(prog)} == kinds
    if assembler() is not None:
        assemble(prog.ptx(), "sm_90")


def _column_module(rows: int, cols: int, is_min: bool = False) -> str:
    """argmax (argmin) over dimension 0 of an f32[rows, cols]: the column kernel's reduction."""
    init = "inf" if is_min else "-inf"
    return ("HloModule m\n" + _reducer(is_min=is_min) + "\nENTRY e {\n"
            f"  p = f32[{rows},{cols}] parameter(0)\n  io = s32[{rows},{cols}] iota(), iota_dimension=0\n"
            f"  c = f32[] constant({init})\n  z = s32[] constant(0)\n"
            f"  r = (f32[{cols}], s32[{cols}]) reduce(p, io, c, z), dimensions={{0}}, to_apply=cmp\n"
            f"  v = f32[{cols}] get-tuple-element(r), index=0\n  x = s32[{cols}] get-tuple-element(r), index=1\n"
            f"  ROOT out = (f32[{cols}], s32[{cols}]) tuple(v, x)\n}}\n")


# (rows, cols, the kernels of the fused program): one thread per row; short rows sharing a
# block (one chunk: the 32 lanes' runs of 8); long rows split into chunks of 256 lanes' runs.
GPU_ROWS = [(11, 15, {("main", "per_output")}),
            (11, 130, {("main", "row"), ("finish", "row")}),
            (12, 5000, {("main", "row"), ("finish", "row")})]


@pytest.mark.parametrize("is_min", [False, True], ids=["argmax", "argmin"])
@pytest.mark.parametrize("rows,cols,kinds", GPU_ROWS, ids=[f"{r}x{c}" for r, c, _ in GPU_ROWS])
def test_gpu_emulated_rows_in_position_order(is_min, rows, cols, kinds):
    """Rows with two NaNs (the first wins, here at 16 before one at cols // 2, in another lane's
    run and, for 5000, another chunk), zeros of both signs as the maximum and the minimum (the
    last one's sign), ties (the least index): each partial folds a contiguous run and the
    finish kernel combines the runs in position order, so the emulated GPU gives the
    interpreter's fold. (Partials of interleaved lanes combined lane by lane gave the NaN at
    cols // 2 and the sign of another zero.)"""
    init = "inf" if is_min else "-inf"
    x = _edges(rows, cols, rows * cols)
    check_gpu(_module(rows, cols, init=init, is_min=is_min), [x], kinds)


@pytest.mark.parametrize("is_min", [False, True], ids=["argmax", "argmin"])
def test_gpu_emulated_columns_in_position_order(is_min):
    """The column kernel (dimension 0 reduced): partials are tiles of 32 consecutive positions,
    combined in order; the special rows of _edges become columns."""
    x = np.ascontiguousarray(_edges(11, 300, 8).T)
    check_gpu(_column_module(300, 11, is_min), [x], {("main", "column"), ("finish", "column")})


@pytest.mark.parametrize("tie", ["GT", "LE"], ids=["last_index_wins", "le"])
def test_gpu_emulated_other_reducers(tie):
    """Reducers that are not argmax (ties to the larger index; LE): still associative, so the
    in-order combination of contiguous runs is their fold too."""
    check_gpu(_module(10, 130, tie=tie), [_edges(10, 130, 9)])


def test_gpu_emulated_index_input_and_init_not_the_identity():
    """Indices from a parameter (shuffled: ties go to the least index VALUE, not position) and
    an init value (0.5, index 9) that is not the identity: it joins once, in front."""
    rows, cols = 10, 700
    x = _edges(rows, cols, 3)
    x[9, :] = -2.0
    x[9, 5] = 0.5
    idx = np.stack([np.random.default_rng(r).permutation(cols) for r in range(rows)]).astype(np.int32)
    idx[9, 5] = 4
    check_gpu(_module(rows, cols, init="0.5", init_index=9, index_param=True), [x, idx])


def test_two_reduced_dimensions():
    """Positions run row-major over the reduced dimensions (the fold's order): the first NaN
    and the last equal value are found across the inner rows; indices come from a parameter."""
    text = ("HloModule m\n" + _reducer() + "\nENTRY e {\n"
            "  p = f32[6,5,33] parameter(0)\n  io = s32[6,5,33] parameter(1)\n"
            "  c = f32[] constant(-inf)\n  z = s32[] constant(0)\n"
            "  r = (f32[6], s32[6]) reduce(p, io, c, z), dimensions={1,2}, to_apply=cmp\n"
            "  v = f32[6] get-tuple-element(r), index=0\n  x = s32[6] get-tuple-element(r), index=1\n"
            "  ROOT out = (f32[6], s32[6]) tuple(v, x)\n}\n")
    x = _edges(30, 33, 4).reshape(6, 5, 33)
    x[1, 3, 2] = x[1, 1, 30] = np.nan  # two NaNs in different inner rows: [1, 30] is the first
    x[2] = -1.0
    x[2, 0, 5] = x[2, 4, 0] = 0.0
    x[2, 2, 7] = -0.0  # value: the last zero (+0 at [4, 0]); index: the least index of the zeros
    idx = np.random.default_rng(6).permutation(6 * 5 * 33).reshape(6, 5, 33).astype(np.int32)
    check_cpu(text, [x, idx])
