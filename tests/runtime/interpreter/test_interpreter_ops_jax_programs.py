"""JAX programs lowered to HLO text, evaluated by the interpreter and compared with JAX's results:
the heavy-op rules in the company of the parser and the core interpreter."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from hlofuse.hlo.parser import parse_hlo  # noqa: E402
from hlofuse.runtime.interpreter import evaluate  # noqa: E402
from interp_ops_support import (  # noqa: E402
    HIGHEST,
    RNG,
    close,
    rand,
)
from interp_ops_support import x64  # noqa: E402,F401  (autouse fixture)


# ---- end to end: JAX programs lowered to HLO text, evaluated, compared with JAX's own results -----
def _maxpool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)))


def _nan_floats(shape):
    x = np.round(rand(shape, np.float32, -3, 3))
    flat = x.reshape(-1)
    flat[::7] = np.nan
    flat[1::11] = -0.0
    flat[2::13] = np.inf
    return x


def _argmax_pool(x):
    idx = lax.broadcasted_iota(jnp.int32, x.shape, 1)

    def pick(a, b):
        take = (a[0] > b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))
        return lax.select(take, a[0], b[0]), lax.select(take, a[1], b[1])

    init = (np.float32(-np.inf), np.int32(2**31 - 1))
    return lax.reduce_window((x, idx), init, pick, (1, 3), (1, 2), ((0, 0), (1, 1)))


def ints(low, high, shape):
    return RNG.integers(low, high, size=shape).astype(np.int32)


def _conv_nhwc(x, w):
    return lax.conv_general_dilated(x, w, (2, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=HIGHEST)


def _conv_grad(x, w):
    def loss(x, w):
        return (lax.conv_general_dilated(x, w, (2, 2), "SAME", rhs_dilation=(1, 2), precision=HIGHEST) ** 2).sum()
    return jax.grad(loss, argnums=(0, 1))(x, w)


JAX_PROGRAMS = {
    "sort_nan_zero": (lambda x: jnp.sort(x, axis=1), lambda: [_nan_floats((6, 40))]),
    "sort_big_row": (lambda x: jnp.sort(x), lambda: [rand((2, 3000), np.float32)]),
    "argsort_stable": (lambda x: jnp.argsort(x, axis=0, stable=True), lambda: [np.round(rand((30, 4), np.float32))]),
    "sort_two_keys": (lambda a, b: lax.sort((a, b), num_keys=2),
                      lambda: [rand((50,), np.int32, 0, 4), np.round(rand((50,), np.float32, 0, 5))]),
    "sort_descending": (lambda x: -jnp.sort(-x, axis=0), lambda: [rand((25, 3), np.float32)]),
    "top_k": (lambda x: lax.top_k(x, 3), lambda: [rand((4, 9), np.float32)]),
    "einsum": (lambda a, b: jnp.einsum("bij,bjk->bik", a, b, precision=HIGHEST),
               lambda: [rand((2, 3, 4)), rand((2, 4, 5))]),
    "conv_nhwc": (_conv_nhwc, lambda: [rand((2, 9, 8, 3)), rand((3, 3, 3, 4))]),
    "conv_grad": (_conv_grad, lambda: [rand((2, 3, 8, 9)), rand((4, 3, 3, 2))]),
    "take": (lambda x, i: jnp.take(x, i, axis=1, mode="clip"),
             lambda: [rand((3, 7, 2)), ints(-2, 9, (4, 5))]),
    "fancy_index": (lambda x, i, j: x[i, :, j], lambda: [rand((5, 3, 6)), ints(0, 5, (4,)),
                                                          ints(0, 6, (4,))]),
    "scatter_add": (lambda x, i, u: x.at[i].add(u), lambda: [rand((6, 3)), ints(-1, 8, (9,)),
                                                             rand((9, 3))]),
    "scatter_max_2d": (lambda x, i, j, u: x.at[i, j].max(u),
                       lambda: [rand((5, 6)), ints(0, 5, (7,)),
                                ints(0, 6, (7,)), rand((7,))]),
    "scatter_set": (lambda x, i, u: x.at[i].set(u, unique_indices=True),
                    lambda: [rand((8, 2)), RNG.permutation(8)[:5].astype(np.int32), rand((5, 2))]),
    "vmap_gather": (jax.vmap(lambda x, i: x[i]), lambda: [rand((4, 6, 2)), ints(0, 6, (4, 3))]),
    "vmap_scatter": (jax.vmap(lambda x, i, u: x.at[i].add(u)),
                     lambda: [rand((4, 6)), ints(0, 6, (4, 3)), rand((4, 3))]),
    "avg_pool": (lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "SAME") / 4,
                 lambda: [rand((2, 7, 7, 3))]),
    "max_pool_grad": (lambda x: jax.grad(lambda v: (_maxpool(v) ** 2).sum())(x),
                      lambda: [np.round(rand((2, 7, 8, 3)))]),
    "argmax_pool": (_argmax_pool, lambda: [np.round(rand((4, 11), np.float32, 0, 3))]),
    "cumsum": (lambda x: jnp.cumsum(x, axis=1), lambda: [rand((3, 20))]),
    "cummax": (lambda x: lax.cummax(x, axis=0), lambda: [rand((20, 3))]),
    "fft2": (lambda x: jnp.fft.rfft2(x), lambda: [rand((3, 8, 6))]),
}


@pytest.mark.parametrize("name", list(JAX_PROGRAMS))
def test_jax_program_through_evaluate(name):
    fn, make_args = JAX_PROGRAMS[name]
    args = make_args()
    want = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    got = evaluate(parse_hlo(text), args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        if w.dtype.kind == "f" or w.dtype.kind == "c":
            close(g, w, rtol=2e-4, atol=2e-4)
        else:
            close(g, w, rtol=0, atol=0)
