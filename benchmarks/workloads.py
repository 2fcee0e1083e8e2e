"""Benchmark and fusion-statistics workloads, written as JAX functions.

`WORKLOADS` maps a name to a `Workload(fn, inputs, doc, kind)`: `fn` is a jax.numpy function
and `inputs(size)` builds its arguments (numpy arrays, seeded) for size "small" (tests, a few
KiB) or "large" (benchmarks: 24-64 MB on the big side, inputs or, where the inputs are small by
nature as for the IoU matrix, the output; so caches flatter nobody). `kind` says what bounds the
workload, which decides the figure benchmarks/run.py sets it against: "memory" (bytes per
second against the machine's streaming bandwidth), "transcendental" (elements per second against
XLA:CPU's on the same HLO), "compute" (dots: time only) or "loop" (a `lax.scan`: time only).
Shared by benchmarks/run.py and benchmarks/fusion_stats.py.

The workload list of issue 14 (scaled add, GELU-tanh, a chain of transcendentals, row and column
sums, sum with sum of squares, softmax, layer norm, batch-norm training, LSTM cell, causal
masked attention, IoU matrix, box decode, image normalisation with channel-slice scatters, an
expensive producer with several consumers) and issue 12's scan RNN are all here, with
issue 13's depthwise convolution (MobileNetV2's 3x3, bias and ReLU6), a transpose and Llama's
rotary embedding (two kernel classes found slow in real models: kernels/transposed_tiles.py,
kernels/row_splits.py).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np


class Workload(NamedTuple):
    """A function and a builder of its inputs."""

    fn: Callable
    inputs: Callable[[str], list]
    doc: str = ""
    kind: str = "memory"  # memory | transcendental | compute | loop
    # Passes over its inputs that the exact computation needs, for the least-traffic figure
    # (benchmarks/run.py's GB/s): batch-norm training's exact two-pass variance reads x for the
    # mean, again for the variance around it and a third time for the output.
    input_passes: int = 1


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _pick(size: str, small, large):
    if size not in ("small", "large"):
        raise ValueError(f"size must be 'small' or 'large', not {size!r}")
    return small if size == "small" else large


# ---- the functions ------------------------------------------------------------------------------

def lstm_cell(x, h, c, w, u, b):
    """One LSTM step: gates from two matmuls, then the pointwise cell update."""
    import jax
    import jax.numpy as jnp

    z = x @ w + h @ u + b
    i, f, g, o = jnp.split(z, 4, axis=-1)
    c2 = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    h2 = jax.nn.sigmoid(o) * jnp.tanh(c2)
    return h2, c2


def softmax(x):
    """Numerically stable softmax over the last axis."""
    import jax.numpy as jnp

    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    return e / jnp.sum(e, axis=-1, keepdims=True)


def layer_norm(x, gamma, beta):
    """Layer normalization over the last axis."""
    import jax.numpy as jnp

    mean = jnp.mean(x, axis=-1, keepdims=True)
    xc = x - mean
    var = jnp.mean(xc * xc, axis=-1, keepdims=True)
    return xc * (1.0 / jnp.sqrt(var + 1e-5)) * gamma + beta


def batch_norm_stats(x):
    """Batch-norm training statistics: per-channel mean and variance of an NHWC batch."""
    import jax.numpy as jnp

    mean = jnp.mean(x, axis=(0, 1, 2))
    mean_sq = jnp.mean(x * x, axis=(0, 1, 2))
    return mean, mean_sq - mean * mean


def resnet_add_relu(x, residual):
    """The tail of a ResNet block: residual add and ReLU."""
    import jax.numpy as jnp

    return jnp.maximum(x + residual, 0.0)


def attention(q, k, v):
    """Scaled dot-product attention for one head."""
    s = (q @ k.T) * (1.0 / np.sqrt(q.shape[-1]))
    return softmax(s) @ v


def iou_matrix(a, b):
    """Pairwise IoU of two box sets (x0, y0, x1, y1), as NMS computes it."""
    import jax.numpy as jnp

    ax0, ay0, ax1, ay1 = (a[:, i][:, None] for i in range(4))
    bx0, by0, bx1, by1 = (b[:, i][None, :] for i in range(4))
    iw = jnp.maximum(jnp.minimum(ax1, bx1) - jnp.maximum(ax0, bx0), 0.0)
    ih = jnp.maximum(jnp.minimum(ay1, by1) - jnp.maximum(ay0, by0), 0.0)
    inter = iw * ih
    area_a = (ax1 - ax0) * (ay1 - ay0)
    area_b = (bx1 - bx0) * (by1 - by0)
    return inter / (area_a + area_b - inter)


def box_decode(*args):
    """Decode box deltas against anchors for several feature-map scales (one small kernel each)."""
    import jax.numpy as jnp

    out = []
    for deltas, anchors in zip(args[0::2], args[1::2]):
        wa = anchors[:, 2] - anchors[:, 0]
        ha = anchors[:, 3] - anchors[:, 1]
        cx = anchors[:, 0] + 0.5 * wa + deltas[:, 0] * wa
        cy = anchors[:, 1] + 0.5 * ha + deltas[:, 1] * ha
        w = jnp.exp(deltas[:, 2]) * wa
        h = jnp.exp(deltas[:, 3]) * ha
        out.append(jnp.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=-1))
    return tuple(out)


def image_normalize(img, mean, std):
    """uint8 NHWC images to normalized float32."""
    import jax.numpy as jnp

    return (img.astype(jnp.float32) * (1.0 / 255.0) - mean) / std


def scaled_add(x, y):
    """y + 2.5 x (BLAS axpy): one read of each input, one write."""
    return 2.5 * x + y


def gelu_tanh(x):
    """GELU with the tanh approximation (jax.nn.gelu(approximate=True))."""
    import jax

    return jax.nn.gelu(x, approximate=True)


def transcendental_chain(x):
    """A chain of transcendental functions: erf(logistic(log1p(exp(tanh(x)))))."""
    import jax
    import jax.numpy as jnp

    return jax.lax.erf(jax.nn.sigmoid(jnp.log1p(jnp.exp(jnp.tanh(x)))))


def row_sums(x):
    """Row sums of |x| (an L1 norm per row: a reduction with a fused elementwise producer)."""
    import jax.numpy as jnp

    return jnp.sum(jnp.abs(x), axis=-1)


def column_sums(x):
    """Column sums of |x| (the reduced dimension is the major one)."""
    import jax.numpy as jnp

    return jnp.sum(jnp.abs(x), axis=0)


def sum_sumsq(x):
    """Row sum and row sum of squares: two reductions of the same input (one pass if multi-output)."""
    import jax.numpy as jnp

    return jnp.sum(x, axis=-1), jnp.sum(x * x, axis=-1)


def batch_norm_train(x, gamma, beta, running_mean, running_var):
    """Batch-norm training step of an NHWC batch: batch statistics, the normalised output and
    the updated running statistics."""
    import jax
    import jax.numpy as jnp

    mean = jnp.mean(x, axis=(0, 1, 2))
    var = jnp.mean(jnp.square(x - mean), axis=(0, 1, 2))
    y = (x - mean) * jax.lax.rsqrt(var + 1e-5) * gamma + beta
    return y, 0.9 * running_mean + 0.1 * mean, 0.9 * running_var + 0.1 * var


def causal_attention(q, k, v):
    """Multi-head causal masked attention, [batch, heads, seq, head_dim] (masked scores -inf)."""
    import jax
    import jax.numpy as jnp

    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * (1.0 / np.sqrt(q.shape[-1]))
    n = q.shape[-2]
    mask = jnp.arange(n)[:, None] >= jnp.arange(n)[None, :]
    s = jnp.where(mask, s, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)


def image_normalize_scatter(img, mean, std):
    """Float NHWC images scaled to [0, 1], then channels 0 and 1 normalised in place through two
    channel-slice `.at[].set` updates (scatters in JAX's HLO)."""
    x = img * (1.0 / 255.0)
    x = x.at[..., 0].set((x[..., 0] - mean[0]) / std[0])
    return x.at[..., 1].set((x[..., 1] - mean[1]) / std[1])


def transpose(x, b):
    """A transpose written out with a bias added along its rows (x.T + b), as a relayout does:
    every output row reads a column."""
    import jax.numpy as jnp

    return jnp.transpose(x) + b


def rotary_embedding(x, angles):
    """Llama's rotary position embedding (keras_hub's): x * cos + rotate_half(x) * sin over
    [batch, positions, heads, head size], the angles' cos and sin duplicated over both halves."""
    import jax.numpy as jnp

    a = jnp.concatenate([angles, angles], axis=-1)[None, :, None, :]
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * jnp.cos(a) + rotated * jnp.sin(a)


def shared_producer(x, a, b):
    """An expensive elementwise producer (tanh, exp) read by three consumers: two elementwise
    ones and a row reduction (fuse it into each, recomputing it, or keep it in memory)."""
    import jax.numpy as jnp

    t = jnp.exp(jnp.tanh(x) * 0.5)
    return t * a, t + b, jnp.sum(t, axis=-1)


def scan_rnn(xs, w, b, h0, c0):
    """A haiku-style LSTM (gates from concat([x, h]) @ w, forget bias 1) unrolled over the
    leading axis of `xs` by `lax.scan`: the hidden states of every step and the final state."""
    import jax
    import jax.numpy as jnp

    def step(carry, x):
        h, c = carry
        z = jnp.concatenate([x, h], axis=-1) @ w + b
        i, g, f, o = jnp.split(z, 4, axis=-1)
        c = jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    (h, c), hs = jax.lax.scan(step, (h0, c0), xs)
    return hs, h, c


def depthwise_conv(x, w, b):
    """A MobileNetV2 depthwise 3x3 convolution (one filter per channel, stride 1, SAME padding),
    NHWC with an HWIO kernel [3, 3, 1, C], and its bias and ReLU6."""
    import jax
    import jax.numpy as jnp

    y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                     feature_group_count=x.shape[-1])
    return jnp.clip(y + b, 0.0, 6.0)


# ---- the inputs ---------------------------------------------------------------------------------

def _lstm_inputs(size: str) -> list:
    # batch 16384, 128 features: x, h, c 8 MB each (the gate update dominates, not the dots)
    n, d, hdim = _pick(size, (4, 8, 8), (16384, 128, 128))
    r = _rng(1)
    f = lambda *s: r.standard_normal(s).astype(np.float32) * 0.1
    return [f(n, d), f(n, hdim), f(n, hdim), f(d, 4 * hdim), f(hdim, 4 * hdim), f(4 * hdim)]


def _softmax_inputs(size: str) -> list:
    return _normal(2, _wide(size))


def _layer_norm_inputs(size: str) -> list:
    n, d = _tall(size)
    r = _rng(3)
    return [r.standard_normal((n, d)).astype(np.float32), r.standard_normal(d).astype(np.float32),
            r.standard_normal(d).astype(np.float32)]


def _bn_inputs(size: str) -> list:
    return _normal(4, _pick(size, (2, 4, 4, 8), (32, 56, 56, 96)))


def _resnet_inputs(size: str) -> list:
    shape = _pick(size, (2, 4, 4, 8), (32, 56, 56, 64))
    r = _rng(5)
    return [r.standard_normal(shape).astype(np.float32), r.standard_normal(shape).astype(np.float32)]


def _attention_inputs(size: str) -> list:
    s, d = _pick(size, (8, 16), (2048, 128))  # scores: 16 MB
    r = _rng(6)
    return [r.standard_normal((s, d)).astype(np.float32) for _ in range(3)]


def _boxes(r: np.random.Generator, n: int) -> np.ndarray:
    xy = r.uniform(0, 100, (n, 2))
    wh = r.uniform(1, 20, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1).astype(np.float32)


def _iou_inputs(size: str) -> list:
    n, m = _pick(size, (16, 8), (4096, 2048))  # the output: 32 MB
    r = _rng(7)
    return [_boxes(r, n), _boxes(r, m)]


def _box_decode_inputs(size: str) -> list:
    # five feature-map scales, 1.05M boxes: 34 MB of deltas and anchors
    counts = _pick(size, (64, 16, 4), (786432, 196608, 49152, 12288, 3072))
    r = _rng(8)
    out = []
    for n in counts:
        out += [(r.standard_normal((n, 4)) * 0.1).astype(np.float32), _boxes(r, n)]
    return out


def _image_inputs(size: str) -> list:
    shape = _pick(size, (2, 8, 8, 3), (96, 224, 224, 3))  # 14 MB of uint8 in, 58 MB out
    r = _rng(9)
    return [r.integers(0, 256, shape, dtype=np.uint8), np.array([0.485, 0.456, 0.406], np.float32),
            np.array([0.229, 0.224, 0.225], np.float32)]


def _normal(seed: int, shape: tuple) -> list:
    return [_rng(seed).standard_normal(shape).astype(np.float32)]


def _wide(size: str) -> tuple:
    # 3072 x 2048 f32 = 24 MB (softmax's and GELU's shape in issue 14)
    return _pick(size, (4, 16), (3072, 2048))


def _tall(size: str) -> tuple:
    # 6144 x 1024 f32 = 24 MB (layer norm's shape in issue 14)
    return _pick(size, (8, 32), (6144, 1024))


def _reduced(size: str) -> tuple:
    # 12288 x 1024 f32 = 48 MB: a reduction reads its input once, and 24 MB would stay in this
    # host's 32 MB L3 from one timed call to the next
    return _pick(size, (8, 32), (12288, 1024))


def _scaled_add_inputs(size: str) -> list:
    r = _rng(10)
    return [r.standard_normal(_wide(size)).astype(np.float32) for _ in range(2)]


def _bn_train_inputs(size: str) -> list:
    n, h, w, c = _pick(size, (2, 4, 4, 8), (32, 56, 56, 96))
    r = _rng(11)
    vec = lambda: r.standard_normal(c).astype(np.float32)
    return [r.standard_normal((n, h, w, c)).astype(np.float32), vec(), vec(), vec(), np.abs(vec()) + 0.5]


def _causal_attention_inputs(size: str) -> list:
    # issue 14's shape: batch 4, 6 heads, sequence 512, head size 64 (scores: 24 MB)
    shape = _pick(size, (1, 2, 8, 4), (4, 6, 512, 64))
    r = _rng(12)
    return [r.standard_normal(shape).astype(np.float32) for _ in range(3)]


def _image_scatter_inputs(size: str) -> list:
    shape = _pick(size, (2, 8, 8, 3), (64, 224, 224, 3))
    r = _rng(13)
    return [r.uniform(0, 255, shape).astype(np.float32), np.array([0.485, 0.456, 0.406], np.float32),
            np.array([0.229, 0.224, 0.225], np.float32)]


def _shared_producer_inputs(size: str) -> list:
    shape = _pick(size, (4, 16), (2048, 2048))
    r = _rng(14)
    return [r.standard_normal(shape).astype(np.float32) for _ in range(3)]


def _transpose_inputs(size: str) -> list:
    rows, cols = _pick(size, (16, 48), (4096, 2048))  # 32 MB
    r = _rng(22)
    return [r.standard_normal((rows, cols)).astype(np.float32), r.standard_normal(rows).astype(np.float32)]


def _rotary_inputs(size: str) -> list:
    # batch 16, 512 positions, 16 heads of 64: 32 MB; the angles positions x frequencies
    b, t, h, d = _pick(size, (2, 8, 2, 32), (16, 512, 16, 64))
    freqs = 1.0 / (10000.0 ** (np.arange(d // 2, dtype=np.float32) * 2 / d))
    angles = (np.arange(t, dtype=np.float32)[:, None] * freqs[None, :]).astype(np.float32)
    return [_rng(23).standard_normal((b, t, h, d)).astype(np.float32), angles]


def _scan_rnn_inputs(size: str) -> list:
    # steps x batch x features: 768 x 128 x 64 f32 = 25 MB of inputs, as many of hidden states
    t, n, d = _pick(size, (4, 2, 4), (768, 128, 64))
    r = _rng(15)
    f = lambda *s: (r.standard_normal(s) * 0.1).astype(np.float32)
    return [f(t, n, d), f(2 * d, 4 * d), f(4 * d), f(n, d), f(n, d)]


def _depthwise_inputs(size: str) -> list:
    # MobileNetV2's 112x112 stage with 96 expanded channels, batch 8: 38.5 MB in, as many out
    n, h, c = _pick(size, (2, 6, 8), (8, 112, 96))
    r = _rng(21)
    return [r.standard_normal((n, h, h, c)).astype(np.float32),
            (r.standard_normal((3, 3, 1, c)) * 0.3).astype(np.float32), r.standard_normal(c).astype(np.float32)]


WORKLOADS: dict[str, Workload] = {
    "scaled_add": Workload(scaled_add, _scaled_add_inputs, "y + 2.5 x"),
    "gelu_tanh": Workload(gelu_tanh, lambda s: _normal(16, _wide(s)), "GELU, tanh approximation", "transcendental"),
    "transcendental_chain": Workload(transcendental_chain, lambda s: _normal(17, _wide(s)),
                                     "erf(logistic(log1p(exp(tanh x))))", "transcendental"),
    "row_sums": Workload(row_sums, lambda s: _normal(18, _reduced(s)), "row sums of |x|"),
    "column_sums": Workload(column_sums, lambda s: _normal(19, _reduced(s)), "column sums of |x|"),
    "sum_sumsq": Workload(sum_sumsq, lambda s: _normal(20, _reduced(s)), "row sum and sum of squares"),
    "softmax": Workload(softmax, _softmax_inputs, "softmax over the last axis"),
    "layer_norm": Workload(layer_norm, _layer_norm_inputs, "layer norm over the last axis"),
    "batch_norm_stats": Workload(batch_norm_stats, _bn_inputs, "batch-norm training mean/variance"),
    "batch_norm_train": Workload(batch_norm_train, _bn_train_inputs,
                                 "batch-norm training: statistics, output, running statistics", input_passes=3),
    "resnet_add_relu": Workload(resnet_add_relu, _resnet_inputs, "residual add + ReLU"),
    "lstm_cell": Workload(lstm_cell, _lstm_inputs, "LSTM cell: two matmuls and the gate update", "transcendental"),
    "attention": Workload(attention, _attention_inputs, "single-head scaled dot-product attention", "compute"),
    "causal_attention": Workload(causal_attention, _causal_attention_inputs,
                                 "causal masked attention, b4 h6 s512 d64", "compute"),
    "iou_matrix": Workload(iou_matrix, _iou_inputs, "pairwise IoU of two box sets (NMS)"),
    "box_decode": Workload(box_decode, _box_decode_inputs, "box decoding per feature-map scale"),
    "image_normalize": Workload(image_normalize, _image_inputs, "uint8 images to normalized float32"),
    "image_normalize_scatter": Workload(image_normalize_scatter, _image_scatter_inputs,
                                        "image normalisation, two channel-slice scatters"),
    "shared_producer": Workload(shared_producer, _shared_producer_inputs,
                                "expensive producer, three consumers", "transcendental"),
    "depthwise_conv": Workload(depthwise_conv, _depthwise_inputs, "depthwise 3x3 conv + bias + ReLU6 (MobileNetV2)",
                               "compute"),
    "scan_rnn": Workload(scan_rnn, _scan_rnn_inputs, "haiku-style LSTM over 768 steps by lax.scan", "loop"),
    "transpose": Workload(transpose, _transpose_inputs, "a 4096 x 2048 transpose plus a bias"),
    "rotary_embedding": Workload(rotary_embedding, _rotary_inputs, "Llama's rotary position embedding"),
}
