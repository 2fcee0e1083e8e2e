"""The benchmark workloads (benchmarks/workloads.py) through the fusion passes: results are
bit-identical to the unfused module, and fusion cuts kernels and bytes moved."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

from workloads import WORKLOADS  # noqa: E402

from hlofuse.hlo.parser import parse_hlo  # noqa: E402
from hlofuse.passes.fusion import fusion_passes, module_log  # noqa: E402
from hlofuse.passes.fusion.cost_model import module_cost  # noqa: E402
from hlofuse.passes.fusion.report import build_report  # noqa: E402
from hlofuse.runtime.interpreter import evaluate  # noqa: E402


@pytest.mark.parametrize("target", ["gpu", "cpu"])
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_workload_fuses_and_keeps_results(name, target):
    import jax

    w = WORKLOADS[name]
    args = w.inputs("small")
    text = jax.jit(w.fn).lower(*args).as_text(dialect="hlo")
    original = parse_hlo(text)
    fused = original.clone()  # the report traces fused instructions back through their origin
    for p in fusion_passes(target):
        p.run(fused)
    report = build_report(original, fused, module_log(fused))
    assert report.after.kernels < report.before.kernels
    assert report.after.bytes_moved < report.before.bytes_moved
    assert module_cost(fused).kernels == report.after.kernels
    np_args = [np.asarray(a) for a in args]
    expected = evaluate(original, np_args)
    got = evaluate(parse_hlo(fused.to_text()), np_args)
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(expected, got))


def test_workload_inputs_have_two_sizes():
    for w in WORKLOADS.values():
        small, large = w.inputs("small"), w.inputs("large")
        assert sum(a.nbytes for a in small) < sum(a.nbytes for a in large)
    with pytest.raises(ValueError):
        WORKLOADS["softmax"].inputs("huge")


def test_fusion_stats_row():
    # benchmarks/fusion_stats.py: one row per workload, both policies, and XLA's CPU fusion count.
    from fusion_stats import stats_for

    w = WORKLOADS["softmax"]
    row = stats_for("softmax", w.fn, w.inputs("small"))
    for target in ("gpu", "cpu"):
        r = row[target]
        assert r["kernels_after"] < r["kernels_before"] and r["bytes_after"] < r["bytes_before"]
        assert 0 < r["fusions"] <= r["kernels_after"]
        assert 0 <= r["duplicated_expensive_elements"] <= r["duplicated_elements"]
    assert row["xla_cpu_fusions"] >= 1
