"""Mixed-type dots and convolutions (passes/contraction_types.py,
hlo.dtypes.contraction_type_of_other_kind).

XLA:CPU computes an f32 x s64 dot into s32 as the f32 dot, converted with saturation; hlofuse's
kernels converted the operands to s32 first and the interpreter wrapped the float result
(the HLO mutation fuzzer, seed 34: every element of the CPU's result wrong, the interpreter's
saturated element wrong). The same for an f32 x f32 convolution into an integer type (seed 36:
the CPU's library step converted the operands first, the interpreter's too, and wrapped a
saturating element). Every backend and the interpreter now agree with XLA:CPU."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.dtypes import contraction_type_of_other_kind, element_type
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.contraction_types import ContractionTypes
from xla_oracle import run_on_xla, xla_available

MIXED = """HloModule mixed
ENTRY main {
  a = f32[3,4] parameter(0)
  b = s64[4,2] parameter(1)
  ROOT d = s32[3,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""

# the fuzzer's operands: fractions (truncated if converted first) and 9.2e18 (saturates)
A = np.array([[7.0e4, 0.54501635, 7.8265181, 3.738785], [-4.2989388, 1.7109838, -3.2534471, -0.83863217],
              [4.7716169, 9.223372e18, -5.2867198, -2.8317246]], np.float32)
B = np.array([[76, 3], [97, -97], [50, -21], [38, 60]], np.int64)


@pytest.mark.parametrize("lhs,rhs,out,want", [
    ("f32", "s64", "s32", "f32"),   # float operands into an integer result: computed in f32
    ("c64", "f32", "f32", "c64"),  # computed in c64, then its real part
    ("s8", "s8", "s32", None),      # upcasts to the result: computed in s32, no rewrite
    ("bf16", "bf16", "f32", None),
    ("f32", "f32", "bf16", None),   # same kind: accumulated in f32 and rounded, as before
    ("u8", "s8", "s32", None),
])
def test_which_contractions_change_kind(lhs, rhs, out, want):
    got = contraction_type_of_other_kind(element_type(lhs), element_type(rhs), element_type(out))
    assert (got.name if got else None) == want


def test_the_pass_makes_the_order_explicit():
    module = parse_hlo(MIXED)
    assert ContractionTypes().run(module)
    ops = {i.opcode: i for i in module.entry.instructions}
    assert module.entry.root.opcode == "convert" and module.entry.root.shape.dtype.name == "s32"
    dot = ops["dot"]
    assert dot.shape.dtype.name == "f32" and [o.shape.dtype.name for o in dot.operands] == ["f32", "f32"]
    assert not ContractionTypes().run(module)  # nothing left to rewrite


def _expected() -> np.ndarray:
    """The f32 dot (f64 accumulation, rounded) saturated into s32, NaN to 0: XLA's convert."""
    acc = A.astype(np.float64) @ B.astype(np.float64)
    return np.clip(acc, np.iinfo(np.int32).min, np.iinfo(np.int32).max).astype(np.int32)


@pytest.mark.parametrize("target", ["interpreter", "cpu", "gpu-emulated"])
def test_every_backend_computes_it_as_xla(target):
    got = np.asarray(hlofuse.compile(parse_hlo(MIXED), target=target)(A, B)[0])
    assert got.tolist() == _expected().tolist()


@pytest.mark.skipif(not xla_available(), reason="needs jax (the xla extra)")
def test_the_expectation_is_xla_cpus():
    assert np.asarray(run_on_xla(MIXED, [A, B])[0]).tolist() == _expected().tolist()


CONV = """HloModule mixed_conv
ENTRY main {
  x = f32[1,1,6] parameter(0)
  k = f32[1,1,3] parameter(1)
  ROOT c = s32[1,1,11] convolution(x, k), window={size=3 pad=1_1 lhs_dilate=2}, dim_labels=bf0_oi0->bf0
}
"""
# fractions (truncated differently if converted first) and +-1e10 (saturate into s32)
X = np.array([[[3.75, -2.5, 1e10, 0.3, -1e10, 7.9]]], np.float32)
K = np.array([[[0.5, 1.25, -0.75]]], np.float32)


def _conv_expected() -> np.ndarray:
    """The convolution in f64 over the input dilated by 2 (zeros between) and padded by one
    zero each side, truncated toward zero and saturated into s32: XLA's convert."""
    x = np.zeros(2 * 6 - 1 + 2)
    x[1:-1:2] = X.ravel()
    acc = np.array([x[j:j + 3] @ K.ravel().astype(np.float64) for j in range(11)])
    return np.trunc(np.clip(acc, np.iinfo(np.int32).min, np.iinfo(np.int32).max)).astype(np.int32).reshape(1, 1, 11)


def test_the_pass_rewrites_a_mixed_convolution():
    module = parse_hlo(CONV)
    assert ContractionTypes().run(module)
    conv = next(i for i in module.entry.instructions if i.opcode == "convolution")
    assert conv.shape.dtype.name == "f32" and module.entry.root.opcode == "convert"


@pytest.mark.parametrize("target", ["interpreter", "cpu", "gpu-emulated"])
def test_every_backend_computes_the_convolution_as_xla(target):
    got = np.asarray(hlofuse.compile(parse_hlo(CONV), target=target)(X, K)[0])
    assert got.tolist() == _conv_expected().tolist()


@pytest.mark.skipif(not xla_available(), reason="needs jax (the xla extra)")
def test_the_convolutions_expectation_is_xla_cpus():
    assert np.asarray(run_on_xla(CONV, [X, K])[0]).tolist() == _conv_expected().tolist()
