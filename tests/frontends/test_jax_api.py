"""JAX entry points: from_exported (static and shape-polymorphic), compile_exported's
per-signature cache and constraint checks, and the jit decorator."""
from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from hlofuse.frontends.jax_api import compile_exported, from_exported, jit
from hlofuse.hlo.errors import InputError
from hlofuse.runtime.interpreter import evaluate

RNG = np.random.default_rng(3)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def poly_matmul():
    def f(x, y):
        return jnp.sin(x) @ y + x.shape[0]

    a, b = export.symbolic_shape("a, b")
    return f, export.export(jax.jit(f))(jax.ShapeDtypeStruct((a, b), jnp.float32),
                                        jax.ShapeDtypeStruct((b, a), jnp.float32))


def test_from_exported_static():
    x = rand(3, 4)
    exp = export.export(jax.jit(lambda v: (jnp.exp(v), v.sum(0))))(jax.ShapeDtypeStruct(x.shape, x.dtype))
    module = from_exported(exp)
    got = evaluate(module, [x])
    np.testing.assert_allclose(got[0], np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(got[1], x.sum(0), rtol=1e-5)


def test_from_exported_polymorphic_refines_shapes():
    f, exp = poly_matmul()
    x, y = rand(2, 3), rand(3, 2)
    module = from_exported(exp, x, y)
    assert all(i.shape.is_static() for i in module.entry.instructions if i.shape.is_array)
    assert str(module.entry.root.shape).startswith("f32[2,2]")
    np.testing.assert_allclose(evaluate(module, [x, y])[0], np.asarray(f(x, y)), rtol=1e-5)
    with pytest.raises(InputError, match="symbolic dimensions"):
        from_exported(exp)


def test_compile_exported_caches_per_signature():
    f, exp = poly_matmul()
    fn = compile_exported(exp, target="interpreter")
    for m, n in [(2, 3), (4, 5), (2, 3)]:
        x, y = rand(m, n), rand(n, m)
        np.testing.assert_allclose(fn(x, y), np.asarray(f(x, y)), rtol=1e-5, atol=1e-5)
    assert len(fn.cache) == 2


@pytest.mark.parametrize("args,message", [
    ((np.ones((2, 3), np.float32), np.ones((2, 2), np.float32)), "dimension variable 'b' is 3"),
    ((np.ones((2, 3), np.float32), np.ones((3, 2), np.float64)), "must be float32"),
    ((np.ones((1, 2, 3), np.float32), np.ones((3, 2), np.float32)), "must have rank 2"),
    ((np.ones((2, 3), np.float32),), "takes 2 arguments"),
])
def test_polymorphic_argument_errors(args, message):
    _, exp = poly_matmul()
    with pytest.raises(InputError, match=message):
        compile_exported(exp, target="interpreter")(*args)


def test_explicit_constraints_and_dimension_expressions():
    a, b = export.symbolic_shape("a, b", constraints=("a >= b",))
    exp = export.export(jax.jit(lambda x, y: x[:y.shape[0]] * 2 + y))(
        jax.ShapeDtypeStruct((a,), jnp.float32), jax.ShapeDtypeStruct((b,), jnp.float32))
    fn = compile_exported(exp, target="interpreter")
    np.testing.assert_array_equal(fn(np.ones(5, np.float32), np.arange(3, dtype=np.float32)), [2, 3, 4])
    with pytest.raises(InputError, match="constraint 'a >= b'"):
        fn(np.ones(2, np.float32), np.arange(3, dtype=np.float32))

    (c,) = export.symbolic_shape("c")
    exp2 = export.export(jax.jit(lambda x, y: jnp.concatenate([x, x]) + y))(
        jax.ShapeDtypeStruct((c,), jnp.float32), jax.ShapeDtypeStruct((2 * c,), jnp.float32))
    fn2 = compile_exported(exp2, target="interpreter")
    np.testing.assert_array_equal(fn2(np.ones(2, np.float32), np.arange(4, dtype=np.float32)), [1, 2, 3, 4])
    with pytest.raises(InputError, match=r"2\*c = 4"):
        fn2(np.ones(2, np.float32), np.arange(5, dtype=np.float32))


def test_jit_decorator_keeps_output_structure_and_caches():
    calls = []

    @jit(target="interpreter")
    def g(a, b):
        calls.append(1)  # runs only while JAX traces
        return {"sum": a + b, "rest": (a * b, jnp.max(a))}

    x, y = rand(2, 3), rand(2, 3)
    out = g(x, y)
    assert set(out) == {"sum", "rest"} and isinstance(out["sum"], np.ndarray)
    np.testing.assert_allclose(out["sum"], x + y, rtol=1e-6)
    np.testing.assert_allclose(out["rest"][0], x * y, rtol=1e-6)
    np.testing.assert_allclose(out["rest"][1], x.max(), rtol=1e-6)
    g(rand(2, 3), rand(2, 3))
    assert len(calls) == 1
    g(rand(4, 1), rand(4, 1))
    assert len(calls) == 2 and len(g.cache) == 2
    assert g.__name__ == "g"


def test_unused_arguments_are_dropped_like_jax_does():
    x, y, unused = np.arange(3, dtype=np.float32), np.ones(3, np.float32), np.zeros(2, np.int32)
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, unused, y)]
    exp = export.export(jax.jit(lambda a, b, c: a * 2 + c))(*specs)
    assert tuple(exp.module_kept_var_idx) == (0, 2)
    assert len(from_exported(exp).entry.parameters) == 2
    np.testing.assert_array_equal(compile_exported(exp, target="interpreter")(x, unused, y), x * 2 + y)


@pytest.mark.parametrize("polymorphic", [False, True])
def test_multi_platform_export_runs_its_cpu_variant(polymorphic):
    (n,) = export.symbolic_shape("n")
    spec = jax.ShapeDtypeStruct((n,) if polymorphic else (3,), jnp.float32)
    exp = export.export(jax.jit(lambda v: jnp.sin(v) * 2), platforms=("cuda", "cpu"))(spec)
    x = np.arange(3, dtype=np.float32)
    module = from_exported(exp, x)
    assert len(module.entry.parameters) == 1
    np.testing.assert_allclose(evaluate(module, [x])[0], np.sin(x) * 2, rtol=1e-6)


def test_jit_plain_decorator_and_module():
    @jit
    def h(v):
        return jnp.tanh(v) * 2 + 1

    assert h.target == "cpu"
    got = jit(lambda v, k: v * k, target="interpreter")(np.arange(3.0), 2)  # float64 and int, as jax.jit takes them
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [0, 2, 4])
    module = h.module(np.ones(4, np.float32))
    assert {"tanh", "multiply", "add"} <= {i.opcode for i in module.entry.instructions}


@pytest.mark.skipif(importlib.util.find_spec("hlofuse.runtime.cpu_executor") is None,
                    reason="the CPU backend (hlofuse.runtime.cpu_executor) is not in this checkout")
def test_jit_on_cpu_backend():
    f = jit(lambda v, w: jnp.sum(jnp.exp(v) * w, axis=1), target="cpu")
    x, y = rand(8, 16), rand(8, 16)
    np.testing.assert_allclose(f(x, y), np.sum(np.exp(x) * y, axis=1), rtol=1e-5, atol=1e-5)


def test_a_function_jitted_in_another_process_is_loaded_without_importing_it(tmp_path, monkeypatch):
    """The first call in a new process of a function compiled before finds the compile by the
    export's serialized module and the arguments' signature (compiler.compile_source): no
    StableHLO import; another signature of a polymorphic export is another compile."""
    import hlofuse.frontends.jax_api as jax_api
    from hlofuse.codegen import cache

    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HLOFUSE_MODULE_CACHE", "1")
    cache.memory_cache.clear()
    f, exp = poly_matmul()
    x, y = rand(3, 5), rand(5, 3)
    first = compile_exported(exp)(x, y)
    imports = []
    real = jax_api.from_exported
    monkeypatch.setattr(jax_api, "from_exported", lambda *a, **k: (imports.append(1), real(*a, **k))[1])
    cache.memory_cache.clear()  # as a new process: from the disk
    again = compile_exported(exp)
    got = again(x, y)
    assert imports == [] and again.executable(x, y).from_cache
    np.testing.assert_array_equal(np.asarray(got), np.asarray(first))
    other = again(rand(4, 2), rand(2, 4))  # a new signature: imported and compiled
    assert imports == [1] and np.asarray(other).shape == (4, 4)
    with pytest.raises(InputError):  # the arguments' check stands on a hit
        compile_exported(exp)(rand(3, 5), rand(4, 3))
    cache.memory_cache.clear()
