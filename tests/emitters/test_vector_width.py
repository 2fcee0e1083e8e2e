"""The preferred vector width of CPU kernels follows the host's features (issue 14 item 4):
512 bits where AVX-512F is present, LLVM's own choice elsewhere."""
from __future__ import annotations

import re

import pytest
from llvmlite import ir

from hlofuse.codegen.kernels.cpu_skeleton import CpuKernelSkeleton
from hlofuse.emitters.cpu.target import CpuTarget, host_cpu, preferred_vector_width
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.cpu_executor import CpuProgram

MODULE = """HloModule m
ENTRY e {
  p = f32[4096] parameter(0)
  ROOT r = f32[4096] tanh(p)
}
"""


def test_width_from_features():
    assert preferred_vector_width("+sse2,+avx2,+avx512f,+avx512vl") == 512
    assert preferred_vector_width("+sse2,+avx2,-avx512f,-avx512vl") is None
    assert preferred_vector_width("+sse2,+avx2,+avx512fp16") is None  # another feature's prefix
    assert preferred_vector_width("") is None


def _skeleton_ir(target) -> str:
    module = ir.Module("m")
    comp = parse_hlo(MODULE).entry
    skel = CpuKernelSkeleton(module, target, "k", comp, 1)
    skel.finish()
    return str(module)


class _Target:
    triple = "x86_64-unknown-linux-gnu"

    def __init__(self, width):
        self.vector_width = width


def test_skeleton_sets_the_attribute_when_the_target_asks():
    assert '"prefer-vector-width"="512"' in _skeleton_ir(_Target(512))
    assert "prefer-vector-width" not in _skeleton_ir(_Target(None))


@pytest.mark.usefixtures("kernels_at_o3")
def test_host_kernels_follow_the_host_features():
    """On this host: the attribute is in the compiled kernel exactly when LLVM reports avx512f,
    and then the kernel's vector code is <16 x float>."""
    has_avx512 = "+avx512f" in host_cpu()[1].split(",")
    assert CpuTarget().vector_width == (512 if has_avx512 else None)
    text = CpuProgram.compile(parse_hlo(MODULE)).llvm_ir()
    assert ('"prefer-vector-width"="512"' in text) == has_avx512
    if has_avx512:
        assert re.search(r"<16 x float>", text)
