"""StableHLO import, op family by op family: JAX runs a function; hlofuse imports the
StableHLO JAX exports for it and the reference interpreter must give JAX's answer."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from hlofuse.frontends.stablehlo import from_stablehlo
from hlofuse.hlo.verifier import verify
from hlofuse.runtime.interpreter import evaluate

RNG = np.random.default_rng(0)


def _tolerance(dtype) -> dict:
    dtype = np.dtype(dtype)
    if dtype.kind not in "fc" and dtype.name != "bfloat16":
        return {"rtol": 0, "atol": 0}
    if dtype.itemsize <= 2 or dtype.name == "bfloat16":
        return {"rtol": 1e-2, "atol": 1e-2}
    return {"rtol": 2e-5, "atol": 2e-6} if dtype in (np.float32, np.complex64) else {"rtol": 1e-12, "atol": 1e-12}


def import_jax(f, *args):
    """The hlofuse module of `jax.jit(f)` lowered for `args` (verified)."""
    text = jax.jit(f).lower(*args).as_text()
    module = from_stablehlo(text)
    verify(module)
    return module


def check(f, *args, **tol):
    """Run f with JAX and through hlofuse's importer + interpreter; compare every output."""
    module = import_jax(f, *args)
    got = evaluate(module, [np.asarray(a) for a in args])
    want = jax.tree.leaves(jax.jit(f)(*args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.dtype, g.shape, w.dtype, w.shape)
        kw = _tolerance(w.dtype) | tol
        if kw["rtol"] == 0 and kw["atol"] == 0:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype(np.complex128 if w.dtype.kind == "c" else np.float64),
                                       w.astype(np.complex128 if w.dtype.kind == "c" else np.float64), **kw)
    return module


def opcodes(module) -> set[str]:
    return {i.opcode for c in module.computations for i in c.instructions}


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- elementwise --------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [jnp.sin, jnp.cos, jnp.tanh, jnp.exp, jnp.expm1, jnp.abs, jnp.negative,
                                jnp.sign, jnp.floor, jnp.ceil, jnp.round, jnp.cbrt, lax.logistic, jnp.isfinite,
                                lambda x: jnp.log1p(jnp.abs(x)), lambda x: jnp.sqrt(jnp.abs(x)),
                                lambda x: lax.rsqrt(jnp.abs(x) + 1)],
                         ids=lambda f: getattr(f, "__name__", "lambda"))
def test_unary_float(fn):
    check(fn, f32(3, 4))


@pytest.mark.parametrize("fn", [jnp.add, jnp.subtract, jnp.multiply, jnp.divide, jnp.maximum, jnp.minimum,
                                jnp.arctan2, lambda x, y: jnp.power(jnp.abs(x), y), jnp.remainder])
def test_binary_float(fn):
    check(fn, f32(3, 4), f32(3, 4))


def test_integer_ops():
    x = RNG.integers(-100, 100, (4, 5)).astype(np.int32)
    y = RNG.integers(0, 31, (4, 5)).astype(np.int32)
    check(lambda a, b: (a << b, a >> b, lax.shift_right_logical(a, b), a & b, a | b, a ^ b, ~a,
                        lax.population_count(a), lax.clz(a), a // (b + 1), a % (b + 1)), x, y)


def test_compare_select_clamp():
    x, y = f32(5, 3), f32(5, 3)
    i = RNG.integers(0, 4, (5, 3)).astype(np.uint8)
    check(lambda a, b, c: (a < b, a >= b, a == b, c > 2, jnp.where(a < b, a, b), jnp.clip(a, -0.5, 0.5),
                           lax.clamp(np.float32(-0.1), a, np.float32(0.2))), x, y, i)


def test_convert_and_bitcast():
    x = f32(4, 4) * 100
    check(lambda a: (a.astype(jnp.int32), a.astype(jnp.float16), a.astype(jnp.bfloat16), a.astype(jnp.uint8),
                     lax.bitcast_convert_type(a, jnp.int32), lax.bitcast_convert_type(a, jnp.uint8),
                     a > 0), x)


def test_complex_parts():
    x, y = f32(3, 2), f32(3, 2)
    check(lambda a, b: (lax.complex(a, b), jnp.real(lax.complex(a, b) * 2), jnp.imag(lax.complex(a, b)),
                        jnp.abs(lax.complex(a, b))), x, y)


def test_reduce_precision():
    check(lambda a: lax.reduce_precision(a, exponent_bits=5, mantissa_bits=10), f32(8) * 1000)


# ---- CHLO, decomposed as XLA does ---------------------------------------------------------
@pytest.mark.parametrize("fn", [lax.erf, lax.erf_inv, lax.lgamma, lax.digamma, jnp.tan, jnp.arcsin, jnp.arccos,
                                jnp.arctan, jnp.sinh, jnp.cosh, jnp.arcsinh, jnp.arctanh, lax.bessel_i1e,
                                lambda x: jnp.arccosh(jnp.abs(x) + 1), lambda x: jnp.nextafter(x, x + 1)],
                         ids=lambda f: getattr(f, "__name__", "lambda"))
def test_chlo_ops(fn):
    x = np.clip(f32(16) * 0.4, -0.95, 0.95).astype(np.float32)
    module = check(fn, x, rtol=1e-4, atol=1e-5)
    assert not any(i.opcode == "custom-call" for c in module.computations for i in c.instructions)


def test_top_k():
    x = f32(3, 10)
    module = check(lambda a: lax.top_k(a, 4), x)
    assert "sort" in opcodes(module)


# ---- data movement ------------------------------------------------------------------------
def test_broadcast_reshape_transpose():
    # (3,1) + (1,4) stretches size-1 dimensions: reshape + broadcast in HLO.
    check(lambda a, b: (a + b, jnp.reshape(a, (1, 3)), jnp.transpose(b * a).T, jnp.broadcast_to(a, (2, 3, 4))),
          f32(3, 1), f32(1, 4))


def test_slices_pad_concat_reverse_iota():
    x = f32(6, 5)

    def f(a, i):
        return (a[1:5:2, ::3], lax.dynamic_slice(a, (i, 1), (2, 3)),
                lax.dynamic_update_slice(a, jnp.ones((2, 2), a.dtype), (i, i)),
                jnp.concatenate([a, a * 2], axis=1), lax.pad(a, np.float32(0.5), [(1, 2, 1), (-1, 0, 0)]),
                a[::-1, ::-1], lax.broadcasted_iota(jnp.int32, (3, 4), 1))

    check(f, x, np.int32(2))


def test_gather_scatter():
    x = f32(10, 4)
    idx = np.array([3, 0, 7, 3], np.int32)

    def f(a, i):
        return a[i], a[i, 2], a.at[i].add(1.0), a.at[i].set(-1.0), a.at[i].max(0.0), a.at[:, 1].mul(3.0)

    check(f, x, idx)


# ---- reductions, windows, sort --------------------------------------------------------------
def test_reductions():
    x = f32(4, 6)
    check(lambda a: (jnp.sum(a, axis=1), jnp.max(a), jnp.argmax(a, axis=0), jnp.prod(a, axis=0),
                     jnp.any(a > 1), jnp.all(a > -3)), x)


def test_reduce_window_and_cumulative():
    x = f32(1, 6, 8, 2)
    check(lambda a: (lax.reduce_window(a, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "SAME"),
                     lax.reduce_window(a, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "VALID"),
                     jnp.cumsum(a, axis=2)), x)


def test_select_and_scatter():
    x = f32(1, 4, 6, 1)

    def pool(a):
        return jnp.sum(lax.reduce_window(a, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") ** 2)

    module = check(jax.grad(pool), x)
    assert "select-and-scatter" in opcodes(module)


def test_sort():
    x = f32(3, 7)
    k = RNG.integers(0, 3, (7,)).astype(np.int32)
    check(lambda a, b: (jnp.sort(a, axis=1), jnp.argsort(a, axis=0), lax.sort((b, a[0]), num_keys=1)), x, k)


# ---- linear algebra -----------------------------------------------------------------------
def test_dot_general():
    check(lambda a, b, c: (a @ b, jnp.einsum("bij,bjk->bik", c, c), jnp.dot(a[0], b[:, 0])),
          f32(3, 4), f32(4, 5), f32(2, 3, 3), rtol=1e-5, atol=1e-5)


def test_convolution():
    lhs, rhs, grouped = f32(2, 3, 9, 8), f32(4, 3, 3, 2), f32(6, 1, 3, 2)
    check(lambda a, b, g: (lax.conv_general_dilated(a, b, (2, 1), [(1, 1), (0, 1)], lhs_dilation=(1, 2),
                                                    rhs_dilation=(2, 1)),
                           lax.conv_general_dilated(a, g, (1, 1), "SAME", feature_group_count=3)),
          lhs, rhs, grouped, rtol=1e-4, atol=1e-4)


# ---- control flow and calls ---------------------------------------------------------------
def test_while_with_captured_values():
    x = f32(4)

    def f(a, n):
        scale = a * 2  # used inside the loop body: an implicit capture
        return lax.fori_loop(0, n, lambda i, c: c + scale * i, a)

    module = check(f, x, np.int32(5))
    assert "while" in opcodes(module)


def test_cond_and_switch():
    x = f32(4)

    def f(a, p, k):
        y = a + 1
        c = lax.cond(p > 0, lambda v: v * y, lambda v: v - y, a)
        s = lax.switch(k, [lambda v: v, lambda v: v * 2, lambda v: jnp.sin(v) + y], a)
        return c, s

    for p, k in [(1, 0), (-1, 2), (0, 1)]:
        check(f, x, np.int32(p), np.int32(k))


def test_nested_call_is_inlined():
    inner = jax.jit(lambda v: jnp.exp(v) * 2)
    module = check(lambda a: inner(a) + inner(a * 3), f32(5))
    assert "call" not in opcodes(module)
    kept = from_stablehlo(jax.jit(lambda a: inner(a) + 1).lower(f32(5)).as_text(), inline_calls=False)
    assert "call" in opcodes(kept)


def test_optimization_barrier():
    module = check(lambda a, b: lax.optimization_barrier((a * 2, b)), f32(3), f32(2))
    assert "opt-barrier" in opcodes(module)


@functools.lru_cache(maxsize=1)
def _x64_values():
    with jax.enable_x64(True):
        x = RNG.standard_normal((3, 2))
        return x, jax.jit(lambda a: (a * 2, a.astype(np.int64) + 1, jnp.sin(a).astype(np.complex128) * 1j))(x)


def test_64_bit_types():
    x, want = _x64_values()
    with jax.enable_x64(True):
        text = jax.jit(lambda a: (a * 2, a.astype(np.int64) + 1, jnp.sin(a).astype(np.complex128) * 1j)).lower(x).as_text()
    got = evaluate(from_stablehlo(text), [x])
    for g, w in zip(got, want):
        assert g.dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-12)
