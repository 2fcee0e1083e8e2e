"""ragged-dot on the compiled backends (passes/ragged_dot_expander.py: a dot over a one-hot
group dimension): the interpreter against a loop over the groups written here, the compiled
backends against the interpreter on the three kinds of ragged dimension, with batch
dimensions, empty groups, groups not covering the dimension, inf and NaN confined to their
group; per-batch group sizes refused by name. (jax.lax.ragged_dot does not reach this pass:
JAX lowers it to masks and dots on the CPU, and exports a composite whose decomposition the
StableHLO import uses for other platforms.)"""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.errors import UnsupportedError
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.interpreter import evaluate


def _module(lhs: str, rhs: str, sizes: str, out: str, attrs: str) -> str:
    return (f"HloModule m\nENTRY e {{\n  a = {lhs} parameter(0)\n  b = {rhs} parameter(1)\n  g = {sizes} parameter(2)\n"
            f"  ROOT r = {out} ragged-dot(a, b, g), {attrs}\n}}\n")


MOE = ("f32[10,4]", "f32[3,4,5]", "s32[3]", "f32[10,5]",
       "lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}")
CASES = {
    # mixture of experts: rows of group g times expert g (groups cover 9 of 10 rows)
    "non_contracting": (*MOE, [3, 0, 6]),
    # a batch dimension, the ragged dimension after it
    "non_contracting_batched": ("f32[2,7,4]", "f32[2,3,4,5]", "s64[3]", "f32[2,7,5]",
                                "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
                                "rhs_contracting_dims={2}, lhs_ragged_dims={1}, rhs_group_dims={1}", [2, 2, 3]),
    # groups of the contracting dimension, each its own slice of the result
    "contracting": ("f32[6,9]", "f32[9,4]", "s32[3]", "f32[3,6,4]",
                    "lhs_contracting_dims={1}, rhs_contracting_dims={0}, lhs_ragged_dims={1}", [4, 0, 5]),
    "contracting_batched": ("f64[2,6,9]", "f64[2,9,4]", "s32[2]", "f64[2,2,6,4]",
                            "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
                            "rhs_contracting_dims={1}, lhs_ragged_dims={2}", [3, 6]),
    # a ragged batch dimension: the plain dot
    "batch": ("f32[3,6,4]", "f32[3,4,5]", "s32[2]", "f32[3,6,5]",
              "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}, "
              "lhs_ragged_dims={0}", [1, 2]),
    "bf16_in_f32_out": ("bf16[8,4]", "bf16[2,4,3]", "s32[2]", "f32[8,3]",
                        "lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}",
                        [5, 3]),
}


def _args(text: str, sizes: list[int], seed: int = 0) -> list[np.ndarray]:
    module = parse_hlo(text)
    rng = np.random.default_rng(seed)
    lhs, rhs, g = module.entry.parameters
    return [rng.standard_normal(lhs.shape.dims).astype(lhs.shape.dtype.numpy),
            rng.standard_normal(rhs.shape.dims).astype(rhs.shape.dtype.numpy),
            np.array(sizes, g.shape.dtype.numpy)]


def test_interpreter_against_a_loop_over_the_groups():
    text = _module(*MOE[:5])
    a, b, g = _args(text, [3, 0, 6])
    want = np.zeros((10, 5), np.float64)
    start = 0
    for group, size in enumerate(g):
        for row in range(start, start + size):
            want[row] = a[row].astype(np.float64) @ b[group].astype(np.float64)
        start += size
    (got,) = evaluate(parse_hlo(text), [a, b, g])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not got[9].any()  # the row past the last group


@pytest.mark.parametrize("backend", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_backends_match_the_interpreter(name, backend):
    *shapes, sizes = CASES[name]
    text = _module(*shapes)
    args = _args(text, sizes)
    (want,) = evaluate(parse_hlo(text), args)
    exe = hlofuse.compile(parse_hlo(text), target=backend, cache=False)
    assert not any(i.opcode == "ragged-dot" for c in exe.fused_module.computations for i in c.instructions)
    np.testing.assert_allclose(np.asarray(exe(*args)[0], np.float64), np.asarray(want, np.float64),
                               rtol=2e-2 if "bf16" in name else 1e-5, atol=2e-2 if "bf16" in name else 1e-5)


def test_inf_and_nan_stay_in_their_group():
    """A select, not a multiply by the mask: group 0's inf and NaN rows reach no other row."""
    text = _module(*MOE[:5])
    a, b, g = _args(text, [3, 0, 6])
    a[0, 1], a[2, 3] = np.inf, np.nan
    (want,) = evaluate(parse_hlo(text), [a, b, g])
    got = np.asarray(hlofuse.compile(parse_hlo(text), target="cpu", cache=False)(a, b, g)[0])
    assert np.isfinite(got[3:]).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # (nan == nan for assert_allclose)


def test_per_batch_group_sizes_are_refused_by_name():
    text = _module("f32[2,6,4]", "f32[2,3,4,5]", "s32[2,3]", "f32[2,6,5]",
                   "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={2}, "
                   "lhs_ragged_dims={1}, rhs_group_dims={1}")
    args = _args(text, [[2, 2, 2], [1, 2, 3]])
    evaluate(parse_hlo(text), args)  # the interpreter has them
    with pytest.raises(UnsupportedError, match="ragged-dot"):
        hlofuse.compile(parse_hlo(text), target="cpu", cache=False)(*args)
