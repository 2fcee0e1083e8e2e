"""The kernel benchmark suite's helpers (benchmarks/run.py, kernel_figures.py, workloads.py):
the STREAM modules compute what they claim, the figures are derived correctly, timing is
interleaved, profiles add up, and the large workloads have the sizes the suite promises."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import kernel_figures as kf  # noqa: E402
from run import format_contraction, format_table, interleaved, rotated_rounds  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

import hlofuse  # noqa: E402

MIB = 1 << 20


@pytest.mark.parametrize("kernel", sorted(kf.STREAM_KERNELS))
def test_stream_modules_compute_copy_and_triad(kernel):
    # The bandwidth figures count 8 and 12 bytes per element: the modules must be exactly
    # y = -x (copy, copy-rows) and y = a + 3 b, run by hlofuse's kernels.
    rows = 3
    template, per_element = kf.STREAM_KERNELS[kernel]
    exe = hlofuse.compile(hlofuse.parse_hlo(template.format(n=rows * 1024, rows=rows)), target="cpu")
    r = np.random.default_rng(0)
    args = [r.standard_normal(p.shape.dims).astype(np.float32) for p in exe.module.entry.parameters]
    (got,) = exe(*args)
    want = -args[0] if kernel.startswith("copy") else args[0] + np.float32(3) * args[1]
    assert np.array_equal(got, want)
    assert per_element == 4 * (len(args) + 1)  # each parameter read once, the result written once


@pytest.mark.parametrize("threads", [1, 2])
def test_hlofuse_stream_runs_on_the_asked_threads(threads, monkeypatch):
    from hlofuse.runtime.cpu_threads import register_openmp

    if threads > 1 and not register_openmp():
        pytest.skip("no libgomp: kernels run on one thread")
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "7")
    bw = kf.hlofuse_stream("triad", threads, nbytes=1 * MIB, repeat=3)
    assert math.isfinite(bw) and bw > 0
    import os

    assert os.environ["HLOFUSE_CPU_THREADS"] == "7"  # restored after the measurement


def test_reference_is_the_best_two_thread_figure():
    stream = {"copy/1t": 50e9, "triad/1t": 40e9, "copy/2t": 30e9, "numpy-copy/2t": 35e9, "triad/2t": 20e9}
    assert kf.reference_bandwidth(stream, 2) == 35e9
    assert kf.reference_bandwidth(stream, 1) == 50e9
    assert math.isnan(kf.reference_bandwidth(stream, 4))
    # the read-only stream is a second reference, never the bar, even where it is the best
    stream.update({"read/1t": 60e9, "read/2t": 70e9})
    assert kf.reference_bandwidth(stream, 2) == 35e9 and kf.reference_bandwidth(stream, 1) == 50e9
    assert kf.read_bandwidth(stream, 2) == 70e9 and math.isnan(kf.read_bandwidth({}, 2))


def test_read_module_sums_rows_and_counts_its_reads():
    template, per_element = kf.READ_KERNELS["read"]
    rows = 3
    exe = hlofuse.compile(hlofuse.parse_hlo(template.format(rows=rows)), target="cpu")
    x = np.random.default_rng(1).standard_normal((rows, 1024)).astype(np.float32)
    (got,) = exe(x)
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-4)
    assert per_element == 4  # one f32 read per element; the per-row result is not counted


def test_geomean_and_bytes():
    assert kf.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert kf.geomean([4.0, 0.0, -1.0, float("nan")]) == pytest.approx(4.0)
    assert math.isnan(kf.geomean([]))
    assert kf.nbytes_of([np.zeros((3, 4), np.float32), np.zeros(5, np.uint8)]) == 53


def test_interleaved_alternates_order_and_counts_rounds():
    calls = []
    times = interleaved([lambda: calls.append("a"), lambda: calls.append("b")], rounds=4, budget=100.0)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert [len(t) for t in times] == [4, 4]
    # a spent budget still gives three rounds, and no more than that
    times = interleaved([lambda: None], rounds=50, budget=0.0)
    assert len(times[0]) == 3
    # the clock is the caller's: one that advances by 1 per reading gives 1 per call
    ticks = iter(range(100))
    times = interleaved([lambda: None, lambda: None], rounds=2, budget=100.0, clock=lambda: next(ticks))
    assert times == [[1, 1], [1, 1]]


def test_rotated_rounds_rotates_order_and_records_measure():
    calls = []
    fns = {k: (lambda k=k: calls.append(k)) for k in "abc"}
    times = rotated_rounds(fns, rounds=4)
    assert calls == list("abc" "bca" "cab" "abc")
    assert {k: len(v) for k, v in times.items()} == {"a": 4, "b": 4, "c": 4}
    assert all(t >= 0 for v in times.values() for t in v)
    marks = rotated_rounds(fns, rounds=2, measure=lambda call: (call(), "m")[1])
    assert marks == {"a": ["m", "m"], "b": ["m", "m"], "c": ["m", "m"]}


def test_profile_rows_of_a_small_program():
    w = WORKLOADS["resnet_add_relu"]
    args = w.inputs("small")
    import jax

    exe = hlofuse.compile(hlofuse.parse_hlo(jax.jit(w.fn).lower(*args).as_text(dialect="hlo")), target="cpu")
    rows, per_run = kf.profile_rows(exe, args, runs=2)
    assert per_run > 0 and rows
    assert [r["ms"] for r in rows] == sorted((r["ms"] for r in rows), reverse=True)
    assert sum(r["share"] for r in rows) <= 1.0 + 1e-6  # steps run inside the run's wall time
    (fusion,) = [r for r in rows if r["op"].startswith("fusion")]
    assert fusion["bytes"] == 3 * args[0].nbytes  # two operands read, one result written
    assert fusion["calls"] == 1
    text = kf.format_profile("resnet_add_relu", rows, per_run)
    assert fusion["step"] in text and "ms per run" in text


def test_large_workloads_are_24_to_64_mb():
    # The big side (inputs, or the output where the inputs are small by nature) is 24-64 MB for
    # every workload except the dot-bound ones, whose shapes come from the issues.
    import jax

    for name, w in WORKLOADS.items():
        if w.kind == "compute":
            continue
        args = w.inputs("large")
        out = jax.eval_shape(w.fn, *args)
        out_bytes = sum(math.prod(o.shape) * o.dtype.itemsize for o in jax.tree_util.tree_leaves(out))
        big = max(kf.nbytes_of(args), out_bytes)
        assert 24 * MIB <= big <= 64 * MIB, (name, big / MIB)
    assert {w.kind for w in WORKLOADS.values()} == {"memory", "transcendental", "compute", "loop"}


def test_table_summarises_ratios_and_failures():
    row = {"workload": "w1", "kind": "memory", "in_bytes": 8e6, "out_bytes": 4e6, "hlofuse_s": 2e-3, "xla_s": 1e-3,
           "ratio": 2.0, "hlofuse_GBps": 6.0, "xla_GBps": 12.0, "hlofuse_Gelem_s": 0.5, "xla_Gelem_s": 1.0,
           "compile_s": 0.1, "matches_interpreter": True, "agrees_with_xla": False}
    row2 = dict(row, workload="w2", kind="transcendental", ratio=0.5)
    text = format_table([row, row2, {"workload": "w3", "kind": "memory", "error": "InputError: bad"}], ref_bw=12e9)
    assert "over 2 workloads: 1.00x" in text and "over 1.1x: w1" in text
    assert "FAILED: InputError: bad" in text and "differs from XLA" in text
    w1 = next(line for line in text.splitlines() if line.startswith("| w1"))
    assert "|    50 |" in w1  # 6 GB/s of a 12 GB/s reference
    assert "| best% |  %rd2 |" in text.splitlines()[0]
    assert "|    50 |     - |     - |" in w1  # no best round given, no read reference measured
    best = dict(row, workload="w4", hlofuse_best_GBps=9.0)
    w4 = format_table([best], ref_bw=12e9, read_bw=8e9).splitlines()[2]
    assert "|    50 |    75 |    75 |" in w4  # median 6 and best 9 of 12; median 6 of the 8 read


def test_real_models_contraction_rate_counts_the_dots_flops(dot_tanh):
    # real_models.py's dot GFLOP/s divides the module's dot and convolution flops by the time
    # of the steps computing them: a module of one 64x128x32 dot (2*64*32*128 flops) beside an
    # elementwise kernel gives exactly those flops per run, in a share of the run below 1.
    import real_models

    exe, args = dot_tanh
    row = real_models.contraction_rate(exe, args, runs=4)
    assert 0 < row["contraction_share"] <= 1
    assert row["contraction_gflops"] > 0
    from hlofuse.runtime.io import check_arguments
    from hlofuse.runtime.profile import step_flops

    steps, _, calls, _ = exe.program.profile(check_arguments(exe.program.module, args), 4)
    total = sum(step_flops(ns) * int(calls[ns.id]) for ns in steps if ns.kind == "kernel")
    assert total == 4 * 2 * 64 * 32 * 128
    scalar = hlofuse.compile(hlofuse.parse_hlo(
        "HloModule s\nENTRY e {\n  x = f32[8] parameter(0)\n  ROOT y = f32[8] tanh(x)\n}\n"), target="cpu")
    assert real_models.contraction_rate(scalar, [np.ones(8, np.float32)]) == {}


def test_contraction_lines_set_each_rate_against_the_all_thread_peak():
    # run.py's dot figures: 120 GFLOP/s against a 2-thread peak of 480 is 25%; a workload
    # without dots gets no line, and a run without any gets no section
    rows = [{"workload": "attention", "contraction_gflops": 120.0, "contraction_share": 0.9},
            {"workload": "softmax"}]
    text = format_contraction(rows, {1: 250.0, 2: 480.0})
    assert "250.0 on 1 thread, 480.0 on 2 threads" in text
    (line,) = [ln for ln in text.splitlines() if "attention" in ln]
    assert "120.0 GFLOP/s, 25% of the 2-thread peak, 90% of the run" in line
    assert "softmax" not in text
    assert "not measured" in format_contraction(rows, {})
    assert format_contraction([{"workload": "softmax"}], {1: 250.0}) == ""
