"""The dynamic-update-slice rules the scatter simplifier runs (passes/dus_rules.py): slices of
an update that read only its operand or only its update, and updates of adjacent or covering
windows merged into one. Each rewrite is checked on the interpreter against the module before
it, with look-alikes that must stay (a second user, windows apart, a partial overlap, a start
that is not a constant); the image normalisation as JAX writes it becomes one loop kernel."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from hlofuse.passes.scatter_simplifier import ScatterToDynamicUpdateSlice

# Channels A and B of x (f32[4,6,3]) set in turn to functions of x's channels, as
# `x.at[..., A].set(f(x[..., A])).at[..., B].set(g(y[..., B]))` lowers: the second update reads
# its channel from the first update's result.
CHANNELS = """HloModule m
assign {
  a = f32[] parameter(0)
  ROOT b = f32[] parameter(1)
}
ENTRY e {
  x = f32[4,6,3] parameter(0)
  ia = s32[1] constant({A})
  sa = f32[4,6,1] slice(x), slice={[0:4], [0:6], [A:A1]}
  va = f32[4,6] reshape(sa)
  na = f32[4,6] negate(va)
  y = f32[4,6,3] scatter(x, ia, na), update_window_dims={0,1}, inserted_window_dims={2}, scatter_dims_to_operand_dims={2}, index_vector_dim=0, to_apply=assign
  ib = s32[1] constant({B})
  sb = f32[4,6,1] slice(y), slice={[0:4], [0:6], [B:B1]}
  vb = f32[4,6] reshape(sb)
  eb = f32[4,6] exponential(vb)
  ROOT z = f32[4,6,3] scatter(y, ib, eb), update_window_dims={0,1}, inserted_window_dims={2}, scatter_dims_to_operand_dims={2}, index_vector_dim=0, to_apply=assign
}
"""


def _channels(a: int, b: int):
    text = CHANNELS.replace("A1", str(a + 1)).replace("B1", str(b + 1)).replace("{A}", "{%d}" % a)
    text = text.replace("{B}", "{%d}" % b).replace("[A:", f"[{a}:").replace("[B:", f"[{b}:")
    return parse_hlo(text)


def _x(*dims):
    return np.random.default_rng(len(dims)).standard_normal(dims).astype(np.float32)


def _same_on_interpreter(make, args):
    before = hlofuse.compile(make(), target="interpreter")(*args)
    m = make()
    changed = ScatterToDynamicUpdateSlice().run(m)
    after = hlofuse.compile(m, target="interpreter")(*args)
    for p, q in zip(before, after):
        np.testing.assert_array_equal(p, q)
    return m, changed


def _ops(m) -> list[str]:
    return [i.opcode for i in m.entry.instructions]


@pytest.mark.parametrize("a,b", [(0, 1), (1, 0), (1, 2), (2, 1)])
def test_adjacent_channel_updates_become_one(a, b):
    m, _ = _same_on_interpreter(lambda: _channels(a, b), [_x(4, 6, 3)])
    ops = _ops(m)
    assert ops.count("dynamic-update-slice") == 1 and ops.count("concatenate") == 1 and "scatter" not in ops
    # the second update reads x's channel directly, not the first update's result
    assert all(i.operands[0].opcode != "dynamic-update-slice" for i in m.entry.instructions if i.opcode == "slice")


@pytest.mark.parametrize("a,b", [(0, 2), (2, 0)])
def test_channels_apart_stay_two_updates(a, b):
    m, _ = _same_on_interpreter(lambda: _channels(a, b), [_x(4, 6, 3)])
    assert _ops(m).count("dynamic-update-slice") == 2 and "concatenate" not in _ops(m)


def test_same_channel_twice_keeps_the_last():
    m, _ = _same_on_interpreter(lambda: _channels(1, 1), [_x(4, 6, 3)])
    assert _ops(m).count("dynamic-update-slice") == 1 and "concatenate" not in _ops(m)


@pytest.mark.parametrize("target", ["cpu", "gpu-emulated"])
def test_image_normalisation_is_one_loop_kernel(target):
    exe = hlofuse.compile(_channels(0, 1), target=target)
    fusions = [i for i in exe.fused_module.entry.instructions if i.opcode == "fusion"]
    if target == "cpu":  # (the GPU pipeline keeps the update's channel reads apart: XLA's in-place rule)
        assert len(fusions) == 1 and fusions[0].attrs["kind"] == "kLoop"
    x = _x(4, 6, 3)
    np.testing.assert_allclose(exe(x)[0], hlofuse.compile(_channels(0, 1), target="interpreter")(x)[0],
                               rtol=1e-6)


DUS_PAIR = """HloModule m
ENTRY e {
  x = f32[6,8] parameter(0)
  u0 = f32[U0] parameter(1)
  u1 = f32[U1] parameter(2)
  r0 = s32[] constant(R0)
  c0 = s32[] constant(C0)
  r1 = s32[] START1
  c1 = s32[] constant(C1)
  d0 = f32[6,8] dynamic-update-slice(x, u0, r0, c0)
  ROOT d1 = f32[6,8] dynamic-update-slice(d0, u1, r1, c1)EXTRA
}
"""


def _pair(u0, r0, c0, u1, r1, c1, extra: bool = False, dynamic: bool = False):
    text = (DUS_PAIR.replace("U0", f"{u0[0]},{u0[1]}").replace("U1", f"{u1[0]},{u1[1]}")
            .replace("R0", str(r0)).replace("C0", str(c0)).replace("C1", str(c1))
            .replace("START1", "parameter(3)" if dynamic else f"constant({r1})"))
    if extra:  # d0 has a second user: its value is still needed
        text = text.replace("ROOT d1 = f32[6,8]", "d1 = f32[6,8]").replace(
            "EXTRA", "\n  ROOT t = (f32[6,8], f32[6,8]) tuple(d1, d0)")
    return parse_hlo(text.replace("EXTRA", ""))


def _pair_args(u0, u1, r1=None):
    rng = np.random.default_rng(7)
    return [rng.standard_normal(s).astype(np.float32) for s in ((6, 8), u0, u1)] + ([] if r1 is None else [np.int32(r1)])


@pytest.mark.parametrize("u0,r0,c0,u1,r1,c1,merged", [
    ((2, 3), 1, 2, (2, 3), 1, 5, True),      # columns 2-4 then 5-7: one update of 2x6
    ((2, 3), 1, 5, (2, 4), 1, 1, True),      # the second window comes first
    ((2, 3), 1, 2, (3, 3), 3, 2, True),      # rows 1-2 then 3-5, same columns
    ((2, 3), 1, 2, (2, 4), 3, 2, False),     # rows 1-2 then 3-4, different columns
    ((2, 3), 1, 2, (4, 6), 0, 1, True),      # the second window covers the first
    ((2, 3), 1, 2, (2, 3), 1, 4, False),     # overlapping columns 2-4 and 4-6
    ((2, 3), 1, 0, (2, 3), 1, 4, False),     # a gap: columns 0-2 and 4-6
    ((2, 3), 1, 2, (2, 3), 2, 5, False),     # diagonal neighbours: two dimensions differ
    ((2, 3), 1, 7, (2, 4), 1, 1, True),      # a start past the end clamps to 5: columns 5-7 after 1-4
])
def test_update_pairs(u0, r0, c0, u1, r1, c1, merged):
    m, _ = _same_on_interpreter(lambda: _pair(u0, r0, c0, u1, r1, c1), _pair_args(u0, u1))
    assert (_ops(m).count("dynamic-update-slice") == 1) == merged


def test_update_with_another_user_or_a_dynamic_start_is_kept():
    u0, u1 = (2, 3), (2, 4)
    m, _ = _same_on_interpreter(lambda: _pair(u0, 1, 2, u1, 1, 5, extra=True), _pair_args(u0, u1))
    assert _ops(m).count("dynamic-update-slice") == 2
    m, changed = _same_on_interpreter(lambda: _pair(u0, 1, 2, u1, 1, 5, dynamic=True), _pair_args(u0, u1, 1))
    assert _ops(m).count("dynamic-update-slice") == 2 and not changed


SLICED = """HloModule m
ENTRY e {
  x = f32[6,8] parameter(0)
  u = f32[2,3] parameter(1)
  r = s32[] constant(1)
  c = s32[] constant(2)
  d = f32[6,8] dynamic-update-slice(x, u, r, c)
  s = f32[SD] slice(d), slice={SPEC}
  ROOT t = (f32[6,8], f32[SD]) tuple(d, s)
}
"""


@pytest.mark.parametrize("spec,reads", [
    ("[0:6], [5:8]", "x"),          # columns right of the window
    ("[3:6:2], [0:8]", "x"),        # rows below it, strided
    ("[1:3], [2:5]", "u"),          # exactly the window
    ("[2:3], [3:5:2]", "u"),        # inside it, strided
    ("[0:3], [2:5]", "dynamic-update-slice"),  # partly inside: kept
])
def test_slices_of_an_update(spec, reads):
    dims = [len(range(*[int(v) for v in part.strip("[] ").split(":")])) for part in spec.split(", ")]
    text = SLICED.replace("SD", ",".join(map(str, dims))).replace("SPEC", spec)
    rng = np.random.default_rng(2)
    m, _ = _same_on_interpreter(lambda: parse_hlo(text), [rng.standard_normal(s).astype(np.float32)
                                                          for s in ((6, 8), (2, 3))])
    s = next(i for i in m.entry.instructions if i.opcode == "slice")
    got = s.operands[0]
    assert (got.opcode if got.opcode == "dynamic-update-slice" else got.name) == reads
