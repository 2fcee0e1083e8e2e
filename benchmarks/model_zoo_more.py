"""A third batch of real models for benchmarks/model_zoo.py (its BUILDERS lists them): the op
classes the first twenty-two leave out, each from the library a user would write it with.

- jax: a graph network's training step (edge gathers, segment sums: scatter-adds, and their
  gradients), a mixture-of-experts layer (top-2 routing, gathers into expert batches), a
  transformer's autoregressive decode loop over a key-value cache (dynamic-update-slice in a
  `fori_loop`), a selective state-space scan (Mamba-style, `lax.associative_scan`), a
  Gaussian-process regression (LAPACK's Cholesky and triangular solves), a log-mel spectrogram
  (an FFT), an int8-quantized layer (an integer dot);
- flax: a WaveNet stack (dilated causal 1-D convolutions, gated activations), a Vision
  Transformer (patch embedding by a strided convolution, attention), an MLP-Mixer's training
  step (token mixing across transposes), a bf16 MLP block's training step, a dropout
  transformer layer's training step (random bits), ResNeXt blocks (grouped convolutions);
- keras: DenseNet121 (concatenations of growing feature maps, average pools).

Found by running them beside XLA:CPU (session of 2026-11-28): the scan ran the emitter out of
memory (passes/fusion/indexing_evaluation.py) and then took 4.2x XLA's time (pad operands under
branches, short rows), the mixture of experts 14x (its cumsum: passes/reduce_window_rewriter.py),
the int8 layer 400x (integer dots in BLAS), the GP did not compile (LAPACK calls), the dropout
step crashed (index_probe).
"""
from __future__ import annotations

import numpy as np

from model_zoo_parts import Model, adam_step, flat_function, keras_inference, random_images, seeded_rng


def jax_gnn_train() -> Model:
    """A 3-layer message-passing network (edge MLP on gathered endpoints, messages summed per node with
    `segment_sum`), one Adam step of a node regression on a random graph of 4,096 nodes and 32,768 edges."""
    import jax
    import jax.numpy as jnp

    r = seeded_rng(21)
    nodes, edges, width = 4096, 32768, 64
    feats = r.standard_normal((nodes, 32)).astype(np.float32)
    senders = r.integers(0, nodes, edges).astype(np.int32)
    receivers = r.integers(0, nodes, edges).astype(np.int32)
    target = r.standard_normal((nodes, 1)).astype(np.float32)

    def dense(key, n_in, n_out):
        return {"w": jax.random.normal(key, (n_in, n_out)) / np.sqrt(n_in), "b": jnp.zeros(n_out)}

    keys = jax.random.split(jax.random.PRNGKey(0), 8)
    params = {"embed": dense(keys[0], 32, width), "out": dense(keys[1], width, 1),
              "layers": [{"edge": dense(keys[2 + 2 * i], 2 * width, width), "node": dense(keys[3 + 2 * i], 2 * width, width)}
                         for i in range(3)]}

    def apply(p, x, s, rcv):
        h = jax.nn.relu(x @ p["embed"]["w"] + p["embed"]["b"])
        for layer in p["layers"]:
            e = jnp.concatenate([h[s], h[rcv]], -1)
            m = jax.nn.relu(e @ layer["edge"]["w"] + layer["edge"]["b"])
            agg = jax.ops.segment_sum(m, rcv, num_segments=nodes)
            h = h + jax.nn.relu(jnp.concatenate([h, agg], -1) @ layer["node"]["w"] + layer["node"]["b"])
        return h @ p["out"]["w"] + p["out"]["b"]

    def loss(p, batch):
        x, s, rcv, y = batch
        return jnp.mean((apply(p, x, s, rcv) - y) ** 2)

    fn, args = adam_step(loss, params, (feats, senders, receivers, target))
    return Model("jax_gnn_train", "jax+optax", "training", fn, args)


def jax_moe_layer() -> Model:
    """A mixture-of-experts feed-forward layer: a router's top-2 over 8 experts, tokens gathered into
    per-expert slots of fixed capacity (one-hot cumsum positions), each expert's GELU MLP as a batched
    matmul, the weighted outputs combined back; 2,048 tokens of width 256."""
    import jax
    import jax.numpy as jnp

    r = seeded_rng(22)
    tokens, width, experts, hidden, k = 2048, 256, 8, 512, 2
    capacity = tokens * k // experts
    x = r.standard_normal((tokens, width)).astype(np.float32)
    router = (r.standard_normal((width, experts)) / 16).astype(np.float32)
    w1 = (r.standard_normal((experts, width, hidden)) / 16).astype(np.float32)
    w2 = (r.standard_normal((experts, hidden, width)) / 22).astype(np.float32)

    def layer(x, router, w1, w2):
        gates = jax.nn.softmax(x @ router, -1)
        weight, expert = jax.lax.top_k(gates, k)  # [t, k]
        onehot = jax.nn.one_hot(expert, experts, dtype=jnp.int32)  # [t, k, e]
        flat = onehot.reshape(tokens * k, experts)
        position = (jnp.cumsum(flat, 0) - 1).reshape(tokens, k, experts)
        slot = jnp.sum(position * onehot, -1)  # [t, k]
        keep = slot < capacity
        dest = jnp.where(keep, expert * capacity + slot, experts * capacity)  # dropped tokens past the end
        src = jnp.broadcast_to(jnp.arange(tokens)[:, None], (tokens, k))
        table = jnp.zeros(experts * capacity + 1, jnp.int32).at[dest.reshape(-1)].set(src.reshape(-1))
        xe = x[table[:-1]].reshape(experts, capacity, width)
        h = jax.nn.gelu(jnp.einsum("ecw,ewh->ech", xe, w1))
        ye = jnp.einsum("ech,ehw->ecw", h, w2).reshape(experts * capacity, width)
        ye = jnp.concatenate([ye, jnp.zeros((1, width), ye.dtype)])
        picked = ye[dest] * (weight * keep)[..., None]  # [t, k, w]
        return x + picked.sum(1)

    return Model("jax_moe_layer", "jax", "inference", layer, [x, router, w1, w2])


def jax_kv_decode() -> Model:
    """Autoregressive decoding of 32 tokens by a 2-layer transformer over a key-value cache of 512
    positions (batch 4, 8 heads of 64): each step embeds the last token, writes its keys and values into
    the cache with dynamic-update-slice, attends to the filled prefix (a mask), and takes the argmax."""
    import jax
    import jax.numpy as jnp

    r = seeded_rng(23)
    batch, heads, dim, width, vocab, max_len, steps, layers = 4, 8, 64, 512, 4000, 512, 32, 2
    embed = (r.standard_normal((vocab, width)) * 0.02).astype(np.float32)
    wqkv = (r.standard_normal((layers, width, 3 * width)) / 22).astype(np.float32)
    wo = (r.standard_normal((layers, width, width)) / 22).astype(np.float32)
    w_up = (r.standard_normal((layers, width, 4 * width)) / 22).astype(np.float32)
    w_down = (r.standard_normal((layers, 4 * width, width)) / 45).astype(np.float32)
    prompt = r.integers(0, vocab, (batch,)).astype(np.int32)
    start = np.int32(200)  # positions already in the cache
    cache = (r.standard_normal((layers, 2, batch, max_len, heads, dim)) * 0.1).astype(np.float32)

    def norm(h):
        return h * jax.lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6)

    def decode(embed, wqkv, wo, w_up, w_down, cache, prompt, start):
        def step(i, carry):
            cache, token, out = carry
            pos = start + i
            h = embed[token]  # [b, w]
            for layer in range(layers):
                q, kk, v = jnp.split(norm(h) @ wqkv[layer], 3, -1)
                q, kk, v = (t.reshape(batch, heads, dim) for t in (q, kk, v))
                cache = jax.lax.dynamic_update_slice(cache, jnp.stack([kk, v])[None, :, :, None], (layer, 0, 0, pos, 0, 0))
                keys, values = cache[layer, 0], cache[layer, 1]  # [b, t, h, d]
                s = jnp.einsum("bhd,bthd->bht", q, keys) / np.sqrt(dim)
                s = jnp.where(jnp.arange(max_len) <= pos, s, -1e30)
                a = jnp.einsum("bht,bthd->bhd", jax.nn.softmax(s, -1), values).reshape(batch, width)
                h = h + a @ wo[layer]
                h = h + jax.nn.gelu(norm(h) @ w_up[layer]) @ w_down[layer]
            token = jnp.argmax(norm(h) @ embed.T, -1).astype(jnp.int32)
            return cache, token, out.at[:, i].set(token)
        init = (cache, prompt, jnp.zeros((batch, steps), jnp.int32))
        cache, _, out = jax.lax.fori_loop(0, steps, step, init)
        return out, cache

    return Model("jax_kv_decode", "jax", "inference", decode, [embed, wqkv, wo, w_up, w_down, cache, prompt, start])


def jax_selective_scan() -> Model:
    """A Mamba-style selective state-space layer: input-dependent step sizes and projections, the linear
    recurrence h_t = a_t h_{t-1} + b_t x_t solved by `lax.associative_scan` over 1,024 steps (state 16,
    channels 128, batch 4), a gated output."""
    import jax
    import jax.numpy as jnp

    r = seeded_rng(24)
    batch, length, channels, state = 4, 1024, 128, 16
    x = r.standard_normal((batch, length, channels)).astype(np.float32)
    a_log = np.log(np.tile(np.arange(1, state + 1, dtype=np.float32), (channels, 1)))
    w_dt = (r.standard_normal((channels, channels)) / 11).astype(np.float32)
    w_b = (r.standard_normal((channels, state)) / 11).astype(np.float32)
    w_c = (r.standard_normal((channels, state)) / 11).astype(np.float32)
    w_gate = (r.standard_normal((channels, channels)) / 11).astype(np.float32)

    def layer(x, a_log, w_dt, w_b, w_c, w_gate):
        dt = jax.nn.softplus(x @ w_dt)  # [b, l, c]
        a = jnp.exp(-jnp.exp(a_log)[None, None] * dt[..., None])  # [b, l, c, n]
        bx = (dt * x)[..., None] * (x @ w_b)[:, :, None, :]  # [b, l, c, n]

        def combine(left, right):
            return left[0] * right[0], right[0] * left[1] + right[1]

        _, h = jax.lax.associative_scan(combine, (a, bx), axis=1)
        y = jnp.einsum("blcn,bln->blc", h, x @ w_c)
        return y * jax.nn.silu(x @ w_gate)

    return Model("jax_selective_scan", "jax", "inference", layer, [x, a_log, w_dt, w_b, w_c, w_gate])


def flax_wavenet() -> Model:
    """A WaveNet stack: causal 1-D convolutions dilated 1, 2, ..., 128 (two cycles), tanh-sigmoid gates,
    residual and skip 1x1 convolutions; 4 waveforms of 4,096 samples, 64 channels."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class WaveNet(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Conv(64, (1,))(x)
            skip = 0.0
            for dilation in [1, 2, 4, 8, 16, 32, 64, 128] * 2:
                z = nn.Conv(128, (2,), kernel_dilation=(dilation,), padding=[(dilation, 0)])(h)
                g = jnp.tanh(z[..., :64]) * jax.nn.sigmoid(z[..., 64:])
                h = h + nn.Conv(64, (1,))(g)
                skip = skip + nn.Conv(64, (1,))(g)
            return nn.Conv(256, (1,))(jax.nn.relu(nn.Conv(64, (1,))(jax.nn.relu(skip))))

    net = WaveNet()
    x = seeded_rng(25).standard_normal((4, 4096, 1)).astype(np.float32)
    params = net.init(jax.random.PRNGKey(0), x[:1, :64])
    fn, args = flat_function(lambda p, x: net.apply(p, x), params, x)
    return Model("flax_wavenet", "flax", "inference", fn, args)


def flax_vit() -> Model:
    """A small Vision Transformer: 8x8 patches by a strided convolution, a class token, 4 pre-norm
    blocks (6 heads of 32, MLP 768), 16 images of 64x64."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = x + nn.MultiHeadDotProductAttention(num_heads=6)(nn.LayerNorm()(x))
            return x + nn.Dense(192)(nn.gelu(nn.Dense(768)(nn.LayerNorm()(x))))

    class ViT(nn.Module):
        @nn.compact
        def __call__(self, img):
            p = nn.Conv(192, (8, 8), strides=(8, 8))(img)
            b = p.shape[0]
            p = p.reshape(b, -1, 192)
            cls = jnp.broadcast_to(self.param("cls", nn.initializers.zeros, (1, 1, 192)), (b, 1, 192))
            x = jnp.concatenate([cls, p], 1) + self.param("pos", nn.initializers.normal(0.02), (1, p.shape[1] + 1, 192))
            for _ in range(4):
                x = Block()(x)
            return nn.Dense(100)(nn.LayerNorm()(x[:, 0]))

    net = ViT()
    x = random_images(16, 64, seed=26)
    params = net.init(jax.random.PRNGKey(0), x[:1])
    fn, args = flat_function(lambda p, x: net.apply(p, x), params, x)
    return Model("flax_vit", "flax", "inference", fn, args)


def flax_mixer_train() -> Model:
    """An MLP-Mixer (patches 4x4 of 32x32 images, 4 blocks: token-mixing MLPs across a transpose,
    channel-mixing MLPs), one Adam step of its cross-entropy on 32 images."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    class MixerBlock(nn.Module):
        @nn.compact
        def __call__(self, x):
            y = nn.LayerNorm()(x).swapaxes(1, 2)
            y = nn.Dense(x.shape[1])(nn.gelu(nn.Dense(128)(y))).swapaxes(1, 2)
            x = x + y
            return x + nn.Dense(x.shape[2])(nn.gelu(nn.Dense(512)(nn.LayerNorm()(x))))

    class Mixer(nn.Module):
        @nn.compact
        def __call__(self, img):
            x = nn.Conv(128, (4, 4), strides=(4, 4))(img)
            x = x.reshape(x.shape[0], -1, 128)
            for _ in range(4):
                x = MixerBlock()(x)
            return nn.Dense(10)(nn.LayerNorm()(x).mean(1))

    net = Mixer()
    x = random_images(32, 32, seed=27)
    labels = seeded_rng(27).integers(0, 10, 32).astype(np.int32)
    params = net.init(jax.random.PRNGKey(0), x[:1])

    def loss(p, batch):
        return optax.softmax_cross_entropy_with_integer_labels(net.apply(p, batch[0]), batch[1]).mean()

    fn, args = adam_step(loss, params, (x, labels))
    return Model("flax_mixer_train", "flax+optax", "training", fn, args)


def keras_densenet121() -> Model:
    """keras.applications.DenseNet121 (weights=None): dense blocks concatenating every layer's features,
    batch norm, 1x1 and 3x3 convolutions, average-pool transitions; 4 images of 64x64."""
    import keras
    m = keras.applications.DenseNet121(weights=None, input_shape=(64, 64, 3), classes=100)
    return keras_inference("keras_densenet121", m, random_images(4, 64, seed=28))


def jax_gp_regression() -> Model:
    """Gaussian-process regression: an RBF kernel matrix of 1,024 points, its Cholesky factor, two
    triangular solves for the posterior mean at 256 test points, and the log marginal likelihood."""
    import jax.numpy as jnp
    import jax.scipy.linalg as sla

    r = seeded_rng(29)
    x = r.standard_normal((1024, 8)).astype(np.float32)
    y = r.standard_normal(1024).astype(np.float32)
    xs = r.standard_normal((256, 8)).astype(np.float32)

    def rbf(a, b):
        d = jnp.sum(a * a, 1)[:, None] + jnp.sum(b * b, 1)[None, :] - 2 * a @ b.T
        return jnp.exp(-0.5 * d / 4.0)

    def gp(x, y, xs):
        k = rbf(x, x) + 0.1 * jnp.eye(x.shape[0], dtype=x.dtype)
        chol = jnp.linalg.cholesky(k)
        alpha = sla.cho_solve((chol, True), y)
        mean = rbf(xs, x) @ alpha
        nll = 0.5 * y @ alpha + jnp.sum(jnp.log(jnp.diag(chol)))
        return mean, nll

    return Model("jax_gp_regression", "jax", "inference", gp, [x, y, xs])


def flax_bf16_mlp_train() -> Model:
    """A transformer MLP block trained in bfloat16 (parameters, activations and matmuls in bf16, the
    loss in f32), one SGD step on 512 tokens of width 512."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm(dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)(x)
            h = nn.Dense(2048, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)(h)
            return x + nn.Dense(512, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)(nn.gelu(h))

    net = Block()
    x = seeded_rng(30).standard_normal((512, 512)).astype(jnp.bfloat16)
    params = net.init(jax.random.PRNGKey(0), x[:1])

    def step(p, x):
        def loss(p):
            return jnp.mean(jnp.square(net.apply(p, x).astype(jnp.float32)))
        l, g = jax.value_and_grad(loss)(p)
        return jax.tree_util.tree_map(lambda a, b: a - jnp.asarray(1e-2, a.dtype) * b, p, g), l

    fn, args = flat_function(step, params, x)
    return Model("flax_bf16_mlp_train", "flax", "training", fn, args)


def flax_dropout_train() -> Model:
    """A transformer encoder layer trained with dropout (jax.random masks from a threaded key: the
    random bit generator in the step), Adam, 8 sequences of 128 tokens of width 256."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class Layer(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            h = nn.MultiHeadDotProductAttention(num_heads=4, dropout_rate=0.1, deterministic=not train)(x, x)
            x = nn.LayerNorm()(x + nn.Dropout(0.1, deterministic=not train)(h))
            h = nn.Dense(256)(nn.Dropout(0.1, deterministic=not train)(nn.relu(nn.Dense(1024)(x))))
            return nn.LayerNorm()(x + h)

    net = Layer()
    x = seeded_rng(31).standard_normal((8, 128, 256)).astype(np.float32)
    params = net.init(jax.random.PRNGKey(0), x[:1], False)
    key = np.asarray(jax.random.key_data(jax.random.PRNGKey(7)))

    def loss(p, batch):
        xb, k = batch
        rngs = {"dropout": jax.random.wrap_key_data(k)}
        return jnp.mean(jnp.square(net.apply(p, xb, True, rngs=rngs) - xb))

    fn, args = adam_step(loss, params, (x, key))
    return Model("flax_dropout_train", "flax+optax", "training", fn, args)


def jax_spectrogram() -> Model:
    """A log-mel spectrogram of 8 clips of 1 s at 16 kHz: framing by a strided gather (400-sample
    Hann windows every 160), an FFT, magnitudes, a mel filter bank matmul, a log."""
    import jax.numpy as jnp

    r = seeded_rng(32)
    audio = r.standard_normal((8, 16000)).astype(np.float32)
    mel = np.abs(r.standard_normal((257, 80))).astype(np.float32) / 257

    def spec(audio, mel):
        frames = 1 + (audio.shape[1] - 400) // 160
        idx = jnp.arange(frames)[:, None] * 160 + jnp.arange(400)[None, :]
        window = 0.5 - 0.5 * jnp.cos(2 * jnp.pi * jnp.arange(400) / 400)
        x = audio[:, idx] * window
        power = jnp.abs(jnp.fft.rfft(x, n=512)) ** 2
        return jnp.log(power @ mel + 1e-6)

    return Model("jax_spectrogram", "jax", "inference", spec, [audio, mel])


def jax_int8_matmul() -> Model:
    """An int8-quantized linear layer: per-row activation scales, int8 x int8 matmul accumulated in
    int32, dequantized with per-channel weight scales, a bias and a GELU; 2,048 tokens, 1024 -> 4096."""
    import jax
    import jax.numpy as jnp

    r = seeded_rng(33)
    x = r.standard_normal((2048, 1024)).astype(np.float32)
    wq = r.integers(-127, 128, (1024, 4096)).astype(np.int8)
    wscale = (np.abs(r.standard_normal(4096)) / 127).astype(np.float32)
    bias = r.standard_normal(4096).astype(np.float32)

    def layer(x, wq, wscale, bias):
        xscale = jnp.max(jnp.abs(x), axis=1, keepdims=True) / 127
        xq = jnp.clip(jnp.round(x / xscale), -127, 127).astype(jnp.int8)
        acc = jax.lax.dot(xq, wq, preferred_element_type=jnp.int32)
        return jax.nn.gelu(acc.astype(jnp.float32) * xscale * wscale + bias)

    return Model("jax_int8_matmul", "jax", "inference", layer, [x, wq, wscale, bias])


def flax_resnext_block() -> Model:
    """Two ResNeXt blocks (grouped 3x3 convolutions, 32 groups) and a strided transposed convolution
    up, batch norm in inference mode; 8 images of 56x56x128."""
    import flax.linen as nn
    import jax

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.relu(nn.BatchNorm(use_running_average=True)(nn.Conv(128, (1, 1))(x)))
            h = nn.relu(nn.BatchNorm(use_running_average=True)(nn.Conv(128, (3, 3), feature_group_count=32)(h)))
            return nn.relu(x + nn.BatchNorm(use_running_average=True)(nn.Conv(128, (1, 1))(h)))

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = Block()(Block()(x))
            return nn.ConvTranspose(64, (3, 3), strides=(2, 2))(x)

    net = Net()
    x = random_images(8, 56, channels=128, seed=34)
    params = net.init(jax.random.PRNGKey(0), x[:1])
    fn, args = flat_function(lambda p, x: net.apply(p, x), params, x)
    return Model("flax_resnext_block", "flax", "inference", fn, args)
