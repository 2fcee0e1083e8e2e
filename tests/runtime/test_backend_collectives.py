"""Single-participant collectives and async ops on the compiled backends (CPU and the emulated
GPU grid), checked against the interpreter (the oracle) and against hand-derived values."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse import parse_hlo
from hlofuse.hlo.errors import UnsupportedError
from hlofuse.runtime.interpreter import evaluate

TARGETS = ["cpu", "gpu-emulated"]
COMPS = """
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%neg (x: f32[2,3]) -> f32[2,3] {
  %x = f32[2,3] parameter(0)
  ROOT %n = f32[2,3] negate(%x)
}
"""
X = np.array([[1.5, -2.0, 3.0], [0.25, 7.0, -0.0]], np.float32)
Y = np.array([4, -5], np.int32)


def _module(body: str, header: str = ""):
    text = (f"HloModule m{header}\n{COMPS}\nENTRY %main {{\n  %p0 = f32[2,3] parameter(0)\n"
            f"  %p1 = s32[2] parameter(1)\n{body}\n}}\n")
    return parse_hlo(text)


CASES = {
    "replica-id": "  %r = u32[] replica-id()\n  %c = f32[] convert(%r)\n"
                  "  %b = f32[2,3] broadcast(%c), dimensions={}\n  ROOT %s = f32[2,3] add(%p0, %b)",
    "partition-id": "  %r = u32[] partition-id()\n  %q = u32[] replica-id()\n  ROOT %t = (u32[], u32[]) tuple(%r, %q)",
    "all-reduce": "  %r = f32[2,3] all-reduce(%p0), replica_groups={{0}}, to_apply=%add\n"
                  "  ROOT %m = f32[2,3] multiply(%r, %r)",
    "all-reduce-iota": "  ROOT %r = f32[2,3] all-reduce(%p0), replica_groups=[1,1]<=[1], to_apply=%add",
    "variadic-all-reduce": "  ROOT %r = (f32[2,3], s32[2]) all-reduce(%p0, %p1), replica_groups={}, to_apply=%add",
    "all-reduce-start": "  %s = f32[2,3] all-reduce-start(%p0), replica_groups={{0}}, to_apply=%add\n"
                        "  ROOT %d = f32[2,3] all-reduce-done(%s)",
    "all-gather": "  ROOT %r = f32[2,3] all-gather(%p0), replica_groups={{0}}, dimensions={1}",
    "reduce-scatter": "  ROOT %r = f32[2,3] reduce-scatter(%p0), replica_groups={}, dimensions={0}, to_apply=%add",
    "all-to-all": "  ROOT %r = f32[2,3] all-to-all(%p0), replica_groups={{0}}, dimensions={1}",
    "collective-broadcast": "  ROOT %r = f32[2,3] collective-broadcast(%p0), replica_groups={{0}}",
    "all-gather-start": "  %s = (f32[2,3], f32[2,3]) all-gather-start(%p0), replica_groups={{0}}, dimensions={0}\n"
                        "  %d = f32[2,3] all-gather-done(%s)\n  ROOT %e = f32[2,3] exponential(%d)",
    "permute-self": "  ROOT %r = f32[2,3] collective-permute(%p0), channel_id=1, source_target_pairs={{0,0}}",
    "permute-none": "  ROOT %r = (f32[2,3], s32[2]) collective-permute(%p0, %p1), source_target_pairs={}",
    "permute-start": "  %s = (f32[2,3], f32[2,3], u32[], u32[]) collective-permute-start(%p0), "
                     "source_target_pairs={{0,0}}\n  ROOT %d = f32[2,3] collective-permute-done(%s)",
    "copy-start": "  %s = (f32[2,3], f32[2,3], u32[]) copy-start(%p0)\n  ROOT %d = f32[2,3] copy-done(%s)",
    "async": "  %s = ((f32[2,3]), f32[2,3], s32[]) async-start(%p0), calls=%neg\n"
             "  %u = ((f32[2,3]), f32[2,3], s32[]) async-update(%s)\n"
             "  ROOT %d = f32[2,3] async-done(%u)",
}


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_collective_matches_interpreter(case, target):
    module = _module(CASES[case])
    want = evaluate(module, [X, Y])
    got = hlofuse.compile(module, target=target)(X, Y)
    _same(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_hand_values(target):
    """Values derived by hand: one participant's all-reduce is its operand; nothing received is zeros."""
    got = hlofuse.compile(_module(CASES["all-reduce"]), target=target)(X, Y)
    _same(got, [X * X])
    got = hlofuse.compile(_module(CASES["permute-none"]), target=target)(X, Y)
    _same(got, [np.zeros_like(X), np.zeros_like(Y)])
    got = hlofuse.compile(_module(CASES["async"]), target=target)(X, Y)
    _same(got, [-X])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("body,header", [
    ("  ROOT %r = f32[2,3] all-reduce(%p0), replica_groups={{0,1}}, to_apply=%add", ""),
    ("  ROOT %r = f32[2,3] all-reduce(%p0), replica_groups={{1}}, to_apply=%add", ""),
    ("  ROOT %r = f32[2,3] all-reduce(%p0), replica_groups=[1,2]<=[2], to_apply=%add", ""),
    ("  ROOT %r = f32[2,3] all-reduce(%p0), replica_groups={}, to_apply=%add", ", replica_count=2"),
    ("  ROOT %r = f32[4,3] all-gather(%p0), replica_groups={}, dimensions={0}", ""),
    ("  ROOT %r = f32[2,3] collective-permute(%p0), source_target_pairs={{0,1},{1,0}}", ""),
])
def test_several_participants_are_refused(body, header, target):
    module = _module(body, header)
    with pytest.raises(UnsupportedError, match=r"instruction r"):
        hlofuse.compile(module, target=target)(X, Y)
