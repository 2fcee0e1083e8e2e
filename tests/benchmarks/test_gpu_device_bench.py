"""benchmarks/gpu_device.py, the real-GPU benchmark, kept runnable where there is no GPU: its
emulated mode compiles a workload for the GPU, checks it against the CPU backend and times it
beside jax, through the same code path the device run takes."""
from __future__ import annotations

import json
import sys

import pytest

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

pytest.importorskip("jax")

import gpu_device  # noqa: E402


def test_emulated_run_checks_and_times_a_workload(tmp_path, capsys):
    out = tmp_path / "rows.json"
    status = gpu_device.main(["--target", "gpu-emulated", "--size", "small", "--rounds", "2",
                              "--workloads", "softmax,scan_rnn", "--json", str(out)])
    assert status == 0
    rows = json.loads(out.read_text())
    assert [r["workload"] for r in rows] == ["softmax", "scan_rnn"]
    for r in rows:
        assert r["matches_cpu"] and r["hlofuse_ms"] > 0 and r["xla_gpu_ms"] > 0 and r["kernels"] >= 1
    assert "geometric mean" in capsys.readouterr().out


def test_a_failing_workload_is_reported_and_fails_the_run(capsys):
    assert gpu_device.main(["--target", "gpu-emulated", "--size", "small", "--workloads", "no_such"]) == 1
    assert "ERROR" in capsys.readouterr().out
