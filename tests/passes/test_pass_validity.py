"""Every pass leaves a valid module on valid input: unique instruction names module-wide and
fused computations that point back at their one fusion instruction (XLA's invariants), checked
by the verifier after each pass, on the corpus, on XLA's already-fused modules, on modules
whose names collide across computations or look like the names passes generate, and on
calls of computations that contain fusions.
"""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from hlofuse.hlo.errors import VerifierError
from hlofuse.hlo.ir import HloComputation, HloInstruction, HloModule
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.shapes import scalar
from hlofuse.hlo.verifier import verify
from hlofuse.passes.fusion import fusion_passes
from hlofuse.passes.pipeline import PassPipeline, get_pass, registered_passes
from hlofuse.runtime.interpreter import evaluate
from repo_paths import REPO

ROOT = str(REPO)
CORPUS = sorted(glob.glob(os.path.join(ROOT, "testdata", "jax", "*.hlo"))
                + glob.glob(os.path.join(ROOT, "testdata", "hlo_text", "**", "*.hlo"), recursive=True))
# Passes whose behaviour depends on the target; the others are run once.
FUSION_PASSES = ("call-inliner", "fusion", "fusion-no-duplication", "fusion-merger", "multi-output-fusion",
                 "sibling-fusion", "horizontal-fusion")


def _single_module_texts() -> list[tuple[str, str]]:
    out = []
    for path in CORPUS:
        text = open(path).read()
        if text.count("HloModule") != 1:
            continue  # files holding several modules are read by other tests
        out.append((os.path.basename(path), text))
    return out


TEXTS = _single_module_texts()
assert len(TEXTS) > 100, "the corpus went missing"


def _make(name: str, target: str):
    try:
        return get_pass(name, target=target)
    except Exception:  # a pass without a target option
        return get_pass(name)


def _run_checked(module: HloModule, names: list[str], target: str) -> None:
    """Run `names` in order through a pipeline that verifies after every pass, then check
    the printed module reads back."""
    PassPipeline([_make(n, target) for n in names], verify=True).run(module)
    verify(parse_hlo(module.to_text()))


def _rename(text: str, style: str) -> str:
    """`text` with every computation's instructions renamed so that names collide across
    computations (`opcode`: each computation names its instructions `<opcode>`, `<opcode>.1`,
    ...) or look like the names the fusion passes make (`generated`). Valid XLA text: names
    are scoped per computation there."""
    pool = ["fusion", "add.1", "tuple", "get-tuple-element", "fused_computation", "param_0", "reshape",
            "slice", "concatenate", "add.1.1", "fusion.1"]
    m = parse_hlo(text)
    for comp in m.computations:
        used: set[str] = set()
        for k, inst in enumerate(comp.instructions):
            if style == "opcode":
                base = f"param_{inst.parameter_number}" if inst.opcode == "parameter" else inst.opcode
            else:
                base = pool[k % len(pool)]
            name, n = base, 0
            while name in used:  # unique within the computation only
                n += 1
                name = f"{base}.{n}"
            used.add(name)
            inst.name = name
    return m.to_text()


@pytest.mark.parametrize("name,text", TEXTS, ids=[t[0] for t in TEXTS])
def test_every_pass_leaves_a_valid_module(name: str, text: str) -> None:
    for pass_name in registered_passes():
        if pass_name.endswith(("-cpu", "-gpu")) or pass_name == "fusion-pipeline":
            continue  # the same passes under fixed-target names
        for target in (("gpu", "cpu") if pass_name in FUSION_PASSES else ("gpu",)):
            _run_checked(parse_hlo(text, name), [pass_name], target)


@pytest.mark.parametrize("target", ["gpu", "cpu"])
@pytest.mark.parametrize("style", ["original", "opcode", "generated"])
def test_fusion_pipeline_leaves_valid_modules(style: str, target: str) -> None:
    for name, text in TEXTS:
        if style != "original":
            text = _rename(text, style)
        m = parse_hlo(text, name)
        _run_checked(m, ["simplifier", "cse", "dce"] + _fusion_pass_names(target) + ["dce"], target)


def _fusion_pass_names(target: str) -> list[str]:
    """The registered names of the fusion passes the standard pipeline runs for `target`."""
    return [p.name for p in fusion_passes(target)]


@pytest.mark.parametrize("style", ["opcode", "generated"])
@pytest.mark.parametrize("pass_name", FUSION_PASSES)
def test_each_fusion_pass_on_colliding_names(style: str, pass_name: str) -> None:
    for name, text in TEXTS:
        if "opt" in name or len(text) > 20000:
            continue  # the pipeline test covers the rest; keep this one quick
        _run_checked(parse_hlo(_rename(text, style), name), [pass_name], "gpu")


# ---- calls of computations that contain fusions ------------------------------------------------

CALL_FUSION = """HloModule call_fusion

fused_computation {
  p0 = f32[8] parameter(0)
  e = f32[8] exponential(p0)
  ROOT n = f32[8] negate(e)
}

callee {
  x = f32[8] parameter(0)
  ROOT fusion = f32[8] fusion(x), kind=kLoop, calls=fused_computation
}

ENTRY main {
  a = f32[8] parameter(0)
  c1 = f32[8] call(a), to_apply=callee
  {SECOND}
}
"""
CALLED_TWICE = CALL_FUSION.replace("{SECOND}", "c2 = f32[8] call(c1), to_apply=callee\n"
                                   "  ROOT t = (f32[8], f32[8]) tuple(c1, c2)")
CALLED_ONCE = CALL_FUSION.replace("{SECOND}", "ROOT s = f32[8] sine(c1)")
# The callee stays (a while body also calls it): the inlined fusion needs its own computation.
CALLED_AND_KEPT = """HloModule kept

fused_computation {
  p0 = f32[8] parameter(0)
  ROOT e = f32[8] exponential(p0)
}

callee {
  x = f32[8] parameter(0)
  ROOT fusion = f32[8] fusion(x), kind=kLoop, calls=fused_computation
}

cond {
  t = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  t = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  v = f32[8] get-tuple-element(t), index=1
  w = f32[8] call(v), to_apply=callee, control-predecessors={j}
  ROOT r = (s32[], f32[8]) tuple(j, w)
}

ENTRY main {
  a = f32[8] parameter(0)
  c1 = f32[8] call(a), to_apply=callee
  z = s32[] constant(0)
  init = (s32[], f32[8]) tuple(z, c1)
  loop = (s32[], f32[8]) while(init), condition=cond, body=body
  ROOT out = f32[8] get-tuple-element(loop), index=1
}
"""


@pytest.mark.parametrize("text", [CALLED_TWICE, CALLED_ONCE, CALLED_AND_KEPT], ids=["twice", "once", "kept"])
@pytest.mark.parametrize("target", ["gpu", "cpu"])
def test_inlined_fusions_own_their_computations(text: str, target: str) -> None:
    module = parse_hlo(text)
    x = np.linspace(-1.0, 1.0, 8, dtype=np.float32)
    expected = evaluate(parse_hlo(text), [x])
    _run_checked(module, _fusion_pass_names(target), target)
    fusions = [i for i in module.all_instructions() if i.opcode == "fusion"]
    assert fusions
    computations = [f.fused_computation for f in fusions]
    assert len({id(c) for c in computations}) == len(fusions)  # one computation per fusion
    assert all(c.fusion_instruction is f for c, f in zip(computations, fusions))
    for got, want in zip(evaluate(module, [x]), expected):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_inlining_a_fusion_twice_names_the_copies_apart() -> None:
    module = parse_hlo(CALLED_TWICE)
    _run_checked(module, ["call-inliner"], "gpu")
    names = [i.name for i in module.all_instructions()]
    assert len(names) == len(set(names))
    assert len([c for c in module.computations if c.is_fusion_computation()]) == 2


# ---- names collide across computations in the text ---------------------------------------------

DUPLICATE_NAMES = """HloModule dup

comp {
  x = f32[8] parameter(0)
  add = f32[8] negate(x)
  ROOT y = f32[8] negate(add)
}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT add = f32[] add(a, b)
}

ENTRY main {
  x = f32[8] parameter(0)
  x.1 = f32[8] negate(x)
  y = f32[8] call(x.1), to_apply=comp
  z = f32[] constant(0)
  r = f32[] reduce(y, z), dimensions={0}, to_apply=add
  b = f32[8] broadcast(r), dimensions={}
  ROOT o = f32[8] add(b, x)
}
"""


def test_parser_makes_instruction_names_unique_in_the_module() -> None:
    module = parse_hlo(DUPLICATE_NAMES)
    names = [i.name for i in module.all_instructions()]
    assert len(names) == len(set(names))
    # the entry keeps the names written in it; another computation's copy is renamed
    assert [i.name for i in module.entry.instructions] == ["x", "x.1", "y", "z", "r", "b", "o"]
    assert module.computation("add").root.name == "add.1"
    verify(module)
    # XLA's parser accepts the text too, and renames the same way (names unique per module)
    xc = pytest.importorskip("jax._src.lib").xla_client
    xla_names = [line.split("=")[0].split()[-1] for line in xc.hlo.hlo_module_from_text(DUPLICATE_NAMES)
                 .to_string().splitlines() if " = " in line and line.startswith("  ")]
    assert len(xla_names) == len(set(xla_names)) == len(names)


@pytest.mark.parametrize("pass_names", [["call-inliner"], ["call-inliner", "fusion"],
                                        ["call-inliner", "fusion", "multi-output-fusion", "horizontal-fusion"],
                                        ["dce", "cse", "simplifier"]])
def test_passes_on_names_that_collide_across_computations(pass_names: list[str]) -> None:
    module = parse_hlo(DUPLICATE_NAMES)
    x = np.arange(8, dtype=np.float32)
    expected = evaluate(parse_hlo(DUPLICATE_NAMES), [x])
    _run_checked(module, pass_names, "gpu")
    np.testing.assert_allclose(evaluate(module, [x])[0], expected[0], rtol=1e-6)


# ---- the module's name pool --------------------------------------------------------------------

def test_a_name_held_twice_stays_taken_until_both_let_go() -> None:
    # a computation `add` and an instruction `add` (separate namespaces in XLA) share a name
    module = HloModule("m")
    reducer = module.add_computation(HloComputation("add"))
    f32 = scalar("f32")
    a = reducer.add_parameter(f32, "a")
    b = reducer.add_parameter(f32, "b")
    reducer.root = reducer.add_instruction(HloInstruction("add", f32, [a, b], name="add"))
    assert reducer.root.name == "add.1"  # the computation holds `add`
    module.reserve_name("add")  # as the parser does for an instruction that shares it
    module.release_name("add")
    assert module.unique_name("add") != "add"
    module.release_name("add")
    module.release_name("add")
    assert module.unique_name("add") == "add"


def test_rename_instruction_keeps_names_unique() -> None:
    module = parse_hlo("HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  fusion = f32[] negate(p)\n"
                       "  ROOT fusion.1 = f32[] negate(fusion)\n}\n")
    entry = module.entry
    root = entry.root
    for wanted in ("fusion", "p", "fusion.1", "fusion"):
        got = module.rename_instruction(root, wanted)
        names = [i.name for i in entry.instructions]
        assert got.startswith(wanted) and len(names) == len(set(names))
        verify(module)
    assert module.rename_instruction(root, "free") == "free"
    assert module.rename_instruction(entry.instruction("fusion"), "fusion.1") == "fusion.1"  # freed above


# ---- the verifier checks the invariants --------------------------------------------------------

FUSED = """HloModule f

fc {
  p0 = f32[4] parameter(0)
  ROOT n = f32[4] negate(p0)
}

ENTRY e {
  a = f32[4] parameter(0)
  ROOT f = f32[4] fusion(a), kind=kLoop, calls=fc
}
"""


def test_verifier_rejects_a_name_used_in_two_computations() -> None:
    module = parse_hlo(FUSED)
    module.computation("fc").root.name = "a"
    with pytest.raises(VerifierError, match="also used in computation fc"):
        verify(module)


def test_verifier_rejects_a_stale_fusion_back_pointer() -> None:
    module = parse_hlo(FUSED)
    fc = module.computation("fc")
    stray = HloInstruction("fusion", fc.root.shape, [], {"kind": "kLoop", "calls": fc}, name="gone")
    fc.fusion_instruction = stray
    with pytest.raises(VerifierError, match="point back|not in the module"):
        verify(module)


def test_verifier_rejects_a_fused_computation_with_two_callers() -> None:
    module = parse_hlo(FUSED)
    entry = module.entry
    fc = module.computation("fc")
    call = entry.add_instruction(HloInstruction("call", fc.root.shape, [entry.instruction("a")],
                                                {"to_apply": fc}, name="c"))
    entry.root = entry.add_instruction(HloInstruction("add", call.shape, [call, entry.root], name="s"))
    with pytest.raises(VerifierError, match="also called by c"):
        verify(module)
