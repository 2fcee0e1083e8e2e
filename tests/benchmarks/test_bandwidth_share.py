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
    # batch-norm training: three passes over x, one write (25%) is nearest triad's third
    assert bandwidth_share.matching_reference(154 * MB, 38 * MB) == "triad"


def test_write_heavy_workloads_against_their_own_streams():
    # image_normalize: uint8 in, float32 out (80% writes): the u8 -> f32 convert stream
    assert bandwidth_share.matching_reference(72 * MB, 58 * MB) == "widen"
    # iou_matrix: two small box sets in, a large matrix out (~100% writes): the write stream
    assert bandwidth_share.matching_reference(64 * MB + 160 * 1024, 64 * MB) == "write"
    assert bandwidth_share.matching_reference(64 * MB, 64 * MB) == "write"


def test_references_name_stream_kernels_that_exist():
    from kernel_figures import MIX_KERNELS, READ_KERNELS, STREAM_KERNELS

    for _, kernels in bandwidth_share.MIXES.values():
        assert all(k in STREAM_KERNELS or k in READ_KERNELS or k in MIX_KERNELS for k in kernels)
    # the write-heavy references are not part of run.py's bar (the best of STREAM_KERNELS)
    assert not set(MIX_KERNELS) & set(STREAM_KERNELS)


def test_mix_kernels_get_inputs_of_their_types_and_compute_their_streams():
    from kernel_figures import MIX_KERNELS, stream_inputs

    for name, (template, per_element) in MIX_KERNELS.items():
        module = hlofuse.parse_hlo(template.format(n=8 * 1024, rows=8))
        args = stream_inputs(module)
        out = hlofuse.compile(module, target="cpu")(*args)
        out = np.asarray(out[0] if isinstance(out, (list, tuple)) else out)
        assert out.dtype == np.float32 and out.size == 8 * 1024
        read = sum(x.nbytes for x in args if x.ndim)
        assert per_element * out.size == read + out.nbytes
        if name.startswith("widen"):
            assert args[0].dtype == np.uint8
            np.testing.assert_array_equal(out, 3.0)
        else:
            assert args[0].shape == () and args[0].dtype == np.float32
            np.testing.assert_array_equal(out, 1.5)


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
