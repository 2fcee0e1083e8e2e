"""Regressions from tests/fuzz in elementwise arithmetic, each over its class: arithmetic, logic
and reductions on pred (add is or, not the xor an i1 add gives) and integer power (XLA's
square-and-multiply over the exponent's low 6 bits; negative exponents). reduce-precision is in
test_reduce_precision.py.

Every case runs on the CPU and the emulated GPU, fused and unfused, and is compared with the
numpy interpreter and, when jaxlib's XLA CPU client is usable, with XLA itself
(tests/backend_oracle.py). XLA refuses subtract/divide/remainder/power on pred (StableHLO has
no i1 arithmetic but add/multiply); hlofuse accepts them, so there the interpreter's
definition is the reference.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from backend_oracle import COMPILED, check_everywhere, check_everywhere_on, needs_xla, run
from xla_oracle import run_on_xla

# ---- pred -------------------------------------------------------------------------------------
# a, b over all four combinations, five times (20 elements: vector bodies and scalar tails).
PA = np.array([0, 0, 1, 1] * 5, bool)
PB = np.array([0, 1, 0, 1] * 5, bool)
PRED_BINARY = ["add", "multiply", "maximum", "minimum", "and", "or", "xor"]  # what XLA accepts on pred


def _pred_module(body: list[str], n: int = PA.size, params: int = 2) -> str:
    """A module of pred[n] parameters p0.., the instructions `body` and a tuple of all of them."""
    lines = [f"  p{i} = pred[{n}] parameter({i})" for i in range(params)] + [f"  {x}" for x in body]
    roots = [x.split("=")[0].strip() for x in body]
    shapes = [x.split("=")[1].split()[0] for x in body]
    lines.append(f"  ROOT t = ({', '.join(shapes)}) tuple({', '.join(roots)})")
    return "HloModule m\nENTRY e {\n" + "\n".join(lines) + "\n}\n"


@pytest.mark.parametrize("op", PRED_BINARY)
def test_pred_binary(op):
    """The reported case (add gave xor on cpu and gpu-emulated) and its class, alone and fused
    with the ops around it (not, convert, select on the result)."""
    text = _pred_module([f"r = pred[20] {op}(p0, p1)", "n = pred[20] not(r)", "c = s32[20] convert(r)",
                         "s = pred[20] select(r, p1, p0)", f"q = pred[20] {op}(n, p0)"])
    check_everywhere(text, [PA, PB])
    want = {"add": PA | PB, "multiply": PA & PB, "maximum": PA | PB, "minimum": PA & PB, "and": PA & PB,
            "or": PA | PB, "xor": PA ^ PB}[op]
    np.testing.assert_array_equal(run(text, [PA, PB], "cpu")[0], want)  # the truth table itself


def test_pred_add_reported_case():
    text = ("HloModule m\nENTRY e {\n  a = pred[4] parameter(0)\n  b = pred[4] parameter(1)\n"
            "  ROOT r = pred[4] add(a, b)\n}\n")
    a, b = np.array([0, 0, 1, 1], bool), np.array([0, 1, 0, 1], bool)
    for backend, fusion in COMPILED:
        np.testing.assert_array_equal(run(text, [a, b], backend, fusion)[0], [False, True, True, True])
    check_everywhere(text, [a, b])


def test_pred_unary_compare_select_clamp_convert():
    body = ["n = pred[20] not(p0)", "k = pred[20] copy(p1)"]
    body += [f"c{d} = pred[20] compare(p0, p1), direction={d}" for d in ("EQ", "NE", "LT", "LE", "GT", "GE")]
    body += ["s = pred[20] select(p0, p1, n)", "l = pred[20] clamp(p0, p1, n)"]
    for i, ty in enumerate(["s32", "u8", "s8", "u64", "f32", "f16", "bf16", "f64", "s4", "f8e4m3fn"]):
        body += [f"to{i} = {ty}[20] convert(p0)", f"back{i} = pred[20] convert(to{i})"]
    check_everywhere(_pred_module(body), [PA, PB])


@needs_xla
@pytest.mark.parametrize("op", ["subtract", "divide", "remainder", "power"])
def test_xla_refuses_pred_arithmetic(op):
    """XLA (through StableHLO, as JAX compiles) refuses these on pred, so they have no XLA
    reference; test_pred_arithmetic_xla_refuses pins hlofuse's own definition."""
    text = _pred_module([f"r = pred[20] {op}(p0, p1)"])
    with pytest.raises(Exception, match="operand #0 must be"):
        run_on_xla(text, [PA, PB])


@pytest.mark.parametrize("op", ["subtract", "divide", "remainder", "power"])
def test_pred_arithmetic_is_refused_like_xla(op):
    """Our verifier refuses what XLA refuses on pred, naming the instruction and the type rule."""
    from hlofuse.hlo.errors import VerifierError
    from hlofuse.hlo.parser import parse_hlo
    from hlofuse.hlo.verifier import verify

    with pytest.raises(VerifierError, match=rf"{op} expects a numeric type"):
        verify(parse_hlo(_pred_module([f"r = pred[20] {op}(p0, p1)"])))


def test_f32_to_bf16_nan_is_canonical_like_xla():
    """A NaN converted to bf16 becomes 0x7fc0 / 0xffc0 (sign kept, payload dropped), as XLA:CPU
    converts, on every backend; ordinary values round to nearest even."""
    bits = np.array([0x7F810000, 0xFF930000, 0x7FC00001, 0xFFFFFFFF, 0x7F800001, 0x3F808000, 0x3F818000],
                    np.uint32)
    text = "HloModule m\nENTRY e {\n  p = f32[7] parameter(0)\n  ROOT c = bf16[7] convert(p)\n}\n"
    want = run_on_xla(text, [bits.view(np.float32)])[0].view(np.uint16)
    assert [hex(v) for v in want[:5]] == ["0x7fc0", "0xffc0", "0x7fc0", "0xffc0", "0x7fc0"]
    for target in ("interpreter", "cpu", "gpu-emulated"):
        got = run(text, [bits.view(np.float32)], target)[0].view(np.uint16)
        np.testing.assert_array_equal(got, want, err_msg=target)


REDUCERS = [("add", "false"), ("or", "false"), ("maximum", "false"), ("xor", "false"),
            ("and", "true"), ("minimum", "true"), ("multiply", "true")]


@pytest.mark.parametrize("op, init", REDUCERS)
@pytest.mark.parametrize("dims, rdims", [((8, 33), (1,)), ((8, 33), (0,)), ((1000,), (0,)), ((4, 5, 6), (0, 2)),
                                         ((3, 2048), (1,))])
def test_pred_reductions(op, init, dims, rdims):
    """Reductions with a pred accumulator (row, column, full, several dims, long rows), over a
    fused not() of the input, mostly-false, mixed and mostly-true inputs."""
    out = [d for i, d in enumerate(dims) if i not in rdims]

    def sh(ds):
        return f"pred[{','.join(map(str, ds))}]"

    text = f"""HloModule m
red {{
  x = pred[] parameter(0)
  y = pred[] parameter(1)
  ROOT s = pred[] {op}(x, y)
}}
ENTRY e {{
  a = {sh(dims)} parameter(0)
  n = {sh(dims)} not(a)
  c = pred[] constant({init})
  ROOT r = {sh(out)} reduce(n, c), dimensions={{{','.join(map(str, rdims))}}}, to_apply=red
}}
"""
    rng = np.random.default_rng(sum(dims) + len(op))
    check_everywhere_on(text, [[rng.random(dims) < p] for p in (0.02, 0.5, 0.98)])


# ---- integer power ----------------------------------------------------------------------------
INTS = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64, "u8": np.uint8, "u16": np.uint16,
        "u32": np.uint32, "u64": np.uint64, "s4": ml_dtypes.int4, "u4": ml_dtypes.uint4}


def edge_ints(dtype) -> list[int]:
    """Bases and exponents at the edges: 0, +-1, small, around the 6-bit window (63..65, 127..129),
    powers of two and the type's limits."""
    info = ml_dtypes.iinfo(dtype)
    vals = {0, 1, 2, 3, 5, 7, -1, -2, -3, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 32767, 65535,
            65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32 + 1, 2**63 - 1, info.max, info.min, info.max - 1, info.min + 1}
    return sorted(v for v in vals if info.min <= v <= info.max)


@pytest.mark.parametrize("ty", list(INTS))
def test_integer_power_edges(ty):
    """Every pair of edge base and edge exponent: exponents >= 64 use their low 6 bits, negative
    ones (as signed values, also in unsigned types) give 1, +-1 or 0; products wrap."""
    ev = edge_ints(INTS[ty])
    base = np.array([b for b in ev for _ in ev], INTS[ty])
    expo = np.array([e for _ in ev for e in ev], INTS[ty])
    n = base.size
    text = (f"HloModule m\nENTRY e {{\n  a = {ty}[{n}] parameter(0)\n  b = {ty}[{n}] parameter(1)\n"
            f"  p = {ty}[{n}] power(a, b)\n  q = {ty}[{n}] power(p, b)\n  ROOT t = ({ty}[{n}], {ty}[{n}]) tuple(p, q)\n}}\n")
    check_everywhere(text, [base, expo])


def test_integer_power_reported_case():
    text = ("HloModule m\nENTRY e {\n  a = s32[3] parameter(0)\n  b = s32[3] parameter(1)\n"
            "  ROOT r = s32[3] power(a, b)\n}\n")
    args = [np.array([3, 0, 2], np.int32), np.array([2147483647, 64, 65], np.int32)]
    # 3**(2**31-1) wraps mod 2**32 like 3**63 does (low 6 bits of the exponent); 0**64 = 0**0; 2**65 = 2**1.
    want = np.array([(pow(3, 63, 2**32) + 2**31) % 2**32 - 2**31, 1, 2], np.int32)
    for backend, fusion in COMPILED:
        np.testing.assert_array_equal(run(text, args, backend, fusion)[0], want)
    check_everywhere(text, args)


@pytest.mark.parametrize("ty", ["s8", "s32", "u16", "u64"])
def test_integer_power_random(ty):
    """Random bases and exponents over the whole type (most exponents are huge or negative)."""
    rng = np.random.default_rng(7)
    info = np.iinfo(INTS[ty])
    base = rng.integers(info.min, info.max, 512, dtype=INTS[ty], endpoint=True)
    base[::4] = rng.integers(-3, 4, base[::4].size).astype(INTS[ty])  # small bases stay interesting
    expo = rng.integers(info.min, info.max, 512, dtype=INTS[ty], endpoint=True)
    expo[::3] = rng.integers(0, 130, expo[::3].size).astype(INTS[ty])
    text = (f"HloModule m\nENTRY e {{\n  a = {ty}[512] parameter(0)\n  b = {ty}[512] parameter(1)\n"
            f"  ROOT r = {ty}[512] power(a, b)\n}}\n")
    check_everywhere(text, [base, expo])
