"""Benchmark and fusion-statistics workloads, written as JAX functions.

`WORKLOADS` maps a name to a `Workload(fn, inputs, doc)`: `fn` is a jax.numpy function and
`inputs(size)` builds its arguments (numpy arrays, seeded) for size "small" (tests, a few KiB)
or "large" (benchmarks, MiBs). Shared by benchmarks/run.py and benchmarks/fusion_stats.py.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np


class Workload(NamedTuple):
    """A function and a builder of its inputs."""

    fn: Callable
    inputs: Callable[[str], list]
    doc: str = ""


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


# ---- the inputs ---------------------------------------------------------------------------------

def _lstm_inputs(size: str) -> list:
    n, d, hdim = _pick(size, (4, 8, 8), (64, 512, 512))
    r = _rng(1)
    f = lambda *s: r.standard_normal(s).astype(np.float32) * 0.1
    return [f(n, d), f(n, hdim), f(n, hdim), f(d, 4 * hdim), f(hdim, 4 * hdim), f(4 * hdim)]


def _softmax_inputs(size: str) -> list:
    return [_rng(2).standard_normal(_pick(size, (4, 16), (1024, 1024))).astype(np.float32)]


def _layer_norm_inputs(size: str) -> list:
    n, d = _pick(size, (4, 32), (2048, 1024))
    r = _rng(3)
    return [r.standard_normal((n, d)).astype(np.float32), r.standard_normal(d).astype(np.float32),
            r.standard_normal(d).astype(np.float32)]


def _bn_inputs(size: str) -> list:
    return [_rng(4).standard_normal(_pick(size, (2, 4, 4, 8), (32, 32, 32, 64))).astype(np.float32)]


def _resnet_inputs(size: str) -> list:
    shape = _pick(size, (2, 4, 4, 8), (32, 56, 56, 64))
    r = _rng(5)
    return [r.standard_normal(shape).astype(np.float32), r.standard_normal(shape).astype(np.float32)]


def _attention_inputs(size: str) -> list:
    s, d = _pick(size, (8, 16), (512, 64))
    r = _rng(6)
    return [r.standard_normal((s, d)).astype(np.float32) for _ in range(3)]


def _boxes(r: np.random.Generator, n: int) -> np.ndarray:
    xy = r.uniform(0, 100, (n, 2))
    wh = r.uniform(1, 20, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1).astype(np.float32)


def _iou_inputs(size: str) -> list:
    n, m = _pick(size, (16, 8), (2048, 1024))
    r = _rng(7)
    return [_boxes(r, n), _boxes(r, m)]


def _box_decode_inputs(size: str) -> list:
    counts = _pick(size, (64, 16, 4), (16384, 4096, 1024, 256, 64))
    r = _rng(8)
    out = []
    for n in counts:
        out += [(r.standard_normal((n, 4)) * 0.1).astype(np.float32), _boxes(r, n)]
    return out


def _image_inputs(size: str) -> list:
    shape = _pick(size, (2, 8, 8, 3), (16, 224, 224, 3))
    r = _rng(9)
    return [r.integers(0, 256, shape, dtype=np.uint8), np.array([0.485, 0.456, 0.406], np.float32),
            np.array([0.229, 0.224, 0.225], np.float32)]


WORKLOADS: dict[str, Workload] = {
    "lstm_cell": Workload(lstm_cell, _lstm_inputs, "LSTM cell: two matmuls and the gate update"),
    "softmax": Workload(softmax, _softmax_inputs, "softmax over the last axis"),
    "layer_norm": Workload(layer_norm, _layer_norm_inputs, "layer norm over the last axis"),
    "batch_norm_stats": Workload(batch_norm_stats, _bn_inputs, "batch-norm training mean/variance"),
    "resnet_add_relu": Workload(resnet_add_relu, _resnet_inputs, "residual add + ReLU"),
    "attention": Workload(attention, _attention_inputs, "single-head scaled dot-product attention"),
    "iou_matrix": Workload(iou_matrix, _iou_inputs, "pairwise IoU of two box sets (NMS)"),
    "box_decode": Workload(box_decode, _box_decode_inputs, "box decoding per feature-map scale"),
    "image_normalize": Workload(image_normalize, _image_inputs, "uint8 images to normalized float32"),
}
