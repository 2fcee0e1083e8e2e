"""Regenerate examples/*.hlo from small JAX programs (HLO before XLA's optimizations).

Run: python scripts/gen_examples.py
"""
from __future__ import annotations

import os

import sys

import jax
import jax.numpy as jnp

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "examples")
sys.path.insert(0, os.path.join(HERE, "..", "benchmarks"))

from workloads import layer_norm, lstm_cell, softmax  # noqa: E402  (the same functions as the benchmarks)


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
    main()
