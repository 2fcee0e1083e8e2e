"""The scatter simplifier (passes/scatter_simplifier.py) and the in-place fusion rule
(passes/fusion/in_place.py): what is rewritten or fused, what is refused under which rule key,
with results unchanged on the interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.scatter_simplifier import ScatterToDynamicUpdateSlice

CHANNEL = """HloModule m
assign {
  a = f32[] parameter(0)
  ROOT b = f32[] parameter(1)
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[2,5,3] parameter(0)
  i = s32[1] constant({IDX})
  s = f32[2,5,1] slice(x), slice={[0:2], [0:5], [1:2]}
  v = f32[2,5] reshape(s)
  n = f32[2,5] negate(v)
  ROOT r = f32[2,5,3] scatter(x, i, n), update_window_dims={0,1}, inserted_window_dims={2}, scatter_dims_to_operand_dims={2}, index_vector_dim=0, to_apply=COMB
}
"""


def _module(idx: int, comb: str = "assign"):
    return parse_hlo(CHANNEL.replace("IDX", str(idx)).replace("COMB", comb))


def _same_on_interpreter(before, after, x):
    a = hlofuse.compile(before, target="interpreter")(x)[0]
    b = hlofuse.compile(after, target="interpreter")(x)[0]
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("idx", [0, 1, 2])
def test_channel_assignment_becomes_dynamic_update_slice(idx):
    m = _module(idx)
    assert ScatterToDynamicUpdateSlice().run(m)
    ops = [i.opcode for i in m.entry.instructions]
    assert "scatter" not in ops and ops.count("dynamic-update-slice") == 1
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    _same_on_interpreter(_module(idx), m, x)


def test_out_of_bounds_window_is_skipped():
    m = _module(7)
    assert ScatterToDynamicUpdateSlice().run(m)
    assert m.entry.root.opcode == "parameter"  # the only window is dropped, as scatter drops it
    x = np.ones((2, 5, 3), np.float32)
    _same_on_interpreter(_module(7), m, x)


def test_combining_scatter_is_kept():
    m = _module(1, "add")
    assert not ScatterToDynamicUpdateSlice().run(m)
    assert m.entry.root.opcode == "scatter"


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
def test_slice_of_the_updated_window_fuses_into_the_in_place_root(target):
    # XLA's one safe read of an in-place buffer: a slice at the window the DUS writes
    exe = hlofuse.compile(_module(1), target=target)
    entry = exe.fused_module.entry
    fusions = [i for i in entry.instructions if i.opcode == "fusion"]
    assert len(fusions) == 1
    assert {i.opcode for i in fusions[0].fused_computation.instructions} >= {"slice", "dynamic-update-slice"}


def test_slice_of_another_window_is_refused_by_the_in_place_rule():
    text = CHANNEL.replace("IDX", "1").replace("COMB", "assign").replace("[1:2]}", "[2:3]}")
    exe = hlofuse.compile(parse_hlo(text), target="cpu")
    refused = [e for e in exe.fusion_log.refusals() if e.rule == "in-place"]
    assert any(e.producer == "s" for e in refused), [str(e) for e in exe.fusion_log.refusals()]
    root = exe.fused_module.entry.root
    assert root.opcode == "fusion" and "slice" not in {i.opcode for i in root.fused_computation.instructions}
    x = np.random.default_rng(4).standard_normal((2, 5, 3)).astype(np.float32)
    np.testing.assert_array_equal(exe(x)[0], hlofuse.compile(parse_hlo(text), target="interpreter")(x)[0])
