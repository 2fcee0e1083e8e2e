"""Called computations a library rule evaluates per comparison or per element (a sort's
comparator, a scatter's combiner) run on the host on the real GPU, not as a kernel launch and
a read-back each (runtime/host_calls.py). Checked on CudaDevice's code paths with host memory
standing in for the device (test_gpu_device._on_fake_cuda), counting launches and copies;
results equal the interpreter's with the real GPU's denormal semantics (keep). The GPU
emulation takes the same host path (its calls run the emulated grid, about 0.25 ms each), with
its own semantics (flush)."""
from __future__ import annotations

import numpy as np
import pytest

from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.gpu_executor import GpuProgram
from hlofuse.runtime.host_calls import batched_stable_order, is_strict_weak_order_result
from hlofuse.runtime.interpreter import evaluate
from hlofuse.runtime.interpreter.sort import comparator_sort_order
from tests.runtime.test_gpu_device import _on_fake_cuda

# XLA's TopK rewriter's comparator (openxla/xla's topk test HLO): a descending total order on
# f32 by the bits, select(x < 0, 0x7fffffff - x, x) compared with GT, the iota as payload.
TOPK = """HloModule topk
compare {
  p.1.lhs = s32[] parameter(2)
  p.1.rhs = s32[] parameter(3)
  lhs = f32[] parameter(0)
  lb = s32[] bitcast-convert(lhs)
  zero = s32[] constant(0)
  lneg = pred[] compare(lb, zero), direction=LT
  max = u32[] constant(2147483647)
  lu = u32[] bitcast-convert(lhs)
  lflip = u32[] subtract(max, lu)
  lfs = s32[] bitcast-convert(lflip)
  lkey = s32[] select(lneg, lfs, lb)
  rhs = f32[] parameter(1)
  rb = s32[] bitcast-convert(rhs)
  rneg = pred[] compare(rb, zero), direction=LT
  ru = u32[] bitcast-convert(rhs)
  rflip = u32[] subtract(max, ru)
  rfs = s32[] bitcast-convert(rflip)
  rkey = s32[] select(rneg, rfs, rb)
  ROOT gt = pred[] compare(lkey, rkey), direction=GT
}
ENTRY e {
  x = f32[8,1237] parameter(0)
  iota = s32[8,1237] iota(), iota_dimension=1
  s = (f32[8,1237], s32[8,1237]) sort(x, iota), dimensions={1}, is_stable=true, to_apply=compare
  v = f32[8,1237] get-tuple-element(s), index=0
  vs = f32[8,5] slice(v), slice={[0:8], [0:5]}
  i = s32[8,1237] get-tuple-element(s), index=1
  is = s32[8,5] slice(i), slice={[0:8], [0:5]}
  ROOT t = (f32[8,5], s32[8,5]) tuple(vs, is)
}
"""


def _counting(prog, monkeypatch) -> list:
    """Record every kernel launch of `prog` (on the fake device) by launch name."""
    launches = []
    real = prog.device.launch

    def launch(launch, ptrs):
        launches.append(launch.name)
        real(launch, ptrs)

    monkeypatch.setattr(prog.device, "launch", launch, raising=False)
    return launches


def _topk_input() -> np.ndarray:
    """Normal values with ties, both zeros, infinities, NaNs of both signs and denormals."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((8, 1237)).astype(np.float32)
    x[:, ::7] = np.round(x[:, ::7])  # ties
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-40, -1e-40], np.float32)
    x[:, 100:108] = special
    x[3, :] = x[3, 0]  # one row of equal keys
    return x


def _equal(got: list, want) -> None:
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))  # bits: NaN signs, -0


def test_topk_comparator_runs_on_the_host_not_per_comparison(monkeypatch):
    """XLA's TopK sort: a handful of launches (the iota, the slices) where each of the ~100,000
    comparisons used to launch the comparator's kernel; the result is the interpreter's."""
    module = parse_hlo(TOPK)
    prog, fake, _ = _on_fake_cuda(module, monkeypatch)
    launches = _counting(prog, monkeypatch)
    x = _topk_input()
    got = prog.run([x])
    _equal(got, evaluate(module, [x], denormals="keep"))
    assert len(launches) <= 4, launches
    assert fake.h2d <= 2  # the input, and at most the sort's operands once


@pytest.mark.parametrize("text", ["TOPK", "SORT_LE", "SORT_CALL"])
def test_the_emulation_runs_comparators_on_the_host(text, monkeypatch):
    """The emulated GPU calls no comparator through its grid (XLA's stable sort expander test
    module, a 4 x 8,732 sort with TopK's comparator, took 2 minutes that way); the results are
    the interpreter's with the emulation's denormal semantics (flush)."""
    module = parse_hlo(globals()[text])
    prog = GpuProgram.compile(module, emulated=True)
    calls = []
    real = prog.call
    monkeypatch.setattr(prog, "call", lambda comp, args: calls.append(comp.name) or real(comp, args))
    rng = np.random.default_rng(5)
    shape = tuple(module.entry.parameters[0].shape.dims)
    x = _topk_input() if text == "TOPK" else np.round(rng.standard_normal(shape) * 3).astype(np.float32)
    args = [x] + ([np.arange(x.size, dtype=np.int32).reshape(shape)] if len(module.entry.parameters) > 1 else [])
    got = prog.run(args)
    _equal(got, evaluate(module, args, denormals="flush"))
    assert calls == []


SORT_LE = """HloModule le
c {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=LE
}
ENTRY e {
  x = f32[3,200] parameter(0)
  y = s32[3,200] parameter(1)
  ROOT s = (f32[3,200], s32[3,200]) sort(x, y), dimensions={1}, is_stable=true, to_apply=c
}
"""

# A comparator that is not elementwise (it calls a computation): evaluated per comparison,
# on the host.
SORT_CALL = """HloModule called
key {
  v = f32[] parameter(0)
  ROOT a = f32[] abs(v)
}
c {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ka = f32[] call(a), to_apply=key
  kb = f32[] call(b), to_apply=key
  ROOT r = pred[] compare(ka, kb), direction=LT
}
ENTRY e {
  x = f32[2,150] parameter(0)
  ROOT s = f32[2,150] sort(x), dimensions={1}, is_stable=true, to_apply=c
}
"""


@pytest.mark.parametrize("text", [SORT_LE, SORT_CALL], ids=["LE", "called"])
def test_other_comparators_run_on_the_host(text, monkeypatch):
    """LE (no strict weak order: XLA's own algorithm, one host call per comparison) and a
    comparator that is not elementwise: no launch per comparison, the interpreter's result."""
    module = parse_hlo(text)
    prog, _, _ = _on_fake_cuda(module, monkeypatch)
    launches = _counting(prog, monkeypatch)
    rng = np.random.default_rng(5)
    shape = tuple(module.entry.parameters[0].shape.dims)
    x = np.round(rng.standard_normal(shape) * 3).astype(np.float32)  # many ties
    args = [x] + ([np.arange(x.size, dtype=np.int32).reshape(shape)] if len(module.entry.parameters) > 1 else [])
    got = prog.run(args)
    _equal(got, evaluate(module, args, denormals="keep"))
    assert launches == []


SCATTER = """HloModule sc
comb {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  two = f32[] constant(2)
  t = f32[] multiply(a, two)
  ROOT r = f32[] add(t, b)
}
ENTRY e {
  o = f32[50] parameter(0)
  i = s32[400,1] parameter(1)
  u = f32[400] parameter(2)
  ROOT s = f32[50] scatter(o, i, u), update_window_dims={}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=comb
}
"""


def test_scatter_combiner_runs_on_the_host_in_order(monkeypatch):
    """A combiner that is no ufunc (2a + b: the order of updates to one element matters) with
    many updates per element, some out of bounds: no launch per update, the interpreter's result."""
    module = parse_hlo(SCATTER)
    prog, _, _ = _on_fake_cuda(module, monkeypatch)
    launches = _counting(prog, monkeypatch)
    rng = np.random.default_rng(6)
    o = rng.standard_normal(50).astype(np.float32)
    i = rng.integers(-3, 53, (400, 1)).astype(np.int32)
    u = rng.standard_normal(400).astype(np.float32)
    got = prog.run([o, i, u])
    _equal(got, evaluate(module, [o, i, u], denormals="keep"))
    assert launches == []


def _batched(fn):
    return lambda args: [fn(*args)]


def test_batched_stable_order_matches_a_stable_argsort():
    """The batched merge sort gives numpy's stable order on keys with many ties, for lengths
    that are not powers of two, and passes its own check."""
    rng = np.random.default_rng(7)
    for n in (2, 3, 7, 100, 129):
        keys = rng.integers(0, 5, (4, n))
        less = _batched(lambda a, b: a < b)
        perm = batched_stable_order(less, [keys])
        np.testing.assert_array_equal(perm, np.argsort(keys, axis=1, kind="stable"))
        assert is_strict_weak_order_result(less, [keys], perm)


def test_orders_of_no_strict_weak_order_are_refused():
    """LE and a constant true are no strict weak orders: the check refuses what the merge sort
    makes of them, so the caller runs XLA's algorithm (which differs from the stable order)."""
    keys = np.array([[3, 1, 2, 1, 3, 0, 2]])
    for fn in (lambda a, b: a <= b, lambda a, b: np.ones(np.shape(a), bool)):
        less = _batched(fn)
        perm = batched_stable_order(less, [keys])
        assert perm is None or not is_strict_weak_order_result(less, [keys], perm)
    xla = comparator_sort_order(7, lambda i, j: keys[0, i] <= keys[0, j])
    assert xla != list(np.argsort(keys[0], kind="stable"))
