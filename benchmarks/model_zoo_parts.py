"""What the model builders of benchmarks/model_zoo.py and model_zoo_recent.py share: the `Model`
record, flat functions of pytrees, seeded inputs, keras inference and keras-hub backbones as
stateless JAX functions, an optax Adam step."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402


@dataclass
class Model:
    """A model step as a JAX function of flat arrays."""

    name: str
    library: str
    kind: str  # "inference" | "training"
    fn: Callable
    args: list

    def input_bytes(self) -> int:
        """Bytes of all arguments."""
        return int(sum(np.asarray(a).nbytes for a in self.args))


def flat_function(fn_of_trees, *trees):
    """`fn_of_trees(*trees)` as a function of the flattened leaves of `trees`."""
    import jax

    leaves, treedef = jax.tree_util.tree_flatten(trees)

    def flat_fn(*flat):
        return fn_of_trees(*jax.tree_util.tree_unflatten(treedef, list(flat)))

    return flat_fn, [np.asarray(x) for x in leaves]


def seeded_rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def random_images(batch: int, size: int, channels: int = 3, seed: int = 1) -> np.ndarray:
    return seeded_rng(seed).standard_normal((batch, size, size, channels)).astype(np.float32)


def keras_inference(name: str, model, x: np.ndarray) -> Model:
    """A keras model's forward pass as a stateless JAX function of (weights, input)."""
    import jax

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def forward(tv, ntv, x):
        y, _ = model.stateless_call(tv, ntv, x, training=False)
        return y

    fn, args = flat_function(forward, trainable, non_trainable, jax.numpy.asarray(x))
    return Model(name, "keras", "inference", fn, args)


def token_inputs(batch: int, seq: int, vocab: int) -> dict:
    r = seeded_rng(2)
    return {"token_ids": r.integers(0, vocab, (batch, seq)).astype(np.int32),
            "padding_mask": np.ones((batch, seq), np.int32)}


def keras_hub_backbone(name: str, backbone, inputs: dict) -> Model:
    import jax

    trainable = [v.value for v in backbone.trainable_variables]
    non_trainable = [v.value for v in backbone.non_trainable_variables]

    def forward(tv, ntv, inputs):
        y, _ = backbone.stateless_call(tv, ntv, inputs, training=False)
        return y["sequence_output"] if isinstance(y, dict) else y

    fn, args = flat_function(forward, trainable, non_trainable, jax.tree_util.tree_map(jax.numpy.asarray, inputs))
    return Model(name, "keras-hub", "inference", fn, args)


def adam_step(loss_fn, params, batch, learning_rate: float = 1e-3):
    """One Adam step of `loss_fn(params, batch)` as a flat function (params, opt state, batch)."""
    import jax
    import optax

    opt = optax.adam(learning_rate)
    state = opt.init(params)

    def step(params, state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    return flat_function(step, params, state, batch)
