"""Regenerate examples/*.hlo from small JAX programs (HLO before XLA's optimizations).

Run: python scripts/gen_examples.py
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "examples")


def lstm_cell(x, h, c, w, u, b):
    gates = x @ w + h @ u + b
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    c_new = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    h_new = jax.nn.sigmoid(o) * jnp.tanh(c_new)
    return h_new, c_new


def softmax(x):
    m = jnp.max(x, axis=-1, keepdims=True)
    e = jnp.exp(x - m)
    return e / jnp.sum(e, axis=-1, keepdims=True)


def layer_norm(x, gamma, beta):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * gamma + beta


def f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


EXAMPLES = {
    "lstm_cell": (lstm_cell, (f32(8, 64), f32(8, 128), f32(8, 128), f32(64, 512), f32(128, 512), f32(512))),
    "softmax": (softmax, (f32(32, 1000),)),
    "layer_norm": (layer_norm, (f32(64, 768), f32(768), f32(768))),
}


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    for name, (fn, specs) in EXAMPLES.items():
        text = jax.jit(fn).lower(*specs).as_text(dialect="hlo")
        with open(os.path.join(OUT, f"{name}.hlo"), "w") as f:
            f.write(text)
        print(f"wrote examples/{name}.hlo")


if __name__ == "__main__":
    np.random.seed(0)
    main()
