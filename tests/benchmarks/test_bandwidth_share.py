"""benchmarks/bandwidth_share.py: each workload is held against the stream of its own access
mix, and a timed call runs its program on the thread count it stands for."""
from __future__ import annotations

import sys

import numpy as np

import hlofuse
from repo_paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import bandwidth_share  # noqa: E402

MB = 1 << 20


def test_reductions_against_the_read_stream():
    # row sums of 48 MB: 48 KB of outputs
    assert bandwidth_share.matching_reference(48 * MB + 48 * 1024, 48 * 1024) == "read"
    assert bandwidth_share.matching_reference(0, 0) == "read"


def test_one_read_one_write_against_copy_and_two_reads_against_triad():
    assert bandwidth_share.matching_reference(48 * MB, 24 * MB) == "copy"  # layer norm, softmax
    assert bandwidth_share.matching_reference(72 * MB, 24 * MB) == "triad"  # scaled add
    # image_normalize: uint8 in, float32 out (80% writes) is nearest copy's one write in two
    assert bandwidth_share.matching_reference(72 * MB, 58 * MB) == "copy"
    # batch-norm training: three passes over x, one write (25%) is nearest triad's third
    assert bandwidth_share.matching_reference(154 * MB, 38 * MB) == "triad"


def test_references_name_stream_kernels_that_exist():
    from kernel_figures import READ_KERNELS, STREAM_KERNELS

    for _, kernels in bandwidth_share.MIXES.values():
        assert all(k in STREAM_KERNELS or k in READ_KERNELS for k in kernels)


def test_pinned_call_runs_the_count_it_stands_for():
    exe = hlofuse.compile(hlofuse.parse_hlo("""HloModule m
ENTRY e {
  x = f32[64,64] parameter(0)
  ROOT y = f32[64,64] negate(x)
}
"""), target="cpu")
    x = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    one = bandwidth_share._pinned_call(exe, [x], 1)
    two = bandwidth_share._pinned_call(exe, [x], 2)
    out = two()
    np.testing.assert_array_equal(out[0] if isinstance(out, (list, tuple)) else out, -x)
    assert exe.program.driver.threads == 2
    one()
    assert exe.program.driver.threads == 1
