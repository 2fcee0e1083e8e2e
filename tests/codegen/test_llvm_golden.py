"""LLVM IR goldens: a few modules of testdata/llvm/*.hlo compiled for the host CPU, their
optimized LLVM IR matched by FileCheck against hand-written claims (a vectorised elementwise
loop, a row reduction with a vector accumulator, a multi-output loop fusion storing two
outputs from one kernel). Each module's IR also passes LLVM's verifier and the compiled
program matches the numpy interpreter."""
from __future__ import annotations

import os

import numpy as np
import pytest

from golden_harness import REPO, Case, FileCheckFailure, build_pipeline, check_case, filecheck, load_cases

LLVM_DIR = os.path.join(REPO, "testdata", "llvm")
CASES = load_cases(LLVM_DIR)


def _module(case: Case):
    """The case's module after its pipeline (`pipeline=none`: as written, already fused)."""
    from hlofuse.hlo.parser import parse_hlo

    module = parse_hlo(case.module_text(), filename=case.filename)
    if case.options.get("pipeline") != "none":
        build_pipeline(case.options).run(module)
    return module


def _compile(case: Case):
    from hlofuse.runtime.cpu_executor import CpuProgram

    return CpuProgram.compile(_module(case))


def test_there_are_llvm_goldens_for_a_loop_a_reduction_and_a_multi_output_fusion():
    names = [c.module_text().split("HloModule", 1)[1].split()[0] for c in CASES]
    assert names == ["vec_loop", "row_reduce", "multi_output_loop"]


@pytest.mark.usefixtures("kernels_at_o3")
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_llvm_golden(case: Case):
    import llvmlite.binding as llvm

    assert case.claim() and case.check_lines(), f"{case.id}: needs a // Claim: and CHECK lines"
    ir = _compile(case).llvm_ir()
    llvm.parse_assembly(ir).verify()
    check_case(case, ir)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_llvm_golden_checks_fail_on_the_unoptimized_ir(case: Case):
    """The claims are about what the optimizer makes of the emitted kernels (vector bodies):
    the emitted IR before LLVM's passes, itself valid, fails them."""
    import llvmlite.binding as llvm

    from hlofuse.codegen.cpu import emit_module
    from hlofuse.emitters.cpu.target import CpuTarget

    code = _compile(case).code
    raw = str(emit_module(code.module.name, code.kernels, CpuTarget()))
    llvm.parse_assembly(raw).verify()
    with pytest.raises(FileCheckFailure):
        check_case(case, raw)


def test_multi_output_checks_fail_for_two_single_output_kernels():
    """The same two results computed by two kernels (XLA:CPU's fusion passes on the unfused
    module, without the CPU's sibling fusion, which would merge them) fail the multi-output
    case's claim of one kernel storing both."""
    from hlofuse.compiler import optimize
    from hlofuse.hlo.parser import parse_hlo
    from hlofuse.runtime.cpu_executor import CpuProgram

    case = CASES[2]
    unfused = """HloModule two_kernels

ENTRY %main (x: f32[2048], y: f32[2048]) -> (f32[2048], f32[2048]) {
  %x = f32[2048]{0} parameter(0)
  %y = f32[2048]{0} parameter(1)
  %s = f32[2048]{0} add(f32[2048]{0} %x, f32[2048]{0} %y)
  %a = f32[2048]{0} multiply(f32[2048]{0} %s, f32[2048]{0} %x)
  %b = f32[2048]{0} subtract(f32[2048]{0} %s, f32[2048]{0} %y)
  ROOT %t = (f32[2048]{0}, f32[2048]{0}) tuple(f32[2048]{0} %a, f32[2048]{0} %b)
}
"""
    fused, _ = optimize(parse_hlo(unfused), "cpu", passes="call-inliner,fusion")
    ir = CpuProgram.compile(fused).llvm_ir()
    assert ir.count("define void") == 2
    with pytest.raises(FileCheckFailure):
        check_case(case, ir)


def test_vector_width_is_not_hard_coded():
    """The vector loop's claim holds for 8 and 16 lanes alike (AVX2 or AVX-512 hosts)."""
    case = CASES[0]
    body = """define void @k0_fusion_l0(ptr %a) {
vector.body:
  %w = load <{n} x float>, ptr %a
  %m = fmul <{n} x float> %w, %w
  %s = fadd <{n} x float> %m, %w
  %g = fneg <{n} x float> %s
  store <{n} x float> %g, ptr %a
  br i1 %c, label %end, label %vector.body
}
"""
    for lanes in (4, 8, 16):
        check_case(case, body.replace("{n}", str(lanes)))
    with pytest.raises(FileCheckFailure):  # mixed widths are not one vector loop
        check_case(case, body.replace("{n}", "8").replace("fadd <8", "fadd <16"))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_llvm_golden_programs_match_the_interpreter(case: Case):
    from hlofuse.runtime.interpreter import evaluate
    from hlofuse.runtime.io import random_inputs

    module = _module(case)
    args = random_inputs(module, 0)
    got = _compile(case).run(args)
    want = evaluate(module, args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=2e-5, atol=1e-5)


def test_filecheck_reads_llvm_syntax_we_use():
    """Variables in vector types and intrinsic names, as the goldens use them."""
    ir = "  %v = phi <16 x float> [ zeroinitializer, %a ]\n  %r = call float @llvm.vector.reduce.fadd.v16f32(float 0.0, <16 x float> %v)\n"
    filecheck(ir, "// CHECK: phi <[[N:[0-9]+]] x float>\n// CHECK: @llvm.vector.reduce.fadd.v[[N]]f32(")
    with pytest.raises(FileCheckFailure):
        filecheck(ir.replace("v16f32", "v8f32"), "// CHECK: phi <[[N:[0-9]+]] x float>\n// CHECK: reduce.fadd.v[[N]]f32(")
