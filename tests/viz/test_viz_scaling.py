"""The graph viewer's work grows with the module, not its square: every node's fusion decisions
come from an index of the log built once (viz/graph.decision_index), not a scan of the whole log
per node (which took 44 s for a 10,000-instruction chain); the indexed answer equals the scan's."""
from __future__ import annotations

import glob
import os
import sys

import hlofuse
from hlofuse.viz import graph as G
from hlofuse.viz import render

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from test_deep_modules import chain_text  # noqa: E402


def test_indexed_decisions_equal_a_scan_of_the_log():
    checked = 0
    for path in sorted(glob.glob(os.path.join(HERE, "..", "..", "examples", "*.hlo"))):
        module = hlofuse.load(path)
        for target in ("cpu", "gpu"):
            fused = hlofuse.compiler.optimize(module, target, verify=False)[0]
            log = fused.fusion_log
            index = G.decision_index(log)
            names = {i.name for i in fused.all_instructions()} | {i.name for i in module.all_instructions()}
            for name in sorted(names):
                for asked in ({name}, {name, "no-such-instruction"}):
                    assert G.decisions_about(log, asked, index) == G.decisions_about(log, asked)
                    checked += 1
    assert checked > 100


def _events(fn) -> int:
    count = 0

    def tick(frame, event, arg):
        nonlocal count
        count += 1

    sys.setprofile(tick)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


def test_rendering_twice_the_chain_is_about_twice_the_work():
    work = []
    for n in (1000, 2000):
        module = hlofuse.parse_hlo(chain_text(n))
        fused = hlofuse.compiler.optimize(module, "cpu", verify=False)[0]
        work.append(_events(lambda: render(module, fused, "dot")))
    assert work[1] / work[0] <= 2.5, work
