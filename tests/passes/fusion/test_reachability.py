"""Fusion reachability (passes/fusion/fusion_utils.Reachability) kept up to date after each
fusion (`update_downstream`, through FusionContext.fused_into) instead of rebuilt.

The reference is independent of the bitsets: every instruction's ancestors found by a plain
walk over operands and control predecessors of the computation as it stands. After every
fusion multi-output and sibling fusion make (CPU and GPU), on the JAX modules of testdata and
generated modules, the kept map must answer every pair as the walk does. The work of an update
is counted too: a fusion in a long chain that joins paths already joined further down touches
a few instructions, not the chain."""
from __future__ import annotations

import glob
import os

import pytest

from hlofuse.hlo.ir import HloComputation, HloInstruction
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.fusion import fusion_passes
from hlofuse.passes.fusion.context import FusionContext
from hlofuse.passes.fusion.fusion_utils import Reachability, create_fusion, merge_siblings

from tests.passes.test_fusion_complexity import softmax_blocks, wide

JAX_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "testdata", "jax")


def walked_ancestors(comp: HloComputation) -> dict[HloInstruction, set[HloInstruction]]:
    """Each instruction of `comp` -> the instructions that reach it (itself included): the
    union of its operands' and control predecessors' sets, over the post order."""
    out: dict[HloInstruction, set[HloInstruction]] = {}
    for inst in comp.post_order():
        seen = {inst}
        for op in list(inst.operands) + list(inst.control_predecessors):
            if op.parent is comp:
                seen |= out[op]
        out[inst] = seen
    return out


def assert_matches(reach: Reachability, comp: HloComputation) -> None:
    truth = walked_ancestors(comp)
    insts = comp.instructions
    for b in insts:
        for a in insts:
            assert reach.is_reachable(a, b) == (a in truth[b]), f"{a.name} -> {b.name}"


def test_built_map_matches_the_walk_with_control_edges():
    module = parse_hlo(softmax_blocks(60))
    comp = module.entry
    insts = comp.instructions
    insts[-1].control_predecessors.append(insts[5])  # a control edge from early to late
    insts[20].control_predecessors.append(insts[3])
    assert_matches(Reachability(comp), comp)


def _checked_runs(monkeypatch) -> list[int]:
    """FusionContext.fused_into checking the kept map against the walk after every update;
    returns the list the number of checks is appended to."""
    checks: list[int] = []
    original = FusionContext.fused_into

    def fused_into(self, node):
        original(self, node)
        if self._reach is not None:
            assert_matches(self._reach, self.comp)
            checks.append(1)

    monkeypatch.setattr(FusionContext, "fused_into", fused_into)
    return checks


_JAX = sorted(p for p in glob.glob(os.path.join(JAX_DIR, "*.hlo")) if not p.endswith(".opt.hlo"))


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_kept_map_matches_the_walk_after_every_fusion(monkeypatch, target):
    checks = _checked_runs(monkeypatch)
    texts = [softmax_blocks(120), wide(160)] + [open(p).read() for p in _JAX]
    for text in texts:
        module = parse_hlo(text)
        for p in fusion_passes(target):
            p.run(module)
    assert len(checks) >= 10  # the modules did exercise the updates


def _sibling_chain(blocks: int) -> str:
    """`blocks` blocks, each exp(c) and negate(c) of the value before (two siblings) added."""
    lines = ["HloModule siblings", "", "ENTRY main {", "  c0 = f32[16] parameter(0)"]
    for k in range(blocks):
        lines += [f"  u{k} = f32[16] exponential(c{k})", f"  v{k} = f32[16] negate(c{k})",
                  f"  {'ROOT ' if k == blocks - 1 else ''}c{k + 1} = f32[16] add(u{k}, v{k})"]
    return "\n".join(lines + ["}"]) + "\n"


def test_update_stops_where_paths_already_joined(monkeypatch):
    """Two siblings merged near the head of a long chain: their paths already met at the add
    that reads both, so nothing after it gains an ancestor; the update touches the same few
    instructions whatever the chain's length (counted as the instructions whose set grew,
    whose users it then visits), and the map still matches the walk."""
    touched = {}
    original = Reachability._downstream
    for blocks in (30, 300):
        comp = parse_hlo(_sibling_chain(blocks)).entry
        reach = Reachability(comp)
        calls = 0

        def counting(self, inst, holders):
            nonlocal calls
            calls += 1
            return original(self, inst, holders)

        monkeypatch.setattr(Reachability, "_downstream", counting)
        by_name = {i.name: i for i in comp.instructions}
        a = create_fusion(by_name["u2"], "kLoop")
        merge_siblings(a, by_name["v2"])
        reach.update_downstream(a)
        monkeypatch.setattr(Reachability, "_downstream", original)
        if blocks == 30:
            assert_matches(reach, comp)
        touched[blocks] = calls
    assert touched[300] == touched[30] <= 8, touched
