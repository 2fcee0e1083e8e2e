"""Numerical edge cases against XLA:CPU: every elementwise opcode of the registry, on every
element type it accepts, applied to edge inputs (NaN, ±inf, ±0, denormals, extremes, integer
overflow, float->int conversion of out-of-range values), run on hlofuse's interpreter and CPU
backend and on XLA:CPU (tests/xla_oracle.py), compared element by element.

Exact ops must match bit for bit (NaN matches any NaN, and the sign of zero counts);
transcendental ops within a few ulps of the result type. XLA:CPU flushes denormals (FTZ/DAZ):
an element that differs only because of that is counted as DENORMAL, apart from mismatches.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from . import outcomes as oc
from .values import edges_for, flush_denormals, is_subnormal, random_array

DTYPES = ["pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64"]
# Opcodes the edge fuzzer leaves out: they take computations, random bits, or complex parts.
SKIP_OPCODES = {"map", "stochastic-convert", "complex", "real", "imag"}
ULPS_DEFAULT = 4
ULPS = {"tan": 8, "erf": 8, "power": 8, "atan2": 4}
COMPARE_TYPES = {"f": ["FLOAT", "TOTALORDER"], "s": ["SIGNED"], "u": ["UNSIGNED"], "p": ["UNSIGNED"]}
N_RANDOM = 64


@dataclass
class EdgeCase:
    """One module: its text, its inputs, and per output a label and an ulp tolerance (0: exact)."""

    label: str
    text: str
    args: list[np.ndarray]
    outputs: list[tuple[str, float]] = field(default_factory=list)


def _np(t: str):
    from hlofuse.hlo.dtypes import element_type

    return element_type(t).numpy


def _kind(t: str) -> str:
    return "p" if t == "pred" else ("f" if t[0] in "fb" else t[0])


def _module(params: list[str], shape: str, ops: list[tuple[str, str, list[int], str]]) -> str:
    lines = [f"  p{i} = {t}[{shape}] parameter({i})" for i, t in enumerate(params)]
    for k, (opcode, rtype, operands, extra) in enumerate(ops):
        lines.append(f"  r{k} = {rtype}[{shape}] {opcode}({', '.join(f'p{i}' for i in operands)}){extra}")
    if len(ops) == 1:
        lines[-1] = "  ROOT" + lines[-1][1:]
    else:
        outs = ", ".join(f"{o[1]}[{shape}]" for o in ops)
        lines.append(f"  ROOT t = ({outs}) tuple({', '.join(f'r{k}' for k in range(len(ops)))})")
    return "HloModule edge\n\nENTRY main {\n" + "\n".join(lines) + "\n}\n"


def _verifies(text: str) -> bool:
    from hlofuse import HloError, parse_hlo
    from hlofuse.hlo.verifier import verify

    try:
        verify(parse_hlo(text))
        return True
    except HloError:
        return False


def _unary_input(t: str, rng) -> np.ndarray:
    dt = _np(t)
    e = edges_for(dt)
    return np.concatenate([e, random_array(dt, (N_RANDOM,), rng, 0.0)]).astype(dt)


def _product_inputs(t: str, arity: int, rng) -> list[np.ndarray]:
    dt = _np(t)
    e = edges_for(dt)
    if arity == 2:
        a, b = zip(*itertools.product(range(len(e)), repeat=2))
        return [e[list(a)], e[list(b)]]
    n = 512
    return [e[rng.integers(0, len(e), n)] for _ in range(arity)]


def _tolerance(opcode: str, t: str) -> float:
    from hlofuse.hlo.opcodes import op_info

    if not op_info(opcode).math:
        return 0.0
    # XLA's f64 approximations (log1p, ...) are not correctly rounded: tens of ulps of an f64.
    return float(ULPS.get(opcode, ULPS_DEFAULT)) * (16 if t == "f64" else 1)


def edge_cases(opcodes: list[str] | None = None, dtypes: list[str] | None = None, seed: int = 0) -> tuple[list[EdgeCase], int]:
    """(cases, number of opcode/type pairs hlofuse's verifier rejects) for the elementwise opcodes
    of the registry (or `opcodes`) over `dtypes`."""
    from hlofuse.hlo.opcodes import OPS

    rng = np.random.default_rng(seed)
    names = opcodes or [o for o, i in OPS.items() if i.elementwise and o not in SKIP_OPCODES]
    cases: list[EdgeCase] = []
    rejected = 0
    for opcode in names:
        info = OPS[opcode]
        for t in dtypes or DTYPES:
            built = _build(opcode, info, t, rng)
            if built is None:
                rejected += 1
                continue
            cases.append(built)
    return cases, rejected


def _build(opcode: str, info, t: str, rng) -> EdgeCase | None:
    kind = _kind(t)
    if opcode == "convert":
        ops = [("convert", d, [0], "") for d in DTYPES if d != t]
        text = _module([t], "{n}", ops)
        args = [_unary_input(t, rng)]
        outs = [(f"convert {t}->{d}", 0.0) for d in DTYPES if d != t]
    elif opcode == "bitcast-convert":
        width = np.dtype(_np(t)).itemsize
        targets = [d for d in DTYPES if d != t and np.dtype(_np(d)).itemsize == width and d != "pred"]
        if not targets or t == "pred":
            return None
        ops = [("bitcast-convert", d, [0], "") for d in targets]
        text, args = _module([t], "{n}", ops), [_unary_input(t, rng)]
        outs = [(f"bitcast-convert {t}->{d}", 0.0) for d in targets]
    elif opcode == "reduce-precision":
        if kind != "f":
            return None
        ops = [("reduce-precision", t, [0], f", exponent_bits={e}, mantissa_bits={m}") for e, m in ((5, 10), (8, 7), (4, 3))]
        text, args = _module([t], "{n}", ops), [_unary_input(t, rng)]
        outs = [(f"reduce-precision {t} e{e}m{m}", 0.0) for e, m in ((5, 10), (8, 7), (4, 3))]
    elif opcode == "compare":
        dirs = [(d, ty) for ty in COMPARE_TYPES[kind] for d in ("EQ", "NE", "LT", "LE", "GT", "GE")]
        ops = [("compare", "pred", [0, 1], f", direction={d}, type={ty}") for d, ty in dirs]
        text, args = _module([t, t], "{n}", ops), _product_inputs(t, 2, rng)
        outs = [(f"compare {t} {d} {ty}", 0.0) for d, ty in dirs]
    elif opcode == "select":
        a = _product_inputs(t, 2, rng)
        pred = rng.integers(0, 2, a[0].shape).astype(bool)
        text, args = _module(["pred", t, t], "{n}", [("select", t, [0, 1, 2], "")]), [pred] + a
        outs = [(f"select {t}", 0.0)]
    elif info.arity in (1, 2, 3):
        rtype = "pred" if opcode == "is-finite" else t
        operands = list(range(info.arity))
        text = _module([t] * info.arity, "{n}", [(opcode, rtype, operands, "")])
        args = [_unary_input(t, rng)] if info.arity == 1 else _product_inputs(t, info.arity, rng)
        outs = [(f"{opcode} {t}", _tolerance(opcode, t))]
    else:
        return None
    text = text.replace("{n}", str(len(args[0])))
    if not _verifies(text):
        return None
    return EdgeCase(f"{opcode} {t}", text, [np.ascontiguousarray(a) for a in args], outs)


# ---- worker side ---------------------------------------------------------------------------
def _float_info(dtype):
    try:
        return ml_dtypes.finfo(dtype) if np.dtype(dtype).kind not in "biu" else None
    except (ValueError, TypeError):
        return None


def elementwise_bad(got: np.ndarray, want: np.ndarray, ulps: float) -> np.ndarray:
    """Elements of `got` that differ from `want`: bit-exact for integers; for floats NaN must
    meet NaN, zeros must agree in sign, and values must be equal or (ulps > 0) within `ulps`
    units of the result type (results below the normal range count as equal to zero then)."""
    got, want = np.asarray(got), np.asarray(want)
    fi = _float_info(want.dtype)
    if fi is None:
        return got != want
    g, w = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(g) & np.isnan(w)
    exact = ((g == w) & (np.signbit(g) == np.signbit(w))) | both_nan
    if not ulps:
        return ~exact
    spacing = float(fi.eps) * np.maximum(np.abs(w), float(fi.tiny))
    with np.errstate(invalid="ignore"):
        close = (np.abs(g - w) <= ulps * spacing) & np.isfinite(g) & np.isfinite(w)
    close |= (np.abs(g) < float(fi.tiny)) & (np.abs(w) < float(fi.tiny))
    return ~(exact | close)


def run_edge(text: str, args: list[np.ndarray], outputs: list[tuple[str, float]], backends: tuple[str, ...]) -> list[dict[str, Any]]:
    """One result per (backend, output): the backend's result against XLA:CPU's."""
    import hlofuse

    import xla_oracle  # tests/support is on the worker's path

    try:
        want = xla_oracle.run_on_xla(text, args)
    except Exception as e:  # noqa: BLE001 - XLA refusing a module means: no oracle for this op/type
        return [{"outcome": oc.SKIPPED, "stage": "xla", "signature": f"XLA refuses {outputs[0][0]}",
                 "message": str(e).splitlines()[0][:200] if str(e) else type(e).__name__}]
    results = []
    module = hlofuse.parse_hlo(text)
    for backend in backends:
        try:
            exe = hlofuse.compile(module, target=backend)
            got = exe(*args)
            flushed = exe(*flush_denormals(args))
        except Exception as e:  # noqa: BLE001
            from .cases import _error_result

            r = _error_result(e, backend)
            r["signature"] = f"edge {backend} {outputs[0][0]}: {r['signature']}"
            results.append(r)
            continue
        for (label, ulps), g, w, f in zip(outputs, got, want, flushed):
            results.append(_edge_result(backend, label, ulps, args, g, w, f))
    return results


def precise_values(label: str, args: list[np.ndarray]) -> np.ndarray | None:
    """The math function of edge case `label` ("opcode type"), the interpreter's numpy function
    for it, applied in a wider type to `args` (x87 long double for f64, f64 for f32 and
    narrower), or for a convert of floats the input itself: where a backend and XLA:CPU
    disagree, it says which is off. None: not a math function, or no wider type on this host
    (long double as wide as double)."""
    from hlofuse.runtime.interpreter.elementwise import float_math_function

    opcode = label.split(" ")[0]
    if opcode == "convert":
        # a conversion between floats: the input itself is the exact value, which numpy rounds
        # once to the result type (XLA:CPU converts f64 to f16 through f32, rounding twice: seed
        # 89, -2.5263670860825496 is 1e-7 below an f16 midpoint, which its f32 rounds onto); to
        # an integer numpy's cast is no reference (NaN and out-of-range values are undefined)
        from hlofuse.hlo.dtypes import element_type

        to_float = element_type(label.rsplit("->", 1)[-1]).is_float
        return args[0] if to_float and args and _float_info(args[0].dtype) is not None else None
    fn = float_math_function(opcode)
    if fn is None or not args or _float_info(args[0].dtype) is None:
        return None
    wide = np.longdouble if args[0].dtype == np.float64 else np.float64
    if wide is np.longdouble and np.finfo(np.longdouble).nmant <= 52:
        return None
    with np.errstate(all="ignore"):
        return fn(*(a.astype(wide) for a in args))


def _xla_less_accurate(bad: np.ndarray, g: np.ndarray, w: np.ndarray, precise: np.ndarray, ulps: float) -> np.ndarray:
    """Elements of `bad` where the backend's `g` is within `ulps` of the wider computation
    `precise` (rounded to the result's type: a correctly rounded answer; 0: exactly it) and
    XLA's `w` is not."""
    with np.errstate(all="ignore"):
        rounded = precise.astype(w.dtype)
    return bad & ~elementwise_bad(g, rounded, ulps) & elementwise_bad(w, rounded, ulps)


def _edge_result(backend, label, ulps, args, g, w, f) -> dict[str, Any]:
    sig = f"edge {backend} vs XLA: {label}"
    if g.dtype != w.dtype or g.shape != w.shape:
        return {"outcome": oc.MISMATCH, "stage": "compare", "signature": sig,
                "message": f"{g.dtype}{list(g.shape)} vs XLA {w.dtype}{list(w.shape)}"}
    bad = elementwise_bad(g, w, ulps)
    if not bad.any():
        return {"outcome": oc.OK, "stage": "compare", "signature": "", "message": ""}
    # Differences explained by FTZ/DAZ: right once denormal inputs and outputs are flushed, or a
    # denormal input where XLA's result is not itself a denormal (XLA read it as zero somewhere
    # inside its own approximation), or a denormal result where XLA has zero.
    any_sub_in = np.zeros(bad.shape, bool)
    for a in args:
        any_sub_in |= is_subnormal(a)
    zero_w = w.astype(np.float64) == 0 if _float_info(w.dtype) is not None else np.zeros(bad.shape, bool)
    ftz = (any_sub_in & ~is_subnormal(w)) | (is_subnormal(g) & zero_w)
    still = bad & elementwise_bad(flush_denormals(f), w, ulps) & ~ftz
    precise = precise_values(label, args) if still.any() else None
    if precise is not None and precise.shape == g.shape:
        # a convert is rounded once, exactly; a math function within its bound (at least 1 ULP)
        exact = label.split(" ")[0] == "convert"
        xla_off = _xla_less_accurate(still, g, w, precise, 0 if exact else (ulps or 1))
        if xla_off.any() and not (still & ~xla_off).any():
            i = int(np.argmax(xla_off))
            ins = ", ".join(repr(a[i].item()) for a in args)
            return {"outcome": oc.XLA_LESS_ACCURATE, "stage": "compare", "signature": sig,
                    "message": f"{int(xla_off.sum())} of {bad.size}; e.g. ({ins}) -> {g[i].item()!r}, "
                               f"wider {float(precise[i])!r}, XLA {w[i].item()!r}"}
    n_bad, n_real = int(bad.sum()), int(still.sum())
    pick = still if n_real else bad
    i = int(np.argmax(pick))
    ins = ", ".join(repr(a[i].item()) for a in args)
    msg = (f"{n_real} differ (+{n_bad - n_real} denormal-only) of {bad.size}; e.g. ({ins}) -> "
           f"{g[i].item()!r} vs XLA {w[i].item()!r}")
    return {"outcome": oc.MISMATCH if n_real else oc.DENORMAL, "stage": "compare", "signature": sig,
            "message": msg, "denormal_elements": n_bad - n_real, "bad_index": i}
