"""The op registry is complete and consistent: every opcode has a shape rule and a
reference rule (or an explicit reason why not), and every row's fields agree with each
other and with XLA."""
from __future__ import annotations

import pytest

from hlofuse.hlo.ir import COMPUTATION_ATTRS
from hlofuse.hlo.opcodes import (OPS, SLOTS, VARIADIC, RegistrationError, mark_unsupported, register_elemental,
                                  register_library, register_reference, register_shape_rule)
from hlofuse.hlo.rule_loader import RULE_MODULES, STAGES, load_rules

KINDS = {"unary", "binary", "ternary", "compare", "data", "reduce", "control", "collective", "io", "other"}
FUSION = {"yes", "root", "producer", "never"}
DOMAINS = {"any", "positive", "unit", "at_least_one", "nonzero", "int"}
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
    send-done sort topk sqrt cbrt tanh triangular-solve while get-dimension-size set-dimension-size
    sinh cosh asin acos asinh acosh atanh""".split())


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


# ---- the loader: every rule module listed, each slot filled once ----------------------------

REGISTRARS = {"shape": "register_shape_rule", "reference": "register_reference",
              "elemental": "register_elemental", "library": "register_library"}


def _registering_modules() -> dict[str, set[str]]:
    """stage -> the hlofuse modules whose source calls that stage's register_* (read with ast,
    independently of the loader's list)."""
    import ast
    from pathlib import Path

    import hlofuse

    root = Path(hlofuse.__file__).parent
    found: dict[str, set[str]] = {stage: set() for stage in REGISTRARS}
    for path in root.rglob("*.py"):
        if path.name == "opcodes.py":
            continue
        module = ".".join(("hlofuse", *path.relative_to(root).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                for stage, name in REGISTRARS.items():
                    if node.func.id == name:
                        found[stage].add(module)
    return found


def test_loader_lists_exactly_the_modules_that_register_rules():
    found = _registering_modules()
    for stage, modules in RULE_MODULES.items():
        assert set(modules) == found[stage], f"{stage}: listed {sorted(modules)}, registering {sorted(found[stage])}"
        assert len(set(modules)) == len(modules), f"{stage}: a module listed twice"
    assert set(RULE_MODULES) == set(STAGES) == set(SLOTS) == set(REGISTRARS)


# A filled slot of each stage, and the registrar of that stage.
FILLED = {"shape": ("add", register_shape_rule), "reference": ("add", register_reference),
          "elemental": ("add", register_elemental), "library": ("dot", register_library)}


@pytest.mark.parametrize("stage", sorted(FILLED))
def test_registering_a_second_rule_is_an_error(stage):
    load_rules(stage)
    opcode, register = FILLED[stage]
    info = OPS[opcode]
    before = getattr(info, SLOTS[stage])
    assert before is not None

    def intruder(*args):  # pragma: no cover - never called
        raise AssertionError

    with pytest.raises(RegistrationError) as err:
        register(opcode)(intruder)
    message = str(err.value)
    assert opcode in message and stage in message
    assert "intruder" in message and before.__qualname__ in message
    assert getattr(info, SLOTS[stage]) is before, "the refused rule must not replace the first"


@pytest.mark.parametrize("stage", sorted(FILLED))
def test_marking_a_filled_slot_unsupported_is_an_error(stage):
    load_rules(stage)
    opcode, _ = FILLED[stage]
    with pytest.raises(RegistrationError, match=opcode):
        mark_unsupported(stage, "a reason", opcode)
    assert stage not in OPS[opcode].unsupported


def test_registering_a_rule_for_an_unsupported_opcode_is_an_error():
    load_rules("reference")
    opcode = next(n for n, i in OPS.items() if "reference" in i.unsupported)
    with pytest.raises(RegistrationError, match="unsupported"):
        register_reference(opcode)(lambda inst, args, interp: None)
    assert OPS[opcode].reference is None


def _fresh(code: str) -> str:
    """Run `code` in a fresh interpreter (nothing of hlofuse imported yet); its stdout."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_importing_the_compiler_fills_no_rule():
    # Parser, verifier, passes and the compile entry point are imported; no rule is attached
    # until a stage's consumer loads it.
    out = _fresh(
        "import hlofuse, hlofuse.compiler, hlofuse.hlo.parser, hlofuse.hlo.verifier, hlofuse.passes.pipeline\n"
        "from hlofuse.hlo.opcodes import OPS, SLOTS\n"
        "from hlofuse.hlo.rule_loader import loaded_stages\n"
        "filled = sum(getattr(i, s) is not None for i in OPS.values() for s in SLOTS.values())\n"
        "print(sorted(loaded_stages()), filled)\n")
    assert out.split() == ["[]", "0"]


@pytest.mark.parametrize("stage", sorted(STAGES))  # sorted: xdist workers must collect one order
def test_each_stage_loads_alone_and_completely(stage):
    # A stage must not depend on another having been loaded (or imported) first.
    out = _fresh(
        "from hlofuse.hlo.opcodes import OPS, SLOTS\n"
        "from hlofuse.hlo.rule_loader import load_rules, loaded_stages\n"
        f"load_rules({stage!r})\n"
        f"print(sorted(loaded_stages()))\n"
        f"print([n for n, i in OPS.items() if getattr(i, SLOTS[{stage!r}]) is None "
        f"and {stage!r} not in i.unsupported])\n")
    loaded, missing = out.splitlines()
    assert loaded == str([stage])
    if stage in ("shape", "reference"):  # every opcode has these (test above)
        assert missing == "[]"


@pytest.mark.parametrize("module", [m for ms in RULE_MODULES.values() for m in ms])
def test_a_rule_module_imported_first_loads(module):
    # Importing a rule module before anything else (a test, a tool) works and registers once.
    _fresh(f"import {module}\nfrom hlofuse.hlo.rule_loader import load_rules\nload_rules()\n")


# ---- facts that were side tables ----------------------------------------------------------------

def test_step_kinds_are_the_bookkeeping_leaves():
    kinds = {n: i.step_kind for n, i in OPS.items() if i.step_kind}
    assert kinds == {"parameter": "param", "constant": "const", "tuple": "tuple", "get-tuple-element": "gte"}


@pytest.mark.parametrize("opcode", sorted(n for n, i in OPS.items() if i.never_fused_why))
def test_never_fused_why_is_a_phrase_of_an_unfused_op(opcode):
    info = OPS[opcode]
    assert info.fusion == "never" and not info.side_effecting
    assert info.never_fused_why.startswith(("a ", "an ")) and ", which " in info.never_fused_why


def test_expensive_rules_are_xlas_type_dependent_cases():
    # XLA_CHEAP's abs/sign/sine/cosine/tan are expensive for complex; divide/remainder cheap for
    # integers by a constant; sqrt/rsqrt/exp cheap in f32/f16 on the GPU; f32->bf16 convert on CPU.
    ruled = {n for n, i in OPS.items() if i.expensive_rule is not None}
    assert ruled == {"abs", "sign", "sine", "cosine", "tan", "divide", "remainder", "sqrt", "rsqrt",
                     "exponential", "convert"}


@pytest.mark.parametrize("opcode", sorted(n for n, i in OPS.items() if i.fold is not None))
def test_foldable_rows_are_pure_elementwise_or_data_movement(opcode):
    info = OPS[opcode]
    assert info.elementwise or info.kind == "data"
    assert not info.side_effecting and not info.called
    assert info.math in ("", "div"), "transcendental functions differ by an ulp between libm and XLA"
