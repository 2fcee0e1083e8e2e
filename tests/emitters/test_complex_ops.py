"""Complex compare LT/LE/GT/GE, logistic, and the complex exp and divide logistic is built from,
on every backend (interpreter, cpu, gpu-emulated; fused and unfused) against XLA:CPU
(tests/support/xla_oracle.py) on edge values: NaN in either part, +-0, +-inf, ties, overflow.

What XLA computes (checked here, and over every pair of {NaN, -inf, -1, -0, +0, 1, inf}^2):
* compare LT/LE/GT/GE: `(re a == re b and im a op im b) or re a op re b`, ordered float
  compares. LT/GT are the lexicographic order (real part, then imaginary part); LE/GE reduce to
  the real parts alone (1+3j <= 1+2j is true). -0 == +0; a NaN in a compared part gives false.
* logistic: 1 / (1 + exp(-x)) with XLA's complex exp (a zero imaginary part stays zero) and
  divide (Smith's algorithm, then limits for zero and infinite operands), so exp(-x) overflowing
  gives 0, not NaN.
Finite results are compared with a tolerance: XLA contracts to FMA in places and flushes f32
subnormals to zero; NaNs and infinities must match exactly.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from xla_oracle import run_on_xla, xla_available

import hlofuse
from hlofuse.hlo.errors import VerifierError

pytestmark = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA CPU client is not usable here")

TYPES = {"c64": np.complex64, "c128": np.complex128}
BACKENDS = ["interpreter", "cpu", "gpu-emulated"]
# Relative tolerance per type; absolute tolerance below the smallest normal (XLA flushes
# subnormal results to zero, the backends need not).
TOL = {"c64": (2e-5, 1e-37), "c128": (1e-12, 1e-300)}


def complex_grid(reals, imags, dtype) -> np.ndarray:
    """Every (re, im) pair, built part by part so that -0 and NaN parts stay as given."""
    pairs = list(itertools.product(reals, imags))
    z = np.empty(len(pairs), dtype=dtype)
    z.real = [p[0] for p in pairs]
    z.imag = [p[1] for p in pairs]
    return z


EDGES = [np.nan, -np.inf, -1.0, -0.0, 0.0, 1.0, np.inf]


def all_pairs(dtype) -> tuple[np.ndarray, np.ndarray]:
    """a, b over every pair of edge complex values (ties in either part included)."""
    z = complex_grid(EDGES, EDGES, dtype)
    return np.repeat(z, len(z)), np.tile(z, len(z))


def run(text: str, args: list, backend: str, fusion: bool) -> list[np.ndarray]:
    return [np.asarray(o) for o in hlofuse.compile(hlofuse.parse_hlo(text), target=backend, fusion=fusion)(*args)]


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, args: list, msg: str) -> None:
    """NaN parts where XLA has them, the same infinities, finite parts within rtol of the larger
    modulus (a part that cancels to ~0 is measured against the whole value) plus atol."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, msg
    with np.errstate(all="ignore"):
        scale = np.maximum(np.abs(got.astype(np.complex128)), np.abs(want.astype(np.complex128)))
        bad = np.zeros(got.shape, bool)
        for g, w in ((got.real, want.real), (got.imag, want.imag)):
            g, w = g.astype(np.float64), w.astype(np.float64)
            finite = np.isfinite(g) & np.isfinite(w)
            near = np.abs(g - w) <= atol + rtol * np.where(np.isfinite(scale), scale, 0)
            same = (g == w) | (np.isnan(g) & np.isnan(w))
            bad |= ~np.where(finite, near, same)
    where = np.nonzero(bad)[0][:6]
    assert not bad.any(), f"{msg}: {int(bad.sum())} differ, e.g. " + "; ".join(
        f"{[a[j] for a in args]} -> {got[j]} (XLA {want[j]})" for j in where)


# ---- compare -----------------------------------------------------------------------------------

def compare_module(t: str, n: int, direction: str, ctype: str = "") -> str:
    """compare feeding a select: fused, both sit in one loop kernel; the pred is an output too."""
    extra = f", type={ctype}" if ctype else ""
    return (f"HloModule cmp\n\nENTRY e {{\n  a = {t}[{n}] parameter(0)\n  b = {t}[{n}] parameter(1)\n"
            f"  c = pred[{n}] compare(a, b), direction={direction}{extra}\n"
            f"  s = {t}[{n}] select(c, a, b)\n  ROOT r = (pred[{n}], {t}[{n}]) tuple(c, s)\n}}\n")


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("direction", ["LT", "LE", "GT", "GE", "EQ", "NE"])
@pytest.mark.parametrize("t", list(TYPES))
def test_complex_compare_matches_xla_on_every_edge_pair(t, direction, backend, fusion):
    a, b = all_pairs(TYPES[t])
    text = compare_module(t, len(a), direction)
    want = run_on_xla(text, [a, b])
    got = run(text, [a, b], backend, fusion)
    wrong = np.nonzero(got[0] != want[0])[0][:8]
    assert not len(wrong), f"{t} {direction} on {backend}: " + "; ".join(
        f"{a[j]} vs {b[j]}: {got[0][j]} (XLA {want[0][j]})" for j in wrong)
    assert got[1].tobytes() == want[1].tobytes()


@pytest.mark.parametrize("t", list(TYPES))
def test_complex_le_ge_ignore_the_imaginary_part_as_xla_does(t):
    """The class's surprise kept visible: XLA's LE/GE on complex look at the real parts only,
    while LT/GT break real ties by the imaginary parts (each value from XLA itself)."""
    a = np.array([1 + 3j, 1 + 1j, complex(1, np.nan), complex(-0.0, 5), 2 + 0j], TYPES[t])
    b = np.array([1 + 2j, 1 + 2j, 1 + 0j, complex(0.0, 1), 1 + 9j], TYPES[t])
    for direction, reals_only in (("LE", np.less_equal), ("GE", np.greater_equal)):
        want = run_on_xla(compare_module(t, len(a), direction), [a, b])[0]
        np.testing.assert_array_equal(want, reals_only(a.real, b.real))  # the rule the emitters use
        for backend in BACKENDS:
            np.testing.assert_array_equal(run(compare_module(t, len(a), direction), [a, b], backend, True)[0], want)
    lex = run_on_xla(compare_module(t, len(a), "LT"), [a, b])[0]
    np.testing.assert_array_equal(lex, [False, True, False, False, False])


@pytest.mark.parametrize("t", list(TYPES))
def test_complex_compare_type_float_is_the_default_and_totalorder_is_refused(t):
    """XLA's verifier takes comparison type FLOAT (only) for complex: an explicit type=FLOAT
    gives what the default gives; TOTALORDER is refused by hlofuse's verifier as by XLA's."""
    a, b = all_pairs(TYPES[t])
    want = run_on_xla(compare_module(t, len(a), "LT"), [a, b])[0]
    for backend in BACKENDS:
        np.testing.assert_array_equal(run(compare_module(t, len(a), "LT", "FLOAT"), [a, b], backend, True)[0], want)
    with pytest.raises(Exception, match="Expected comparison type FLOAT"):
        run_on_xla(compare_module(t, 2, "LT", "TOTALORDER"), [a[:2], b[:2]])
    with pytest.raises(VerifierError, match="TOTALORDER|comparison type"):
        hlofuse.compile(hlofuse.parse_hlo(compare_module(t, 2, "LT", "TOTALORDER")), target="interpreter")


SORT = """HloModule s

cmp {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction={d}
}}

ENTRY e {{
  x = {t}[{n}] parameter(0)
  k = s32[{n}] parameter(1)
  s = ({t}[{n}], s32[{n}]) sort(x, k), dimensions={{0}}, is_stable=true, to_apply=cmp
  ROOT g = s32[{n}] get-tuple-element(s), index=1
}}
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("direction", ["LT", "GT"])
@pytest.mark.parametrize("t", list(TYPES))
def test_sort_with_a_complex_comparator(t, direction, backend):
    """A stable sort by complex LT (GT) is numpy's stable lexicographic sort by (re, im)
    (descending for GT; -0 ties +0). XLA:CPU's sort emitter refuses complex LT ('UNIMPLEMENTED:
    complex comparison'), so the reference is numpy; keys without NaN, which no strict weak
    order admits."""
    rng = np.random.default_rng(7)
    n = 97
    re = rng.choice([-np.inf, -2.0, -0.0, 0.0, 1.0, 1.5, np.inf], n)
    im = rng.choice([-np.inf, -1.0, -0.0, 0.0, 3.0, np.inf], n)
    x = np.empty(n, TYPES[t])
    x.real, x.imag = re, im
    want = np.lexsort((im, re)) if direction == "LT" else np.lexsort((-im, -re))
    got = run(SORT.format(t=t, d=direction, n=n), [x, np.arange(n, dtype=np.int32)], backend, True)[0]
    np.testing.assert_array_equal(got, want)


# ---- logistic, and the exp and divide it is made of --------------------------------------------

LOGISTIC_REALS = [np.nan, -np.inf, -1e4, -1000.0, -100.0, -89.0, -88.0, -50.0, -20.0, -1.0, -0.0, 0.0,
                  1e-30, 0.5, 1.0, 20.0, 88.0, 89.0, 100.0, 710.0, 1000.0, np.inf]
# Away from the poles of logistic (im = odd multiples of pi at re = 0), where f32 rounding of
# the argument alone moves the result arbitrarily far.
LOGISTIC_IMAGS = [np.nan, -np.inf, -1e30, -1000.0, -3.0, -1.0, -0.0, 0.0, 1e-20, 1.0, 2.0, 3.0, 1000.0, 1e30, np.inf]


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("t", list(TYPES))
def test_complex_logistic_matches_xla(t, backend, fusion):
    x = complex_grid(LOGISTIC_REALS, LOGISTIC_IMAGS, TYPES[t])
    n = len(x)
    # negate(logistic(x)) is exact on every value, and fused it puts logistic inside a kernel.
    text = (f"HloModule lg\n\nENTRY e {{\n  x = {t}[{n}] parameter(0)\n  l = {t}[{n}] logistic(x)\n"
            f"  ROOT r = {t}[{n}] negate(l)\n}}\n")
    want = run_on_xla(text, [x])[0]
    assert np.isnan(want.real).any() and (np.abs(want[np.isfinite(want)]) < 1e-30).any()  # the edges are hit
    assert_close(run(text, [x], backend, fusion)[0], want, *TOL[t], [x], f"logistic {t} on {backend}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("t", list(TYPES))
def test_complex_divide_matches_xla_at_zeros_and_infinities(t, backend):
    """XLA's limits where Smith's algorithm gives NaN + NaN i: x/0, inf/finite, finite/inf."""
    z = complex_grid(*[[np.nan, -np.inf, -3.0, -1.0, -0.0, 0.0, 1.0, 2.0, np.inf, 1e15, -1e18, 1e-15]] * 2, TYPES[t])
    a, b = np.repeat(z, len(z)), np.tile(z, len(z))
    n = len(a)
    text = f"HloModule d\n\nENTRY e {{\n  a = {t}[{n}] parameter(0)\n  b = {t}[{n}] parameter(1)\n  ROOT r = {t}[{n}] divide(a, b)\n}}\n"
    want = run_on_xla(text, [a, b])[0]
    assert_close(run(text, [a, b], backend, True)[0], want, *TOL[t], [a, b], f"divide {t} on {backend}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("t", list(TYPES))
def test_complex_exp_matches_xla_at_the_edges(t, backend):
    """exp keeps a zero imaginary part (exp(inf + 0i) = inf + 0i); no C99 special cases."""
    x = complex_grid(*[[np.nan, -np.inf, -1000.0, -1.0, -0.0, 0.0, 1.0, np.pi, 1000.0, np.inf]] * 2, TYPES[t])
    n = len(x)
    text = f"HloModule x\n\nENTRY e {{\n  a = {t}[{n}] parameter(0)\n  ROOT r = {t}[{n}] exponential(a)\n}}\n"
    want = run_on_xla(text, [x])[0]
    assert_close(run(text, [x], backend, True)[0], want, *TOL[t], [x], f"exp {t} on {backend}")
