"""Refusals whose sentence is written when first read (decisions.Decision.refuse_later): the
same decision as a plain refusal, written once, and fusion logs that say exactly what they said
when every sentence was written at once (the deferred sentence names what the graph holds when
it is read; these check that it is read before the graph changes)."""
import glob
import os

import pytest

from hlofuse.compiler import optimize
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.fusion import producer_consumer
from hlofuse.passes.fusion.decisions import Decision

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MODULES = sorted(glob.glob(os.path.join(ROOT, "testdata", "jax", "*.hlo")))


def test_a_later_refusal_is_the_plain_refusal_written_once():
    calls = []

    def why() -> str:
        calls.append(1)
        return "because"

    d = Decision.refuse_later("rule", why)
    assert not d and d.rule == "rule" and not calls  # nothing written until read
    assert d.reason == "because" and d.reason == "because" and len(calls) == 1
    plain = Decision.refuse("rule", "because")
    assert d == plain and plain == d and hash(d) == hash(plain) and str(d) == str(plain)
    assert d != Decision.refuse("rule", "other") and d != Decision.allow()


def _log_text(path: str, target: str) -> str:
    with open(path) as f:
        module = parse_hlo(f.read())
    fused, _ = optimize(module, target)
    return fused.fusion_log.to_text()


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_fusion_logs_match_sentences_written_at_once(monkeypatch, target):
    assert len(MODULES) > 20
    # the logs with every rule's sentence deferred (as shipped) ...
    deferred = [_log_text(p, target) for p in MODULES]
    # ... and with the same rules writing each sentence the moment they refuse
    monkeypatch.setattr(producer_consumer, "refuse_later", lambda rule, why: Decision.refuse(rule, why()))
    at_once = [_log_text(p, target) for p in MODULES]
    assert any("producer-not-fusible" in t for t in at_once)  # the deferred rules do refuse here
    for path, a, b in zip(MODULES, deferred, at_once):
        assert a == b, os.path.basename(path)
