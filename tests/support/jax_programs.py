"""The JAX corpus: a table of small JAX programs with seeded example arguments.

Each record names a program, the function and a builder for its example arguments (numpy
arrays from a fixed seed). `scripts/gen_corpus.py` lowers every record to
testdata/jax/NAME.hlo (before optimization) and NAME.opt.hlo (XLA's optimized module);
tests compare hlofuse's results with the function's own outputs on the same arguments.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np

import jax
import jax.numpy as jnp
from jax import lax


@dataclass(frozen=True)
class JaxProgram:
    """One corpus entry: `fn(*make_args())` is what the HLO files compute."""

    name: str
    fn: Callable
    make_args: Callable[[], tuple]
    rtol: float | None = None  # extra float tolerance where the program needs it
    description: str = ""


PROGRAMS: list[JaxProgram] = []


def program(name: str, rtol: float | None = None):
    """Decorator: `@program(name)` on an argument builder returning (fn, args)."""

    def deco(builder):
        fn, _ = builder(np.random.default_rng(0))
        PROGRAMS.append(JaxProgram(name, fn, lambda: builder(np.random.default_rng(0))[1], rtol,
                                   (builder.__doc__ or "").strip()))
        return builder

    return deco


def f32(rng, *shape, scale: float = 1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def by_name(name: str) -> JaxProgram:
    """The corpus entry called `name`."""
    for p in PROGRAMS:
        if p.name == name:
            return p
    raise KeyError(name)


# ---- networks -------------------------------------------------------------------------------
@program("mlp")
def _mlp(rng):
    """Two dense layers with relu and bias."""

    def fn(x, w1, b1, w2, b2):
        h = jax.nn.relu(x @ w1 + b1)
        return h @ w2 + b2

    return fn, (f32(rng, 4, 8), f32(rng, 8, 16), f32(rng, 16), f32(rng, 16, 3), f32(rng, 3))


@program("attention")
def _attention(rng):
    """Scaled dot-product attention with softmax over keys."""

    def fn(q, k, v):
        s = jnp.einsum("bqd,bkd->bqk", q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
        return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, axis=-1), v)

    return fn, (f32(rng, 2, 5, 8), f32(rng, 2, 6, 8), f32(rng, 2, 6, 8))


@program("conv_net", rtol=1e-4)
def _conv_net(rng):
    """Strided padded conv, grouped conv, relu, global mean pool."""

    def fn(x, k1, k2):
        y = lax.conv_general_dilated(x, k1, window_strides=(2, 2), padding=((1, 1), (0, 1)),
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = jax.nn.relu(y)
        y = lax.conv_general_dilated(y, k2, window_strides=(1, 1), padding="SAME",
                                     rhs_dilation=(1, 2), feature_group_count=2,
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.mean(y, axis=(1, 2))

    return fn, (f32(rng, 2, 9, 8, 3), f32(rng, 3, 3, 3, 4), f32(rng, 3, 2, 2, 6))


@program("conv_nchw_lhs_dilation", rtol=1e-4)
def _conv_nchw(rng):
    """NCHW conv with lhs dilation (transposed-conv style) and batch of 1."""

    def fn(x, k):
        return lax.conv_general_dilated(x, k, window_strides=(1, 1), padding=((2, 1), (1, 1)),
                                        lhs_dilation=(2, 1), dimension_numbers=("NCHW", "OIHW", "NCHW"))

    return fn, (f32(rng, 1, 2, 5, 4), f32(rng, 3, 2, 3, 2))


@program("lstm_cell")
def _lstm(rng):
    """One LSTM step: gates through logistic and tanh."""

    def fn(x, h, c, w, u, b):
        z = x @ w + h @ u + b
        i, f, g, o = jnp.split(z, 4, axis=-1)
        c2 = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return jax.nn.sigmoid(o) * jnp.tanh(c2), c2

    return fn, (f32(rng, 3, 5), f32(rng, 3, 4), f32(rng, 3, 4), f32(rng, 5, 16), f32(rng, 4, 16), f32(rng, 16))


@program("resnet_block")
def _resnet(rng):
    """Residual add + relu after a 1x1 conv expressed as dot."""

    def fn(x, w):
        return jax.nn.relu(x + jnp.einsum("nhwc,cd->nhwd", x, w))

    return fn, (f32(rng, 2, 4, 4, 6), f32(rng, 6, 6))


@program("layer_norm")
def _layer_norm(rng):
    """Layer normalization with scale and offset."""

    def fn(x, g, b):
        m = jnp.mean(x, axis=-1, keepdims=True)
        v = jnp.mean((x - m) ** 2, axis=-1, keepdims=True)
        return (x - m) * lax.rsqrt(v + 1e-5) * g + b

    return fn, (f32(rng, 6, 32), f32(rng, 32), f32(rng, 32))


@program("batch_norm_stats")
def _bn_stats(rng):
    """Per-channel mean and variance over N, H, W, then normalize."""

    def fn(x):
        m = jnp.mean(x, axis=(0, 1, 2))
        v = jnp.var(x, axis=(0, 1, 2))
        return m, v, (x - m) / jnp.sqrt(v + 1e-3)

    return fn, (f32(rng, 3, 4, 5, 7),)


@program("softmax")
def _softmax(rng):
    """Numerically stable softmax on rows."""
    return (lambda x: jax.nn.softmax(x, axis=-1)), (f32(rng, 7, 33, scale=4.0),)


@program("logsumexp")
def _lse(rng):
    """logsumexp over an axis (max subtraction, is-finite guard)."""
    return (lambda x: jax.nn.logsumexp(x, axis=0)), (f32(rng, 9, 5, scale=3.0),)


# ---- control flow ---------------------------------------------------------------------------
@program("scan_cumulative")
def _scan(rng):
    """lax.scan carrying a state and emitting per-step outputs (a while loop)."""

    def fn(xs, h0):
        def step(h, x):
            h = jnp.tanh(h * 0.5 + x)
            return h, h.sum()

        return lax.scan(step, h0, xs)

    return fn, (f32(rng, 6, 4), f32(rng, 4))


@program("fori_loop")
def _fori(rng):
    """fori_loop with integer and float carries."""

    def fn(x):
        def body(i, c):
            a, s = c
            return a * 0.9 + jnp.float32(i), s + i * 3

        return lax.fori_loop(0, 7, body, (x, jnp.int32(1)))

    return fn, (f32(rng, 5),)


@program("cond")
def _cond(rng):
    """lax.cond on a predicate computed from the data."""

    def fn(x, y):
        return lax.cond(jnp.sum(x) > 0, lambda a, b: a * b, lambda a, b: a - b, x, y)

    return fn, (f32(rng, 4), f32(rng, 4))


@program("switch")
def _switch(rng):
    """lax.switch with an index (clamped by JAX), three branches."""

    def fn(i, x):
        return lax.switch(i, [jnp.sin, jnp.cos, lambda v: v * 2.0], x)

    return fn, (np.int32(2), f32(rng, 3))


# ---- sorting and selection -------------------------------------------------------------------
@program("sort_multi")
def _sort(rng):
    """Multi-operand lax.sort (keys with payload) and argsort."""

    def fn(k, v):
        sk, sv = lax.sort((k, v), num_keys=1)
        return sk, sv, jnp.argsort(k, axis=-1)

    return fn, (f32(rng, 3, 10), rng.integers(-50, 50, (3, 10)).astype(np.int32))


@program("argmax_argmin")
def _argmax(rng):
    """argmax/argmin: variadic reduce over (value, index)."""
    return (lambda x: (jnp.argmax(x, axis=1), jnp.argmin(x, axis=0))), (f32(rng, 5, 8),)


@program("top_k")
def _top_k(rng):
    """lax.top_k on the last axis."""
    return (lambda x: lax.top_k(x, 3)), (f32(rng, 4, 11),)


@program("cumsum_cumprod")
def _cum(rng):
    """cumsum / cumprod / cummax (reduce-window on CPU)."""
    return (lambda x: (jnp.cumsum(x, axis=1), jnp.cumprod(x, axis=0), lax.cummax(x, axis=1))), (f32(rng, 4, 6),)


# ---- gather / scatter / dynamic slicing ------------------------------------------------------
@program("gather_take")
def _gather(rng):
    """x[idx] and take_along_axis."""

    def fn(x, idx, idx2):
        return x[idx], jnp.take_along_axis(x, idx2, axis=1)

    return fn, (f32(rng, 6, 5), rng.integers(0, 6, (4,)).astype(np.int32),
                rng.integers(0, 5, (6, 3)).astype(np.int32))


@program("scatter_ops")
def _scatter(rng):
    """x.at[idx].add / set / max with repeated indices."""

    def fn(x, idx, u):
        return x.at[idx].add(u), x.at[idx[:2]].set(u[:2]), x.at[idx].max(u)

    return fn, (f32(rng, 7, 3), np.array([1, 4, 1, 6], np.int32), f32(rng, 4, 3))


@program("dynamic_slice_update")
def _dyn(rng):
    """dynamic_slice and dynamic_update_slice with out-of-range (clamped) starts."""

    def fn(x, u, i, j):
        a = lax.dynamic_slice(x, (i, j), (3, 2))
        b = lax.dynamic_update_slice(x, u, (j, i))
        return a, b

    return fn, (f32(rng, 5, 6), f32(rng, 2, 3), np.int32(4), np.int32(-2))


# ---- integer and low-precision code ----------------------------------------------------------
@program("integer_ops")
def _int_ops(rng):
    """Bit ops, shifts, division/remainder with negatives, wrap-around multiply."""

    def fn(a, b, s):
        return (a & b, a | b, a ^ b, ~a, a << s, a >> s, lax.shift_right_logical(a, s),
                lax.div(a, b), lax.rem(a, b), a * jnp.int32(1_000_003) + b, lax.clz(a),
                lax.population_count(a), jnp.abs(a), jnp.sign(a))

    a = rng.integers(-(2**31), 2**31 - 1, (16,), dtype=np.int64).astype(np.int32)
    b = rng.integers(-9, 10, (16,)).astype(np.int32)
    b[b == 0] = 3
    s = rng.integers(0, 31, (16,)).astype(np.int32)
    return fn, (a, b, s)


@program("unsigned_ops")
def _uint_ops(rng):
    """uint32 arithmetic wrap-around, division, shifts, and u8 convert."""

    def fn(a, b):
        return a - b, a * b, a // (b | jnp.uint32(1)), a % (b | jnp.uint32(1)), a >> jnp.uint32(3), \
            a.astype(jnp.uint8)

    a = rng.integers(0, 2**32, (12,), dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, (12,), dtype=np.uint64).astype(np.uint32)
    return fn, (a, b)


@program("bf16_math", rtol=2e-2)
def _bf16(rng):
    """bf16 elementwise math and a bf16 dot with f32 accumulation."""

    def fn(x, w):
        y = jnp.tanh(x) * 1.5 + jnp.exp(x * 0.25)
        return y, jnp.dot(y, w, preferred_element_type=jnp.float32)

    return fn, (f32(rng, 4, 8).astype(ml_dtypes.bfloat16), f32(rng, 8, 3).astype(ml_dtypes.bfloat16))


@program("f16_math", rtol=5e-3)
def _f16(rng):
    """f16 arithmetic, convert to f32 and back, mean reduction."""

    def fn(x, y):
        z = x * y - x / (jnp.abs(y) + jnp.float16(1))
        return z, jnp.mean(z.astype(jnp.float32), axis=0).astype(jnp.float16), jnp.sqrt(jnp.abs(z))

    return fn, (f32(rng, 6, 5).astype(np.float16), f32(rng, 6, 5).astype(np.float16))


@program("convert_types")
def _convert(rng):
    """float->int (NaN, saturation), int->float, to bool, bitcast_convert_type widths."""

    def fn(x, i):
        return (x.astype(jnp.int32), x.astype(jnp.uint8), x.astype(jnp.bool_), i.astype(jnp.float32),
                lax.bitcast_convert_type(x, jnp.int32), lax.bitcast_convert_type(x, jnp.uint16),
                lax.bitcast_convert_type(i, jnp.uint8),
                lax.bitcast_convert_type(i.astype(jnp.int8).reshape(4, 2), jnp.int16))

    x = np.array([0.5, -1.7, 3e9, -3e9, np.nan, np.inf, -np.inf, 255.9], np.float32)
    return fn, (x, rng.integers(-1000, 1000, (8,)).astype(np.int32))


@program("reduce_precision")
def _reduce_precision(rng):
    """lax.reduce_precision to bf16-like and f16-like formats."""

    def fn(x):
        return lax.reduce_precision(x, 8, 7), lax.reduce_precision(x, 5, 10), lax.reduce_precision(x, 4, 3)

    x = np.concatenate([f32(rng, 10, scale=100.0), np.array([1e30, -1e-30, np.nan, np.inf], np.float32)])
    return fn, (x,)


# ---- elementwise math ------------------------------------------------------------------------
@program("transcendental")
def _transcendental(rng):
    """erf, tanh, logistic, expm1, log1p, atan2, pow, rsqrt, cbrt, sin/cos/tan."""

    def fn(x, y):
        p = jnp.abs(x) + 0.1
        return (lax.erf(x), jnp.tanh(x), jax.nn.sigmoid(x), jnp.expm1(x), jnp.log1p(p), jnp.arctan2(x, y),
                jnp.power(p, y), lax.rsqrt(p), jnp.cbrt(x), jnp.sin(x), jnp.cos(y), jnp.tan(x * 0.3),
                jnp.log(p), jnp.exp(y))

    return fn, (f32(rng, 20, scale=2.0), f32(rng, 20, scale=2.0))


@program("clamp_select_compare")
def _clamp(rng):
    """clamp, select (where), comparisons, maximum/minimum with NaN, rounding."""

    def fn(x, y):
        return (lax.clamp(-0.5, x, 0.5), jnp.where(x > y, x, y * 2), x == y, x != y, x <= y, jnp.maximum(x, y),
                jnp.minimum(x, y), jnp.round(x * 3), lax.round(x * 3, lax.RoundingMethod.AWAY_FROM_ZERO),
                jnp.floor(x * 3), jnp.ceil(x * 3), jnp.isfinite(x / y))

    x = f32(rng, 12)
    y = f32(rng, 12)
    x[3] = np.nan
    y[5] = np.nan
    x[7] = 0.5 / 3
    y[8] = 0.0
    return fn, (x, y)


@program("complex_ops", rtol=1e-5)
def _complex(rng):
    """complex construction, multiply, abs, real/imag, exp, conj."""

    def fn(a, b):
        z = lax.complex(a, b)
        w = z * z + jnp.conj(z)
        return jnp.abs(w), jnp.real(w), jnp.imag(w), jnp.exp(z), w / (z + 2.0)

    return fn, (f32(rng, 6), f32(rng, 6))


@program("iota_broadcast")
def _iota(rng):
    """iota in several dimensions, broadcasting and an integer mask."""

    def fn(x):
        r = lax.broadcasted_iota(jnp.int32, x.shape, 0)
        c = lax.broadcasted_iota(jnp.int32, x.shape, 1)
        return jnp.where(r >= c, x, 0.0), jnp.arange(10, dtype=jnp.float32) * 0.5

    return fn, (f32(rng, 5, 7),)


@program("data_movement")
def _data_movement(rng):
    """pad (negative and interior), concatenate, reverse, transpose, broadcast, reshape, slice."""

    def fn(x, y):
        p = lax.pad(x, 0.5, ((1, -1, 1), (-2, 2, 0)))
        return (p, jnp.concatenate([x, y], axis=0), x[::-1, ::2], x.T.reshape(12, 2),
                jnp.broadcast_to(y[0], (3, 4, 6)), x[1:3, 2:5])

    return fn, (f32(rng, 4, 6), f32(rng, 2, 6))


# ---- vision ----------------------------------------------------------------------------------
@program("iou_matrix")
def _iou(rng):
    """Pairwise IoU of boxes (broadcast, max/min, divide)."""

    def fn(a, b):
        lt = jnp.maximum(a[:, None, :2], b[None, :, :2])
        rb = jnp.minimum(a[:, None, 2:], b[None, :, 2:])
        wh = jnp.clip(rb - lt, 0)
        inter = wh[..., 0] * wh[..., 1]
        area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])
        return inter / (area(a)[:, None] + area(b)[None, :] - inter)

    def boxes(n):
        xy = rng.uniform(0, 10, (n, 2)).astype(np.float32)
        return np.concatenate([xy, xy + rng.uniform(1, 5, (n, 2)).astype(np.float32)], axis=1)

    return fn, (boxes(5), boxes(7))


@program("box_decode")
def _box_decode(rng):
    """Anchor box decode with exp of deltas and clipping."""

    def fn(anchors, deltas):
        wa = anchors[:, 2] - anchors[:, 0]
        ha = anchors[:, 3] - anchors[:, 1]
        cx = anchors[:, 0] + 0.5 * wa + deltas[:, 0] * wa
        cy = anchors[:, 1] + 0.5 * ha + deltas[:, 1] * ha
        w = wa * jnp.exp(jnp.minimum(deltas[:, 2], 4.0))
        h = ha * jnp.exp(jnp.minimum(deltas[:, 3], 4.0))
        return jnp.clip(jnp.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1), 0, 32)

    a = rng.uniform(0, 20, (8, 2)).astype(np.float32)
    return fn, (np.concatenate([a, a + 4], axis=1), f32(rng, 8, 4, scale=0.5))


@program("image_normalize")
def _image_normalize(rng):
    """uint8 image to float, per-channel mean/std normalize, NHWC->NCHW."""

    def fn(img, mean, std):
        return jnp.transpose((img.astype(jnp.float32) / 255.0 - mean) / std, (0, 3, 1, 2))

    return fn, (rng.integers(0, 256, (2, 4, 5, 3)).astype(np.uint8), np.array([0.485, 0.456, 0.406], np.float32),
                np.array([0.229, 0.224, 0.225], np.float32))


@program("max_pool")
def _max_pool(rng):
    """2x2 stride-2 max pool with padding (reduce-window)."""

    def fn(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)))

    return fn, (f32(rng, 2, 7, 6, 3),)


@program("max_pool_grad")
def _max_pool_grad(rng):
    """Gradient of a max pool: select-and-scatter."""

    def pool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def fn(x, g):
        return jax.vjp(pool, x)[1](g)[0]

    return fn, (f32(rng, 2, 6, 4, 3), f32(rng, 2, 3, 2, 3))


@program("avg_pool")
def _avg_pool(rng):
    """Average pool with window dilation-free padding (reduce-window add)."""

    def fn(x):
        s = lax.reduce_window(x, 0.0, lax.add, (1, 2, 3), (1, 1, 2), "SAME")
        return s / 6.0

    return fn, (f32(rng, 2, 5, 7),)


# ---- linear algebra --------------------------------------------------------------------------
@program("dot_general_batch")
def _dot_general(rng):
    """dot_general with batch and multiple contracting dimensions."""

    def fn(a, b):
        return lax.dot_general(a, b, (((1, 3), (2, 0)), ((0,), (1,))))

    return fn, (f32(rng, 2, 3, 4, 5), f32(rng, 5, 2, 3, 6))


@program("einsum_chain")
def _einsum(rng):
    """einsum with a transposed output and an outer product."""

    def fn(a, b, c):
        return jnp.einsum("ij,jk,k->ki", a, b, c), jnp.einsum("i,j->ij", c, c)

    return fn, (f32(rng, 3, 4), f32(rng, 4, 5), f32(rng, 5))


@program("integer_matmul")
def _int_matmul(rng):
    """int32 matmul with wrap-around and int8 inputs widened."""

    def fn(a, b):
        return a @ b, jnp.dot(a.astype(jnp.int8), b.astype(jnp.int8), preferred_element_type=jnp.int32)

    return fn, (rng.integers(-100, 100, (3, 4)).astype(np.int32), rng.integers(-100, 100, (4, 2)).astype(np.int32))


@program("fft_roundtrip", rtol=1e-4)
def _fft(rng):
    """fft, rfft and irfft."""

    def fn(x):
        return jnp.fft.fft(x.astype(jnp.complex64)), jnp.fft.irfft(jnp.fft.rfft(x), n=8)

    return fn, (f32(rng, 3, 8),)


@program("reductions_mixed")
def _reductions(rng):
    """sum/prod/max/min/any/all over different axes and dtypes."""

    def fn(x, i, b):
        return (jnp.sum(x, axis=0), jnp.prod(x, axis=1), jnp.max(x), jnp.min(i, axis=1), jnp.sum(i),
                jnp.any(b, axis=0), jnp.all(b, axis=1), jnp.max(i, axis=0))

    return fn, (f32(rng, 4, 5), rng.integers(-1000, 1000, (4, 5)).astype(np.int32), rng.random((4, 5)) > 0.3)


@program("rng_bit_generator")
def _rbg(rng):
    """jax.random with the rbg implementation (rng-bit-generator)."""

    def fn(key_data):
        key = jax.random.wrap_key_data(key_data, impl="rbg")
        return jax.random.bits(key, (4, 3), jnp.uint32)

    return fn, (np.array([1, 2, 3, 4], np.uint32),)


@program("threefry_uniform")
def _threefry(rng):
    """jax.random.uniform with the default threefry key (pure integer HLO)."""

    def fn(seed):
        return jax.random.uniform(jax.random.key(seed), (6,))

    return fn, (np.uint32(42),)


# ---- training-style programs ----------------------------------------------------------------
@program("mlp_grad", rtol=1e-4)
def _mlp_grad(rng):
    """jax.grad of a softmax cross-entropy MLP loss (transposes, broadcasts, reductions)."""

    def loss(w1, w2, x, labels):
        logits = jnp.tanh(x @ w1) @ w2
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(labels, 4), axis=-1))

    return jax.grad(loss, argnums=(0, 1)), (f32(rng, 6, 5), f32(rng, 5, 4), f32(rng, 3, 6),
                                            np.array([0, 3, 1], np.int32))


@program("gelu_variants")
def _gelu(rng):
    """Exact (erf) and tanh-approximate GELU."""
    return (lambda x: (jax.nn.gelu(x, approximate=False), jax.nn.gelu(x, approximate=True))), (f32(rng, 4, 9, scale=3),)


@program("segment_sum")
def _segment_sum(rng):
    """jax.ops.segment_sum / segment_max (scatter with a combiner) with an empty segment."""

    def fn(data, ids):
        return jax.ops.segment_sum(data, ids, num_segments=5), jax.ops.segment_max(data, ids, num_segments=5)

    return fn, (f32(rng, 8, 3), np.array([0, 0, 1, 3, 3, 3, 4, 1], np.int32))


@program("embedding_lookup")
def _embedding(rng):
    """Embedding table gather by token ids, mean over the sequence, out-of-range ids clamped."""

    def fn(table, ids):
        return jnp.mean(jnp.take(table, ids, axis=0, mode="clip"), axis=1)

    return fn, (f32(rng, 10, 4), np.array([[1, 2, 9], [0, 12, -3]], np.int32))


# ---- checking a program's outputs against JAX's (the corpus tests) ----------------------------

# (rtol, atol) by result dtype name; integers and bools compare exactly.
TOLERANCE = {"float64": (1e-12, 1e-12), "complex128": (1e-12, 1e-12), "float32": (2e-5, 2e-5),
             "complex64": (2e-5, 2e-5), "float16": (2e-3, 2e-3), "bfloat16": (2e-2, 2e-2)}


def expected_outputs(p: JaxProgram, args) -> list[np.ndarray]:
    """JAX's own results for the program (jit-compiled by XLA), flattened."""
    return [np.asarray(v) for v in jax.tree_util.tree_leaves(jax.jit(p.fn)(*args))]


def assert_outputs_match(p: JaxProgram, got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """Same count, dtypes and shapes; integers exactly, floats within TOLERANCE (or the program's rtol)."""
    assert len(got) == len(want), f"{p.name}: {len(got)} outputs, JAX gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, f"{p.name} out{i}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{p.name} out{i}")
            continue
        rtol, atol = TOLERANCE[w.dtype.name]
        if p.rtol is not None:
            rtol = atol = max(rtol, p.rtol)
        wide = np.complex128 if w.dtype.kind == "c" else np.float64
        np.testing.assert_allclose(g.astype(wide), w.astype(wide), rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=f"{p.name} out{i}")
