"""Assembling the GPU kernels at a chosen ptxas level (HLOFUSE_PTXAS_LEVEL): the workaround and
the fuzzer's diagnosis for assembler miscompiles (docs/gpu_device.md). The real-GPU side is
tests/runtime/test_gpu_device.py's; here, without a GPU, the assembler's options and the knob."""
from __future__ import annotations

import pytest

import hlofuse
from backend_cases import NEGATED_MAX_S32
from hlofuse.compiler import optimize
from hlofuse.emitters.gpu.ptxas import assemble, assembler
from hlofuse.hlo.errors import UnsupportedError
from hlofuse.runtime.gpu_executor import PTXAS_LEVEL_ENV, GpuProgram, ptxas_level


def test_the_knob_reads_a_level_or_nothing(monkeypatch):
    monkeypatch.delenv(PTXAS_LEVEL_ENV, raising=False)
    assert ptxas_level() is None
    for level in range(4):
        monkeypatch.setenv(PTXAS_LEVEL_ENV, str(level))
        assert ptxas_level() == level
    monkeypatch.setenv(PTXAS_LEVEL_ENV, "fast")
    with pytest.raises(UnsupportedError, match="expected 0, 1, 2 or 3"):
        ptxas_level()


@pytest.mark.skipif(assembler() is None, reason="neither ptxas nor nvJitLink on this machine")
def test_each_level_assembles_and_the_optimizer_changes_the_code():
    fused, _ = optimize(hlofuse.parse_hlo(NEGATED_MAX_S32), "gpu")
    ptx = GpuProgram.compile(fused, emulated=True, build_only=True).ptx()
    cubins = {level: assemble(ptx, "sm_90", level) for level in (None, 0, 3)}
    assert all(c.startswith(b"\x7fELF") for c in cubins.values())
    assert cubins[0] != cubins[3]
    with pytest.raises(ValueError, match="expected 0, 1, 2 or 3"):
        assemble(ptx, "sm_90", 5)
