"""`hlofuse opt MODULE --passes a,b` (XLA's hlo-opt): the named passes only, and the module
they leave. Expected results come from the module's meaning (the interpreter on the input and
on the output), from counting what a pass must remove, and from `hlofuse compile`'s standard
pipeline, which builds its passes without the spec parser."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import numpy as np
import pytest

import hlofuse
from hlofuse.cli import main
from hlofuse.hlo.shapes import array
from hlofuse.passes.pass_base import HloPass
from hlofuse.passes.pipeline import PASSES, PIPELINES
from hlofuse.runtime.interpreter import evaluate
from hlofuse.runtime.io import random_inputs
from repo_paths import REPO

ROOT = str(REPO)
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.hlo")))
LAYER_NORM = os.path.join(ROOT, "examples", "layer_norm.hlo")  # fused differently for cpu and gpu

DUPLICATES = """HloModule dup
ENTRY main {
  x = f32[64] parameter(0)
  two = f32[] constant(2)
  b = f32[64] broadcast(two), dimensions={}
  m1 = f32[64] multiply(x, b)
  m2 = f32[64] multiply(x, b)
  dead = f32[64] exponential(x)
  a = f32[64] add(m1, m2)
  ROOT e = f32[64] tanh(a)
}
"""
FOLDABLE = """HloModule fold
ENTRY main {
  x = f32[16] parameter(0)
  c = f32[16] constant({0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15})
  n = f32[16] negate(c)
  ROOT a = f32[16] add(x, n)
}
"""


def _write(tmp_path, text: str, name: str = "m.hlo") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _opt(capsys, *argv: str) -> str:
    assert main(["opt", *argv]) == 0
    return capsys.readouterr().out


def _same_meaning(original: str, optimized: str) -> None:
    before, after = hlofuse.parse_hlo(original), hlofuse.parse_hlo(optimized)
    inputs = random_inputs(before, 0)
    for x, y in zip(evaluate(before, inputs), evaluate(after, inputs)):
        np.testing.assert_allclose(y, x, rtol=1e-6)


def _count(text: str, opcode: str) -> int:
    return sum(f" {opcode}(" in line for line in text.splitlines())


@pytest.mark.parametrize("passes,multiplies,exponentials", [
    ("cse", 1, 1),  # the duplicate goes; the dead exponential stays
    ("dce", 2, 0),
    ("cse,dce", 1, 0),
    (" cse , dce ", 1, 0),
])
def test_the_named_passes_run_in_order_and_keep_the_meaning(tmp_path, capsys, passes, multiplies, exponentials):
    out = _opt(capsys, _write(tmp_path, DUPLICATES), "--passes", passes)
    assert (_count(out, "multiply"), _count(out, "exponential")) == (multiplies, exponentials)
    _same_meaning(DUPLICATES, out)


def test_options_in_braces_reach_the_pass(tmp_path, capsys):
    path = _write(tmp_path, FOLDABLE)
    assert _count(_opt(capsys, path, "--passes", "simplifier"), "negate") == 0  # 16 <= 64: folded
    small = _opt(capsys, path, "--passes", "simplifier{max_fold_elements=8}")
    assert _count(small, "negate") == 1
    assert _count(_opt(capsys, path, "--passes", "simplifier{fold_constants=false}"), "negate") == 1
    _same_meaning(FOLDABLE, small)


def test_target_is_the_default_of_passes_that_take_one(capsys):
    cpu = _opt(capsys, LAYER_NORM, "--passes", "fusion")
    gpu = _opt(capsys, LAYER_NORM, "--passes", "fusion", "--target", "gpu")
    assert cpu != gpu  # the two policies fuse this module differently
    assert _opt(capsys, LAYER_NORM, "--passes", "fusion{target=gpu}") == gpu  # braces win over --target
    assert _opt(capsys, LAYER_NORM, "--passes", "fusion{target=cpu}", "--target", "gpu") == cpu


@pytest.mark.parametrize("target", ["cpu", "gpu"])
@pytest.mark.parametrize("example", EXAMPLES, ids=os.path.basename)
def test_named_pipeline_spelled_out_is_compile_s_pipeline(example, target, capsys):
    spec = "batchnorm-expander,call-inliner,simplifier,reshape-mover,simplifier,cse,dce,fusion-pipeline,dce"
    opt = _opt(capsys, example, "--passes", spec, "--target", target)
    assert main(["compile", example, "--target", target]) == 0
    assert opt == capsys.readouterr().out
    assert _count(opt, "fusion") > 0


def test_list_passes_names_every_pass_with_its_options_and_doc(capsys):
    out = "\n" + _opt(capsys, "--list-passes")
    heads = [line.split("{")[0] for line in out.splitlines() if line and not line.startswith(" ")]
    assert sorted(set(PASSES) | set(PIPELINES)) == sorted(h for h in heads if not h.startswith("A pass"))
    assert "\nsimplifier{fold_constants=true,max_fold_elements=64}\n" in out
    assert "\ncse\n    XLA's HloCSE over every computation (callees first).\n" in out
    assert "\nfusion{target,may_duplicate=true}\n" in out and "\nfusion-pipeline{target,algorithm}\n" in out
    assert "\nalgsimp{fold_constants=true,max_fold_elements=64}\n    the same pass as simplifier\n" in out


@pytest.mark.parametrize("spec,says", [
    ("cse,nope", "unknown pass 'nope'; known passes: algsimp, batchnorm-expander,"),
    ("cse{x=1}", "pass 'cse' has no option x; it takes no options"),
    ("simplifier{max_fold=1}", "pass 'simplifier' has no option max_fold; it takes fold_constants, max_fold_elements"),
    ("fusion-pipeline{depth=2}", "pipeline 'fusion-pipeline' has no option depth; it takes target"),
    ("simplifier{max_fold_elements=abc}", "option max_fold_elements=abc should be a whole number"),
    ("dce{remove_computations=1}", "option remove_computations=1 should be true or false"),
    ("fusion{target=tpu}", "pass 'fusion' has no target 'tpu'; targets are cpu, gpu"),
    ("fusion-pipeline{target=tpu}", "pipeline 'fusion-pipeline' has no target 'tpu'; targets are cpu, gpu"),
    ("cse{", "malformed pass spec 'cse{'"),
])
def test_an_unknown_pass_or_option_is_a_user_error_listing_what_is_known(tmp_path, capsys, spec, says):
    assert main(["opt", _write(tmp_path, DUPLICATES), "--passes", spec]) == 2
    captured = capsys.readouterr()
    assert says in captured.err and "Traceback" not in captured.err and captured.out == ""


@pytest.mark.parametrize("argv,says", [
    (["opt"], "opt needs a MODULE"),
    (["opt", LAYER_NORM], "opt needs --passes"),
])
def test_missing_module_or_passes_is_a_user_error(capsys, argv, says):
    assert main(argv) == 2
    assert says in capsys.readouterr().err


def test_output_file_dump_dir_and_timings(tmp_path, capsys):
    out_file, dump = tmp_path / "out.hlo", tmp_path / "dumps"
    assert main(["opt", _write(tmp_path, DUPLICATES), "--passes", "cse,dce", "-o", str(out_file),
                 "--dump-dir", str(dump), "--timings"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert [line.split()[0] for line in captured.err.splitlines()] == ["cse", "dce"]
    assert _count(out_file.read_text(), "multiply") == 1
    assert sorted(os.listdir(dump)) == ["0000.dup.before_optimizations.hlo", "0001.dup.cse.hlo", "0002.dup.dce.hlo"]
    assert (dump / "0002.dup.dce.hlo").read_text() == out_file.read_text()


class _BreakRoot(HloPass):
    """Gives the entry's root a wrong shape, as a buggy pass would."""

    name = "break-root"

    def run(self, module) -> bool:
        module.entry.root.shape = array("f32", (3,))
        return True


def test_verify_after_each_pass_names_the_pass(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PASSES, "break-root", _BreakRoot)
    monkeypatch.delenv("HLOFUSE_VERIFY_PASSES", raising=False)  # the suite's default: verify everything
    path = _write(tmp_path, DUPLICATES)
    assert main(["opt", path, "--passes", "cse,break-root,dce"]) == 0  # unverified: printed as it is
    capsys.readouterr()
    assert main(["opt", path, "--passes", "cse,break-root,dce", "--verify"]) == 2
    err = capsys.readouterr().err
    assert "the module is invalid after pass 'break-root'" in err and "Traceback" not in err


def test_opt_in_a_subprocess(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hlofuse.cli", "opt", _write(tmp_path, DUPLICATES),
                           "--passes", "cse,dce", "--verify"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert _count(proc.stdout, "multiply") == 1 and _count(proc.stdout, "exponential") == 0
    proc = subprocess.run([sys.executable, "-m", "hlofuse.cli", "opt", _write(tmp_path, DUPLICATES),
                           "--passes", "nope"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2 and "known passes" in proc.stderr and "Traceback" not in proc.stderr
