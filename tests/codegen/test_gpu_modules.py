"""The GPU backend on whole modules: every golden module input (testdata/hlo_text/<pass>), every
benchmark workload (benchmarks/workloads.py, lowered by JAX) and the JAX corpus
(testdata/jax), fused with the GPU pipeline. Each gives PTX that ptxas (or nvJitLink)
assembles for sm_90, and the emulated grid matches the interpreter."""
from __future__ import annotations

import glob
import os
import sys

import numpy as np
import pytest

from backend_cases import corpus_case
from golden_harness import load_cases
from hlofuse.compiler import optimize
from hlofuse.emitters.gpu.ptxas import assemble, assembler
from hlofuse.hlo.errors import UnsupportedError
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_outputs
from hlofuse.runtime.gpu_executor import GpuProgram
from hlofuse.runtime.interpreter import evaluate
from hlofuse.runtime.io import random_inputs
from repo_paths import REPO

ROOT = str(REPO)
NO_ASSEMBLER = "neither ptxas nor nvJitLink is available to assemble PTX"


def check_module(module, args=None, arch: str = "sm_90", assemble_ptx: bool = True) -> str:
    """Fuse `module` for the GPU, assemble its PTX (when `assemble_ptx` and an assembler is
    installed), run it emulated and compare it with the interpreter; returns "" when the
    results were compared, or a note saying why the interpreter or the backend cannot run it."""
    fused, _ = optimize(module, "gpu")
    prog = GpuProgram.compile(fused, emulated=True, build_only=True)
    if assemble_ptx and assembler() is not None:
        assemble(prog.ptx(), arch)
    args = random_inputs(module, 0) if args is None else args
    try:
        want = evaluate(module, args)
    except UnsupportedError as e:
        return f"interpreter: {e}"
    try:
        got = GpuProgram.compile(fused, emulated=True).run(args)
    except UnsupportedError as e:
        if "rng" in str(e):  # random number generation is unsupported by the compiled backends
            return f"backend: {e}"
        raise
    bad = [r.line() for r in compare_outputs(got, [np.asarray(w) for w in want]) if not r.ok]
    assert not bad, "\n".join(bad)
    return ""


GOLDEN_CASES = load_cases()


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=[c.id for c in GOLDEN_CASES])
def test_golden_inputs_emulated(case):
    """Every golden module input, fused for the GPU and run on the emulated grid, matches the
    interpreter (no assembler needed). A module the interpreter cannot run (an external
    custom-call) is skipped with the reason: nothing was compared."""
    note = check_module(parse_hlo(case.module_text(), case.filename), assemble_ptx=False)
    if note:
        pytest.skip(f"not compared: {note}")


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=[c.id for c in GOLDEN_CASES])
def test_golden_inputs_assemble(case):
    """Every golden module input, fused for the GPU, gives PTX that ptxas (or nvJitLink)
    assembles for sm_90."""
    if assembler() is None:
        pytest.skip(NO_ASSEMBLER)
    fused, _ = optimize(parse_hlo(case.module_text(), case.filename), "gpu")
    assemble(GpuProgram.compile(fused, emulated=True, build_only=True).ptx(), "sm_90")


def _workloads():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        from workloads import WORKLOADS
    finally:
        sys.path.pop(0)
    return WORKLOADS


@pytest.mark.parametrize("name", sorted(_workloads()))
def test_benchmark_workloads(name):
    jax = pytest.importorskip("jax")
    if assembler() is None:
        pytest.skip(NO_ASSEMBLER)
    w = _workloads()[name]
    args = w.inputs("small")
    module = parse_hlo(jax.jit(w.fn).lower(*args).as_text(dialect="hlo"))
    assert check_module(module, [np.asarray(a) for a in args]) == ""


def _corpus() -> list[str]:
    return sorted(p for p in glob.glob(os.path.join(ROOT, "testdata", "jax", "*.hlo")) if not p.endswith(".opt.hlo"))


@pytest.mark.parametrize("name", ["softmax.hlo", "layer_norm.hlo", "argmax_argmin.hlo", "batch_norm_stats.hlo"])
def test_jax_corpus_sample(name):
    path = os.path.join(ROOT, "testdata", "jax", name)
    if not os.path.exists(path):
        pytest.skip(f"{path} is not in this checkout")
    assert check_module(parse_hlo(open(path).read(), path)) == ""


@pytest.mark.parametrize("path", _corpus(), ids=os.path.basename)
def test_jax_corpus(path):
    # "" means the results were compared; every corpus module is runnable by both sides.
    assert check_module(parse_hlo(open(path).read(), path)) == ""


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "testdata", "jax", "*.opt.hlo"))),
                         ids=os.path.basename)
def test_xla_fused_corpus_runs_as_given(path):
    """XLA's own fusion decisions (the .opt.hlo files, kLoop/kInput/kOutput fusions) run
    through the GPU kernels without re-fusing."""
    module, args, want = corpus_case(path)
    prog = GpuProgram.compile(module, emulated=True)
    bad = [r.line() for r in compare_outputs(prog.run(args), want) if not r.ok]
    assert not bad, "\n".join(bad)
    if assembler() is not None:
        assemble(prog.ptx())


def test_build_only_defers_unsupported_ops():
    text = """HloModule m
ENTRY e {
  x = f32[64] parameter(0)
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  r = f32[64] rng(lo, hi), distribution=rng_uniform
  ROOT y = f32[64] add(x, r)
}
"""
    prog = GpuProgram.compile(parse_hlo(text), emulated=True, build_only=True)
    assert prog.launches  # the add still has a kernel (and PTX)
    with pytest.raises(RuntimeError, match="build_only"):
        prog.run([np.zeros(64, np.float32)])
    with pytest.raises(UnsupportedError, match="rng instruction r"):
        GpuProgram.compile(parse_hlo(text), emulated=True)


def test_cli_emits_ptx(tmp_path):
    from hlofuse import cli

    path = tmp_path / "m.hlo"
    path.write_text("""HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[128,512] parameter(0)
  e = f32[128,512] exponential(x)
  z = f32[] constant(0)
  ROOT r = f32[128] reduce(e, z), dimensions={1}, to_apply=add
}
""")
    out = tmp_path / "m.ptx"
    assert cli.main(["compile", str(path), "--target", "gpu", "--emit", "ptx", "-o", str(out)]) == 0
    ptx = out.read_text()
    assert ".target sm_90" in ptx and ".entry" in ptx
    if assembler() is not None:
        assemble(ptx)


def test_compile_api_gpu_emulated():
    import hlofuse

    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[512,96] parameter(0)
  t = f32[512,96] tanh(x)
  z = f32[] constant(0)
  r = f32[96] reduce(t, z), dimensions={0}, to_apply=add
  ROOT o = (f32[512,96], f32[96]) tuple(t, r)
}
"""
    module = hlofuse.parse_hlo(text)
    exe = hlofuse.compile(module, target="gpu-emulated")
    x = np.random.default_rng(4).standard_normal((512, 96)).astype(np.float32)
    t, r = exe(x)
    np.testing.assert_allclose(t, np.tanh(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r, np.tanh(x).sum(axis=0), rtol=1e-4, atol=1e-4)
    assert ".entry" in exe.program.ptx()
