"""benchmarks/region_cost.py: each measuring loop computes what it claims (a kernel applied
`iterations` times by a while loop, checked against numpy), its work is counted as
codegen/region_cost.py prices it, and the timing gives both thread counts every round."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import region_cost as bench  # noqa: E402

import hlofuse  # noqa: E402
from hlofuse.codegen import region_cost  # noqa: E402

STEP = {  # one iteration of each elementwise body, in numpy (f32)
    "plain": lambda x: x * np.float32(0.5) + np.float32(0.5),
    "divide": lambda x: np.float32(1.5) / (x + np.float32(1.5)),
    "tanh": lambda x: np.tanh(x * np.float32(1.5)),
    "exp": lambda x: np.exp(x * np.float32(-0.5)),
    "logistic": lambda x: 1 / (1 + np.exp(-(x * np.float32(1.5)))),
}


@pytest.mark.parametrize("kind", sorted(STEP))
def test_elementwise_loops_compute_their_kernel(kind):
    text, args, work, per = bench.case(kind, 1024, 3)
    (got,) = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu")(*args)
    want = args[0].astype(np.float64)
    for _ in range(3):
        want = STEP[kind](want)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    assert work == 1024
    assert per == pytest.approx(region_cost.ELEMENT_NS + region_cost.TRANSCENDENTAL_NS * (kind not in ("plain", "divide")))


def test_row_sums_and_gemm_loops_compute_their_kernels():
    text, args, work, per = bench.case("rowsum", 256 * 8, 4)
    (got,) = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu")(*args)
    np.testing.assert_allclose(got, args[0].sum(axis=1) * 3, rtol=1e-5, atol=1e-4)  # the last counter is 3
    assert (work, per) == (256 * 8, region_cost.REDUCED_ELEMENT_NS)
    text, args, work, per = bench.case("gemm", 16, 2)
    (got,) = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu")(*args)
    np.testing.assert_allclose(got, args[0] @ args[1] @ args[1], rtol=1e-4, atol=1e-4)
    assert (work, per) == (16 * 128 * 128, region_cost.MULTIPLY_ADD_NS)


def test_every_round_times_both_thread_counts():
    text, args, _, _ = bench.case("plain", 1024, 2)
    times = bench.per_iteration(text, args, rounds=3, iterations=2)
    assert sorted(times) == [1, 2] and all(len(wall) == len(cpu) == 3 for wall, cpu in times.values())
