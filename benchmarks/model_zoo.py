"""Real models from the libraries people use, as pure JAX functions of flat array arguments.

Each builder returns a `Model`: a function of a flat list of arrays (parameters, optimizer state
and data, randomly initialised: nothing is downloaded) and those arrays. Parameters are
arguments, not constants, so the HLO text stays small and both compilers see the same program
as a real training or serving step does.

Libraries (the `bench` extra): keras 3 on the JAX backend (keras.applications, keras-hub),
flax (linen), equinox, dm-haiku, optax. A model whose library is missing is skipped with the
reason; nothing else is needed. The last nine are in model_zoo_recent.py (architectures the
first thirteen did not cover: LLM backbones, EfficientNet, ConvNeXt, a UNet and a language
model's training steps, a GRU trained through a scan, a text CNN, top-k sampling); the fourteen
after them in model_zoo_more.py (op classes those leave out: scatter-adds of a graph network,
a mixture of experts' gathers, a key-value cache's updates in a loop, an associative scan,
dilated 1-D convolutions, patch embeddings, token mixing, DenseNet's concatenations, LAPACK calls,
bf16 training, dropout's random bits, FFTs, int8 dots, grouped convolutions); the last seven in
model_zoo_extra.py (a VAE, 3-D convolutions, a neural ODE, a contrastive loss, a ranking step, a
DLRM-style recommender, a keras LSTM).
"""
from __future__ import annotations

import os
from typing import Callable

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402

import model_zoo_extra as extra  # noqa: E402
import model_zoo_more as more  # noqa: E402
import model_zoo_recent as recent  # noqa: E402
from model_zoo_parts import (Model, adam_step, flat_function, keras_hub_backbone, keras_inference,  # noqa: E402
                             random_images, seeded_rng, token_inputs)


# ---- keras ------------------------------------------------------------------------------------

def keras_mobilenet_v2() -> Model:
    """keras.applications.MobileNetV2 (depthwise convolutions), 8 images of 160x160."""
    import keras

    model = keras.applications.MobileNetV2(weights=None, input_shape=(160, 160, 3), classes=1000)
    return keras_inference("keras_mobilenet_v2", model, random_images(8, 160))


def keras_resnet50() -> Model:
    """keras.applications.ResNet50, 4 images of 128x128."""
    import keras

    model = keras.applications.ResNet50(weights=None, input_shape=(128, 128, 3), classes=1000)
    return keras_inference("keras_resnet50", model, random_images(4, 128))


def keras_hub_gpt2() -> Model:
    """keras_hub GPT2Backbone (4 layers, hidden 512), batch 4 x 256 tokens."""
    import keras_hub

    backbone = keras_hub.models.GPT2Backbone(vocabulary_size=5000, num_layers=4, num_heads=8, hidden_dim=512,
                                             intermediate_dim=2048, max_sequence_length=256)
    return keras_hub_backbone("keras_hub_gpt2", backbone, token_inputs(4, 256, 5000))


def keras_hub_bert() -> Model:
    """keras_hub BertBackbone (4 layers, hidden 512), batch 4 x 256 tokens."""
    import keras_hub

    backbone = keras_hub.models.BertBackbone(vocabulary_size=5000, num_layers=4, num_heads=8, hidden_dim=512,
                                             intermediate_dim=2048, max_sequence_length=256)
    inputs = token_inputs(4, 256, 5000)
    inputs["segment_ids"] = np.zeros((4, 256), np.int32)
    return keras_hub_backbone("keras_hub_bert", backbone, inputs)


# ---- flax ---------------------------------------------------------------------------------------

def _flax_cnn():
    import flax.linen as nn

    class CNN(nn.Module):
        """The flax MNIST example's CNN."""

        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(32, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), (2, 2))
            x = nn.relu(nn.Conv(64, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), (2, 2))
            x = x.reshape((x.shape[0], -1))
            x = nn.relu(nn.Dense(256)(x))
            return nn.Dense(10)(x)

    return CNN()


def flax_mnist_cnn() -> Model:
    """The flax MNIST CNN, inference on 256 images."""
    import jax

    net = _flax_cnn()
    x = random_images(256, 28, 1)
    params = net.init(jax.random.PRNGKey(0), x[:1])
    fn, args = flat_function(lambda p, x: net.apply(p, x), params, x)
    return Model("flax_mnist_cnn", "flax", "inference", fn, args)


def flax_mnist_cnn_train() -> Model:
    """A training step (cross-entropy, Adam) of the flax MNIST CNN on 128 images."""
    import jax
    import optax

    net = _flax_cnn()
    x = random_images(128, 28, 1)
    labels = seeded_rng(3).integers(0, 10, 128).astype(np.int32)
    params = net.init(jax.random.PRNGKey(0), x[:1])

    def loss(p, batch):
        logits = net.apply(p, batch[0])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[1]).mean()

    fn, args = adam_step(loss, params, (x, labels))
    return Model("flax_mnist_cnn_train", "flax+optax", "training", fn, args)


def flax_transformer_block() -> Model:
    """A flax pre-LN transformer encoder block (8 heads, width 512, MLP 2048), batch 8 x 256."""
    import flax.linen as nn
    import jax

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=8)(h, h)
            h = nn.LayerNorm()(x)
            h = nn.Dense(512)(nn.gelu(nn.Dense(2048)(h)))
            return x + h

    x = seeded_rng(4).standard_normal((8, 256, 512)).astype(np.float32)
    block = Block()
    params = block.init(jax.random.PRNGKey(0), x[:1])
    fn, args = flat_function(lambda p, x: block.apply(p, x), params, x)
    return Model("flax_transformer_block", "flax", "inference", fn, args)


# ---- equinox ------------------------------------------------------------------------------------

def equinox_attention_block() -> Model:
    """An equinox multi-head attention + MLP block (8 heads, width 512), batch 8 x 256 (vmap)."""
    import equinox as eqx
    import jax

    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    attn = eqx.nn.MultiheadAttention(8, 512, key=k1)
    mlp = eqx.nn.MLP(512, 512, 2048, 1, key=k2)
    ln = eqx.nn.LayerNorm(512)
    model = (attn, mlp, ln)
    params, static = eqx.partition(model, eqx.is_array)

    def forward(params, x):
        attn, mlp, ln = eqx.combine(params, static)

        def one(seq):
            h = jax.vmap(ln)(seq)
            seq = seq + attn(h, h, h)
            return seq + jax.vmap(mlp)(jax.vmap(ln)(seq))

        return jax.vmap(one)(x)

    x = seeded_rng(5).standard_normal((8, 256, 512)).astype(np.float32)
    fn, args = flat_function(forward, params, x)
    del k3
    return Model("equinox_attention_block", "equinox", "inference", fn, args)


def equinox_mlp_train() -> Model:
    """A training step (MSE, Adam) of an equinox MLP 1024-2048-2048-1024 on 1024 rows."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    mlp = eqx.nn.MLP(1024, 1024, 2048, 2, key=jax.random.PRNGKey(0))
    params, static = eqx.partition(mlp, eqx.is_array)
    r = seeded_rng(6)
    batch = (r.standard_normal((1024, 1024)).astype(np.float32), r.standard_normal((1024, 1024)).astype(np.float32))

    def loss(p, batch):
        model = eqx.combine(p, static)
        pred = jax.vmap(model)(batch[0])
        return jnp.mean((pred - batch[1]) ** 2)

    fn, args = adam_step(loss, params, batch)
    return Model("equinox_mlp_train", "equinox+optax", "training", fn, args)


def _equinox_vgg(channels: list[int], classes: int, size: int):
    """An equinox VGG-style CNN in equinox's channels-first layout (NCHW convolutions, as
    PyTorch's): pairs of 3x3 convolutions with bias and ReLU, a 2x2 max pool after each pair, a
    linear head; (params, static) of eqx.partition."""
    import equinox as eqx
    import jax

    keys = jax.random.split(jax.random.PRNGKey(1), len(channels) + 1)

    class VGG(eqx.Module):
        convs: list
        head: eqx.nn.Linear

        def __init__(self):
            pairs = zip([3, *channels[:-1]], channels)
            self.convs = [eqx.nn.Conv2d(i, o, 3, padding=1, key=k) for (i, o), k in zip(pairs, keys)]
            side = size >> (len(channels) // 2)
            self.head = eqx.nn.Linear(channels[-1] * side * side, classes, key=keys[-1])

        def __call__(self, x):
            for j, conv in enumerate(self.convs):
                x = jax.nn.relu(conv(x))
                if j % 2 == 1:
                    x = eqx.nn.MaxPool2d(2, 2)(x)
            return self.head(x.reshape(-1))

    return eqx.partition(VGG(), eqx.is_array)


def equinox_vgg() -> Model:
    """An equinox VGG-style CNN (NCHW, 3 -> 32, 32, 64, 64, 128, 128), inference on 16 images of 64x64."""
    import equinox as eqx
    import jax

    params, static = _equinox_vgg([32, 32, 64, 64, 128, 128], 100, 64)
    x = seeded_rng(8).standard_normal((16, 3, 64, 64)).astype(np.float32)
    fn, args = flat_function(lambda p, x: jax.vmap(eqx.combine(p, static))(x), params, x)
    return Model("equinox_vgg", "equinox", "inference", fn, args)


def equinox_cnn_train() -> Model:
    """A training step (cross-entropy, Adam) of an equinox CNN (NCHW, 3 -> 32, 64) on 64 images of 32x32."""
    import equinox as eqx
    import jax
    import optax

    params, static = _equinox_vgg([32, 64], 10, 32)
    r = seeded_rng(6)
    batch = (r.standard_normal((64, 3, 32, 32)).astype(np.float32), r.integers(0, 10, 64).astype(np.int32))

    def loss(p, batch):
        logits = jax.vmap(eqx.combine(p, static))(batch[0])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[1]).mean()

    fn, args = adam_step(loss, params, batch)
    return Model("equinox_cnn_train", "equinox+optax", "training", fn, args)


# ---- haiku --------------------------------------------------------------------------------------

def haiku_lstm_scan() -> Model:
    """A haiku LSTM (hidden 512) unrolled over 64 steps with lax.scan (hk.dynamic_unroll), batch 32."""
    import haiku as hk
    import jax

    def forward(x):
        core = hk.LSTM(512)
        out, _ = hk.dynamic_unroll(core, x, core.initial_state(x.shape[1]))
        return out

    net = hk.without_apply_rng(hk.transform(forward))
    x = seeded_rng(7).standard_normal((64, 32, 256)).astype(np.float32)  # time-major
    params = net.init(jax.random.PRNGKey(0), x)
    fn, args = flat_function(lambda p, x: net.apply(p, x), params, x)
    return Model("haiku_lstm_scan", "haiku", "inference", fn, args)


def haiku_resnet_train() -> Model:
    """A training step (cross-entropy, SGD with momentum) of haiku's ResNet18 on 16 images of 64x64."""
    import haiku as hk
    import jax
    import optax

    def forward(x, is_training):
        return hk.nets.ResNet18(10)(x, is_training=is_training)

    net = hk.transform_with_state(forward)
    x = random_images(16, 64)
    labels = seeded_rng(8).integers(0, 10, 16).astype(np.int32)
    params, state = net.init(jax.random.PRNGKey(0), x, True)
    opt = optax.sgd(0.1, momentum=0.9)
    opt_state = opt.init(params)

    def step(params, state, opt_state, x, labels):
        def loss(p):
            logits, new_state = net.apply(p, state, None, x, True)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), new_state

        (value, new_state), grads = jax.value_and_grad(loss, has_aux=True)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_state, opt_state, value

    fn, args = flat_function(step, params, state, opt_state, x, labels)
    return Model("haiku_resnet18_train", "haiku+optax", "training", fn, args)


BUILDERS: dict[str, Callable[[], Model]] = {
    "keras_mobilenet_v2": keras_mobilenet_v2,
    "keras_resnet50": keras_resnet50,
    "keras_hub_gpt2": keras_hub_gpt2,
    "keras_hub_bert": keras_hub_bert,
    "flax_mnist_cnn": flax_mnist_cnn,
    "flax_mnist_cnn_train": flax_mnist_cnn_train,
    "flax_transformer_block": flax_transformer_block,
    "equinox_attention_block": equinox_attention_block,
    "equinox_mlp_train": equinox_mlp_train,
    "equinox_vgg": equinox_vgg,
    "equinox_cnn_train": equinox_cnn_train,
    "haiku_lstm_scan": haiku_lstm_scan,
    "haiku_resnet18_train": haiku_resnet_train,
    # model_zoo_recent.py
    "keras_efficientnet_b0": recent.keras_efficientnet_b0,
    "keras_convnext_tiny": recent.keras_convnext_tiny,
    "keras_text_cnn": recent.keras_text_cnn,
    "keras_hub_llama": recent.keras_hub_llama,
    "keras_hub_gemma": recent.keras_hub_gemma,
    "flax_unet_train": recent.flax_unet_train,
    "flax_lm_train": recent.flax_lm_train,
    "equinox_gru_train": recent.equinox_gru_train,
    "jax_topk_sampling": recent.jax_topk_sampling,
    # model_zoo_more.py
    "jax_gnn_train": more.jax_gnn_train,
    "jax_moe_layer": more.jax_moe_layer,
    "jax_kv_decode": more.jax_kv_decode,
    "jax_selective_scan": more.jax_selective_scan,
    "flax_wavenet": more.flax_wavenet,
    "flax_vit": more.flax_vit,
    "flax_mixer_train": more.flax_mixer_train,
    "keras_densenet121": more.keras_densenet121,
    "jax_gp_regression": more.jax_gp_regression,
    "flax_bf16_mlp_train": more.flax_bf16_mlp_train,
    "flax_dropout_train": more.flax_dropout_train,
    "jax_spectrogram": more.jax_spectrogram,
    "jax_int8_matmul": more.jax_int8_matmul,
    "flax_resnext_block": more.flax_resnext_block,
    # model_zoo_extra.py
    "flax_vae_train": extra.flax_vae_train,
    "flax_conv3d": extra.flax_conv3d,
    "jax_neural_ode": extra.jax_neural_ode,
    "jax_clip_loss": extra.jax_clip_loss,
    "jax_ranking": extra.jax_ranking,
    "jax_dlrm": extra.jax_dlrm,
    "keras_lstm_classifier": extra.keras_lstm_classifier,
}
