"""The interpreter (the oracle) on signed zeros, NaNs and rank-0 operands.

* maximum/minimum, clamp, reduce, reduce-window and scatter with max/min over +-0 and NaN,
  against XLA's CPU compiler (IEEE 754-2019: max(+0, -0) = +0 and min(+0, -0) = -0 in either
  operand order; NaN propagates), on the interpreter and the compiled backends.
* Every elementwise opcode of the registry on rank-0 operands of every element type the
  interpreter supports, against the same op on shape [1] (scalar inputs once crashed `erf`).

Signed zeros reach XLA as parameters, never as constants: XLA's HLO parser reads the literal
`-0` (and `-0.0`) as +0.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from xla_oracle import run_on_xla, xla_available  # noqa: E402

import hlofuse  # noqa: E402
from hlofuse.hlo.dtypes import ELEMENT_TYPES  # noqa: E402
from hlofuse.hlo.errors import HloError  # noqa: E402
from hlofuse.hlo.opcodes import OPS  # noqa: E402
from hlofuse.hlo.parser import parse_hlo  # noqa: E402
from hlofuse.hlo.verifier import verify  # noqa: E402
from hlofuse.hlo.rule_loader import load_rules  # noqa: E402
from hlofuse.runtime.interpreter import evaluate  # noqa: E402

needs_xla = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA CPU client is not usable here")

FLOATS = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
BACKENDS = ["interpreter", "cpu", "gpu-emulated"]


def same_bits(got, want) -> bool:
    """Equal values with equal signs of zero (any NaN equals any NaN)."""
    g = np.asarray(got).astype(np.float64).ravel()
    w = np.asarray(want).astype(np.float64).ravel()
    if g.shape != w.shape:
        return False
    nan = np.isnan(g)
    return bool(np.array_equal(nan, np.isnan(w)) and np.array_equal(g[~nan], w[~nan])
                and np.array_equal(np.signbit(g[~nan]), np.signbit(w[~nan])))


def run(text: str, args: list, backend: str) -> list[np.ndarray]:
    """Outputs of module `text` on `args`, through hlofuse's `backend`."""
    return [np.asarray(o) for o in hlofuse.compile(parse_hlo(text), target=backend)(*args)]


# ---- maximum / minimum / clamp --------------------------------------------------------------
ZEROS_AND_NANS = [0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf]
PAIRS = [(a, b) for a in ZEROS_AND_NANS for b in ZEROS_AND_NANS]


@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("dt", list(FLOATS))
def test_max_min_signed_zero_follow_ieee_2019(op, dt):
    """max(+0, -0) = +0 and min(+0, -0) = -0 in both orders, NaN wins: IEEE 754-2019's
    maximum/minimum, checked without XLA (the operands' own values are the reference)."""
    npdt = FLOATS[dt]
    for a, b in [(0.0, -0.0), (-0.0, 0.0)]:
        text = f"HloModule m\nENTRY e {{\n a = {dt}[] parameter(0)\n b = {dt}[] parameter(1)\n ROOT r = {dt}[] {op}(a, b)\n}}\n"
        for backend in BACKENDS:
            got = run(text, [np.array(a, npdt), np.array(b, npdt)], backend)[0]
            assert got.shape == () and float(got) == 0.0
            assert bool(np.signbit(got.astype(np.float32))) == (op == "minimum"), (backend, a, b)


@needs_xla
@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("dt", list(FLOATS))
def test_max_min_pairs_vs_xla(op, dt):
    npdt = FLOATS[dt]
    n = len(PAIRS)
    x = np.array([p[0] for p in PAIRS], npdt)
    y = np.array([p[1] for p in PAIRS], npdt)
    text = f"HloModule m\nENTRY e {{\n a = {dt}[{n}] parameter(0)\n b = {dt}[{n}] parameter(1)\n ROOT r = {dt}[{n}] {op}(a, b)\n}}\n"
    want = run_on_xla(text, [x, y])[0]
    for backend in BACKENDS:
        assert same_bits(run(text, [x, y], backend)[0], want), backend


@needs_xla
@pytest.mark.parametrize("dt", list(FLOATS))
def test_clamp_signed_zero_vs_xla(dt):
    npdt = FLOATS[dt]
    vals = [0.0, -0.0, np.nan, 1.0]
    triples = [(lo, x, hi) for lo in vals for x in vals for hi in vals]
    n = len(triples)
    lo, x, hi = (np.array([t[i] for t in triples], npdt) for i in range(3))
    text = (f"HloModule m\nENTRY e {{\n lo = {dt}[{n}] parameter(0)\n x = {dt}[{n}] parameter(1)\n"
            f" hi = {dt}[{n}] parameter(2)\n ROOT r = {dt}[{n}] clamp(lo, x, hi)\n}}\n")
    want = run_on_xla(text, [lo, x, hi])[0]
    for backend in BACKENDS:
        assert same_bits(run(text, [lo, x, hi], backend)[0], want), backend


# Rows of 40 (long enough for vectorized and tree reductions) mixing signed zeros and NaN.
ROWS = [[-0.0, 0.0], [0.0, -0.0], [-0.0, -0.0], [0.0, 0.0], [-0.0, -1.0], [0.0, 1.0], [np.nan, -0.0],
        [-0.0, np.nan], [1.0, -0.0]]


@needs_xla
@pytest.mark.parametrize("op,init", [("maximum", "-inf"), ("minimum", "inf")])
@pytest.mark.parametrize("dt", list(FLOATS))
def test_reduce_and_reduce_window_signed_zero_vs_xla(op, init, dt):
    x = np.array([r * 20 for r in ROWS], FLOATS[dt])
    n, k = x.shape
    text = f"""HloModule m
red {{
  a = {dt}[] parameter(0)
  b = {dt}[] parameter(1)
  ROOT r = {dt}[] {op}(a, b)
}}
ENTRY e {{
  p = {dt}[{n},{k}] parameter(0)
  c = {dt}[] constant({init})
  rows = {dt}[{n}] reduce(p, c), dimensions={{1}}, to_apply=red
  cols = {dt}[{k}] reduce(p, c), dimensions={{0}}, to_apply=red
  all = {dt}[] reduce(p, c), dimensions={{0,1}}, to_apply=red
  win = {dt}[{n},{k - 1}] reduce-window(p, c), window={{size=1x2}}, to_apply=red
  ROOT t = ({dt}[{n}], {dt}[{k}], {dt}[], {dt}[{n},{k - 1}]) tuple(rows, cols, all, win)
}}
"""
    want = run_on_xla(text, [x])
    for backend in BACKENDS:
        got = run(text, [x], backend)
        for name, g, w in zip(["rows", "cols", "all", "window"], got, want):
            assert same_bits(g, w), (backend, name, g, w)


@needs_xla
@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_scatter_signed_zero_vs_xla(op, dt):
    """Repeated indices combine +-0 updates with +-0 operands (numpy's ufunc.at keeps one of
    an equal pair, the interpreter and the compiled scatter once did too)."""
    npdt = FLOATS[dt]
    text = f"""HloModule m
red {{
  a = {dt}[] parameter(0)
  b = {dt}[] parameter(1)
  ROOT r = {dt}[] {op}(a, b)
}}
ENTRY e {{
  op = {dt}[7] parameter(0)
  idx = s32[10,1] parameter(1)
  upd = {dt}[10] parameter(2)
  ROOT s = {dt}[7] scatter(op, idx, upd), update_window_dims={{}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=red
}}
"""
    operand = np.array([0.0, -0.0, -0.0, 0.0, -0.0, np.nan, 0.0], npdt)
    idx = np.array([[0], [0], [1], [1], [2], [3], [4], [4], [5], [6]], np.int32)
    upd = np.array([-0.0, -0.0, 0.0, -0.0, -0.0, -0.0, -0.0, 0.0, 0.0, np.nan], npdt)
    want = run_on_xla(text, [operand, idx, upd])[0]
    for backend in BACKENDS:
        assert same_bits(run(text, [operand, idx, upd], backend)[0], want), backend


# ---- every elementwise opcode on rank-0 operands ---------------------------------------------
load_rules("reference")  # attaches the reference rules to the registry rows
ELEMENTWISE = sorted(name for name, info in OPS.items()
                     if info.elementwise and info.kind in ("unary", "binary", "ternary", "compare")
                     and info.reference is not None)
DTYPES = [name for name, t in ELEMENT_TYPES.items() if t.numpy is not None]


def _values(dt: str) -> list:
    t = ELEMENT_TYPES[dt]
    if t.is_pred:
        return [True, False]
    if t.is_float or t.is_complex:
        return [-0.0, 1.5, -2.0, np.nan]
    return [1, 2] if not t.is_signed else [-1, 3]


def _module(op: str, dt: str, dims: str) -> tuple[str, int] | None:
    """(HLO text of one `op` on operands of type `dt` and dims `dims`, its operand count), or
    None where the opcode takes no such operands."""
    t = ELEMENT_TYPES[dt]
    shape = f"{dt}[{dims}]"
    info = OPS[op]
    n = {"unary": 1, "binary": 2, "compare": 2, "ternary": 3}[info.kind]
    out, attrs = shape, ""
    if op in ("compare",):
        out, attrs = f"pred[{dims}]", ", direction=LT"
    elif op == "is-finite":
        out = f"pred[{dims}]"
    elif op == "convert":
        out = f"f32[{dims}]" if dt != "f32" else f"s32[{dims}]"
    elif op == "bitcast-convert":  # the same-width form (the others change the rank)
        same_width = {8: "u8", 16: "u16", 32: "u32", 64: "u64"}.get(t.bits)
        if same_width is None or t.is_pred:
            return None
        out = f"{same_width if not t.is_integer else {8: 'f8e5m2', 16: 'f16', 32: 'f32', 64: 'f64'}[t.bits]}[{dims}]"
    elif op == "reduce-precision":
        attrs = ", exponent_bits=5, mantissa_bits=2"
    elif op in ("real", "imag", "abs") and t.is_complex:
        out = f"{'f32' if dt == 'c64' else 'f64'}[{dims}]"
    elif op == "complex":
        if dt not in ("f32", "f64"):
            return None
        out = f"{'c64' if dt == 'f32' else 'c128'}[{dims}]"
    elif op == "stochastic-convert":  # (value, random bits of its width) -> a signed integer
        if not t.is_float or t.bits not in (16, 32, 64):
            return None
        out = f"s32[{dims}]"
    params = [f" p{i} = {shape} parameter({i})" for i in range(n)]
    if op == "stochastic-convert":
        params[1] = f" p1 = u{t.bits}[{dims}] parameter(1)"
    if op == "select":
        params[0] = f" p0 = pred[{dims}] parameter(0)"
    args = ", ".join(f"p{i}" for i in range(n))
    text = "HloModule m\nENTRY e {\n" + "\n".join(params) + f"\n ROOT r = {out} {op}({args}){attrs}\n}}\n"
    return text, n


@pytest.mark.parametrize("op", ELEMENTWISE)
def test_elementwise_rank0_matches_rank1(op):
    """op on rank-0 operands == op on [1] operands reshaped, for every dtype the interpreter
    runs it on (at least one must run)."""
    ran = []
    for dt in DTYPES:
        built = _module(op, dt, "1"), _module(op, dt, "")
        if built[0] is None:
            continue
        (text1, n), (text0, _) = built
        npdt = ELEMENT_TYPES[dt].numpy
        for k, v in enumerate(_values(dt)):
            vals = [v] + _values(dt)[(k + 1) % 2:][: n - 1]
            vals += vals[-1:] * (n - len(vals))
            args1 = [np.array([val], dtype=npdt) for val in vals]
            if op == "select":
                args1[0] = np.array([k % 2 == 0])
            if op == "stochastic-convert":
                args1[1] = np.array([(k * 40503) % 65536], dtype=f"uint{ELEMENT_TYPES[dt].bits}")
            try:
                module1 = parse_hlo(text1)
                verify(module1)
                with np.errstate(all="ignore"):
                    want = evaluate(module1, args1)
            except HloError:
                break  # the op does not take this dtype (rank 1 is the reference)
            with np.errstate(all="ignore"):
                got = evaluate(parse_hlo(text0), [a.reshape(()) for a in args1])
            assert got[0].shape == () and got[0].dtype == want[0].dtype, (dt, vals)
            g, w = got[0].reshape(1), want[0]
            if g.dtype.kind == "c":
                assert same_bits(np.concatenate([g.real, g.imag]), np.concatenate([w.real, w.imag])), (dt, vals, g, w)
            elif g.dtype.kind == "f" or "float" in g.dtype.name:
                assert same_bits(g, w), (dt, vals, g, w)
            else:
                assert np.array_equal(g, w), (dt, vals, g, w)
            ran.append(dt)
    assert ran, f"{op}: no dtype ran"
