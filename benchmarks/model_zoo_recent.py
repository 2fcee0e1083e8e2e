"""More real models for benchmarks/model_zoo.py (its BUILDERS lists them): architectures the first
thirteen do not cover. Found by running them beside XLA:CPU (session of 2026-11-28): keras_hub
Llama ran 1.36x XLA:CPU's time (its rotary embedding's kernels scalar: kernels/row_splits.py)
and reads attention scores transposed in Gemma (kernels/transposed_tiles.py).

- keras: EfficientNetB0, ConvNeXtTiny (weights=None), a text CNN (embedding, Conv1D, max pools);
- keras-hub: Llama and Gemma backbones (small configurations, random weights);
- flax: a diffusion-style UNet training step (GroupNorm, SiLU, strided convolutions,
  ConvTranspose, skip concatenations; MSE, Adam) and a 2-layer decoder language model's step
  (embedding gathers and their scatter-add gradient, causal attention, cross-entropy, AdamW);
- equinox: a GRU over 64 steps of lax.scan, trained (the backward pass is a second scan);
- jax: a top-k sampling step (top_k over a 32,000-word vocabulary, a categorical draw).
"""
from __future__ import annotations

import numpy as np

from model_zoo_parts import (Model, adam_step, flat_function, keras_hub_backbone, keras_inference, random_images,
                             seeded_rng, token_inputs)


def keras_efficientnet_b0() -> Model:
    """keras.applications.EfficientNetB0 (depthwise 3x3 and 5x5, squeeze-and-excitation, swish), 8 images of 96x96."""
    import keras
    m = keras.applications.EfficientNetB0(weights=None, input_shape=(96, 96, 3), classes=100)
    return keras_inference("keras_efficientnet_b0", m, random_images(8, 96))


def keras_convnext_tiny() -> Model:
    """keras.applications.ConvNeXtTiny (depthwise 7x7, layer norm over channels, GELU, layer scale), 4 images of 64x64."""
    import keras
    m = keras.applications.ConvNeXtTiny(weights=None, input_shape=(64, 64, 3), classes=100)
    return keras_inference("keras_convnext_tiny", m, random_images(4, 64))


def flax_unet_train() -> Model:
    """A small diffusion-style UNet (GroupNorm, SiLU, strided convolutions down, ConvTranspose up, skip
    concatenations), one Adam step of its MSE on 8 images of 32x32."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class Res(nn.Module):
        ch: int

        @nn.compact
        def __call__(self, x):
            h = nn.Conv(self.ch, (3, 3))(nn.silu(nn.GroupNorm(8)(x)))
            h = nn.Conv(self.ch, (3, 3))(nn.silu(nn.GroupNorm(8)(h)))
            if x.shape[-1] != self.ch:
                x = nn.Conv(self.ch, (1, 1))(x)
            return x + h

    class UNet(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Conv(32, (3, 3))(x)
            a = Res(32)(x)
            b = Res(64)(nn.Conv(64, (3, 3), strides=2)(a))
            c = Res(64)(nn.Conv(64, (3, 3), strides=2)(b))
            u = nn.ConvTranspose(64, (2, 2), strides=(2, 2))(c)
            u = Res(64)(jnp.concatenate([u, b], -1))
            u = nn.ConvTranspose(32, (2, 2), strides=(2, 2))(u)
            u = Res(32)(jnp.concatenate([u, a], -1))
            return nn.Conv(3, (3, 3))(nn.silu(nn.GroupNorm(8)(u)))

    net = UNet()
    x = random_images(8, 32)
    y = random_images(8, 32, seed=5)
    params = net.init(jax.random.PRNGKey(0), x[:1])
    def loss(p, batch):
        return jnp.mean((net.apply(p, batch[0]) - batch[1]) ** 2)
    fn, args = adam_step(loss, params, (x, y))
    return Model("flax_unet_train", "flax+optax", "training", fn, args)


def flax_lm_train() -> Model:
    """A 2-layer flax decoder language model's training step: embedding (its gradient a scatter-add), causal
    attention, cross-entropy, AdamW; 8 sequences of 128 tokens."""
    import flax.linen as nn
    import jax
    import optax

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, mask):
            h = nn.LayerNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=4)(h, h, mask=mask)
            h = nn.LayerNorm()(x)
            return x + nn.Dense(256)(nn.gelu(nn.Dense(1024)(h)))

    class LM(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            emb = nn.Embed(4000, 256)
            x = emb(tokens) + self.param("pos", nn.initializers.normal(0.02), (128, 256))[: tokens.shape[1]]
            mask = nn.make_causal_mask(tokens)
            for _ in range(2):
                x = Block()(x, mask)
            return emb.attend(nn.LayerNorm()(x))

    net = LM()
    tokens = seeded_rng(11).integers(0, 4000, (8, 128)).astype(np.int32)
    params = net.init(jax.random.PRNGKey(0), tokens[:1])
    def loss(p, batch):
        logits = net.apply(p, batch[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()
    opt = optax.adamw(1e-3)
    state = opt.init(params)
    def step(params, state, batch):
        l, g = jax.value_and_grad(loss)(params, batch)
        u, state = opt.update(g, state, params)
        return optax.apply_updates(params, u), state, l
    fn, args = flat_function(step, params, state, tokens)
    return Model("flax_lm_train", "flax+optax", "training", fn, args)


def keras_hub_llama() -> Model:
    """keras_hub LlamaBackbone (2 layers, hidden 512, 8 query and 2 key-value heads: rotary embedding, RMS norm,
    SwiGLU), batch 4 x 256 tokens."""
    import keras_hub
    bb = keras_hub.models.LlamaBackbone(vocabulary_size=5000, num_layers=2, num_query_heads=8, num_key_value_heads=2,
                                        hidden_dim=512, intermediate_dim=1024)
    return keras_hub_backbone("keras_hub_llama", bb, token_inputs(4, 256, 5000))


def keras_hub_gemma() -> Model:
    """keras_hub GemmaBackbone (2 layers, hidden 512, 4 query heads and 1 key-value head of 128: interleaved rotary
    embedding, GeGLU), batch 4 x 256 tokens."""
    import keras_hub
    bb = keras_hub.models.GemmaBackbone(vocabulary_size=5000, num_layers=2, num_query_heads=4, num_key_value_heads=1,
                                        hidden_dim=512, intermediate_dim=2048, head_dim=128)
    return keras_hub_backbone("keras_hub_gemma", bb, token_inputs(4, 256, 5000))


def equinox_gru_train() -> Model:
    """An equinox GRU (hidden 256) over 64 steps of lax.scan with a linear head, one Adam step of its MSE on
    16 sequences: the backward pass is a second scan."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    cell = eqx.nn.GRUCell(64, 256, key=k1)
    head = eqx.nn.Linear(256, 8, key=k2)
    params, static = eqx.partition((cell, head), eqx.is_array)
    r = seeded_rng(12)
    xs = r.standard_normal((16, 64, 64)).astype(np.float32)
    ys = r.standard_normal((16, 8)).astype(np.float32)
    def loss(p, batch):
        cell, head = eqx.combine(p, static)
        def one(seq):
            h, _ = jax.lax.scan(lambda h, x: (cell(x, h), None), jnp.zeros(256), seq)
            return head(h)
        return jnp.mean((jax.vmap(one)(batch[0]) - batch[1]) ** 2)
    fn, args = adam_step(loss, params, (xs, ys))
    return Model("equinox_gru_train", "equinox+optax", "training", fn, args)


def keras_text_cnn() -> Model:
    """keras: embedding, Conv1D x2, GlobalMaxPooling1D, dense: a text classifier on 32 x 256 tokens."""
    import keras
    inp = keras.Input((256,), dtype="int32")
    x = keras.layers.Embedding(8000, 128)(inp)
    x = keras.layers.Conv1D(128, 5, activation="relu")(x)
    x = keras.layers.MaxPooling1D(2)(x)
    x = keras.layers.Conv1D(128, 5, activation="relu")(x)
    x = keras.layers.GlobalMaxPooling1D()(x)
    out = keras.layers.Dense(4, activation="softmax")(x)
    m = keras.Model(inp, out)
    toks = seeded_rng(13).integers(0, 8000, (32, 256)).astype(np.int32)
    return keras_inference("keras_text_cnn", m, toks)


def jax_topk_sampling() -> Model:
    """A sampling step: logits over a 32,000-word vocabulary, temperature, top-k (k 50), a categorical draw
    and the log-softmax of the kept logits, batch 64."""
    import jax
    import jax.numpy as jnp
    def step(logits, key_data):
        key = jax.random.wrap_key_data(key_data)
        v, i = jax.lax.top_k(logits / 0.8, 50)
        choice = jax.random.categorical(key, v)
        return jnp.take_along_axis(i, choice[:, None], axis=1)[:, 0], jax.nn.log_softmax(v)
    logits = seeded_rng(14).standard_normal((64, 32000)).astype(np.float32)
    key = np.asarray(jax.random.key_data(jax.random.PRNGKey(3)))
    return Model("jax_topk_sampling", "jax", "inference", step, [logits, key])
