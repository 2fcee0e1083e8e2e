"""What the real GPU target (NVPTX) computes f32 math with, where it must differ from plain LLVM
or from libdevice. Each choice was found on a real H200 by the StableHLO conformance files
(docs/gpu_device.md); the emulated grid runs host code and cannot show them, so these tests
check the IR the target emits and that ptxas assembles it."""
from __future__ import annotations

import pytest
from llvmlite import ir

from hlofuse.emitters.gpu.ptxas import assemble, assembler
from hlofuse.emitters.gpu.target import GpuTarget, compile_ptx, libdevice_bitcode
from hlofuse.emitters.target import Target

F32 = ir.FloatType()


def _function_ir(emit, target: Target | None = None, ty: ir.Type = F32) -> tuple[str, ir.Module]:
    """IR of `ty f(ty x, ty y) { return emit(target, builder, x, y); }` on `target` (the GPU's
    when None)."""
    target = GpuTarget() if target is None else target
    module = ir.Module(name="m")
    if isinstance(target, GpuTarget):
        module.triple, module.data_layout = target.triple, target.data_layout
    fn = ir.Function(module, ir.FunctionType(ty, [ty, ty]), "f")
    builder = ir.IRBuilder(fn.append_basic_block())
    builder.ret(emit(target, builder, *fn.args))
    return str(module), module


def test_remainder_is_libdevice_fmod_not_frem():
    """NVPTX expands `frem` as x - trunc(x/y)*y, returning x for an infinite y: fmod(inf, inf)
    came out inf, not NaN. The GPU calls libdevice's fmod; the host keeps frem."""
    text, _ = _function_ir(lambda t, b, x, y: t.float_remainder(b, x, y))
    assert "frem" not in text
    assert "@\"__nv_fmodf\"(" in text
    host, _ = _function_ir(lambda t, b, x, y: t.float_remainder(b, x, y), Target())
    assert "frem float" in host


def test_f32_tanh_is_the_branch_free_approximation():
    """XLA:GPU computes f32 tanh with its rational approximation, not __nv_tanhf (whose error,
    added to the reference's, reached 4 ULP on tanh_float32_20_20); f64 keeps libdevice."""
    text, _ = _function_ir(lambda t, b, x, y: t.math(b, "tanh", [x]))
    assert "__nv_tanh" not in text
    assert "fdiv" in text  # one divide of two polynomials
    double, _ = _function_ir(lambda t, b, x, y: t.math(b, "tanh", [x]), ty=ir.DoubleType())
    assert "@\"__nv_tanh\"(" in double


@pytest.mark.skipif(libdevice_bitcode() is None or assembler() is None,
                    reason="needs libdevice (numba-cuda's CUDA wheel) and ptxas or nvJitLink")
def test_fmod_and_tanh_link_and_assemble():
    """libdevice's fmod is linked and inlined (no call left in the PTX), and ptxas takes it."""
    def emit(t, b, x, y):
        return b.fadd(t.float_remainder(b, x, y), t.math(b, "tanh", [x]))

    _, module = _function_ir(emit)
    _, ptx = compile_ptx(module, "sm_90")
    assert "__nv_fmodf" not in ptx
    assert len(assemble(ptx, "sm_90")) > 0


def test_minimum_and_maximum_return_the_nan_operand():
    """NVPTX's `min.NaN`/`max.NaN` return the canonical NaN, so minimum(1, -NaN) lost the sign
    that a TOTALORDER compare then exposed (the large-graph fuzzer on an H200). The GPU target
    selects a NaN operand itself: the first's, else the second's, as the interpreter does."""
    for is_min in (True, False):
        text, module = _function_ir(lambda t, b, x, y: t.float_max(b, x, y, is_min))
        assert text.count("fcmp uno") == 2, text
        intrinsic = "llvm.minimum" if is_min else "llvm.maximum"
        assert intrinsic in text
        # The selects survive optimization (LLVM may not fold them into the intrinsic, whose
        # NaN is unspecified), and the intrinsic is still the hardware's instruction.
        optimized, ptx = compile_ptx(module, "sm_90")
        assert optimized.count("fcmp uno") + optimized.count("fcmp ord") >= 1, optimized
        assert ("min.NaN.f32" if is_min else "max.NaN.f32") in ptx, ptx
        assert ptx.count("selp.f32") + ptx.count("selp.b32") >= 2, ptx
    host, _ = _function_ir(lambda t, b, x, y: t.float_max(b, x, y, True), Target())
    assert "fcmp uno" not in host  # the host's instruction returns an operand: no selects


F16_TOTALORDER = """HloModule m
ENTRY e {
  x = f16[5] parameter(0)
  y = f16[5] parameter(1)
  ROOT c = pred[5] compare(x, y), direction=LT, type=TOTALORDER
}
"""


def test_f16_totalorder_compares_the_stored_bits(tmp_path):
    """A TOTALORDER compare of f16 keys the stored 16 bits: widened first, a -NaN went through
    the GPU's `cvt.f32.f16`, which gives the canonical (positive) NaN, and 1 < -NaN came out
    true (the graph fuzzer on an H200, seed 65). The PTX has no conversion; the emulated grid
    and the CPU give the interpreter's answer, -NaN below everything."""
    import numpy as np

    import hlofuse
    from hlofuse.cli import main

    source = tmp_path / "m.hlo"
    source.write_text(F16_TOTALORDER)
    out = tmp_path / "m.ptx"
    assert main(["compile", str(source), "--target", "gpu", "--emit", "ptx", "--no-cache", "-o", str(out)]) == 0
    assert "cvt.f32.f16" not in out.read_text()
    x = np.array([1, 1, 1, -np.inf, 0], np.float16)
    y = np.array([0xFE00, 0x7E00, 0x3C00, 0xFE00, 0x8000], np.uint16).view(np.float16)  # -NaN, NaN, 1, -NaN, -0
    want = [False, True, False, False, False]
    for target in ("interpreter", "cpu", "gpu-emulated"):
        (got,) = hlofuse.compile(hlofuse.parse_hlo(F16_TOTALORDER), target, cache=False)(x, y)
        assert list(np.asarray(got)) == want, target


@pytest.mark.parametrize("ty", [F32, ir.DoubleType()], ids=["f32", "f64"])
def test_newer_elementwise_functions_link_from_libdevice_and_assemble(ty):
    """sinh, cosh and the inverse trigonometric and hyperbolic functions (XLA's newer opcodes)
    are libdevice's on the GPU: each is linked and inlined, and ptxas takes the kernel."""
    names = ("sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh")

    def emit(t, b, x, y):
        acc = x
        for name in names:
            acc = b.fadd(acc, t.math(b, name, [x]))
        return acc

    text, module = _function_ir(emit, ty=ty)
    suffix = "f" if ty == F32 else ""
    assert all(f"@\"__nv_{n}{suffix}\"(" in text for n in names)
    _, ptx = compile_ptx(module, "sm_90")
    assert not any(f"__nv_{n}{suffix}" in ptx for n in names)
    assert len(assemble(ptx, "sm_90")) > 0
