"""A reduction split into slices (codegen/planning.py: few work units over many elements, a
partial kernel per slice and a combine kernel) starts every slice from the reduce's init value,
which agrees with the interpreter (the oracle) and XLA:CPU only where repeating the init
changes nothing (reduction_groups.slices_keep_init): a max, min, and or or, or a sum or product
whose init is its identity. Any other init keeps the reduce unsplit, so it joins once as in the
interpreter and XLA:CPU (a sum over zeros with init 5 gave 80: 16 slices). XLA's contract leaves
a non-identity init undefined (jax.lax.reduce: init and computation must form a monoid); the
interpreter takes it once, and so does the compiled code now. An init that is a constant outside the fusion (an unfused reduce of a
parameter) is seen through the caller's operand."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from backend_cases import plain_reduce_module


def _module(dims: tuple[int, ...], rdims: tuple[int, ...], op: str, init: str) -> str:
    return plain_reduce_module(dims, rdims, op, init)


SHAPES = [((1 << 20,), (0,)), ((4096, 64), (0,)), ((64, 32, 32, 16), (0, 1, 2))]


@pytest.mark.parametrize("dims, rdims", SHAPES)
@pytest.mark.parametrize("op, init, split", [
    ("add", "5", False), ("add", "0", True), ("multiply", "2", False), ("multiply", "1", True),
    ("maximum", "5", True), ("minimum", "-5", True),
])
def test_split_only_where_the_init_may_repeat(dims, rdims, op, init, split):
    rng = np.random.default_rng(len(dims))
    x = rng.uniform(0.999, 1.001, dims).astype(np.float32) if op == "multiply" else \
        rng.standard_normal(dims).astype(np.float32)
    text = _module(dims, rdims, op, init)
    exe = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)
    parts = max(k.parts for k in exe.program._planner.kernels)
    assert (parts > 1) == split, [(k.name, k.parts) for k in exe.program._planner.kernels]
    (got,) = exe(x)
    (want,) = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=1e-3)


def test_sum_with_init_over_zeros_is_the_init():
    """The case that found it: the init once, exactly."""
    for dims, rdims in SHAPES:
        exe = hlofuse.compile(hlofuse.parse_hlo(_module(dims, rdims, "add", "5")), "cpu", cache=False)
        (got,) = exe(np.zeros(dims, np.float32))
        assert (np.asarray(got) == 5).all(), dims
