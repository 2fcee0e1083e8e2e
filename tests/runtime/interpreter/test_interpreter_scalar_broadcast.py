"""A scalar-to-scalar `broadcast` (dimensions={}) in a called computation is an identity per
batch element, so a comparator or combiner containing one is still evaluated on whole arrays
at once (Interpreter.call_batched). XLA's TopK rewriter emits such comparators
(select(broadcast(true), compare(a, b, GT, TOTALORDER), broadcast(true))). A broadcast that adds
dimensions is not elementwise. Expected orders come from numpy on the float bits, independent
of the interpreter's own total-order key."""
from __future__ import annotations

import numpy as np
import pytest

from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.interpreter import Interpreter, evaluate, is_elementwise_computation
from hlofuse.runtime.interpreter import sort as sort_rules

# XLA's TopK comparator variant (the corpus's topk__sort_iota_cmp4 module), on a smaller array.
CMP4 = """HloModule cmp4
compare {
  p.1.lhs = s32[] parameter(2)
  p.1.rhs = s32[] parameter(3)
  t = pred[] constant(true)
  bt = pred[] broadcast(t), dimensions={}
  lhs = f32[] parameter(0)
  rhs = f32[] parameter(1)
  gt = pred[] compare(lhs, rhs), direction=GT, type=TOTALORDER
  ROOT r = pred[] select(bt, gt, bt)
}
ENTRY e {
  x = f32[3,300] parameter(0)
  iota = s32[3,300] iota(), iota_dimension=1
  ROOT s = (f32[3,300], s32[3,300]) sort(x, iota), dimensions={1}, is_stable=true, to_apply=compare
}
"""

# A scalar broadcast of a batched value (a parameter), not only of a constant.
CMP_PARAM = """HloModule cmpp
compare {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ba = f32[] broadcast(a), dimensions={}
  ROOT lt = pred[] compare(ba, b), direction=LT, type=TOTALORDER
}
ENTRY e {
  x = f32[3,300] parameter(0)
  ROOT s = f32[3,300] sort(x), dimensions={1}, is_stable=true, to_apply=compare
}
"""

WIDENING = """HloModule w
c {
  a = f32[] parameter(0)
  b = f32[2] broadcast(a), dimensions={}
  ROOT r = f32[2] negate(b)
}
ENTRY e {
  x = f32[] parameter(0)
  ROOT y = f32[2] call(x), to_apply=c
}
"""


def _comparator(module):
    return module.entry.root.attrs["to_apply"] if module.entry.root.opcode == "sort" else None


def _input() -> np.ndarray:
    """Rounded normals (many ties) with NaNs of both signs, both zeros and infinities."""
    rng = np.random.default_rng(12)
    x = np.round(rng.standard_normal((3, 300)) * 2).astype(np.float32)
    special = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, np.nan], np.float32)
    x[:, 40:49] = special
    x[:, 200:209] = special[::-1]
    x[2, :] = -0.0  # a row of equal keys (under the total order)
    x[2, ::3] = 0.0
    return x


def _total_order(x: np.ndarray) -> np.ndarray:
    """IEEE total order as int64: -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN."""
    bits = x.view(np.int32).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFFFFFF) - 1, bits)


def test_only_scalar_to_scalar_broadcasts_count_as_elementwise():
    assert is_elementwise_computation(_comparator(parse_hlo(CMP4)))
    assert is_elementwise_computation(_comparator(parse_hlo(CMP_PARAM)))
    widening = parse_hlo(WIDENING)
    assert not is_elementwise_computation(widening.entry.root.attrs["to_apply"])
    assert evaluate(widening, [np.float32(3)])[0].tolist() == [-3.0, -3.0]


@pytest.mark.parametrize("text", [CMP4, CMP_PARAM], ids=["cmp4", "param"])
def test_batched_comparator_equals_per_comparison_calls(text):
    """call_batched over all pairs gives, element by element, what one call per pair gives."""
    comp = _comparator(parse_hlo(text))
    interp = Interpreter()
    x = _input()[:, :60].reshape(-1)
    a, b = np.repeat(x, x.size), np.tile(x, x.size)  # every pair, NaNs and zeros included
    extra = [np.zeros_like(a, dtype=np.int32)] * (len(comp.parameters) - 2)
    args = [a, b] + extra
    got = np.broadcast_to(np.asarray(interp.call_batched(comp, args)), a.shape)
    one = np.array([bool(interp.call(comp, [np.asarray(v[k]) for v in args])) for k in range(0, a.size, 7)])
    np.testing.assert_array_equal(got[::7], one)
    ka, kb = _total_order(a), _total_order(b)
    np.testing.assert_array_equal(got, ka > kb if text is CMP4 else ka < kb)


@pytest.mark.parametrize("text", [CMP4, CMP_PARAM], ids=["cmp4", "param"])
def test_sort_takes_the_batched_path_and_matches_numpy(text, monkeypatch):
    """The sort runs the batched merge sort (never one call per comparison), its permutation
    equals numpy's stable argsort on the total order, and equals the per-comparison path's."""
    module = parse_hlo(text)
    x = _input()
    key = _total_order(x)
    want = np.argsort(-key if text is CMP4 else key, axis=1, kind="stable")

    def refuse(*a, **k):
        raise AssertionError("the comparator was called per comparison")

    with monkeypatch.context() as m:
        m.setattr(sort_rules, "_order_by_calls", refuse)
        fast = evaluate(module, [x])
    with monkeypatch.context() as m:
        m.setattr(sort_rules, "batched_call", lambda comp, interp: None)
        slow = evaluate(module, [x])
    sorted_x = np.take_along_axis(x, want, axis=1)
    for got in (fast, slow):
        np.testing.assert_array_equal(got[0].view(np.uint32), sorted_x.view(np.uint32))  # NaN signs, -0
        if text is CMP4:
            np.testing.assert_array_equal(got[1], want)


def test_gpu_host_sort_calls_the_comparator_batched(monkeypatch):
    """On the real GPU's code paths (host memory standing in, test_gpu_device._on_fake_cuda) the
    cmp4 comparator is evaluated on the host in batches (runtime/host_calls.py): no call per
    comparison, no launch for it, and the result is numpy's order and the interpreter's."""
    from tests.runtime.test_gpu_device import _on_fake_cuda

    module = parse_hlo(CMP4)
    prog, _, _ = _on_fake_cuda(module, monkeypatch)
    per_call = []
    real_call = Interpreter.call

    def call(self, computation, args):
        if not self.batched:
            per_call.append(computation.name)
        return real_call(self, computation, args)

    monkeypatch.setattr(Interpreter, "call", call)
    x = _input()
    got = prog.run([x])
    assert per_call == []
    monkeypatch.setattr(Interpreter, "call", real_call)
    want = np.argsort(-_total_order(x), axis=1, kind="stable")
    np.testing.assert_array_equal(got[1], want)
    np.testing.assert_array_equal(got[0].view(np.uint32), np.take_along_axis(x, want, axis=1).view(np.uint32))
    ref = evaluate(module, [x], denormals="keep")
    np.testing.assert_array_equal(got[1], ref[1])
