"""Row reductions over several reduced loops fold each run of the innermost loop into
accumulators of their own (codegen/kernels/innermost_runs.py): a sum of more ones than an f32
counts exactly (2^24) comes out exact, as in the interpreter and XLA:CPU (it was 0.46% low on
XLA's constant folding test module), a non-zero init is counted once, and random sums stay as
close to the f64 sum as the interpreter's."""
from __future__ import annotations

import numpy as np

import hlofuse
from hlofuse.hlo.parser import parse_hlo


def _sum(dims: str, reduced: str, init: str = "0", source: str = "broadcast") -> str:
    body = ("  c = f32[] constant(1)\n  x = f32[" + dims + "] broadcast(c), dimensions={}\n" if source == "broadcast"
            else "  x = f32[" + dims + "] parameter(0)\n")
    return ("HloModule s\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
            "ENTRY e {\n" + body + f"  z = f32[] constant({init})\n"
            f"  ROOT r = reduce(x, z), dimensions={{{reduced}}}, to_apply=add\n}}\n")


def test_a_sum_of_more_ones_than_f32_counts_is_exact():
    text = _sum("20000,40,512", "0,1,2")
    got = float(np.asarray(hlofuse.compile(parse_hlo(text), target="cpu", cache=False)()[0]))
    assert got == 20000 * 40 * 512  # (the interpreter gives it too; not run here: 1.6 GB of ones)


def test_a_nonzero_init_is_counted_once():
    """Each run starts from a zero only for sums from a constant zero: with another init the
    one accumulator is kept, and the init counted once."""
    text = _sum("6,40,64", "1,2", init="5", source="parameter")
    x = np.random.default_rng(0).standard_normal((6, 40, 64)).astype(np.float32)
    got = np.asarray(hlofuse.compile(parse_hlo(text), target="cpu", cache=False)(x)[0])
    np.testing.assert_allclose(got, 5 + x.astype(np.float64).sum(axis=(1, 2)), rtol=1e-5, atol=1e-4)


def test_random_sums_stay_close_to_the_f64_sum():
    text = _sum("8,300,1024", "1,2", source="parameter")
    x = (np.random.default_rng(1).standard_normal((8, 300, 1024)) + 3).astype(np.float32)
    got = np.asarray(hlofuse.compile(parse_hlo(text), target="cpu", cache=False)(x)[0], np.float64)
    exact = x.astype(np.float64).sum(axis=(1, 2))
    np.testing.assert_allclose(got, exact, rtol=1e-6)
