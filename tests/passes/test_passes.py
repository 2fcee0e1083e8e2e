"""DCE, CSE, the simplifier, constant folding, the pass registry and the pipeline.

Every rewrite is checked for exactness: the reference interpreter runs the module before and
after the passes on random inputs (signed zeros, infinities and NaNs included), and the
results must be equal bit for bit.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from golden_harness import build_pipeline, golden_files, split_cases
from hlofuse.hlo.errors import HloError
from hlofuse.hlo.ir import HloInstruction
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.constant_folding import ConstantFolding, fold
from hlofuse.passes.cse import CommonSubexpressionElimination
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.pass_base import HloPass
from hlofuse.passes.pipeline import (PASSES, PassPipeline, PipelineVerifyError, UnknownPassError, get_pass,
                                     parse_pass_list, registered_passes, standard_pipeline)
from hlofuse.passes.simplifier import AlgebraicSimplifier
from repo_paths import JAX_CORPUS

MY_PASSES = {"simplifier", "algsimp", "cse", "dce", "constant-folding"}


def module(body: str, params: str = "p: f32[4]", result: str = "f32[4]") -> object:
    return parse_hlo(f"HloModule m\n\nENTRY %main ({params}) -> {result} {{\n{body}\n}}\n")


def names(m) -> list[str]:
    return [i.name for i in m.entry.instructions]


def opcodes(m) -> list[str]:
    return [i.opcode for i in m.entry.instructions]


# ---- exactness with the reference interpreter ---------------------------------------------------

SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0], dtype=np.float64)


def random_inputs(m, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    args = []
    for p in m.entry.parameters:
        t, dims = p.shape.dtype, p.shape.dims
        if t.kind == "float":
            x = rng.standard_normal(dims)
            mask = rng.random(dims) < 0.3
            x = np.where(mask, rng.choice(SPECIALS, size=dims), x)
            args.append(np.asarray(x).astype(t.numpy))
        elif t.kind == "pred":
            args.append(rng.random(dims) < 0.5)
        else:
            args.append(rng.integers(-100, 100, size=dims).astype(t.numpy))
    return args


def assert_bit_exact(before, after) -> None:
    """Every element the same bits, except that a NaN may come back as another NaN: IEEE 754
    leaves which NaN an operation of two NaN operands returns to the implementation (x86: the
    first operand's), so a rewrite that reorders a dot's operands (mlp_grad's transposes folded
    into its dots) may turn a -NaN of the gradient into a +NaN. Where NaNs are stays exact."""
    assert len(before) == len(after)
    for k, (a, b) in enumerate(zip(before, after)):
        a, b = np.atleast_1d(np.asarray(a)), np.atleast_1d(np.asarray(b))
        assert a.dtype == b.dtype and a.shape == b.shape, k
        if a.dtype.kind in "fc" and a.dtype.itemsize in (2, 4, 8, 16):
            nan = np.isnan(a)
            assert np.array_equal(nan, np.isnan(b)), (k, a, b)
            a, b = a[~nan], b[~nan]
        assert np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8)), (k, a, b)


def check_exact(text: str, passes, seeds=range(3)) -> object:
    from hlofuse.runtime.interpreter import evaluate

    original = parse_hlo(text)
    optimized = parse_hlo(text)
    PassPipeline(passes, verify=True).run(optimized)
    for seed in seeds:
        args = random_inputs(original, seed)
        assert_bit_exact(evaluate(original, args), evaluate(optimized, args))
    return optimized


def _golden_cases_of_my_passes():
    out = []
    for path in golden_files():
        with open(path) as f:
            for case in split_cases(f.read(), path):
                passes = set(case.options.get("passes", "").split(","))
                # rng draws differ between runs: nothing to compare
                if case.options.get("passes") and passes <= MY_PASSES and "rng(" not in case.module_text():
                    out.append(case)
    return out


GOLDEN = _golden_cases_of_my_passes()


@pytest.mark.parametrize("case", GOLDEN, ids=[c.id for c in GOLDEN])
def test_golden_cases_are_bit_exact(case):
    from hlofuse.runtime.interpreter import evaluate

    from hlofuse.hlo.errors import UnsupportedError

    original = parse_hlo(case.module_text())
    optimized = parse_hlo(case.module_text())
    build_pipeline(case.options).run(optimized)
    for seed in range(3):
        args = random_inputs(original, seed)
        try:
            before = evaluate(original, args)
        except UnsupportedError as e:
            pytest.skip(f"the interpreter cannot run it: {e}")
        assert_bit_exact(before, evaluate(optimized, args))


JAX_DIR = str(JAX_CORPUS)
JAX_FILES = sorted(f for f in os.listdir(JAX_DIR) if f.endswith(".hlo")) if os.path.isdir(JAX_DIR) else []


@pytest.mark.parametrize("name", JAX_FILES)
def test_jax_corpus_is_bit_exact_after_simplifier_cse_dce(name):
    """Real programs as JAX emits them (and as XLA optimized them) keep their results."""
    from hlofuse.hlo.errors import UnsupportedError
    from hlofuse.runtime.interpreter import evaluate

    with open(os.path.join(JAX_DIR, name)) as f:
        text = f.read()
    original = parse_hlo(text)
    args = random_inputs(original, 0)
    try:
        before = evaluate(original, args)
    except UnsupportedError as e:
        pytest.skip(f"the interpreter cannot run it: {e}")
    optimized = parse_hlo(text)
    PassPipeline([AlgebraicSimplifier(), CommonSubexpressionElimination(), DeadCodeElimination()], verify=True).run(optimized)
    assert_bit_exact(before, evaluate(optimized, args))


def _random_module(seed: int) -> str:
    """A random chain of the patterns the simplifier and CSE rewrite (and look-alikes)."""
    rng = np.random.default_rng(seed)
    lines = ["  %p0 = f32[4,6]{1,0} parameter(0)", "  %p1 = f32[4,6]{1,0} parameter(1)",
             "  %s = f32[] parameter(2)", "  %c = pred[4,6]{1,0} parameter(3)"]
    values = ["%p0", "%p1"]
    T = "f32[4,6]{1,0}"

    def new(k: int) -> str:
        return f"%v{k}"

    def const(name: str, value: str, ty: str = "f32") -> str:
        lines.append(f"  {name}_c = {ty}[] constant({value})")
        lines.append(f"  {name}_b = {ty}[4,6]{{1,0}} broadcast({ty}[] {name}_c), dimensions={{}}")
        return f"{name}_b"

    for k in range(int(rng.integers(6, 14))):
        x = values[int(rng.integers(len(values)))]
        y = values[int(rng.integers(len(values)))]
        v = new(k)
        kind = int(rng.integers(16))
        if kind == 0:
            lines.append(f"  {v} = {T} multiply({T} {x}, {T} {const(v + 'one', '1')})")
        elif kind == 1:
            lines.append(f"  {v} = {T} add({T} {const(v + 'z', rng.choice(['0', '-0']))}, {T} {x})")
        elif kind == 2:
            lines.append(f"  {v} = {T} subtract({T} {x}, {T} {const(v + 'z', rng.choice(['0', '-0']))})")
        elif kind == 3:
            lines.append(f"  {v} = {T} divide({T} {x}, {T} {const(v + 'one', '1')})")
        elif kind == 4:
            lines.append(f"  {v}r = f32[24]{{0}} reshape({T} {x})")
            lines.append(f"  {v} = {T} reshape(f32[24]{{0}} {v}r)")
        elif kind == 5:
            lines.append(f"  {v}t = f32[6,4]{{1,0}} transpose({T} {x}), dimensions={{1,0}}")
            lines.append(f"  {v} = {T} transpose(f32[6,4]{{1,0}} {v}t), dimensions={{1,0}}")
        elif kind == 6:
            lines.append(f"  {v}b = f32[6]{{0}} broadcast(f32[] %s), dimensions={{}}")
            lines.append(f"  {v} = {T} broadcast(f32[6]{{0}} {v}b), dimensions={{1}}")
        elif kind == 7:
            pred = const(v + "p", rng.choice(["true", "false"]), "pred")
            lines.append(f"  {v} = {T} select(pred[4,6]{{1,0}} {pred}, {T} {x}, {T} {y})")
        elif kind == 8:
            lines.append(f"  {v} = {T} select(pred[4,6]{{1,0}} %c, {T} {x}, {T} {x})")
        elif kind == 9:
            a, b = const(v + "a", "1.5"), const(v + "b", "-2.25")
            lines.append(f"  {v}k = {T} multiply({T} {a}, {T} {b})")
            lines.append(f"  {v} = {T} add({T} {x}, {T} {v}k)")
        elif kind == 10:
            lines.append(f"  {v}w = f64[4,6]{{1,0}} convert({T} {x})")
            lines.append(f"  {v} = {T} convert(f64[4,6]{{1,0}} {v}w)")
        elif kind == 11:
            lines.append(f"  {v} = {T} copy({T} {x})")
        elif kind == 12:
            lines.append(f"  {v}a = {T} exponential({T} {x})")
            lines.append(f"  {v}b = {T} exponential({T} {x})")
            lines.append(f"  {v} = {T} add({T} {v}a, {T} {v}b)")
        elif kind == 13:
            lines.append(f"  {v} = {T} maximum({T} {x}, {T} {y})")
        elif kind == 14:
            lines.append(f"  {v}n = bf16[4,6]{{1,0}} convert({T} {x})")
            lines.append(f"  {v} = {T} convert(bf16[4,6]{{1,0}} {v}n)")
        else:
            lines.append(f"  {v} = {T} negate({T} {x})")
        values.append(v)
    outs = values[-3:]
    shape = "(" + ", ".join([T] * len(outs)) + ")"
    lines.append(f"  ROOT %out = {shape} tuple({', '.join(outs)})")
    return ("HloModule random\n\nENTRY %main (p0: f32[4,6], p1: f32[4,6], s: f32[], c: pred[4,6]) -> "
            + shape.replace("{1,0}", "") + " {\n" + "\n".join(lines) + "\n}\n")


@pytest.mark.parametrize("seed", range(24))
def test_random_modules_are_bit_exact_after_simplifier_cse_dce(seed):
    text = _random_module(seed)
    optimized = check_exact(text, [AlgebraicSimplifier(), CommonSubexpressionElimination(), DeadCodeElimination()])
    # nothing the simplifier targets is left over, except the look-alikes it must keep
    ops = opcodes(optimized)
    assert "copy" not in ops and "divide" not in ops
    assert not any(i.opcode == "transpose" for i in optimized.entry.instructions)


# ---- registry and pipeline ----------------------------------------------------------------------

def test_registry_knows_the_basic_passes():
    assert MY_PASSES <= set(registered_passes())
    assert isinstance(get_pass("dce"), DeadCodeElimination)
    assert get_pass(" cse ").name == "cse"


def test_unknown_pass_is_a_user_error():
    with pytest.raises(UnknownPassError, match="unknown pass 'nope'.*known passes: .*dce") as info:
        get_pass("nope")
    assert isinstance(info.value, HloError)


def test_pass_options_are_strict():
    assert get_pass("simplifier", max_fold_elements=5).max_fold_elements == 5
    with pytest.raises(UnknownPassError, match="pass 'simplifier' has no option max_fold_elments; it takes "
                                               "fold_constants, max_fold_elements"):
        get_pass("simplifier", max_fold_elments=8)
    with pytest.raises(UnknownPassError, match="pass 'dce' has no option target"):
        get_pass("dce", target="gpu")


def test_pass_specs_carry_options_in_braces():
    simplifier, cse, fusion = parse_pass_list("simplifier{max_fold_elements=8, fold_constants=false},cse,"
                                              "fusion{target=cpu}")
    assert (simplifier.max_fold_elements, simplifier.fold_constants) == (8, False)
    assert cse == CommonSubexpressionElimination() and fusion.params.name == "cpu"
    # a named pipeline stands where a pass can
    assert [p.name for p in parse_pass_list("fusion-pipeline{target=cpu},dce")] == [
        "call-inliner", "fusion", "sibling-fusion", "dce"]
    with pytest.raises(UnknownPassError, match="has no option max_fold_elments"):
        parse_pass_list("simplifier{max_fold_elments=8}")
    with pytest.raises(UnknownPassError, match="no pass of 'cse,dce' takes option max_fold_elements"):
        parse_pass_list("cse,dce", max_fold_elements=8)
    with pytest.raises(UnknownPassError, match="malformed pass spec"):
        parse_pass_list("simplifier{max_fold_elements=8")


def test_every_pass_of_the_table_is_a_value_with_its_options():
    for name, cls in PASSES.items():
        p = get_pass(name)
        assert isinstance(p, cls) and p.name in PASSES, name
        assert get_pass(name, **{k: getattr(p, k) for k in cls.option_names() if hasattr(p, k)}) is not p


def test_compile_verify_flag_is_honoured(monkeypatch):
    """`verify=False` runs no verification after the passes; `verify=True` after each one."""
    import hlofuse
    from hlofuse.hlo import verifier

    calls = []
    real = verifier.verify
    monkeypatch.setattr(verifier, "verify", lambda m, *a, **k: (calls.append(1), real(m, *a, **k))[1])
    m = module("  %p = f32[4]{0} parameter(0)\n  ROOT %n = f32[4]{0} negate(f32[4]{0} %p)")
    hlofuse.compile(m, target="interpreter", verify=False)
    assert len(calls) == 1  # the input only
    calls.clear()
    fused, pipeline = hlofuse.compiler.optimize(m, "cpu", verify=True)
    assert len(calls) == 1 + len(pipeline.passes)


class _Counter(HloPass):
    def __init__(self, name: str, changed: bool) -> None:
        self.name, self.changed, self.calls = name, changed, 0

    def run(self, module) -> bool:
        self.calls += 1
        return self.changed


def test_pipeline_runs_in_order_and_reports_changed_and_timings():
    a, b = _Counter("a", False), _Counter("b", True)
    m = module("  ROOT %p = f32[4]{0} parameter(0)")
    pipeline = PassPipeline([a, b, a])
    assert pipeline.run(m) is True
    assert a.calls == 2 and b.calls == 1
    assert [(n, c) for n, _, c in pipeline.timings] == [("a", False), ("b", True), ("a", False)]
    assert all(s >= 0 for _, s, _ in pipeline.timings)
    assert PassPipeline([a]).run(m) is False


def test_pipeline_dumps_after_each_pass(tmp_path):
    m = module("  %p = f32[4]{0} parameter(0)\n  %n = f32[4]{0} negate(f32[4]{0} %p)\n"
               "  ROOT %e = f32[4]{0} exponential(f32[4]{0} %p)")
    PassPipeline([get_pass("cse"), get_pass("dce")], dump_dir=str(tmp_path / "dump")).run(m)
    files = sorted(os.listdir(tmp_path / "dump"))
    assert files == ["0000.m.before_optimizations.hlo", "0001.m.cse.hlo", "0002.m.dce.hlo"]
    before = (tmp_path / "dump" / files[0]).read_text()
    after = (tmp_path / "dump" / files[2]).read_text()
    assert "negate" in before and "negate" not in after
    assert parse_hlo(after).to_text() == after  # dumps are ordinary HLO text


def test_pipeline_verify_names_the_pass_that_broke_the_module():
    class Breaker(HloPass):
        name = "breaker"

        def run(self, module) -> bool:
            root = module.entry.root
            root.shape = type(root.shape)(root.shape.dtype, (5,))  # wrong shape for a negate of f32[4]
            return True

    m = module("  %p = f32[4]{0} parameter(0)\n  ROOT %n = f32[4]{0} negate(f32[4]{0} %p)")
    with pytest.raises(PipelineVerifyError, match="after pass 'breaker'"):
        PassPipeline([Breaker()], verify=True).run(m)


def test_standard_pipeline_order():
    without = standard_pipeline(fusion=False)
    before_fusion = ["batchnorm-expander", "scan-expander", "conditional-to-select", "stochastic-convert-decomposer", "shuffle-expander", "ragged-dot-expander", "nested-fusion-flattener", "oversized-fusion-splitter", "reduce-window-rewriter", "lapack-call-expander", "legacy-index-vectors", "scatter-simplifier",
                     "contraction-types",
                     "call-inliner", "simplifier",
                     "reshape-mover",
                     "simplifier", "cse", "dce"]
    assert [p.name for p in without.passes] == before_fusion + ["dce"]
    with_fusion = [p.name for p in standard_pipeline(target="gpu").passes]
    assert with_fusion[:len(before_fusion)] == before_fusion
    assert with_fusion[-1] == "dce" and "priority-fusion" in with_fusion  # priority fusion: the GPU default
    # calls are inlined once, before the simplifier: the fusion passes' own inliner is left out
    for target in ("cpu", "gpu"):
        assert [p.name for p in standard_pipeline(target=target).passes].count("call-inliner") == 1


# ---- DCE ----------------------------------------------------------------------------------------

def test_dce_reports_changed_once():
    m = module("  %p = f32[4]{0} parameter(0)\n  %n = f32[4]{0} negate(f32[4]{0} %p)\n"
               "  %e = f32[4]{0} exponential(f32[4]{0} %n)\n  ROOT %a = f32[4]{0} abs(f32[4]{0} %p)")
    assert DeadCodeElimination().run(m) is True
    assert names(m) == ["p", "a"]
    assert DeadCodeElimination().run(m) is False


def test_dce_keeps_unused_parameters_and_side_effects():
    m = module('  %p = f32[4]{0} parameter(0)\n  %q = f32[4]{0} parameter(1)\n'
               '  %cc = f32[4]{0} custom-call(f32[4]{0} %p), custom_call_target="x"\n'
               '  ROOT %a = f32[4]{0} abs(f32[4]{0} %p)', params="p: f32[4], q: f32[4]")
    assert DeadCodeElimination().run(m) is False
    assert names(m) == ["p", "q", "cc", "a"]


def test_dce_keeps_a_while_whose_body_has_side_effects():
    text = """HloModule m

%cond (c: s32[]) -> pred[] {
  %c = s32[] parameter(0)
  %ten = s32[] constant(10)
  ROOT %lt = pred[] compare(s32[] %c, s32[] %ten), direction=LT
}

%body (b: s32[]) -> s32[] {
  %b = s32[] parameter(0)
  %cc = s32[] custom-call(s32[] %b), custom_call_target="log"
  %one = s32[] constant(1)
  ROOT %n = s32[] add(s32[] %b, s32[] %one)
}

%pure_body (b2: s32[]) -> s32[] {
  %b2 = s32[] parameter(0)
  %one2 = s32[] constant(1)
  ROOT %n2 = s32[] add(s32[] %b2, s32[] %one2)
}

ENTRY %main (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %w = s32[] while(s32[] %p), condition=%cond, body=%body
  %w2 = s32[] while(s32[] %p), condition=%cond, body=%pure_body
  ROOT %r = s32[] negate(s32[] %p)
}
"""
    m = parse_hlo(text)
    assert DeadCodeElimination().run(m) is True
    assert names(m) == ["p", "w", "r"]
    assert [c.name for c in m.computations if c is not m.entry] == ["cond", "body"]


def test_dce_keeps_ordering_through_removed_control_predecessors():
    m = module('  %p = f32[4]{0} parameter(0)\n'
               '  %a = f32[4]{0} custom-call(f32[4]{0} %p), custom_call_target="first"\n'
               '  %dead = f32[4]{0} negate(f32[4]{0} %p), control-predecessors={%a}\n'
               '  %b = f32[4]{0} custom-call(f32[4]{0} %p), custom_call_target="second", control-predecessors={%dead}\n'
               '  ROOT %r = f32[4]{0} abs(f32[4]{0} %p)')
    assert DeadCodeElimination().run(m) is True
    b = m.entry.instruction("b")
    assert [c.name for c in b.control_predecessors] == ["a"]


def _removal_work(survivors: int) -> int:
    """Function calls (sys.setprofile events) of a Rewriter removing a dead chain of 3 from a
    computation with `survivors` other instructions."""
    import sys

    from hlofuse.passes.rewrite import Rewriter

    body = "  %p = f32[4]{0} parameter(0)\n" + "".join(f"  %s{k} = f32[4]{{0}} negate(f32[4]{{0}} %p)\n" for k in range(survivors))
    body += ("  %d0 = f32[4]{0} exponential(f32[4]{0} %p)\n  %d1 = f32[4]{0} negate(f32[4]{0} %d0)\n"
             "  %d2 = f32[4]{0} abs(f32[4]{0} %d1)\n  ROOT %r = f32[4]{0} add(f32[4]{0} %d2, f32[4]{0} %p)")
    m = module(body)
    comp = m.entry
    count = comp.instruction_count()
    r, d2 = comp.root, comp.instruction("d2")
    calls = 0

    def count_calls(frame, event, arg):
        nonlocal calls
        calls += 1

    comp.control_holders()  # (built once per computation and kept by its edits)
    comp.remove_instruction(comp.instruction("s0"))
    comp.instructions  # noqa: B018 (a read drops what was removed, keeping the holders)
    rewriter = Rewriter(comp)
    rewriter.replace(r.operands[0], r.operands[1])  # r = add(p, p): the chain d0..d2 dies
    sys.setprofile(count_calls)
    try:
        removed = rewriter.finish()
    finally:
        sys.setprofile(None)
    assert removed == 3 and comp.instruction_count() == count - 4 and d2.parent is None
    assert [i.name for i in comp.instructions][-2:] == [f"s{survivors - 1}", "r"]
    assert m.unique_name("d1") == "d1"  # the dead instructions' names are free again
    return calls


def test_removing_dead_instructions_does_not_walk_the_survivors():
    """A Rewriter's sweep costs the dead instructions, not the computation: fusion's kernel
    computations grow to thousands of instructions and lose a few at each deduplication."""
    assert _removal_work(2000) == _removal_work(20)


# ---- CSE ----------------------------------------------------------------------------------------

def test_cse_reports_changed_once_and_keeps_the_first():
    m = module("  %p = f32[4]{0} parameter(0)\n  %e1 = f32[4]{0} exponential(f32[4]{0} %p)\n"
               "  %e2 = f32[4]{0} exponential(f32[4]{0} %p)\n  ROOT %a = f32[4]{0} add(f32[4]{0} %e1, f32[4]{0} %e2)")
    assert CommonSubexpressionElimination().run(m) is True
    assert names(m) == ["p", "e1", "a"]
    assert m.entry.root.operands == [m.entry.instruction("e1")] * 2
    assert CommonSubexpressionElimination().run(m) is False


def test_cse_ignores_metadata_but_not_other_attributes():
    m = module('  %p = f32[4]{0} parameter(0)\n'
               '  %e1 = f32[4]{0} exponential(f32[4]{0} %p), metadata={op_name="a"}\n'
               '  %e2 = f32[4]{0} exponential(f32[4]{0} %p), metadata={op_name="b"}\n'
               '  ROOT %a = f32[4]{0} add(f32[4]{0} %e1, f32[4]{0} %e2)')
    assert CommonSubexpressionElimination().run(m) is True
    m2 = module('  %p = f32[2,2]{1,0} parameter(0)\n'
                '  %t1 = f32[2,2]{1,0} copy(f32[2,2]{1,0} %p)\n'
                '  %t2 = f32[2,2]{0,1} copy(f32[2,2]{1,0} %p)\n'
                '  ROOT %t = (f32[2,2]{1,0}, f32[2,2]{0,1}) tuple(%t1, %t2)',
                params="p: f32[2,2]", result="(f32[2,2], f32[2,2])")
    assert CommonSubexpressionElimination().run(m2) is False  # layouts differ


def test_cse_does_not_merge_elided_constants_or_control_tied_instructions():
    m = module('  %c1 = f32[4]{0} constant({...})\n  %c2 = f32[4]{0} constant({...})\n'
               '  ROOT %a = f32[4]{0} add(f32[4]{0} %c1, f32[4]{0} %c2)', params="")
    assert CommonSubexpressionElimination().run(m) is False
    m2 = module('  %p = f32[4]{0} parameter(0)\n  %e1 = f32[4]{0} exponential(f32[4]{0} %p)\n'
                '  %e2 = f32[4]{0} exponential(f32[4]{0} %p), control-predecessors={%e1}\n'
                '  ROOT %a = f32[4]{0} add(f32[4]{0} %e1, f32[4]{0} %e2)')
    assert CommonSubexpressionElimination().run(m2) is False


# ---- simplifier -----------------------------------------------------------------------------------

def test_simplifier_reports_changed_once():
    m = module("  %p = f32[4]{0} parameter(0)\n  %c = f32[4]{0} copy(f32[4]{0} %p)\n"
               "  ROOT %n = f32[4]{0} negate(f32[4]{0} %c)")
    assert AlgebraicSimplifier().run(m) is True
    assert names(m) == ["p", "n"]
    assert AlgebraicSimplifier().run(m) is False


def test_simplifier_leaves_a_module_without_patterns_alone():
    text = ("  %p = f32[4]{0} parameter(0)\n  %e = f32[4]{0} exponential(f32[4]{0} %p)\n"
            "  ROOT %n = f32[4]{0} add(f32[4]{0} %e, f32[4]{0} %p)")
    m = module(text)
    before = m.to_text()
    assert AlgebraicSimplifier().run(m) is False
    assert m.to_text() == before


def test_simplifier_skips_instructions_tied_by_control_edges():
    m = module('  %p = f32[4]{0} parameter(0)\n'
               '  %s = f32[4]{0} custom-call(f32[4]{0} %p), custom_call_target="x"\n'
               '  %c = f32[4]{0} copy(f32[4]{0} %p), control-predecessors={%s}\n'
               '  ROOT %n = f32[4]{0} negate(f32[4]{0} %c)')
    assert AlgebraicSimplifier().run(m) is False


def test_simplifier_does_not_touch_fused_computations():
    text = """HloModule m

%fused (fp: f32[4]) -> f32[4] {
  %fp = f32[4]{0} parameter(0)
  ROOT %fc = f32[4]{0} copy(f32[4]{0} %fp)
}

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %f = f32[4]{0} fusion(f32[4]{0} %p), kind=kLoop, calls=%fused
}
"""
    m = parse_hlo(text)
    assert AlgebraicSimplifier().run(m) is False


def test_simplifier_keeps_the_entry_result_layout():
    # The copy changes the layout of the result: removing it would change the entry's result.
    m = module("  %p = f32[2,3]{1,0} parameter(0)\n  ROOT %c = f32[2,3]{0,1} copy(f32[2,3]{1,0} %p)",
               params="p: f32[2,3]", result="f32[2,3]")
    assert AlgebraicSimplifier().run(m) is False


def test_simplifier_root_replacement_is_bit_exact():
    text = ("HloModule m\n\nENTRY %main (p: f32[4]) -> f32[4] {\n  %p = f32[4]{0} parameter(0)\n"
            "  %one = f32[] constant(1)\n  %b = f32[4]{0} broadcast(f32[] %one), dimensions={}\n"
            "  ROOT %m = f32[4]{0} multiply(f32[4]{0} %b, f32[4]{0} %p)\n}\n")
    m = check_exact(text, [AlgebraicSimplifier()])
    assert m.entry.root.opcode == "parameter" and names(m) == ["p"]


def test_complex_multiply_by_one_is_not_simplified():
    m = module("  %p = c64[2]{0} parameter(0)\n  %one = c64[] constant((1, 0))\n"
               "  %b = c64[2]{0} broadcast(c64[] %one), dimensions={}\n"
               "  ROOT %m = c64[2]{0} multiply(c64[2]{0} %p, c64[2]{0} %b)", params="p: c64[2]", result="c64[2]")
    assert AlgebraicSimplifier().run(m) is False


# ---- constant folding ---------------------------------------------------------------------------

def _fold_text(body: str, result: str, max_elements: int = 64):
    m = module(body, params="", result=result)
    changed = ConstantFolding(max_elements=max_elements).run(m)
    return m, changed


def test_folding_wraps_integers_like_xla():
    m, changed = _fold_text("  %a = s8[2]{0} constant({127, -128})\n  %b = s8[2]{0} constant({1, -1})\n"
                            "  ROOT %s = s8[2]{0} add(s8[2]{0} %a, s8[2]{0} %b)", "s8[2]")
    assert changed and m.entry.root.opcode == "constant"
    assert m.entry.root.literal.tolist() == [-128, 127]  # two's complement wrap-around


def test_folding_pad_with_interior_and_negative_padding():
    m, changed = _fold_text("  %a = s32[3]{0} constant({1, 2, 3})\n  %z = s32[] constant(0)\n"
                            "  ROOT %p = s32[6]{0} pad(s32[3]{0} %a, s32[] %z), padding=-1_2_1", "s32[6]")
    # interior 1: 1 0 2 0 3; low -1 drops the first element; high 2 appends two zeros
    assert changed and m.entry.root.literal.tolist() == [0, 2, 0, 3, 0, 0]


def test_folding_transpose_slice_concatenate():
    m, changed = _fold_text(
        "  %a = s32[2,3]{1,0} constant({ { 1, 2, 3 }, { 4, 5, 6 } })\n"
        "  %t = s32[3,2]{1,0} transpose(s32[2,3]{1,0} %a), dimensions={1,0}\n"
        "  %s = s32[2,2]{1,0} slice(s32[3,2]{1,0} %t), slice={[1:3], [0:2]}\n"
        "  ROOT %c = s32[4,2]{1,0} concatenate(s32[2,2]{1,0} %s, s32[2,2]{1,0} %s), dimensions={0}", "s32[4,2]")
    assert changed and m.entry.root.literal.tolist() == [[2, 5], [3, 6], [2, 5], [3, 6]]


def test_folding_bf16_rounds_once_to_nearest_even():
    # 1 + 2^-8 is halfway between two bf16 values (1 and 1 + 2^-7); ties go to even: 1.
    m, _ = _fold_text("  %a = bf16[1]{0} constant({1})\n  %b = bf16[1]{0} constant({0.00390625})\n"
                      "  ROOT %s = bf16[1]{0} add(bf16[1]{0} %a, bf16[1]{0} %b)", "bf16[1]")
    assert float(m.entry.root.literal[0]) == 1.0


def test_folding_respects_the_size_budget():
    body = ("  %a = s32[8]{0} constant({1, 2, 3, 4, 5, 6, 7, 8})\n"
            "  ROOT %n = s32[8]{0} negate(s32[8]{0} %a)")
    assert _fold_text(body, "s32[8]", max_elements=8)[1] is True
    assert _fold_text(body, "s32[8]", max_elements=7)[1] is False


def test_folding_leaves_broadcast_and_iota_alone():
    m, changed = _fold_text("  %c = f32[] constant(1)\n  ROOT %b = f32[4]{0} broadcast(f32[] %c), dimensions={}", "f32[4]")
    assert not changed
    m, changed = _fold_text("  ROOT %i = s32[4]{0} iota(), iota_dimension=0", "s32[4]")
    assert not changed


def _probe(opcode: str, out: str, operand_types: list[str], **attrs) -> HloInstruction:
    from hlofuse.hlo.shapes import array

    ops = [HloInstruction("parameter", array(t, (2,))) for t in operand_types]
    return HloInstruction(opcode, array(out, (2,)), ops, attrs)


def test_fold_rules_refuse_what_numpy_gets_wrong():
    f32, s32 = np.float32, np.int32
    assert fold(_probe("convert", "s32", ["f32"]), [np.array([1e10, np.nan], f32)]) is None
    assert fold(_probe("divide", "s32", ["s32", "s32"]), [np.array([1, 2], s32), np.array([0, 1], s32)]) is None
    assert fold(_probe("maximum", "f32", ["f32", "f32"]), [np.array([-0.0, 1], f32), np.array([0.0, 2], f32)]) is None
    assert fold(_probe("compare", "pred", ["f32", "f32"], direction="LT", type="TOTALORDER"),
                [np.array([1, 2], f32), np.array([2, 1], f32)]) is None
    # ... and folds what it gets right
    assert fold(_probe("maximum", "f32", ["f32", "f32"]), [np.array([-1, np.nan], f32), np.array([0.5, 2], f32)]
                ).tolist()[0] == 0.5
    assert fold(_probe("convert", "pred", ["f32"]), [np.array([0.0, np.nan], f32)]).tolist() == [False, True]
    assert fold(_probe("compare", "pred", ["f32", "f32"], direction="NE"),
                [np.array([np.nan, 1], f32), np.array([np.nan, 1], f32)]).tolist() == [True, False]


def test_fold_rules_leave_narrow_types_alone():
    f8 = _probe("add", "f8e4m3fn", ["f8e4m3fn", "f8e4m3fn"])
    one = np.ones(2, dtype=f8.shape.dtype.numpy)
    assert fold(f8, [one, one]) is None
    s4 = _probe("negate", "s4", ["s4"])
    assert fold(s4, [np.ones(2, dtype=s4.shape.dtype.numpy)]) is None
    # data movement of narrow types is exact
    rev = _probe("reverse", "s4", ["s4"], dimensions=(0,))
    assert fold(rev, [np.array([1, 2], dtype=rev.shape.dtype.numpy)]).astype(int).tolist() == [2, 1]
