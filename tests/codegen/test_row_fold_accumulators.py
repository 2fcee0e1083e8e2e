"""Row kernels' fold loops (kernels/cpu_row.py): each level's reduction loop keeps
reduction_groups.row_accumulators independent vector accumulators (interleaved, rolled), and a
fold loop that prefetches the next row does it in FOLD_PREFETCH_ROUNDS chunks of the row
(`_fold_chunk_bytes`), each ending in one horizontal sum, not one every 64 elements. Results
stay the interpreter's (within the reduction tolerance) for rows around the chunk boundaries."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.cpu import emit_kernel_module
from hlofuse.codegen.kernels import cpu_row, loop_hints, reduction_groups
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.runtime.compare import compare_outputs
from llvm_loops import instructions_after_o3, loop_hint_names
from test_row_kernels import _input, _row_kernels, module


@pytest.fixture
def from_memory(monkeypatch):
    """An L3 of 64 KiB: the kernels here count as coming from memory (they prefetch)."""
    monkeypatch.setattr(cpu_row, "l3_cache_bytes", lambda: 64 << 10)


def _compile(text: str):
    return hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)


def _vector_phis(exe) -> int:
    """Float vector phis of the optimized program: the accumulators its vectorised loops carry."""
    return len(re.findall(r"= phi (?:reassoc )?(?:\w+ )*<\d+ x float>", exe.program.llvm_ir()))


def test_chunk_rule():
    streams = [(None, 4, False), (None, 4, True)]
    assert cpu_row._fold_chunk_bytes(1024, streams) == 1024 * 4 // cpu_row.FOLD_PREFETCH_ROUNDS
    assert cpu_row._fold_chunk_bytes(32, streams) == cpu_row.PREFETCH_CHUNK_BYTES
    assert cpu_row._fold_chunk_bytes(1000, [(None, 8, False)]) == 4000


def test_rows_ahead_rule():
    f32 = [(None, 4, False), (None, 4, True)]
    assert cpu_row._rows_ahead(1024, f32) == 1  # 4 KB rows: the next
    assert cpu_row._rows_ahead(4096, f32) == 1
    assert cpu_row._rows_ahead(512, f32) == 2  # 2 KB rows: the one after
    assert cpu_row._rows_ahead(1000, f32) == 2
    assert cpu_row._rows_ahead(256, [(None, 8, False)]) == 2


@pytest.mark.parametrize("n", [256, 512])
def test_short_rows_prefetch_further_ahead_and_match_the_interpreter(from_memory, monkeypatch, n):
    """Rows of 1-2 KB prefetch 2-4 rows ahead; on two threads a thread's last rows prefetch
    nothing of the other's; values the interpreter's."""
    monkeypatch.setenv("HLOFUSE_CPU_THREADS", "2")
    rows = 257
    text = module("layer_norm", (rows, n))
    x = _input((rows, n), "f32", seed=n)
    exe = _compile(text)
    assert "llvm.prefetch" in _row_kernel_ir(exe)
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(x)
    for r in compare_outputs(list(exe(x)), list(want)):
        assert r.ok, r


def test_layer_norm_folds_keep_eight_accumulators_each(from_memory):
    """Mean (from memory) and variance (prefetching, in two chunks) loops: 8 vector
    accumulators each after O3; with the rule off, LLVM's own choice keeps fewer."""
    text = module("layer_norm", (64, 1024))
    exe = _compile(text)
    assert len(_row_kernels(exe)) == 1
    with_rule = _vector_phis(exe)
    assert with_rule >= 2 * reduction_groups.ROW_ACCUMULATORS, with_rule


def test_without_the_rule_fewer_accumulators(from_memory, monkeypatch):
    monkeypatch.setattr(reduction_groups, "ROW_ACCUMULATORS", 1)
    exe = _compile(module("layer_norm", (64, 1024)))
    assert _vector_phis(exe) < 2 * 8


def _row_kernel_ir(exe, vector_width: int | None = None) -> str:
    """The row kernel's LLVM IR as emitted (before optimization: the loop hints are there), for
    the host's target or one preferring `vector_width`-bit vectors."""
    (k,) = _row_kernels(exe)
    target = CpuTarget()
    if vector_width is not None:
        target.vector_width = vector_width
    return str(emit_kernel_module(k, target, k.name))


def test_layer_norm_fold_loops_carry_the_hint(from_memory):
    assert '"llvm.loop.interleave.count", i32 8' in _row_kernel_ir(_compile(module("layer_norm", (64, 1024))))


def test_softmax_folds_keep_llvms_choice_with_avx512(from_memory):
    """Softmax's sum folds exp(x - max): bound by the exp. With AVX-512's vectors no hint (LLVM
    interleaves and unrolls it as it likes); its output loop over 1,024 stays rolled with
    loop_hints.ROLLED_INTERLEAVE vectors (loop_hints.stays_rolled)."""
    hints = loop_hint_names(_row_kernel_ir(_compile(module("softmax", (64, 1024))), vector_width=512))
    assert not hints.get("fold")
    assert hints["col"] == {"llvm.loop.unroll.disable", "llvm.loop.interleave.count"}


@pytest.mark.parametrize("width", [256, None])
def test_softmax_folds_interleave_four_vectors_with_16_registers(from_memory, width):
    """With 256-bit vectors (the host's own width where it has no AVX-512: None), the exp-and-
    sum fold interleaves cpu_row.EXPENSIVE_FOLD_VECTORS (LLVM chose 2 and left the core
    waiting on the chains), rolled; the results stay the interpreter's."""
    if width is None and (CpuTarget().vector_width or 0) >= 512:
        pytest.skip("the host prefers AVX-512 vectors: the width-256 case states the rule")
    text = module("softmax", (64, 1024))
    exe = _compile(text)
    ir_text = _row_kernel_ir(exe, vector_width=width)
    hints = loop_hint_names(ir_text)
    assert hints["fold"] == {"llvm.loop.interleave.count", "llvm.loop.unroll.disable"}
    assert f'"llvm.loop.interleave.count", i32 {cpu_row.EXPENSIVE_FOLD_VECTORS}' in ir_text
    x = _input((64, 1024), "f32", seed=5)
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(x)
    assert all(r.ok for r in compare_outputs(list(exe(x)), list(want)))


@pytest.mark.parametrize("pattern", ["layer_norm", "softmax"])
def test_long_rows_stay_rolled_and_smaller(from_memory, monkeypatch, pattern):
    """A row of 1,024: LLVM unrolled the output loop (and softmax's first and cold loops) fully
    after vectorising it; rolled, the kernel has fewer instructions after O3 (layer norm here,
    prefetching: 469 against 547; softmax 265 against 781) and computes the same bits."""
    text = module(pattern, (64, 1024))
    rolled = _compile(text)
    rolled_ir = _row_kernel_ir(rolled)
    assert "llvm.loop.unroll.disable" in loop_hint_names(rolled_ir)["col"]
    monkeypatch.setattr(loop_hints, "ROLL_LONG_LOOPS", False)
    unrolled = _compile(text)
    unrolled_ir = _row_kernel_ir(unrolled)
    assert "col" not in loop_hint_names(unrolled_ir)
    rolled_n, unrolled_n = instructions_after_o3(rolled_ir), instructions_after_o3(unrolled_ir)
    if pattern == "layer_norm" and CpuTarget().vector_width != 512:
        # On the Zen 1 AVX2 host LLVM leaves layer norm's 8-lane output loop of 1,024 rolled
        # either way: 385 instructions after O3 both (softmax: still fewer rolled).
        assert rolled_n <= unrolled_n, (rolled_n, unrolled_n)
    else:
        assert rolled_n < unrolled_n, (rolled_n, unrolled_n)
    x = _input((64, 1024), "f32")
    for a, b in zip(rolled(x), unrolled(x)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("pattern", ["layer_norm", "rms_norm", "softmax"])
@pytest.mark.parametrize("n", [1, 17, 129, 1000, 2049])
def test_results_match_the_interpreter(from_memory, pattern, n):
    rows = max(3, -(-(1 << 14) // n)) | 1
    text = module(pattern, (rows, n))
    x = _input((rows, n), "f32", seed=n)
    exe = _compile(text)
    # rows of one element: each reduce is a reshape (passes/simplifier.py), no row kernel
    assert len(_row_kernels(exe)) == (0 if n == 1 else 1)
    got = exe(x)
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(x)
    for r in compare_outputs(list(got), list(want)):
        assert r.ok, r
    assert np.isfinite(np.asarray(got[0])).all()
