"""The interpreter's convolution contracts oversized patch tensors one window offset at a time,
skipping the outputs whose input is padding (runtime/interpreter/convolution.py,
`_contract_by_taps`): XLA's swap-conv-operands test module (a 30x30 window over 32x32 outputs,
128 x 512 features) needed 450 GiB for one einsum. Here every form of convolution is computed
both ways (the budget set to 0 forces the offsets) and must agree: the same values up to the
float64 sums' order, the same NaNs where an inf weight meets padding (0 * inf)."""
from __future__ import annotations

import numpy as np
import pytest

from hlofuse.hlo.attributes import ConvDimensionNumbers, Window, WindowDimension
from hlofuse.runtime.interpreter import convolution

W = WindowDimension


def _window(*dims) -> Window:
    return Window(tuple(dims))


# (lhs shape, rhs shape, dim_labels, window, feature groups, batch groups)
CASES = {
    "padded-large-window": ((2, 3, 5, 4), (4, 3, 6, 5), "bf01_oi01->bf01",
                           _window(W(size=6, padding_low=5, padding_high=5), W(size=5, padding_low=4, padding_high=4)),
                           1, 1),
    "strides-and-rhs-dilation": ((2, 3, 11, 9), (2, 3, 3, 2), "bf01_oi01->bf01",
                                 _window(W(size=3, stride=2, padding_low=1, padding_high=2, window_dilation=2),
                                         W(size=2, stride=3, padding_low=3, padding_high=0)), 1, 1),
    "lhs-dilation-negative-padding": ((1, 2, 7, 6), (3, 2, 3, 3), "bf01_oi01->bf01",
                                      _window(W(size=3, base_dilation=2, padding_low=-1, padding_high=2),
                                              W(size=3, base_dilation=3, padding_low=2, padding_high=-2,
                                                window_reversal=True)), 1, 1),
    "feature-groups-nhwc": ((2, 5, 4, 6), (3, 3, 2, 6), "b01f_01io->b01f",
                            _window(W(size=3, padding_low=2, padding_high=2), W(size=3, padding_low=1, padding_high=1)),
                            3, 1),
    "batch-groups": ((4, 3, 5, 5), (4, 3, 2, 2), "bf01_oi01->bf01",
                     _window(W(size=2, padding_low=1, padding_high=1), W(size=2)), 1, 2),
}


def _inputs(case: str, inf_weight: bool):
    lhs_shape, rhs_shape = CASES[case][:2]
    rng = np.random.default_rng(len(case))
    lhs = rng.standard_normal(lhs_shape).astype(np.float32)
    rhs = rng.standard_normal(rhs_shape).astype(np.float32)
    if inf_weight:
        rhs.reshape(-1)[3] = np.inf
    return lhs, rhs


@pytest.mark.parametrize("inf_weight", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_offset_by_offset_equals_one_einsum(case, inf_weight, monkeypatch):
    _, _, labels, window, fg, bg = CASES[case]
    lhs, rhs = _inputs(case, inf_weight)
    dn = ConvDimensionNumbers.of(labels)
    # Contractions this small are summed term by term; both sides take the einsum paths here.
    monkeypatch.setattr(convolution, "sequential_dtype", lambda *a, **k: None)
    calls = []
    real = convolution._contract_by_taps
    monkeypatch.setattr(convolution, "_contract_by_taps", lambda *a: calls.append(1) or real(*a))
    args = (lhs, rhs, window, dn, fg, bg, np.dtype(np.float32))
    whole = convolution.convolve(*args)
    assert not calls
    monkeypatch.setattr(convolution, "PATCH_ELEMENT_BUDGET", 0)
    taps = convolution.convolve(*args)
    assert calls
    assert taps.shape == whole.shape
    np.testing.assert_array_equal(np.isnan(taps), np.isnan(whole))
    if inf_weight:
        assert np.isnan(whole).any()  # the case exercises inf meeting padding or input
    np.testing.assert_allclose(taps, whole, rtol=1e-6, atol=1e-6)  # f64 sums rounded to f32
