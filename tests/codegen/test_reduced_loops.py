"""Row reductions over several reduced loops fold each run of the innermost loop into
accumulators of their own (codegen/kernels/reduced_loops.py): a sum of more ones than an f32
counts exactly (2^24) comes out exact, as in the interpreter and XLA:CPU (it was 0.46% low on
XLA's constant folding test module), whatever the init value and wherever it comes from (a
runtime parameter), a non-zero init is counted once, and random sums stay as close to the f64
sum as the interpreter's."""
from __future__ import annotations

import numpy as np

import hlofuse
from hlofuse.hlo.parser import parse_hlo


def _sum(dims: str, reduced: str, init: str = "0", source: str = "broadcast") -> str:
    """A sum over `reduced` of ones (`source` broadcast) or of parameter 0; the init is the
    constant `init`, or with init "parameter" the module's last parameter."""
    body = ("  c = f32[] constant(1)\n  x = f32[" + dims + "] broadcast(c), dimensions={}\n" if source == "broadcast"
            else "  x = f32[" + dims + "] parameter(0)\n")
    z = (f"  z = f32[] parameter({0 if source == 'broadcast' else 1})\n" if init == "parameter"
         else f"  z = f32[] constant({init})\n")
    return ("HloModule s\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
            "ENTRY e {\n" + body + z +
            f"  ROOT r = reduce(x, z), dimensions={{{reduced}}}, to_apply=add\n}}\n")


def test_a_sum_of_more_ones_than_f32_counts_is_exact():
    text = _sum("20000,40,512", "0,1,2")
    got = float(np.asarray(hlofuse.compile(parse_hlo(text), target="cpu", cache=False)()[0]))
    assert got == 20000 * 40 * 512  # (the interpreter gives it too; not run here: 1.6 GB of ones)


def test_a_sum_from_a_runtime_init_is_exact_too():
    """The init is a parameter (as in a multi-output kernel, where the constant zero arrives as
    the fusion's operand): the runs still start from the identity, so the count stays exact past
    2^24 (the running total used to seed lane 0)."""
    text = _sum("4096,16,512", "0,1,2", init="parameter")
    got = float(np.asarray(hlofuse.compile(parse_hlo(text), target="cpu", cache=False)(np.float32(0))[0]))
    assert got == 4096 * 16 * 512


def test_a_nonzero_init_is_counted_once():
    """The running total starts from the init and each run from -0.0: the init is counted once."""
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
