"""LLVM levels of kernels whose run time is a library call (codegen/kernel_work.py
`library_elements`): a GEMM kernel (BLAS or oneDNN's sgemm) or a oneDNN primitive's kernel is
judged by its own loops (a GEMM's epilogue, a oneDNN kernel's per-feature operands), not by the
library's multiply-adds. A GEMM without an epilogue and a oneDNN convolution go to the small
level, a GEMM with an epilogue over a large result stays at O3, and a GEMM without an epilogue
in a while loop's body is small too (its cost is none of its own call's time). Every output
is the same bits as with library kernels judged by their whole work (all at O3 here) and
agrees with the interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import kernel_work, llvm_pool
from hlofuse.codegen.cpu import CpuPlanner
from hlofuse.codegen.kernel_work import (library_elements, once_kernels, own_work_ns, small_anywhere,
                                         small_kernels, small_level_cost_ns)
from hlofuse.codegen.kernels import cpu_conv_gemm
from hlofuse.codegen.region_cost import ELEMENT_NS, TRANSCENDENTAL_NS
from hlofuse.runtime.cpu_executor import CpuProgram
from hlofuse.runtime.gemm_provider import gemm_provider
from hlofuse.runtime.interpreter import evaluate

# Three GEMMs of one lhs: `plain` has no epilogue (the kernel is its BLAS calls), `activated`
# adds a bias and a tanh over its f32[256,256] result (65,536 elements: an epilogue whose
# speed matters), `narrow` adds a bias over an f32[256,4] result (1,024 elements: negligible
# beside its call, but its whole work, about 13 us by the elements it touches, kept it at O3).
GEMMS = """HloModule gemms

ENTRY main {
  a = f32[256,512] parameter(0)
  b = f32[512,256] parameter(1)
  c = f32[512,256] parameter(2)
  bias = f32[256] parameter(3)
  n = f32[512,4] parameter(4)
  nb = f32[4] parameter(5)
  plain = f32[256,256] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d = f32[256,256] dot(a, c), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[256,256] broadcast(bias), dimensions={1}
  s = f32[256,256] add(d, bb)
  activated = f32[256,256] tanh(s)
  dn = f32[256,4] dot(a, n), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  nbb = f32[256,4] broadcast(nb), dimensions={1}
  narrow = f32[256,4] add(dn, nbb)
  ROOT out = (f32[256,256], f32[256,256], f32[256,4]) tuple(plain, activated, narrow)
}
"""

# A GEMM without an epilogue in a while loop's body (x <- x . w, 3 times), and one with an
# epilogue (a bias over its f32[64,64] result) in the same body.
LOOPED_GEMM = """HloModule looped_gemm

cond {
  s = (s32[], f32[64,64], f32[64,64], f32[64,64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[64,64], f32[64,64], f32[64,64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[64,64] get-tuple-element(s), index=1
  w = f32[64,64] get-tuple-element(s), index=2
  y = f32[64,64] get-tuple-element(s), index=3
  one = s32[] constant(1)
  j = s32[] add(i, one)
  x2 = f32[64,64] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d = f32[64,64] dot(y, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  y2 = f32[64,64] add(d, w)
  ROOT t = (s32[], f32[64,64], f32[64,64], f32[64,64]) tuple(j, x2, w, y2)
}

ENTRY main {
  x = f32[64,64] parameter(0)
  w = f32[64,64] parameter(1)
  y = f32[64,64] parameter(2)
  z = s32[] constant(0)
  init = (s32[], f32[64,64], f32[64,64], f32[64,64]) tuple(z, x, w, y)
  r = (s32[], f32[64,64], f32[64,64], f32[64,64]) while(init), condition=cond, body=body
  rx = f32[64,64] get-tuple-element(r), index=1
  ry = f32[64,64] get-tuple-element(r), index=3
  ROOT out = (f32[64,64], f32[64,64]) tuple(rx, ry)
}
"""

# A convolution with keras's inference batch norm folded in: scale and shift are expressions
# of per-feature parameters (24 features each), which the oneDNN kernel computes before its call.
CONV_SCALE = """HloModule conv_scale

fused {
  x = f32[8,32,32,16] parameter(0)
  w = f32[3,3,16,24] parameter(1)
  g = f32[24] parameter(2)
  v = f32[24] parameter(3)
  c = f32[8,32,32,24] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  sc = f32[24] multiply(g, v)
  scb = f32[8,32,32,24] broadcast(sc), dimensions={3}
  m = f32[8,32,32,24] multiply(c, scb)
  ng = f32[24] negate(g)
  sh = f32[24] add(ng, v)
  shb = f32[8,32,32,24] broadcast(sh), dimensions={3}
  ROOT a = f32[8,32,32,24] add(m, shb)
}

ENTRY e {
  x = f32[8,32,32,16] parameter(0)
  w = f32[3,3,16,24] parameter(1)
  g = f32[24] parameter(2)
  v = f32[24] parameter(3)
  ROOT f = f32[8,32,32,24] fusion(x, w, g, v), kind=kOutput, calls=fused
}
"""


def _fused(text: str):
    return hlofuse.compiler.optimize(hlofuse.parse_hlo(text), "cpu", verify=False)[0]


def _planned(text: str):
    fused = _fused(text)
    planner = CpuPlanner()
    planner.plan(fused.entry)
    return fused, planner


def _args(module) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [rng.uniform(-1, 1, p.shape.dims).astype(np.float32) for p in module.entry.parameters]


def _levels(prog: CpuProgram) -> dict[str, int]:
    """Kernel name -> the level it was compiled at."""
    return {k.name: o.speed_level for o in prog.code.objects for k in o.kernels}


def _same_bits_both_ways_and_the_interpreters_values(text: str, monkeypatch, rtol: float = 2e-5) -> CpuProgram:
    """`text` compiled with library kernels judged by their own code and by their whole work
    (LIBRARY_KERNELS off): the same bits, close to the interpreter's values; the first program."""
    module = hlofuse.parse_hlo(text)
    args = _args(module)
    prog = CpuProgram.compile(_fused(text), cache=False)
    with monkeypatch.context() as m:
        m.setattr(kernel_work, "LIBRARY_KERNELS", False)
        whole = CpuProgram.compile(_fused(text), cache=False)
    got = prog.run(args)
    for g, a, w in zip(got, whole.run(args), evaluate(module, args)):
        assert g.tobytes() == a.tobytes()
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-4)
    return prog


def test_gemm_kernels_are_judged_by_their_epilogue():
    """The GEMM without an epilogue has no own elements and costs nothing at the small level;
    the others' own elements are their results', at ELEMENT_NS and TRANSCENDENTAL_NS (the tanh)
    each; the library's multiply-adds count in neither."""
    _, planner = _planned(GEMMS)
    gemms = {library_elements(k): k for k in planner.kernels if k.custom == "gemm"}
    assert sorted(gemms) == [0, 256 * 4, 256 * 256]
    plain, narrow, activated = gemms[0], gemms[256 * 4], gemms[256 * 256]
    assert (plain.comp.root.shape.dims, narrow.comp.root.shape.dims) == ((256, 256), (256, 4))
    assert own_work_ns(plain) == small_level_cost_ns(plain) == 0.0
    assert own_work_ns(narrow) == pytest.approx(1024 * ELEMENT_NS)
    assert own_work_ns(activated) == pytest.approx(65536 * (ELEMENT_NS + TRANSCENDENTAL_NS))
    assert kernel_work.kernel_work_ns(narrow) > kernel_work.SMALL_KERNEL_NS > own_work_ns(narrow)


def test_gemms_without_a_large_epilogue_go_to_the_small_level(monkeypatch):
    """The plain and the narrow GEMM are compiled at SMALL_KERNEL, the activated one at O3 (its
    epilogue's own work, 14 us by the estimate, is over SMALL_KERNEL_NS); with LIBRARY_KERNELS
    off all three are at O3. The same bits either way, the interpreter's values."""
    prog = _same_bits_both_ways_and_the_interpreters_values(GEMMS, monkeypatch)
    levels = {k.name: _levels(prog)[k.name] for k in prog.code.kernels if k.custom == "gemm"}
    by_elements = {library_elements(k): levels[k.name] for k in prog.code.kernels if k.custom == "gemm"}
    assert by_elements == {0: llvm_pool.SMALL_KERNEL, 1024: llvm_pool.SMALL_KERNEL, 65536: 3}
    monkeypatch.setattr(kernel_work, "LIBRARY_KERNELS", False)
    fused, planner = _planned(GEMMS)
    assert not any(k.custom == "gemm" and id(k) in small_kernels(planner, fused.entry) for k in planner.kernels)


def test_a_gemm_without_an_epilogue_in_a_while_loop_is_small(monkeypatch):
    """A while body's kernels do not run once per execution; the GEMM without an epilogue is
    small anyway (`small_anywhere`: nothing of its own to slow down), the one with a bias stays
    at O3 (its epilogue's cost is not within SMALL_SHARE of its call)."""
    fused, planner = _planned(LOOPED_GEMM)
    gemms = [k for k in planner.kernels if k.custom == "gemm"]
    once = once_kernels(planner, fused.entry)
    assert len(gemms) == 2 and not any(id(k) in once for k in gemms)
    chosen = small_kernels(planner, fused.entry)
    assert {library_elements(k): (small_anywhere(k), id(k) in chosen) for k in gemms} == {
        0: (True, True), 64 * 64: (False, False)}
    prog = _same_bits_both_ways_and_the_interpreters_values(LOOPED_GEMM, monkeypatch)
    levels = _levels(prog)
    assert sorted(levels[k.name] for k in prog.code.kernels if k.custom == "gemm") == [llvm_pool.SMALL_KERNEL, 3]


def test_the_small_level_threshold_at_zero_keeps_library_kernels_at_o3(monkeypatch):
    """SMALL_KERNEL_NS = 0 (every kernel at O3, as tests that read O3's code ask) holds for
    library kernels too, in a loop's body or not."""
    monkeypatch.setattr(kernel_work, "SMALL_KERNEL_NS", 0.0)
    for text in (GEMMS, LOOPED_GEMM):
        fused, planner = _planned(text)
        assert not small_kernels(planner, fused.entry)


@pytest.mark.skipif(gemm_provider("f32") != "onednn", reason="libdnnl not loaded (or HLOFUSE_GEMM=openblas)")
def test_a_onednn_convolution_is_judged_by_its_per_feature_operands(monkeypatch):
    """The oneDNN convolution kernel's own elements are its two per-feature operands (24 each);
    it is compiled at the small level, with the same bits as at O3 and the interpreter's values
    (oneDNN sums in its own order: float rounding)."""
    monkeypatch.setattr(cpu_conv_gemm, "prefers_onednn", lambda comp: True)
    fused, planner = _planned(CONV_SCALE)
    (conv,) = [k for k in planner.kernels if k.custom == "onednn_conv"]
    assert library_elements(conv) == 2 * 24
    assert id(conv) in small_kernels(planner, fused.entry)
    prog = _same_bits_both_ways_and_the_interpreters_values(CONV_SCALE, monkeypatch, rtol=1e-4)
    assert [_levels(prog)[k.name] for k in prog.code.kernels if k.custom == "onednn_conv"] == [llvm_pool.SMALL_KERNEL]
