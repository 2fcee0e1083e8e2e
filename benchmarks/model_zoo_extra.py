"""A fourth batch of real models for benchmarks/model_zoo.py (its BUILDERS lists them): training
and inference steps whose op mix the first batches leave out.

- flax: a convolutional VAE's training step (reparameterized sampling, a KL term, transposed
  convolutions), a 3-D convolution net over short video clips;
- jax: a neural ODE integrated by 32 fixed RK4 steps in a `fori_loop`, a CLIP-style contrastive
  loss with its gradient, a ranking step (argsort, take_along_axis, NDCG), a DLRM-style
  recommender (embedding gathers, segment sums, pairwise feature interactions);
- keras: an LSTM text classifier (keras.layers.LSTM on the JAX backend: a `lax.scan`).
"""
from __future__ import annotations

import numpy as np

from model_zoo_parts import Model, adam_step, flat_function, keras_inference, random_images, seeded_rng


def flax_vae_train() -> Model:
    """A convolutional VAE on 28x28 images (two strided convolutions down, a 16-dim latent drawn by
    reparameterization, two transposed convolutions up), one Adam step of its ELBO on 64 images."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class VAE(nn.Module):
        @nn.compact
        def __call__(self, x, key):
            h = nn.relu(nn.Conv(32, (3, 3), strides=2)(x))
            h = nn.relu(nn.Conv(64, (3, 3), strides=2)(h)).reshape(x.shape[0], -1)
            mean, logvar = nn.Dense(16)(h), nn.Dense(16)(h)
            z = mean + jnp.exp(0.5 * logvar) * jax.random.normal(key, mean.shape)
            h = nn.relu(nn.Dense(7 * 7 * 64)(z)).reshape(x.shape[0], 7, 7, 64)
            h = nn.relu(nn.ConvTranspose(32, (3, 3), strides=(2, 2))(h))
            logits = nn.ConvTranspose(1, (3, 3), strides=(2, 2))(h)
            return logits, mean, logvar

    net = VAE()
    x = (seeded_rng(40).random((64, 28, 28, 1)) > 0.5).astype(np.float32)
    key = np.asarray(jax.random.key_data(jax.random.PRNGKey(1)))
    params = net.init(jax.random.PRNGKey(0), x[:1], jax.random.PRNGKey(2))

    def loss(p, batch):
        xb, k = batch
        logits, mean, logvar = net.apply(p, xb, jax.random.wrap_key_data(k))
        rec = jnp.sum(jnp.maximum(logits, 0) - logits * xb + jnp.log1p(jnp.exp(-jnp.abs(logits))))
        kl = -0.5 * jnp.sum(1 + logvar - mean ** 2 - jnp.exp(logvar))
        return (rec + kl) / xb.shape[0]

    fn, args = adam_step(loss, params, (x, key))
    return Model("flax_vae_train", "flax+optax", "training", fn, args)


def flax_conv3d() -> Model:
    """A 3-D convolution net over 4 clips of 16 frames of 32x32 RGB: three 3x3x3 convolutions with
    max pooling in space and time, a global average pool and a classifier."""
    import flax.linen as nn
    import jax

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            for ch in (32, 64, 128):
                x = nn.relu(nn.Conv(ch, (3, 3, 3))(x))
                x = nn.max_pool(x, (2, 2, 2), strides=(2, 2, 2))
            return nn.Dense(10)(x.mean(axis=(1, 2, 3)))

    net = Net()
    x = seeded_rng(41).standard_normal((4, 16, 32, 32, 3)).astype(np.float32)
    params = net.init(jax.random.PRNGKey(0), x[:1])
    fn, args = flat_function(lambda p, x: net.apply(p, x), params, x)
    return Model("flax_conv3d", "flax", "inference", fn, args)


def jax_neural_ode() -> Model:
    """A neural ODE dy/dt = MLP(y) integrated over 32 fixed RK4 steps in a `lax.fori_loop`, batch
    256 of state 64, the MLP 64 -> 256 -> 64 with tanh."""
    import jax
    import jax.numpy as jnp

    r = seeded_rng(42)
    y0 = r.standard_normal((256, 64)).astype(np.float32)
    w1 = (r.standard_normal((64, 256)) / 8).astype(np.float32)
    w2 = (r.standard_normal((256, 64)) / 16).astype(np.float32)
    b1 = np.zeros(256, np.float32)

    def solve(y0, w1, b1, w2):
        def f(y):
            return jnp.tanh(y @ w1 + b1) @ w2

        def step(_, y):
            h = 1.0 / 32
            k1 = f(y)
            k2 = f(y + 0.5 * h * k1)
            k3 = f(y + 0.5 * h * k2)
            k4 = f(y + h * k3)
            return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

        return jax.lax.fori_loop(0, 32, step, y0)

    return Model("jax_neural_ode", "jax", "inference", solve, [y0, w1, b1, w2])


def jax_clip_loss() -> Model:
    """A CLIP-style contrastive loss and its gradient: 1,024 image and text embeddings of 512
    projected to 256, L2-normalized, a temperature-scaled similarity matrix, cross-entropy both
    ways, and the top-1 accuracy by argmax."""
    import jax
    import jax.numpy as jnp

    r = seeded_rng(43)
    img = r.standard_normal((1024, 512)).astype(np.float32)
    txt = r.standard_normal((1024, 512)).astype(np.float32)
    wi = (r.standard_normal((512, 256)) / 22).astype(np.float32)
    wt = (r.standard_normal((512, 256)) / 22).astype(np.float32)

    def loss(wi, wt, img, txt):
        a = img @ wi
        b = txt @ wt
        a = a / jnp.linalg.norm(a, axis=1, keepdims=True)
        b = b / jnp.linalg.norm(b, axis=1, keepdims=True)
        logits = a @ b.T / 0.07
        labels = jnp.arange(a.shape[0])
        l1 = -jnp.mean(jax.nn.log_softmax(logits, 1)[labels, labels])
        l2 = -jnp.mean(jax.nn.log_softmax(logits, 0)[labels, labels])
        return (l1 + l2) / 2, jnp.mean(jnp.argmax(logits, 1) == labels)

    def step(wi, wt, img, txt):
        (l, acc), g = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(wi, wt, img, txt)
        return l, acc, g[0], g[1]

    return Model("jax_clip_loss", "jax", "training", step, [wi, wt, img, txt])


def jax_ranking() -> Model:
    """A learning-to-rank evaluation: scores of 256 queries x 1,000 documents, sorted by argsort,
    relevance gathered in that order (take_along_axis), DCG with log discounts, NDCG against the
    ideal order (a sort)."""
    import jax.numpy as jnp

    r = seeded_rng(44)
    scores = r.standard_normal((256, 1000)).astype(np.float32)
    relevance = r.integers(0, 4, (256, 1000)).astype(np.float32)

    def ndcg(scores, relevance):
        order = jnp.argsort(-scores, axis=1)
        gains = jnp.take_along_axis(relevance, order, axis=1)
        discount = 1.0 / jnp.log2(jnp.arange(2, scores.shape[1] + 2, dtype=jnp.float32))
        dcg = jnp.sum((2 ** gains - 1) * discount, axis=1)
        ideal = jnp.sum((2 ** -jnp.sort(-relevance, axis=1) - 1) * discount, axis=1)
        return jnp.mean(dcg / ideal), order[:, :10]

    return Model("jax_ranking", "jax", "inference", ndcg, [scores, relevance])


def jax_dlrm() -> Model:
    """A DLRM-style recommender's forward pass: 8 embedding tables of 100,000 x 64 gathered for a
    batch of 2,048 (each a bag of 4 ids summed with segment_sum), a bottom MLP on 13 dense
    features, pairwise dot products of the 9 feature vectors (the upper triangle), a top MLP."""
    import jax
    import jax.numpy as jnp

    r = seeded_rng(45)
    batch, tables, rows, dim, bag = 2048, 8, 100_000, 64, 4
    emb = (r.standard_normal((tables, rows, dim)) * 0.01).astype(np.float32)
    ids = r.integers(0, rows, (tables, batch * bag)).astype(np.int32)
    dense = r.standard_normal((batch, 13)).astype(np.float32)
    wb = (r.standard_normal((13, dim)) / 4).astype(np.float32)
    wt1 = (r.standard_normal((36 + dim, 256)) / 10).astype(np.float32)
    wt2 = (r.standard_normal((256, 1)) / 16).astype(np.float32)

    def forward(emb, ids, dense, wb, wt1, wt2):
        segments = jnp.repeat(jnp.arange(batch), bag)
        bags = jax.vmap(lambda t, i: jax.ops.segment_sum(t[i], segments, num_segments=batch))(emb, ids)
        x = jax.nn.relu(dense @ wb)
        feats = jnp.concatenate([x[None], bags], 0).transpose(1, 0, 2)  # [batch, 9, dim]
        inter = jnp.einsum("bid,bjd->bij", feats, feats)
        iu, ju = jnp.triu_indices(9, 1)
        z = jnp.concatenate([x, inter[:, iu, ju]], 1)
        return jax.nn.sigmoid(jax.nn.relu(z @ wt1) @ wt2)

    return Model("jax_dlrm", "jax", "inference", forward, [emb, ids, dense, wb, wt1, wt2])


def keras_lstm_classifier() -> Model:
    """keras: embedding, a 128-unit LSTM over 100 tokens (a `lax.scan` on the JAX backend), a dense
    classifier; 64 sequences."""
    import keras
    inp = keras.Input((100,), dtype="int32")
    x = keras.layers.Embedding(5000, 64)(inp)
    x = keras.layers.LSTM(128)(x)
    out = keras.layers.Dense(5, activation="softmax")(x)
    m = keras.Model(inp, out)
    toks = seeded_rng(46).integers(0, 5000, (64, 100)).astype(np.int32)
    return keras_inference("keras_lstm_classifier", m, toks)
