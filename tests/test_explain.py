"""`hlofuse explain`: where instructions ended up and why they are (not) in one kernel."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import hlofuse
from hlofuse.cli import main
from hlofuse.explain import HINTS, explain
from hlofuse.hlo.errors import HloError
from repo_paths import REPO

ROOT = REPO
LSTM = ROOT / "examples" / "lstm_cell.hlo"
SOFTMAX = ROOT / "examples" / "softmax.hlo"


@pytest.fixture(scope="module")
def lstm():
    return hlofuse.load(str(LSTM))


@pytest.fixture(scope="module")
def softmax():
    return hlofuse.load(str(SOFTMAX))


def test_one_instruction_where_and_decisions(lstm):
    text = explain(lstm, ["tanh.3"], "cpu")
    assert "tanh.3 (tanh f32[8,128]) ended up in fusion fusion (kind=kLoop" in text
    assert "[fusion] fused tanh.3 into mul.5 -> fusion" in text
    # the fusion it joined was also refused add.16, which the tuple root needs
    assert "[not-fusible-into-all-users]" in text


def test_one_instruction_duplicated(softmax):
    # exp.1 is duplicated into the kernel of its sum and the kernel of the division, which stay
    # two kernels on the CPU (a reduction and a loop)
    text = explain(softmax, ["exp.1"], "cpu")
    assert "ended up in 2 kernels (duplicated)" in text
    assert "as exp.1.1" in text


def test_duplicate_computed_once_when_its_users_merge(lstm):
    # add.9 is duplicated into the fusions of the cell state and of the hidden state, and the
    # CPU's producer-consumer multi-output fusion then computes the cell state in the hidden
    # state's kernel: one kernel, add.9 computed once there
    text = explain(lstm, ["add.9"], "cpu")
    assert text.startswith("add.9 runs in fusion (kLoop).")
    assert "[fusion] fused add.9 into fusion.1 -> fusion.1 (merged into fusion later)" in text


def test_same_kernel(lstm):
    text = explain(lstm, ["tanh.3", "mul.5"], "cpu")
    assert text.startswith("tanh.3 and mul.5 are in the same kernel, fusion (kLoop).\n")
    assert "fused tanh.3 into mul.5" in text


def test_direct_producer_refused_with_numbers_and_hint(lstm):
    """On the CPU a dot fuses into elementwise consumers as their epilogue (kOutput) only when the
    fusion yields an array of the dot's dimensions; add.9's fusion does not (the LSTM slices the
    gates), so the dot stays a kernel of its own, with the rule, the numbers and a hint."""
    text = explain(lstm, ["dot_general.2", "add.9"], "cpu")
    assert text.startswith("dot_general.2 and add.9 run in different kernels: dot_general.2 in dot_general.2, "
                           "add.9 in fusion; the deciding refusal was "
                           "[fusion/dot-output-shape] 'fusion does not produce one array of dot dot_general.2's "
                           "dimensions")
    assert "dot_general.2 is an operand of add.9." in text
    # f32[8,512]: 8 * 512 * 4 bytes, written once and read once when not fused
    assert "f32[8,512] = 16384 bytes" in text and "32768 bytes of traffic" in text
    assert text.count("refused dot_general.2 -> add.9") == 1  # recorded once per pair
    assert "an epilogue has the dot's dimensions" in text  # the hint of dot-output-shape


def test_path_gives_reachability(lstm):
    text = explain(lstm, ["dot_general.2", "mul.5"], "cpu")
    path = re.search(r"reaches mul.5 through (.*)\.", text).group(1).split(" -> ")
    assert path[0] == "dot_general.2" and path[-1] == "mul.5" and len(path) > 2
    module = hlofuse.load(str(LSTM))
    comp = module.entry
    for u, v in zip(path, path[1:]):  # every step is a real operand -> user edge
        assert any(o.name == u for o in comp.instruction(v).operands)
    assert "Reachability: a kernel holding dot_general.2 and mul.5" in text


def test_siblings_on_cpu(lstm):
    # the gates' slices of add.13 end up in one kernel (the cell state's fusion computed in the
    # hidden state's: CPU multi-output fusion)
    text = explain(lstm, ["split.7", "split.5"], "cpu")
    assert text.startswith("split.7 and split.5 are in the same kernel, fusion (kLoop).")


def test_gpu_refusals_name_the_rules(softmax):
    # the legacy GPU algorithm (instruction fusion, merger, multi-output): its rules by name
    text = explain(softmax, ["reduce_sum.7", "div.7"], "gpu", algorithm="legacy")
    assert "reduce_sum.7 (reduce f32[32]) ended up in fusion fusion.2 (kind=kInput" in text
    assert "[expensive-reused]" in text and "What would allow it:" in text
    # the division is reachable from the sum through div.6, which cannot take it
    assert "Reachability: a kernel holding reduce_sum.7 and div.7 but not div.6" in text


def test_gpu_priority_fusion_decisions_carry_the_estimate(softmax):
    # priority fusion (the GPU default): the fused edges carry the model's estimate, a refusal
    # by a rule what the model would have expected
    text = explain(softmax, ["exp.1", "div.7"], "gpu")
    assert "exp.1 and div.7 are in the same kernel" in text
    text = explain(softmax, ["reduce_sum.7", "div.7"], "gpu")
    assert "[priority-fusion/reduce-epilogue]" in text or "[reduce-epilogue]" in text
    assert "the model, had it been allowed: fusing costs" in text
    assert "What would allow it:" in text


SIBLINGS = """
HloModule siblings
ENTRY main {
  x = f32[64,128] parameter(0)
  e = f32[64,128] exponential(x)
  t = f32[32,128] slice(x), slice={[0:32], [0:128]}
  n = f32[32,128] negate(t)
  ROOT r = (f32[64,128], f32[32,128]) tuple(e, n)
}
"""


def test_gpu_siblings_refused_for_different_loop_shapes():
    module = hlofuse.parse_hlo(SIBLINGS)
    text = explain(module, ["e", "t"], "gpu")
    assert "e and t are siblings: both read x" in text
    assert "different loop shapes (f32[32,128] vs f32[64,128]) [different-loop-shapes]" in text
    assert "make their output shapes (or reduction input shapes) agree" in text
    # the CPU merges loops only when their outputs have the same dimensions
    text = explain(module, ["e", "t"], "cpu")
    assert "e and t are siblings: both read x" in text
    assert "the deciding refusal was [sibling-fusion/cpu-loop-dims]" in text
    assert "only loops writing outputs of the same dimensions share a kernel" in text  # the hint


def test_names_removed_before_fusion_or_in_combiners(softmax):
    text = explain(softmax, ["broadcast_in_dim.2"], "gpu")
    assert "removed or replaced it before fusion" in text
    text = explain(softmax, ["reduce_max.5"], "gpu")
    assert "is in computation region_0.1 called by reduce_max.7" in text


def test_unknown_names_list_close_matches(lstm):
    with pytest.raises(HloError) as err:
        explain(lstm, ["tanh.4", "mul.5"], "cpu")
    assert "no instruction named 'tanh.4'" in str(err.value)
    assert "tanh.3" in str(err.value)
    with pytest.raises(HloError, match="one or two"):
        explain(lstm, ["a", "b", "c"], "cpu")


def test_cli_explain(capsys):
    assert main(["explain", str(LSTM), "tanh.3", "mul.5"]) == 0
    assert "are in the same kernel" in capsys.readouterr().out
    assert main(["explain", str(LSTM), "tanh.9"]) == 2
    err = capsys.readouterr().err
    assert "tanh.9" in err and "Traceback" not in err


def test_every_refusal_rule_has_a_hint():
    source = "\n".join(p.read_text() for p in (ROOT / "hlofuse" / "passes" / "fusion").glob("*.py"))
    rules = set(re.findall(r'refuse\(\s*"([a-z-]+)"', source))
    assert rules, "no refusal rules found"
    assert rules <= set(HINTS), sorted(rules - set(HINTS))


def test_every_hint_key_is_written_once():
    """A key written twice in the HINTS literal silently keeps only its last text (multi-output
    fusion's `unprofitable` hid priority fusion's)."""
    import ast

    tree = ast.parse((ROOT / "hlofuse" / "explain_hints.py").read_text())
    (literal,) = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                  and any(getattr(t, "id", None) == "HINTS" for t in n.targets)]
    keys = [k.value for k in literal.keys]
    assert len(keys) == len(set(keys)), sorted(k for k in set(keys) if keys.count(k) > 1)


# ---- every name, every pair: checked against facts read off the fused module ----------------------
# The facts are computed here from the fused module alone (`optimize` in one go, not explain's two
# steps): a fusion runs its non-parameter members; a fused parameter reads its fusion's operand,
# computed wherever that operand is; a combiner runs in its callers' kernels; an original name
# stands for every copy of its instruction (the copies' origin chains meet in the user's module).

from hlofuse.compiler import optimize  # noqa: E402
from hlofuse.explain import Explainer  # noqa: E402

EXAMPLES = sorted((ROOT / "examples").glob("*.hlo"))
NO_KERNEL = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast"}
SAME = re.compile(r"^(\S+) and (\S+) are in the same kernel, (\S+) ")
APART = re.compile(r"^(\S+) and (\S+) run in different kernels: ")
NAMEISH = re.compile(r"[A-Za-z_][\w\-]*(?:\.\d+)+")


def _kernel_facts(module: hlofuse.HloModule, target: str):
    """(fused module, {name: set of kernel names}) for every instruction name of the fused module."""
    fused, _ = optimize(module, target)
    callers: dict = {}
    for inst in fused.all_instructions():
        for comp in inst.called_computations():
            callers.setdefault(comp, []).append(inst)

    def kernels(inst, depth=0) -> frozenset:
        comp = inst.parent
        fusion = comp.fusion_instruction
        if fusion is not None:
            return kernels(fusion.operands[inst.parameter_number]) if inst.opcode == "parameter" else kernels(fusion)
        if comp in callers and depth < 20:  # a called computation (fusions' are handled above)
            return frozenset().union(*(kernels(c, depth + 1) for c in callers[comp]))
        return frozenset() if inst.opcode in NO_KERNEL else frozenset({inst.name})

    user = set(module.all_instructions())

    def key(inst):
        link = inst
        while link.origin is not None and link not in user:
            link = link.origin
        return link

    copies: dict = {}
    for inst in fused.all_instructions():
        if not (inst.opcode == "parameter" and inst.parent.fusion_instruction is not None):
            copies.setdefault(key(inst), set()).add(inst)
    facts = {}
    for inst in fused.all_instructions():
        k = key(inst)
        fused_param = inst.opcode == "parameter" and inst.parent.fusion_instruction is not None
        group = copies[k] if k.name == inst.name and not fused_param and inst.opcode != "fusion" else {inst}
        facts[inst.name] = frozenset().union(*(kernels(m) for m in group))
    return fused, facts


def _pairs(names: list[str]) -> list[tuple[str, str]]:
    """Every pair of names, and both orders for every seventh pair."""
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    return pairs + [(b, a) for a, b in pairs[::7]]


@pytest.mark.parametrize("target", ["cpu", "gpu"])
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_pair_agrees_with_the_fused_module(path: Path, target: str) -> None:
    module = hlofuse.load(str(path))
    fused, facts = _kernel_facts(module, target)
    ex = Explainer(module, target)
    assert ex.fused.to_text() == fused.to_text()  # the facts are about the module explain fused
    known = set(facts) | {i.name for i in module.all_instructions()}
    known |= {n.strip() for e in ex.log for n in (e.producer, e.fusion, *e.consumer.split(",")) if n.strip()}
    resolved: set[str] = set()

    def check_names(text: str) -> None:
        for tok in set(NAMEISH.findall(text)) | (set(re.findall(r"[\w.\-]+", text)) & known):
            if tok not in resolved:
                ex.explain([tok])  # raises HloError for a name that does not resolve
                resolved.add(tok)

    names = sorted(facts)
    for name in names:  # every name alone
        text = ex.explain([name])
        assert "not in the module" not in text
        expect = f"{name} runs in no kernel" if not facts[name] else f"{name} runs in "
        assert text.startswith(expect), (name, text)
        check_names(text)
    for a, b in _pairs(names):
        text = ex.explain([a, b])
        first = text.split("\n", 1)[0]
        shared = facts[a] & facts[b]
        if shared:
            m = SAME.match(first)
            assert m and m.group(3) in shared, (a, b, facts[a], facts[b], first)
        else:
            assert APART.match(first), (a, b, facts[a], facts[b], first)
        assert "not in the module" not in text and "one of them is a fusion" not in text
        check_names(text)


# ---- the cases ----------------------------------------------------------------------------

def test_a_fused_clone_is_accepted_and_resolves_to_its_original(softmax) -> None:
    fused, facts = _kernel_facts(softmax, "cpu")
    clone = next(i for i in fused.all_instructions() if i.name == "exp.1.1")
    holder = clone.parent.fusion_instruction.name
    text = explain(softmax, ["exp.1", "exp.1.1"], "cpu")
    assert text.startswith(f"exp.1 and exp.1.1 are in the same kernel, {holder} ")
    assert (f"exp.1.1 (exponential f32[32,1000]) is a copy of exp.1 made by fusion; it ended up in fusion "
            f"{holder} ") in text
    assert len(facts["exp.1"]) == 2 and "(duplicated)" in text  # exp.1 is computed by both fusions
    assert "not in the module" not in text and "one of them is a fusion" not in text
    one = explain(softmax, ["exp.1.1"], "cpu")
    assert one.startswith(f"exp.1.1 runs in {holder} (kLoop).")


def test_a_name_of_another_target_is_an_error_with_close_matches(capsys) -> None:
    # broadcast.5.1 is a copy only the GPU's fusion makes in the layer norm
    layer_norm = str(ROOT / "examples" / "layer_norm.hlo")
    assert main(["explain", layer_norm, "broadcast.5.1", "--target", "gpu"]) == 0
    capsys.readouterr()
    assert main(["explain", layer_norm, "broadcast.5", "broadcast.5.1", "--target", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "no instruction named 'broadcast.5.1'" in err and "broadcast.5" in err and "Traceback" not in err


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_a_fusion_name_resolves_to_the_fusion(lstm, target: str) -> None:
    fused, facts = _kernel_facts(lstm, target)
    for f in [i for i in fused.entry.instructions if i.opcode == "fusion"]:
        member = next(m for m in f.fused_computation.instructions if m.opcode != "parameter")
        text = explain(lstm, [f.name, member.name], target)
        assert text.startswith(f"{f.name} and {member.name} are in the same kernel, {f.name} "), text
        assert explain(lstm, [f.name], target).startswith(f"{f.name} runs in {f.name} ")


@pytest.mark.parametrize("target", ["cpu", "gpu"])
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_report_names_the_fusions_holding_refused_consumers(path: Path, target: str) -> None:
    """A refusal's '(in F)' names a fusion of the fused module, or says where F was merged; the
    fusions named hold (a copy of) the consumer; every name of the report resolves in explain."""
    from hlofuse.passes.fusion.report import build_report

    module = hlofuse.load(str(path))
    fused, facts = _kernel_facts(module, target)
    report = build_report(module, fused, fused.fusion_log)
    fusions = {i.name for i in fused.entry.instructions if i.opcode == "fusion"}
    text = report.to_text()
    for line in text.split("Refused candidates")[1].splitlines()[1:]:
        m = re.match(r"  (.*?) -> (.*?)(?: \(in ([^)]*)\))? \[", line)
        assert m, line
        if m.group(3):
            held, _, since = m.group(3).partition(", since merged into ")
            final = since.split(", ") if since else [held]
            assert set(final) <= fusions, line
            consumers = [c.strip() for c in m.group(2).split(",")]
            assert any(set(final) & facts[c] for c in consumers if c in facts), line
    ex = Explainer(module, target)
    for tok in set(NAMEISH.findall(text)):
        ex.explain([tok])


@pytest.mark.parametrize("a,b,target", [("tanh.3", "mul.5", "cpu"), ("add.9", "mul.5", "gpu"),
                                        ("split.7", "split.5", "gpu"), ("neg.3", "div.4", "cpu")])
def test_same_kernel_lists_only_the_decisions_on_the_path(lstm, a: str, b: str, target: str) -> None:
    """Not every decision of the kernel (the issue's 28 lines): the path's edges, a few each."""
    _, facts = _kernel_facts(lstm, target)
    assert facts[a] & facts[b]
    text = explain(lstm, [a, b], target)
    assert text.startswith(f"{a} and {b} are in the same kernel")
    head = re.search(r"How they got there, along (.*):\n", text)
    path = head.group(1).split(" -> ")
    assert {path[0], path[-1]} == {a, b}
    edges = re.findall(r"^  (\S+) -> (\S+):$", text, re.M)
    graph = lstm.entry
    steps = list(zip(path, path[1:]))
    assert len(edges) == len(steps)
    for (u, v), (x, y) in zip(edges, steps):
        assert {u, v} == {x, y} and any(o.name == u for o in graph.instruction(v).operands)
    decisions = [ln for ln in text.splitlines() if ln.startswith("    [")]
    log_lines = optimize(lstm, target)[0].fusion_log.to_text().splitlines()
    assert 1 <= len(decisions) <= 3 * len(steps) < len(log_lines)
