"""The GEMM convolution kernel's packing blocks sized by the target's vector register
(cpu_conv_gemm_kernel.block_bytes; issue 15): 16 f32 rows a block with AVX-512 as before, 8
with AVX2, where blocks of two registers made the weight-gradient kernels larger for LLVM; the
same bits as the row-by-row packing and the interpreter's values at 8 lanes on any host (the
target's vector width patched to 256 bits)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from hlofuse.codegen.kernels import cpu_conv_gemm, cpu_conv_gemm_kernel
from hlofuse.emitters.cpu import target as cpu_target
from hlofuse.hlo.parser import parse_hlo

from test_conv import _module
from test_conv_gemm import check_gemm
from test_conv_gemm_pack import CASES, _bits


def test_block_bytes_follow_the_vector_register():
    assert cpu_conv_gemm_kernel.block_bytes(SimpleNamespace(vector_width=512)) == 64
    assert cpu_conv_gemm_kernel.block_bytes(SimpleNamespace(vector_width=None)) == 32
    assert cpu_conv_gemm_kernel.block_bytes(SimpleNamespace(vector_width=1024)) == 64  # at most VECTOR_BYTES


@pytest.mark.parametrize("name", ["4x4_pad", "16x16_pad", "f64"])
def test_eight_lane_blocks_match_rows_and_interpreter(name, monkeypatch):
    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: False)
    monkeypatch.setattr(cpu_conv_gemm, "prefers_gemm", lambda conv: True)
    monkeypatch.setattr(cpu_target, "preferred_vector_width", lambda features: 256)
    lhs, rhs, dtype, attrs = CASES[name]
    text = _module(lhs, rhs, dtype, attrs)
    layout = cpu_conv_gemm.gemm_layout(parse_hlo(text).entry.root)
    assert layout.batch_minor and layout.geo.batch >= 32 * 8 // layout.geo.out_type.bits  # blocks run
    check_gemm(text, threads=(1,))
    blocked, rows = _bits(text, True, monkeypatch), _bits(text, False, monkeypatch)
    np.testing.assert_array_equal(blocked.view(np.uint8), rows.view(np.uint8))
