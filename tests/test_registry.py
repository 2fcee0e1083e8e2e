"""The op registry is complete and consistent: every opcode has a shape rule and a
reference rule (or an explicit reason why not), and every row's fields agree with each
other and with XLA."""
from __future__ import annotations

import pytest

from hlofuse.hlo.ir import COMPUTATION_ATTRS
from hlofuse.hlo.opcodes import OPS, VARIADIC
from hlofuse.hlo.rule_loader import load_rules

KINDS = {"unary", "binary", "ternary", "compare", "data", "reduce", "control", "collective", "io", "other"}
FUSION = {"yes", "root", "producer", "never"}
DOMAINS = {"any", "positive", "unit", "nonzero", "int"}
STAGES = {"shape", "reference", "elemental", "library"}  # library: unfused ops run by compiled backends
KIND_ARITY = {"unary": 1, "binary": 2, "ternary": 3, "compare": 2}

# Independent reference, not a registry: XLA's InstructionFusion::IsExpensive
# (openxla/xla xla/service/instruction_fusion.cc at fdde9d42), by HLO text spelling.
# abs/sign/sine/cosine/tan are expensive only for complex types and divide/remainder are
# cheap only for integers divided by a constant; the registry flag records the case of
# real floating-point operands.
XLA_CHEAP = set("""
    add and bitcast bitcast-convert broadcast ceil clamp count-leading-zeros compare complex concatenate
    constant convert copy copy-done copy-start dynamic-slice dynamic-update-slice floor get-tuple-element
    imag infeed iota is-finite maximum minimum multiply negate not opt-barrier or xor outfeed pad
    partition-id popcnt real reduce-precision replica-id reshape dynamic-reshape reverse round-nearest-afz
    round-nearest-even select shift-left shift-right-arithmetic shift-right-logical slice stochastic-convert
    subtract transpose tuple abs sign sine cosine tan""".split())
XLA_EXPENSIVE = set("""
    divide remainder add-dependency after-all atan2 async-start async-update async-done batch-norm-grad
    batch-norm-inference batch-norm-training call cholesky conditional convolution all-gather all-gather-start
    all-gather-done all-reduce reduce-scatter all-reduce-start all-reduce-done all-to-all collective-broadcast
    collective-permute collective-permute-done collective-permute-start custom-call domain dot erf exponential
    exponential-minus-one fft fusion gather log log-plus-one logistic map parameter power recv recv-done
    reduce reduce-window rng rng-get-and-update-state rng-bit-generator rsqrt scatter select-and-scatter send
    send-done sort topk sqrt cbrt tanh triangular-solve while get-dimension-size set-dimension-size""".split())


@pytest.mark.parametrize("opcode", sorted(OPS))
def test_every_opcode_has_a_shape_rule(opcode):
    load_rules("shape")
    info = OPS[opcode]
    assert info.shape_rule is not None or info.unsupported.get("shape"), \
        f"{opcode}: no shape rule and no mark_unsupported('shape', reason)"


def test_every_opcode_has_a_reference_rule_or_a_reason():
    load_rules("reference")
    missing = sorted(n for n, i in OPS.items() if i.reference is None and not i.unsupported.get("reference"))
    assert not missing, f"opcodes without a reference rule or an unsupported reason: {missing}"


def test_xla_reference_names_only_registered_opcodes():
    assert not (XLA_CHEAP | XLA_EXPENSIVE) - set(OPS)
    assert not XLA_CHEAP & XLA_EXPENSIVE


@pytest.mark.parametrize("opcode", sorted(XLA_CHEAP | XLA_EXPENSIVE))
def test_expensive_flag_matches_xla(opcode):
    assert OPS[opcode].expensive == (opcode in XLA_EXPENSIVE)


@pytest.mark.parametrize("opcode", sorted(OPS))
def test_row_fields_are_consistent(opcode):
    info = OPS[opcode]
    assert info.name == opcode
    assert info.kind in KINDS
    assert info.fusion in FUSION
    assert info.domain in DOMAINS
    assert set(info.unsupported) <= STAGES
    assert all(reason.strip() for reason in info.unsupported.values()), "an unsupported stage needs a reason"
    assert info.arity == VARIADIC or info.arity >= 0
    if info.kind in KIND_ARITY:
        assert info.arity == KIND_ARITY[info.kind]
        assert info.elementwise, f"{opcode} is {info.kind} but not elementwise"
    if info.elementwise:
        assert info.fusion == "yes", f"elementwise {opcode} must be fusible anywhere"
    if info.math:
        assert info.elementwise, f"{opcode} has a math function but is not elementwise"
    for key in info.called:
        assert key in COMPUTATION_ATTRS, f"{opcode} calls through '{key}', unknown to HloInstruction"
    if info.side_effecting:
        assert info.fusion == "never", f"side-effecting {opcode} must not be fused"
