"""`hlofuse explain`: where instructions ended up and why they are (not) in one kernel."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import hlofuse
from hlofuse.cli import main
from hlofuse.explain import HINTS, explain
from hlofuse.hlo.errors import HloError

ROOT = Path(__file__).resolve().parent.parent
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


def test_one_instruction_duplicated(lstm):
    text = explain(lstm, ["add.9"], "cpu")
    assert "ended up in 2 kernels (duplicated)" in text
    assert "as add.9.1" in text


def test_same_kernel(lstm):
    text = explain(lstm, ["tanh.3", "mul.5"], "cpu")
    assert "Same kernel: tanh.3 and mul.5 are both in fusion." in text
    assert "fused tanh.3 into mul.5" in text


def test_direct_producer_refused_with_numbers_and_hint(lstm):
    text = explain(lstm, ["dot_general.2", "add.9"], "cpu")
    assert "Different kernels" in text
    assert "dot_general.2 is an operand of add.9." in text
    # f32[8,512]: 8 * 512 * 4 bytes, written once and read once when not fused
    assert "f32[8,512] = 16384 bytes" in text and "32768 bytes of traffic" in text
    assert "dot_general.2 is a dot, which is never fused into loop fusions (XLA fuses dots only in dedicated " \
           "fusions); add.9 reads it from memory [producer-not-fusible]" in text
    assert text.count("refused dot_general.2 -> add.9") == 1  # recorded once per pair
    assert "dot, convolution, sort, custom calls never fuse" in text


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
    text = explain(lstm, ["split.7", "split.5"], "cpu")
    assert "siblings: both read add.13" in text
    assert "no multi-output (sibling) fusion" in text


def test_gpu_refusals_name_the_rules(softmax):
    text = explain(softmax, ["reduce_sum.7", "div.7"], "gpu")
    assert "reduce_sum.7 (reduce f32[32]) ended up in fusion fusion.2 (kind=kInput" in text
    assert "[expensive-reused]" in text and "What would allow it:" in text
    # multi-output fusion refused to merge them: the division is reachable from the sum
    assert "[cycle]" in text and "Reachability: a kernel holding reduce_sum.7 and div.7 but not div.6" in text


SIBLINGS = """
HloModule siblings
ENTRY main {
  x = f32[64,128] parameter(0)
  e = f32[64,128] exponential(x)
  t = f32[128,64] transpose(x), dimensions={1,0}
  n = f32[128,64] negate(t)
  ROOT r = (f32[64,128], f32[128,64]) tuple(e, n)
}
"""


def test_gpu_siblings_refused_for_different_loop_shapes():
    module = hlofuse.parse_hlo(SIBLINGS)
    text = explain(module, ["e", "t"], "gpu")
    assert "e and t are siblings: both read x" in text
    assert "different loop shapes (f32[128,64] vs f32[64,128]) [different-loop-shapes]" in text
    assert "make their output shapes (or reduction input shapes) agree" in text
    text = explain(module, ["e", "t"], "cpu")
    assert "no multi-output (sibling) fusion" in text


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
    assert "Same kernel" in capsys.readouterr().out
    assert main(["explain", str(LSTM), "tanh.9"]) == 2
    err = capsys.readouterr().err
    assert "tanh.9" in err and "Traceback" not in err


def test_every_refusal_rule_has_a_hint():
    source = "\n".join(p.read_text() for p in (ROOT / "hlofuse" / "passes" / "fusion").glob("*.py"))
    rules = set(re.findall(r'refuse\(\s*"([a-z-]+)"', source))
    assert rules, "no refusal rules found"
    assert rules <= set(HINTS), sorted(rules - set(HINTS))
