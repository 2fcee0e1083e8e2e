"""benchmarks/conv_classes.py: its classes have ResNet-50's shapes and the M x N x K of their
GEMMs, the epilogue module computes batch norm + ReLU of the convolution, and its sgemm call is
a row-major matrix product."""
from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import conv_classes as cc  # noqa: E402

import hlofuse  # noqa: E402


@pytest.mark.parametrize("name,image,out,mnk", [
    ("stem_7x7s2_3-64", 224, (1, 112, 112, 64), (12544, 64, 147)),
    ("conv2_3x3_64", 224, (1, 56, 56, 64), (3136, 64, 576)),
    ("conv3_1x1s2_256-512", 224, (1, 28, 28, 512), (784, 512, 256)),
    ("conv5_3x3_512", 224, (1, 7, 7, 512), (49, 512, 4608)),
    ("conv5_1x1_2048-512", 128, (1, 4, 4, 512), (16, 512, 2048)),
])
def test_class_shapes_and_gemm_sizes(name, image, out, mnk):
    # ImageNet's 224 gives ResNet-50's published stage sizes (112, 56, 28, 14, 7); M is the
    # output positions, K the taps times input features
    text, got = cc.module_text(1, image, *cc.CLASSES[name])
    assert tuple(hlofuse.parse_hlo(text).entry.root.shape.dims) == out
    assert got == mnk


def test_epilogue_module_is_scale_shift_relu_of_the_convolution():
    # the two modules against each other through the interpreter: relu(conv * s + t) per feature
    rng = np.random.default_rng(0)
    text, _ = cc.module_text(2, 32, 4, 8, 16, 3, 1, 1)  # conv2-like: 8x8 input, 8 -> 16 features
    bare, _ = cc.module_text(2, 32, 4, 8, 16, 3, 1, 1, epilogue=False)
    x = rng.standard_normal((2, 8, 8, 8)).astype(np.float32)
    w = rng.standard_normal((3, 3, 8, 16)).astype(np.float32)
    s, t = rng.standard_normal(16).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    (conv,) = hlofuse.compile(hlofuse.parse_hlo(bare), target="interpreter", fusion=False)(x, w)
    (got,) = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(x, w, s, t)
    np.testing.assert_allclose(np.asarray(got), np.maximum(np.asarray(conv) * s + t, 0), rtol=1e-6, atol=1e-6)


def test_sgemm_is_the_row_major_product():
    from hlofuse.runtime.gemm_provider import onednn_library

    if onednn_library() is None:
        pytest.skip("libdnnl is not installed")
    g = cc.Sgemm(24, 40, 72, 1)
    g()
    np.testing.assert_allclose(g.c, g.a.astype(np.float64) @ g.b, rtol=1e-4, atol=1e-4)


def test_time_rounds_times_every_call_each_round_after_a_warm_up():
    # each path is called reps times per round, rounds + 1 rounds (the first untimed), and with
    # an eviction array it is written once before each call
    counts = {"a": 0, "b": 0}
    calls = {p: (lambda p=p: counts.__setitem__(p, counts[p] + 1)) for p in counts}
    evict = np.zeros(4, np.float32)
    times = cc.time_rounds(calls, 3, 2, time.perf_counter, evict)
    assert counts == {"a": 8, "b": 8} and {p: len(t) for p, t in times.items()} == {"a": 3, "b": 3}
    assert all(t >= 0 for ts in times.values() for t in ts) and evict[0] == 16
