"""The batchnorm-expander pass: batch-norm ops rewritten into elementwise ops, broadcasts and
reductions; the expanded module must compute what the interpreter computes on the original
(which implements batch-norm directly), and the compiled backends must run it."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse import parse_hlo
from hlofuse.hlo.verifier import verify
from hlofuse.passes.pipeline import get_pass, standard_pipeline
from hlofuse.runtime.interpreter import evaluate

TRAINING = """HloModule bn_training
ENTRY %main (x: f32[4,3,5,2], s: f32[3], o: f32[3]) -> (f32[4,3,5,2], f32[3], f32[3]) {
  %x = f32[4,3,5,2] parameter(0)
  %s = f32[3] parameter(1)
  %o = f32[3] parameter(2)
  ROOT %bn = (f32[4,3,5,2], f32[3], f32[3]) batch-norm-training(%x, %s, %o), epsilon=0.001, feature_index=1
}
"""
INFERENCE = """HloModule bn_inference
ENTRY %main (x: f32[6,7], s: f32[7], o: f32[7], m: f32[7], v: f32[7]) -> f32[6,7] {
  %x = f32[6,7] parameter(0)
  %s = f32[7] parameter(1)
  %o = f32[7] parameter(2)
  %m = f32[7] parameter(3)
  %v = f32[7] parameter(4)
  ROOT %bn = f32[6,7] batch-norm-inference(%x, %s, %o, %m, %v), epsilon=0.01, feature_index=1
}
"""
GRAD = """HloModule bn_grad
ENTRY %main (x: f32[8,4,3], s: f32[3], m: f32[3], v: f32[3], dy: f32[8,4,3]) -> (f32[8,4,3], f32[3], f32[3]) {
  %x = f32[8,4,3] parameter(0)
  %s = f32[3] parameter(1)
  %m = f32[3] parameter(2)
  %v = f32[3] parameter(3)
  %dy = f32[8,4,3] parameter(4)
  ROOT %bn = (f32[8,4,3], f32[3], f32[3]) batch-norm-grad(%x, %s, %m, %v, %dy), epsilon=0.0001, feature_index=2
}
"""
# Training in f64 with the feature dimension first, followed by arithmetic that fuses with it.
TRAINING_F64 = """HloModule bn_training_f64
ENTRY %main (x: f64[3,16], s: f64[3], o: f64[3]) -> f64[3,16] {
  %x = f64[3,16] parameter(0)
  %s = f64[3] parameter(1)
  %o = f64[3] parameter(2)
  %bn = (f64[3,16], f64[3], f64[3]) batch-norm-training(%x, %s, %o), epsilon=1e-05, feature_index=0
  %y = f64[3,16] get-tuple-element(%bn), index=0
  ROOT %t = f64[3,16] tanh(%y)
}
"""


def _args(module, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for p in module.entry.parameters:
        dt = p.shape.dtype.numpy
        a = rng.standard_normal(p.shape.dims) * 2 + 0.5
        if p.name == "v":  # variances are positive
            a = np.abs(a) + 0.1
        out.append(a.astype(dt))
    return out


def _close(got, want, rtol):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


CASES = {"training": TRAINING, "inference": INFERENCE, "grad": GRAD, "training_f64": TRAINING_F64}


@pytest.mark.parametrize("name", sorted(CASES))
def test_expanded_module_matches_the_interpreter_on_the_original(name):
    original = parse_hlo(CASES[name])
    args = _args(original)
    want = evaluate(original, args)
    expanded = parse_hlo(CASES[name])
    assert get_pass("batchnorm-expander").run(expanded)
    verify(expanded)
    assert not any(i.opcode.startswith("batch-norm") for i in expanded.all_instructions())
    rtol = 1e-12 if name.endswith("f64") else 2e-5
    _close(evaluate(expanded, args), want, rtol)


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
def test_bf16_training_computes_in_bf16(target):
    """The expansion keeps the operand's type (as XLA's does): bf16 in, bf16 arithmetic, so the
    result is within bf16 rounding of the interpreter's (which computes wide and rounds once)."""
    text = TRAINING.replace("f32", "bf16")
    module = parse_hlo(text)
    args = _args(module, seed=2)
    want = evaluate(module, args)
    got = hlofuse.compile(module, target=target)(*args)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=0.05, atol=0.05)


def test_no_batch_norm_no_change():
    module = parse_hlo("HloModule m\nENTRY %e (p: f32[3]) -> f32[3] {\n  %p = f32[3] parameter(0)\n"
                       "  ROOT %n = f32[3] negate(%p)\n}\n")
    before = module.to_text()
    assert not get_pass("batchnorm-expander").run(module)
    assert module.to_text() == before


def test_runs_first_in_the_standard_pipeline():
    for target in ("cpu", "gpu"):
        names = [p.name for p in standard_pipeline(target).passes]
        # the expander first; the simplifier after the scatter simplifier (whose DUS chains it cleans)
        assert names[0] == "batchnorm-expander" and names.index("simplifier") > names.index("scatter-simplifier")


def test_hand_derived_inference_value():
    """y = (x - mean) / sqrt(var + eps) * scale + offset, by hand for one feature."""
    module = parse_hlo(INFERENCE)
    x = np.full((6, 7), 3.0, np.float32)
    s, o, m = np.full(7, 2.0, np.float32), np.full(7, 1.0, np.float32), np.full(7, 1.0, np.float32)
    v = np.full(7, 3.99, np.float32)  # sqrt(3.99 + 0.01) = 2
    (got,) = hlofuse.compile(module, target="cpu")(x, s, o, m, v)
    np.testing.assert_allclose(got, np.full((6, 7), 3.0), rtol=1e-6)


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_backends_run_batch_norm(name, target):
    module = parse_hlo(CASES[name])
    args = _args(module, seed=1)
    want = evaluate(module, args)
    exe = hlofuse.compile(module, target=target)
    assert not any(i.opcode.startswith("batch-norm") for i in exe.fused_module.all_instructions())
    rtol = 1e-11 if name.endswith("f64") else 5e-5
    _close(list(exe(*args)), want, rtol)
