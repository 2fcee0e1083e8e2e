"""Chunks of buffered streaming rows (kernels/cpu_streaming.py `chunk_elements`): a loop
kernel whose element LLVM does not interleave (cpu_loop.interleave_count 1: no math
functions) streams its rows in chunks of CHEAP_CHUNK_VECTORS vectors, so after O3 the row is a
rolled loop of a few computed vectors and streaming stores (a row unrolled whole into 64
streaming stores wrote 25-30% more slowly); an interleaved element keeps whole-row chunks (its
interleaved vectors must fit one). Values bit for bit the interpreter's, rows ending mid-chunk."""
from __future__ import annotations

import platform
import re

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import cpu_loop, cpu_row, cpu_streaming
from hlofuse.codegen.kernels.cpu_streaming import CHEAP_CHUNK_VECTORS, CHUNK_ELEMENTS, VECTOR_BYTES, chunk_elements
from hlofuse.hlo.dtypes import element_type
from test_loop_streaming import NONTEMPORAL, _binary, _two_outputs

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 streaming stores")


@pytest.fixture
def from_memory(monkeypatch):
    """An L3 of 64 KiB: every kernel here moves more than that; latency-bound loops stream on
    any host, as with AVX-512 (cpu_loop.NARROW_LATENCY_BOUND_STREAMS)."""
    monkeypatch.setattr(cpu_row, "l3_cache_bytes", lambda: 64 << 10)
    monkeypatch.setattr(cpu_loop, "NARROW_LATENCY_BOUND_STREAMS", True)


class _Leaf:
    def __init__(self, ty: str):
        self.shape = type("S", (), {"dtype": element_type(ty)})()


def _gens(ty: str, outputs: int = 1) -> list:
    return [(None, _Leaf(ty), None) for _ in range(outputs)]


def test_chunk_rule():
    f32_lanes = VECTOR_BYTES // 4
    assert chunk_elements(1024, _gens("f32"), interleaved=1) == CHEAP_CHUNK_VECTORS * f32_lanes == 64
    assert chunk_elements(1024, _gens("f64"), interleaved=1) == CHEAP_CHUNK_VECTORS * VECTOR_BYTES // 8
    assert chunk_elements(1024, _gens("f32"), interleaved=4) == CHUNK_ELEMENTS
    assert chunk_elements(1024, _gens("f32")) == CHUNK_ELEMENTS  # not told: as before
    assert chunk_elements(32, _gens("f32"), interleaved=1) == 32  # the row


def _compile(text: str):
    return hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)


def test_cheap_rows_stream_a_few_vectors_a_step(from_memory):
    exe = _compile(_binary((256, 1024)))
    stores = NONTEMPORAL.findall(exe.program.llvm_ir())
    assert 0 < len(stores) <= 2 * CHEAP_CHUNK_VECTORS, len(stores)  # LLVM may unroll a chunk loop by 2


def test_the_check_can_fail(from_memory, monkeypatch):
    """Whole-row chunks (the kernels before the rule): 64 streaming stores, unrolled."""
    monkeypatch.setattr(cpu_streaming, "CHEAP_CHUNK_VECTORS", 64)
    exe = _compile(_binary((256, 1024)))
    assert len(NONTEMPORAL.findall(exe.program.llvm_ir())) >= 64


def test_interleaved_rows_keep_whole_row_chunks(from_memory):
    """exp(tanh x) beside x * 3: interleaved, its buffers hold the row (1024 f32 each)."""
    exe = _compile(_two_outputs((64, 1024), "f32"))
    assert re.findall(r"alloca \[(\d+) x float\]", exe.program.llvm_ir()) == [str(CHUNK_ELEMENTS)] * 2


@pytest.mark.parametrize("dims", [(64, 1008), (33, 1024), (257, 16), (8, 4, 80)])
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_values_are_the_interpreters(from_memory, dims, ty):
    text = _binary(dims, ty)
    rng = np.random.default_rng(sum(dims))
    args = [rng.standard_normal(dims).astype(ty == "f32" and np.float32 or np.float64) for _ in range(2)]
    got = _compile(text)(*args)
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter", fusion=False)(*args)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
