"""benchmarks/mobilenet_layers.py: its layer classes have MobileNetV2's shapes (keras's zero
padding before a stride-2 convolution), and hlofuse's kernel time is the profile's."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import mobilenet_layers as ml  # noqa: E402

import hlofuse  # noqa: E402

jax = pytest.importorskip("jax")


@pytest.mark.parametrize("name,out", [("dw s2 80x80x96", (8, 40, 40, 96)), ("dw s1 5x5x960", (8, 5, 5, 960)),
                                      ("dw s2 10x10x576", (8, 5, 5, 576)),
                                      ("proj 40x40 144->24", (8, 40, 40, 24)), ("stem 160 3->32", (8, 80, 80, 32))])
def test_layer_shapes(name, out):
    fn, args = ml.layer(*ml.LAYERS[name])
    assert jax.eval_shape(fn, *args).shape == out


def test_layer_matches_jax_and_kernel_time_is_positive():
    """A small layer of the same kind through hlofuse: jax's values, and a kernel time."""
    fn, args = ml.layer("dw", 6, 16, 16, 2)
    exe = hlofuse.compile(hlofuse.parse_hlo(jax.jit(fn).lower(*args).as_text(dialect="hlo")), target="cpu")
    np.testing.assert_allclose(np.asarray(exe(*args)[0]), np.asarray(jax.jit(fn)(*args)), rtol=1e-5, atol=1e-5)
    assert ml.kernel_seconds(exe, args, 2) > 0


def test_vector_ab_compares_the_same_bits(monkeypatch, capsys):
    """--vector-ab on a small depthwise layer: the vector, scalar and control kernels agree bit
    for bit, and each side has an LLVM time and a kernel time."""
    monkeypatch.setitem(ml.LAYERS, "dw tiny", ("dw", 6, 32, 32, 2))
    ml.vector_ab(["dw tiny"], rounds=1)
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("dw tiny"))
    fields = row.split()
    assert fields[2] == "True" and all(float(f) > 0 for f in fields[3:7]), row


def test_features_ab_compares_the_same_bits(monkeypatch, capsys):
    """--features-ab on a small stem layer (the direct kernel with feature vectors against the
    scalar feature loop), kernel and call times: the three kernels agree bit for bit, and each
    side has an LLVM time and a time; a layer the GEMM kernel runs is named and skipped."""
    monkeypatch.setitem(ml.LAYERS, "stem tiny", ("stem", 12, 3, 32, 2))
    monkeypatch.setitem(ml.LAYERS, "exp tiny", ("expand", 4, 24, 144, 1))
    for call_time in (False, True):
        ml.vector_ab(["stem tiny", "exp tiny"], rounds=1, kind="dense", call_time=call_time)
        out = capsys.readouterr().out.splitlines()
        fields = next(line for line in out if line.startswith("stem tiny")).split()
        assert fields[2] == "True" and all(float(f) > 0 for f in fields[3:7]), fields
        assert any(line.startswith("exp tiny") and "not a direct kernel" in line for line in out), out
