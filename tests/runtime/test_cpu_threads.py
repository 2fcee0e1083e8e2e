"""The CPU executor's thread-count tuner: explores each choice, then keeps the fastest and
re-times the others now and then; splitting never changes results."""
from __future__ import annotations

import numpy as np

import hlofuse
from hlofuse.runtime.cpu_threads import SplitTuner, split_choices


def _drive(tuner: SplitTuner, cost: dict[int, float], calls: int) -> list[int]:
    chosen = []
    for _ in range(calls):
        c = tuner.choose()
        tuner.record(c, cost[c])
        chosen.append(c)
    return chosen


def test_tuner_explores_then_keeps_the_fastest():
    tuner = SplitTuner([1, 2])
    chosen = _drive(tuner, {1: 3.0, 2: 1.0}, 200)
    n = 2 * SplitTuner.SAMPLES
    assert sorted(chosen[:n]) == [1] * SplitTuner.SAMPLES + [2] * SplitTuner.SAMPLES
    later = chosen[n:]
    assert later.count(2) > 0.9 * len(later)
    assert 1 in later  # re-timed now and then


def test_tuner_follows_a_change_in_costs():
    tuner = SplitTuner([1, 2])
    _drive(tuner, {1: 1.0, 2: 3.0}, 100)
    chosen = _drive(tuner, {1: 5.0, 2: 3.0}, 400)
    assert chosen[-100:].count(2) > 90


def test_single_choice_needs_no_timing():
    tuner = SplitTuner([1])
    assert _drive(tuner, {1: 1.0}, 5) == [1] * 5


def test_split_choices():
    assert split_choices(1, 1 << 30, 1 << 14) == [1]  # one unit cannot be split
    assert split_choices(1000, 1000, 1 << 14) == [1]  # too little work
    big = split_choices(1 << 20, 1 << 24, 1 << 14)
    assert big[0] == 1 and all(1 <= c <= 1 << 20 for c in big) and big == sorted(set(big))


def test_results_do_not_depend_on_the_thread_count():
    exe = hlofuse.compile(hlofuse.parse_hlo("""
HloModule m
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY f {
  x = f32[512,300] parameter(0)
  e = f32[512,300] exponential(x)
  zero = f32[] constant(0)
  ROOT s = f32[512] reduce(e, zero), dimensions={1}, to_apply=add_f32
}
"""), target="cpu")
    x = np.random.default_rng(3).standard_normal((512, 300)).astype(np.float32)
    (kernel,) = exe.program.loaded.values()
    results = []
    for threads in (1, 2, 3):
        kernel.tuner = SplitTuner([threads])
        results.append(exe(x)[0])
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    np.testing.assert_allclose(results[0], np.exp(x.astype(np.float64)).sum(axis=1), rtol=1e-5)
