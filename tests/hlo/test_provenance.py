"""Provenance: `HloModule.clone` is a structural copy, instructions trace back to the instruction
they were cloned from (`origin` / `original`), the fusion report, `hlofuse explain` and the graph
viewer map fused instructions back through it (never by name), the fusion log is a field of the
module and the Executable, and the fusion passes are values whose rules are pure functions."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hlo_corpus import ROOT, corpus_files, input_text

import hlofuse
from hlofuse.compiler import fuse, optimize
from hlofuse.explain import explain
from hlofuse.hlo.errors import HloError
from hlofuse.hlo.ir import HloInstruction, HloModule
from hlofuse.hlo.origin import OriginIndex
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.verifier import verify
from hlofuse.passes.fusion import CallInliner, InstructionFusion, NonDuplicatingFusion, fusion_passes
from hlofuse.passes.fusion.context import FusionContext
from hlofuse.passes.fusion.cost_model import CPU, GPU
from hlofuse.passes.fusion.decisions import FusionLog
from hlofuse.passes.fusion.producer_consumer import CPU_RULES, GPU_RULES, should_fuse
from hlofuse.passes.fusion.report import build_report
from hlofuse.passes.pipeline import PASSES, standard_pipeline
from hlofuse.viz import build_graphs

CORPUS = corpus_files()
IDS = [str(p.relative_to(ROOT / "testdata")) for p in CORPUS]


def _parsed(path) -> HloModule:
    try:
        return parse_hlo(input_text(path))
    except HloError as e:  # a corpus file that is not a module (none today)
        pytest.fail(f"{path} does not parse: {e}")


def _graph(module: HloModule) -> list[tuple]:
    """Everything structural about `module`, by name, in order (to compare before/after)."""
    out = []
    for comp in module.computations:
        out.append((comp.name, comp.root.name if comp.root else None, comp.is_entry,
                    comp.fusion_instruction.name if comp.fusion_instruction else None))
        for inst in comp.instructions:
            literal = None if inst.literal is None else repr(inst.literal)
            out.append((inst.name, inst.opcode, str(inst.shape), [o.name for o in inst.operands],
                        [u.name for u in inst.users], [p.name for p in inst.control_predecessors],
                        inst.parameter_number, literal, sorted(inst.attrs), inst.parent is comp))
    return out


# ---- the structural clone ------------------------------------------------------------------------

@pytest.mark.parametrize("path", CORPUS, ids=IDS)
def test_clone_prints_the_same_and_shares_nothing(path) -> None:
    m = _parsed(path)
    c = m.clone()
    assert c.to_text() == m.to_text()
    assert _graph(c) == _graph(m)
    mine = {id(i) for i in m.all_instructions()} | {id(x) for x in m.computations}
    comps = {id(x) for x in c.computations}
    for comp, copy in zip(m.computations, c.computations):
        assert copy.parent is c and (comp is m.entry) == (copy is c.entry)
        if comp.fusion_instruction is not None:  # the back-pointer names the copy's fusion
            assert copy.fusion_instruction.parent.parent is c
            assert copy.fusion_instruction.fused_computation is copy
        for inst, twin in zip(comp.instructions, copy.instructions):
            assert id(twin) not in mine and twin.parent is copy
            assert twin.origin is inst  # the copy traces back to the instruction it copies
            linked = twin.operands + twin.users + twin.control_predecessors
            assert all(id(x) not in mine and x.parent is copy for x in linked)
            assert all(id(x) in comps for x in twin.called_computations())
            if isinstance(inst.literal, np.ndarray):
                assert not np.shares_memory(twin.literal, inst.literal)


def _valid(path) -> bool:
    """Whether the corpus file is a module the verifier accepts (the verifier goldens' are not)."""
    try:
        verify(parse_hlo(input_text(path)))
    except HloError:
        return False
    return True


VALID = [(p, i) for p, i in zip(CORPUS, IDS) if _valid(p)]


@pytest.mark.parametrize("path", [p for p, _ in VALID], ids=[i for _, i in VALID])
def test_optimizing_the_clone_leaves_the_original_unchanged(path) -> None:
    m = _parsed(path)
    text, graph = m.to_text(), _graph(m)
    for target in ("gpu", "cpu"):
        c = m.clone()
        standard_pipeline(target).run(c)
    assert m.to_text() == text and _graph(m) == graph
    assert m.fusion_log is None


def test_clone_has_the_same_name_pool() -> None:
    """The copy hands out the names the original would: names held, freed and counters."""
    m = parse_hlo("""HloModule m

ENTRY main {
  p = f32[4] parameter(0)
  add = f32[4] add(p, p)
  add.2 = f32[4] add(add, p)
  ROOT add.3 = f32[4] add(add.2, p)
}
""")
    assert m.unique_name("add") == "add.1"
    m.release_name("add.2")  # freed: handed out again (its counter already passed it)
    c = m.clone()
    wanted = ["add", "add", "add.2", "p", "fusion", "fusion", "add.1"]
    assert [c.unique_name(w) for w in wanted] == [m.unique_name(w) for w in wanted]
    assert c.unique_name("add") == m.unique_name("add")


MUTABLE = """HloModule m

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[4] parameter(0)
  k = f32[4] constant({1, 2, 3, 4})
  z = f32[] constant(0)
  e = f32[4] exponential(p)
  m = f32[4] multiply(e, k)
  r = f32[] reduce(m, z), dimensions={0}, to_apply=add
  ROOT t = (f32[4], f32[]) tuple(m, r)
}
"""


@pytest.mark.parametrize("mutation", ["literal", "attrs", "operands", "rename", "add", "called", "fuse"])
def test_mutating_the_clone_leaves_the_original_unchanged(mutation: str) -> None:
    m = parse_hlo(MUTABLE)
    text, graph = m.to_text(), _graph(m)
    c = m.clone()
    entry = c.entry
    if mutation == "literal":
        entry.instruction("k").literal[0] = 42
    elif mutation == "attrs":
        entry.instruction("r").attrs["dimensions"] = (1,)
    elif mutation == "operands":
        entry.instruction("m").replace_operand(1, entry.instruction("e"))
    elif mutation == "rename":
        c.rename_instruction(entry.instruction("e"), "exp")
    elif mutation == "add":
        entry.add_instruction(HloInstruction("negate", entry.instruction("p").shape, [entry.instruction("p")]))
    elif mutation == "called":
        c.computation("add").root.opcode = "maximum"
    else:
        InstructionFusion("cpu").run(c)
    assert c.to_text() != text  # the mutation took
    assert m.to_text() == text and _graph(m) == graph
    assert m.unique_name("negate") == "negate"  # the copy's names are its own


def test_clones_trace_back_through_modules_and_collapse_within_one() -> None:
    """An instruction clone points at its source's original (chains collapse); a module clone
    points at the instruction it copies; OriginIndex follows both back to the first module."""
    m = parse_hlo(MUTABLE)
    once = m.clone()
    twice = once.clone()
    index = OriginIndex(m.all_instructions())
    for inst, mid, copy in zip(m.all_instructions(), once.all_instructions(), twice.all_instructions()):
        assert inst.origin is None and mid.origin is inst and copy.origin is mid
        assert inst.clone().clone().origin is inst and copy.clone().clone().origin is mid
        assert index.source(copy.clone()) is inst and index.source(inst) is inst
        # the other direction: passes ran on m, `twice` was kept aside as the unfused module
        assert OriginIndex(twice.all_instructions()).source(inst.clone()) is copy
    assert index.source(HloInstruction("negate", m.entry.root.shape)) is None


# ---- the compiler's output traces back to the user's module ---------------------------------------

DUPLICATED = """HloModule m

ENTRY main {
  x = f32[16] parameter(0)
  y = f32[16] parameter(1)
  a = f32[16] add(x, y)
  n = f32[16] negate(a)
  f = f32[16] floor(a)
  ROOT t = (f32[16], f32[16]) tuple(n, f)
}
"""


def test_fused_copies_trace_back_to_the_users_instructions() -> None:
    """On the CPU `a` (cheap, two users) is duplicated into both consumers' fusions: both
    copies trace back to the user's `a`, whatever they are called. (XLA:CPU's fusion passes:
    the CPU's sibling fusion would then merge the two consumers into one kernel.)"""
    m = parse_hlo(DUPLICATED)
    exe = hlofuse.compile(m, target="interpreter")
    fused, _ = optimize(m, "cpu", passes="call-inliner,fusion")
    users = {id(i) for i in m.all_instructions()}
    copies = [i for i in fused.all_instructions() if i.original is m.entry.instruction("a")]
    assert len(copies) == 2 and len({c.parent.name for c in copies}) == 2
    assert any(c.name != "a" for c in copies)
    for inst in fused.all_instructions():  # all but what fusion made: fusions, fused parameters
        if inst.opcode != "fusion" and (inst.opcode != "parameter" or inst.parent is fused.entry):
            assert id(inst.original) in users, inst.name
        else:
            assert inst.origin is None, inst.name
    # the report counts the second evaluation of a's 16 elements, the viewer names a as the origin
    assert build_report(m, fused).after.duplicated_elements == 16
    nodes = [n for g in build_graphs(m, fused) for n in g.nodes.values() if n.opcode == "add"]
    assert sorted(n.origin for n in nodes) == ["a", "a"]
    assert exe.fusion_log is exe.fused_module.fusion_log and isinstance(exe.fusion_log, FusionLog)


# A module in which GPU horizontal fusion makes `concatenate`, `slice` and `reshape` instructions
# while the user's module has an unrelated instruction of that name: names of the `<name>.N` form
# are not copies of it. (Name stripping took them for copies: the report counted its elements as
# duplicated work and the fusion as 3 kernels, explain placed it in the fusion.)
UNRELATED = {
    "slice": "f32[2] slice(r), slice={[0:2]}",
    "concatenate": "f32[12] concatenate(r, r), dimensions={0}",
    "reshape": "f32[2,3] reshape(r)",
}


@pytest.mark.parametrize("name", sorted(UNRELATED))
def test_pass_made_instructions_are_not_copies_of_a_namesake(name: str) -> None:
    rhs = UNRELATED[name]
    m = parse_hlo(f"""HloModule h

ENTRY main {{
  p = f32[2,4] parameter(0)
  q = f32[4] parameter(1)
  r = f32[6] parameter(2)
  {name} = {rhs}
  a = f32[2,4] negate(p)
  b = f32[4] abs(q)
  ROOT t = (f32[2,4], f32[4], {rhs.split()[0]}) tuple(a, b, {name})
}}
""")
    fused, _ = optimize(m, "gpu")
    (fusion,) = [i for i in fused.entry.instructions if i.opcode == "fusion"]
    members = [i.name for i in fusion.fused_computation.instructions]
    assert any(n.startswith(name + ".") for n in members) or name in members  # the namesake exists
    report = build_report(m, fused)
    (summary,) = report.fusions
    assert summary.kernels_before == 2  # a and b: the kernels horizontal fusion merged
    assert report.after.duplicated_elements == 0  # every value is computed once
    shape = rhs.split()[0]  # the instruction is named after its opcode
    assert f"{name} ({name} {shape}) ended up in {name}: not fused, a kernel of its own" in explain(m, [name], "gpu")
    (graph,) = build_graphs(m, fused)
    origins = {n.name: n.origin for n in graph.nodes.values() if n.cluster == fusion.name}
    assert origins == {n: (n if n in ("a", "b") else None) for n in members}


CALLED_TWICE = """HloModule m

twice {
  v = f32[16] parameter(0)
  ROOT x = f32[16] exponential(v)
}

ENTRY main {
  p = f32[16] parameter(0)
  q = f32[16] parameter(1)
  c1 = f32[16] call(p), to_apply=twice
  c2 = f32[16] call(q), to_apply=twice
  n1 = f32[16] negate(c1)
  n2 = f32[16] abs(c2)
  ROOT t = (f32[16], f32[16]) tuple(n1, n2)
}
"""


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_a_users_module_made_by_cloning_keeps_its_instructions_apart(target: str) -> None:
    """A user's module whose instructions are clones themselves (an importer inlined one
    function at two call sites: two instructions, one origin) is still traced instruction by
    instruction: each fused copy maps to its own call site's instruction."""
    m = parse_hlo(CALLED_TWICE)
    CallInliner().run(m)
    (x1, x2) = [i for i in m.entry.instructions if i.opcode == "exponential"]
    assert x1.origin is x2.origin is not None and x1.name != x2.name
    fused, _ = optimize(m, target)
    # each exponential of the fused module reads its own parameter: p for x1's, q for x2's
    reads = {i.original: i.operands[0] for i in fused.all_instructions() if i.opcode == "exponential"}
    entry_param = {i: f.operands[i.parameter_number].name for f in fused.entry.instructions if f.opcode == "fusion"
                   for i in f.fused_computation.parameters}
    assert {src.name: entry_param[op] for src, op in reads.items()} == {x1.name: "p", x2.name: "q"}
    nodes = [n for g in build_graphs(m, fused) for n in g.nodes.values() if n.opcode == "exponential"]
    assert sorted(n.origin for n in nodes) == sorted([x1.name, x2.name])
    for x in (x1, x2):
        assert f"{x.name} (exponential f32[16]) ended up in fusion " in explain(m, [x.name], target)


@pytest.mark.parametrize("target", ["cpu", "gpu"])
@pytest.mark.parametrize("path", [p for p in CORPUS if p.parent.name == "jax"],
                         ids=[i for i, p in zip(IDS, CORPUS) if p.parent.name == "jax"])
def test_fusing_the_pre_fusion_module_is_optimize(path, target: str) -> None:
    """explain fuses a clone of the pre-fusion module (so its origins link the two); that must be
    what optimize does in one go."""
    m = _parsed(path)
    pre, _ = optimize(m, target, fusion=False)
    fused, _ = fuse(pre, target)
    whole, _ = optimize(m, target)
    assert fused.to_text() == whole.to_text()
    assert fused.fusion_log.to_text() == whole.fusion_log.to_text()


# ---- the fusion log is a field ------------------------------------------------------------------

def test_fusion_log_is_a_field_of_module_and_executable() -> None:
    m = parse_hlo(DUPLICATED)
    assert m.fusion_log is None and m.clone().fusion_log is None
    fused, _ = optimize(m, "cpu")
    assert isinstance(fused.fusion_log, FusionLog) and fused.fusion_log.target == "cpu"
    assert fused.clone().fusion_log is None  # a log describes the passes run on its module's objects
    unfused, _ = optimize(m, "cpu", fusion=False)
    assert unfused.fusion_log is None
    assert hlofuse.compile(m, target="interpreter", fusion=False).fusion_log is None


# ---- passes are values, rules are functions ------------------------------------------------------

FUSION_PASS_NAMES = ["call-inliner", "fusion", "fusion-no-duplication", "fusion-merger", "multi-output-fusion",
                     "sibling-fusion", "horizontal-fusion"]


@pytest.mark.parametrize("name", FUSION_PASS_NAMES)
def test_fusion_passes_are_frozen_values(name: str) -> None:
    cls = PASSES[name]
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    options = {"fusion": ("target", "may_duplicate"), "multi-output-fusion": ("target", "loop_siblings"),
               "sibling-fusion": ("target", "loop_siblings")}.get(name, ("target",))
    assert cls.option_names() == options
    p = cls(target="cpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.target = "gpu"
    assert p == cls(target="cpu") and hash(p) == hash(cls(target="cpu"))


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_a_pass_keeps_nothing_between_runs(target: str) -> None:
    """The same pass objects on a second module fuse it as fresh ones do, and are unchanged."""
    texts = [input_text(p) for p in CORPUS if p.name in ("softmax.hlo", "lstm_cell.hlo", "layer_norm.hlo")]
    assert len(texts) >= 2
    shared = fusion_passes(target)
    before = list(shared)
    for text in texts:
        again, fresh = parse_hlo(text), parse_hlo(text)
        for p in shared:
            p.run(again)
        for p in fusion_passes(target):
            p.run(fresh)
        assert again.to_text() == fresh.to_text()
        assert again.fusion_log.to_text() == fresh.fusion_log.to_text()
    assert shared == before and all(vars(p) == vars(q) for p, q in zip(shared, fusion_passes(target)))


def test_non_duplicating_fusion_takes_no_duplication_option() -> None:
    assert NonDuplicatingFusion.option_names() == ("target",)
    assert not NonDuplicatingFusion().may_duplicate and InstructionFusion().may_duplicate
    assert not InstructionFusion(may_duplicate=False).may_duplicate
    with pytest.raises(ValueError, match="unknown fusion target"):
        InstructionFusion("tpu")


@pytest.mark.parametrize("params", [CPU, GPU], ids=["cpu", "gpu"])
def test_rules_are_pure_functions_of_producer_consumer_and_context(params) -> None:
    """Asking every rule about every operand of every instruction twice, with two contexts,
    gives the same decisions and leaves the module as it was."""
    m = parse_hlo(input_text(next(p for p in CORPUS if p.name == "lstm_cell.hlo")))
    text = m.to_text()
    rules = CPU_RULES if params is CPU else GPU_RULES
    assert all(callable(r) and r.__code__.co_varnames[:3] == ("producer", "consumer", "ctx") for r in rules)

    def decide():
        ctx = FusionContext.for_computation(m.entry, params, FusionLog(), "fusion")
        return [(i.name, k, should_fuse(i, k, ctx)) for i in m.entry.instructions for k in range(len(i.operands))]

    first, second = decide(), decide()
    assert first == second and any(d for _, _, d in first) and any(not d for _, _, d in first)
    assert m.to_text() == text
