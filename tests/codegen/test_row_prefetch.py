"""Row kernels' memory traffic: they prefetch the next row while their later loops run in
cache, and write whole output rows with streaming stores (kernels/cpu_row.py
`prefetches_next_row`, `streams_outputs`). The prefetch: which kernels do, what they prefetch (every input
row for reading, every output row for writing), and that the results stay the interpreter's
where the chunked loops end mid-chunk and where a thread's last row has no next row. The
kernels here are small; the rule's L3 size is set below them (the `from_memory` fixture) so
that they count as coming from memory."""
from __future__ import annotations

import platform
import re

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import cpu_row, host_caches
from hlofuse.runtime.compare import compare_outputs
from test_row_kernels import _input, _row_kernels, module


def _prefetches(exe) -> list[tuple[int, int]]:
    """(read/write, locality) of every llvm.prefetch call in the program's optimized IR."""
    ir_text = exe.program.llvm_ir()
    return [(int(rw), int(loc)) for rw, loc in
            re.findall(r"call void @llvm\.prefetch\.p0\(ptr [^,]+, i32 (\d), i32 (\d), i32 1\)", ir_text)]


def _compile(text: str):
    return hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)


@pytest.fixture
def from_memory(monkeypatch):
    """An L3 of 64 KiB: every kernel here streams more than that."""
    monkeypatch.setattr(cpu_row, "l3_cache_bytes", lambda: 64 << 10)


@pytest.mark.parametrize("pattern", ["layer_norm", "rms_norm"])
def test_cheap_row_loops_prefetch_inputs_and_outputs(pattern, from_memory):
    """Layer norm's second loop (the variance) and RMS norm's output loop (its only later
    loop) prefetch the next row: the input for reading, the output for writing, into L2."""
    exe = _compile(module(pattern, (64, 1000)))
    assert len(_row_kernels(exe)) == 1
    found = set(_prefetches(exe))
    assert found == {(0, cpu_row.PREFETCH_LOCALITY), (1, cpu_row.PREFETCH_LOCALITY)}


@pytest.mark.parametrize("pattern", ["softmax", "log_softmax", "l2_normalize"])
def test_rows_with_an_expensive_op_do_not_prefetch(pattern, from_memory):
    """exp, or a divide (XLA's IsExpensive), per element: the rows are compute-bound and the
    prefetches only cost."""
    exe = _compile(module(pattern, (64, 1000)))
    assert len(_row_kernels(exe)) == 1
    assert _prefetches(exe) == []


def test_rows_too_large_to_hold_two_do_not_prefetch(monkeypatch, from_memory):
    """The current and next rows of input and output (4 x 4000 bytes) must fit in L2."""
    text = module("layer_norm", (64, 1000))
    monkeypatch.setattr(cpu_row, "l2_cache_bytes", lambda: 15999)
    monkeypatch.setattr(cpu_row, "row_budget_bytes", lambda: 1 << 20)  # still a row kernel
    exe = _compile(text)
    assert len(_row_kernels(exe)) == 1 and _prefetches(exe) == []
    monkeypatch.setattr(cpu_row, "l2_cache_bytes", lambda: 16000)
    assert _prefetches(_compile(text))


@pytest.mark.parametrize("pattern", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("n", [2, 63, 64, 65, 1000, 4097])
def test_chunked_rows_match_the_interpreter_on_two_threads(monkeypatch, from_memory, pattern, n):
    """Row lengths around the chunk (64 elements), rows split over two threads (each thread's
    last row prefetches nothing), checked against the interpreter."""
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "2")
    rows = max(3, -(-(1 << 16) // n)) | 1  # enough elements for two threads, an odd count
    text = module(pattern, (rows, n))
    x = _input((rows, n), "f32", seed=n)
    exe = _compile(text)
    assert len(_row_kernels(exe)) == 1 and _prefetches(exe)
    got = exe(x)
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(x)
    for r in compare_outputs(list(got), list(want)):
        assert r.ok, r
    if exe.program.driver is not None:
        assert exe.program.driver.threads == 2


def test_rows_in_cache_do_not_prefetch(monkeypatch):
    """64 rows of 1000 f32 in and out (512 KB) within an L3 of 512 KB: the rows come from
    cache, where the chunked loop only costs; one byte more and they count as from memory."""
    text = module("layer_norm", (64, 1000))
    monkeypatch.setattr(cpu_row, "l3_cache_bytes", lambda: 64 * 1000 * 8)
    assert _prefetches(_compile(text)) == []
    monkeypatch.setattr(cpu_row, "l3_cache_bytes", lambda: 64 * 1000 * 8 - 1)
    assert _prefetches(_compile(text))


def test_cache_sizes_come_from_the_host_or_defaults():
    """L2 and L3 sizes from /sys where the host describes them (this host: L2 below L3)."""
    l2, l3 = cpu_row.l2_cache_bytes(), cpu_row.l3_cache_bytes()
    assert l2 == (cpu_row.cache_bytes(2) or host_caches.DEFAULT_L2_BYTES)
    assert l3 == (cpu_row.cache_bytes(3) or host_caches.DEFAULT_L3_BYTES)
    assert 0 < l2 < l3


# Streaming stores (kernels/cpu_row.py `streams_outputs`): an output row written whole by the
# output loop goes to memory without being read for ownership first.
x86_only = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 streaming stores")
NONTEMPORAL = re.compile(r"store <16 x float> .*!nontemporal")


def _streaming(exe) -> bool:
    ir_text = exe.program.llvm_ir()
    found = bool(NONTEMPORAL.search(ir_text))
    assert found == ("llvm.x86.sse.sfence" in ir_text)  # every streaming kernel fences
    return found


@x86_only
@pytest.mark.parametrize("pattern", ["layer_norm", "rms_norm"])  # rms norm: the loop also prefetches
@pytest.mark.parametrize("rows", [64, 17, 9])
def test_rows_stream_with_the_plain_loops_values(monkeypatch, from_memory, pattern, rows):
    """Bit for bit the values of the plain output loop (and the interpreter's), whether the
    output row starts on a 64-byte boundary (the vector path) or not (the plain one)."""
    text = module(pattern, (rows, 1024))
    x = _input((rows, 1024), "f32", seed=rows)
    exe = _compile(text)
    assert _streaming(exe)
    got = exe(x)
    monkeypatch.setattr(cpu_row, "streams_outputs", lambda *a: False)
    plain = _compile(text)
    assert not _streaming(plain)
    np.testing.assert_array_equal(got[0], plain(x)[0])
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(x)
    for r in compare_outputs(list(got), list(want)):
        assert r.ok, r


@x86_only
@pytest.mark.parametrize("pattern, n, why", [
    ("layer_norm", 1000, "rows of 1000 f32 are not whole 64-byte vectors"),
    ("softmax", 1000, "rows of 1000 f32 are not whole 64-byte vectors"),
])
def test_rows_that_do_not_stream(from_memory, pattern, n, why):
    assert not _streaming(_compile(module(pattern, (64, n)))), why


@x86_only
@pytest.mark.parametrize("rows", [64, 17])
def test_softmax_streams_with_its_exp_in_a_row_buffer(monkeypatch, from_memory, rows):
    """Softmax's exp(x - max), summed and then divided, goes to a row buffer on the stack
    (cpu_row.buffers_kept_values), not to the output row, which then streams: bit for bit the
    values of the kernel that keeps it in the output row, and the interpreter's. A buffer over
    KEPT_BUFFER_BYTES keeps the output row."""
    text = module("softmax", (rows, 1024))
    x = _input((rows, 1024), "f32", seed=rows)
    x[1, 5], x[2] = np.nan, -np.inf
    exe = _compile(text)
    assert _streaming(exe)
    got = exe(x)
    monkeypatch.setattr(cpu_row, "BUFFER_KEPT_VALUES", False)
    plain = _compile(text)
    assert not _streaming(plain)
    assert np.asarray(got[0]).tobytes() == np.asarray(plain(x)[0]).tobytes()
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(x)
    for r in compare_outputs(list(got), list(want)):
        assert r.ok, r
    monkeypatch.setattr(cpu_row, "BUFFER_KEPT_VALUES", True)
    monkeypatch.setattr(cpu_row, "KEPT_BUFFER_BYTES", 4 * 1024 - 1)
    assert not _streaming(_compile(text))


@x86_only
def test_rows_in_cache_do_not_stream():
    assert not _streaming(_compile(module("layer_norm", (64, 1024))))
