"""A cheap producer ending a convolution's epilogue chain is not copied into another of its
users on the CPU (conv_fusion.duplicate_keeps_conv_epilogue, rule `conv-epilogue-duplicate`).

The pattern is keras MobileNetV2's projection block: `m = scale(conv(x))` read by the next
convolution and by a residual add that is a second convolution's epilogue. Instruction fusion
visits the residual add first; copying `m` into it gave `conv` two users, so `conv` lost its
epilogue (`conv-output-users`) and ran as its own kernel beside a loop kernel recomputing `m`.
Expected: `conv` and `m` in one kOutput fusion, the add reading `m` from memory, one kernel
fewer; the results equal the interpreter's (the oracle) bit for bit (small contractions, which
it sums term by term in the kernel's order)."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo

from backend_oracle import bits_equal

# conv -> m -> {c2 (reads m from memory), r = add(c3, m) (c3's epilogue)}
PROJECTION = """HloModule m
ENTRY e {
  x = f32[1,6,6,4] parameter(0)
  w = f32[1,1,4,8] parameter(1)
  s = f32[8] parameter(2)
  w2 = f32[1,1,8,8] parameter(3)
  y = f32[1,6,6,4] parameter(4)
  w3 = f32[3,3,4,8] parameter(5)
  conv = f32[1,6,6,8] convolution(x, w), window={size=1x1}, dim_labels=b01f_01io->b01f
  sb = f32[1,6,6,8] broadcast(s), dimensions={3}
  m = f32[1,6,6,8] multiply(conv, sb)
  c2 = f32[1,6,6,8] convolution(m, w2), window={size=1x1}, dim_labels=b01f_01io->b01f
  c3 = f32[1,6,6,8] convolution(y, w3), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  r = f32[1,6,6,8] add(c3, m)
  ROOT t = (f32[1,6,6,8], f32[1,6,6,8]) tuple(r, c2)
}
"""

# the brief's minimal form, with a two-link chain: conv -> m -> a -> {add, convolution}
CHAIN = """HloModule m
ENTRY e {
  x = f32[2,5,5,3] parameter(0)
  w = f32[1,1,3,6] parameter(1)
  s = f32[6] parameter(2)
  b = f32[6] parameter(3)
  z = f32[2,5,5,6] parameter(4)
  w2 = f32[1,1,6,2] parameter(5)
  conv = f32[2,5,5,6] convolution(x, w), window={size=1x1}, dim_labels=b01f_01io->b01f
  sb = f32[2,5,5,6] broadcast(s), dimensions={3}
  m = f32[2,5,5,6] multiply(conv, sb)
  bb = f32[2,5,5,6] broadcast(b), dimensions={3}
  a = f32[2,5,5,6] add(m, bb)
  u = f32[2,5,5,6] add(a, z)
  c2 = f32[2,5,5,2] convolution(a, w2), window={size=1x1}, dim_labels=b01f_01io->b01f
  ROOT t = (f32[2,5,5,6], f32[2,5,5,2]) tuple(u, c2)
}
"""

# an expensive link (exp) is judged by the expensive-duplication rules, not walked through
EXPENSIVE_LINK = """HloModule m
ENTRY e {
  x = f32[1,4,4,2] parameter(0)
  w = f32[1,1,2,4] parameter(1)
  z = f32[1,4,4,4] parameter(2)
  w2 = f32[1,1,4,4] parameter(3)
  conv = f32[1,4,4,4] convolution(x, w), window={size=1x1}, dim_labels=b01f_01io->b01f
  e = f32[1,4,4,4] exponential(conv)
  n = f32[1,4,4,4] negate(e)
  u = f32[1,4,4,4] add(n, z)
  c2 = f32[1,4,4,4] convolution(n, w2), window={size=1x1}, dim_labels=b01f_01io->b01f
  ROOT t = (f32[1,4,4,4], f32[1,4,4,4]) tuple(u, c2)
}
"""


# every user of m can fuse it: the copies write conv's result instead of m's, as many bytes
# (XLA's choice, kept); a copy is refused only where a user reads m from memory anyway
ALL_USERS_FUSE = """HloModule m
ENTRY e {
  x = f32[1,4,4,2] parameter(0)
  w = f32[1,1,2,4] parameter(1)
  s = f32[4] parameter(2)
  z = f32[1,4,4,4] parameter(3)
  conv = f32[1,4,4,4] convolution(x, w), window={size=1x1}, dim_labels=b01f_01io->b01f
  sb = f32[1,4,4,4] broadcast(s), dimensions={3}
  m = f32[1,4,4,4] multiply(conv, sb)
  u = f32[1,4,4,4] add(m, z)
  v = f32[1,4,4,4] subtract(m, z)
  ROOT t = (f32[1,4,4,4], f32[1,4,4,4]) tuple(u, v)
}
"""


def _args(text: str) -> list[np.ndarray]:
    module = parse_hlo(text)
    rng = np.random.default_rng(0)
    return [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]


def _compile(text: str):
    return hlofuse.compile(parse_hlo(text), target="cpu")


def _holds(fusion, name: str) -> bool:
    """Whether `fusion` computes instruction `name` of the input (fusing clones it as name.N)."""
    return any(i.name == name or i.name.startswith(name + ".") for i in fusion.fused_computation.instructions)


def _fusion_of(exe, name: str):
    """The entry instruction that computes original instruction `name` (itself or its fusion)."""
    for inst in exe.fused_module.entry.instructions:
        if inst.name == name or inst.opcode == "fusion" and _holds(inst, name):
            return inst
    raise AssertionError(f"{name} not found")


def _refusals(exe) -> set[tuple[str, str, str]]:
    return {(r["producer"], r["consumer"], r["rule"]) for r in exe.report()["refused"]}


def _check_against_interpreter(text: str, exe, rtol: float = 0.0) -> None:
    """Bit for bit, or within `rtol` (absolute too: u = z - exp(..) cancels) where the kernel's math
    library differs from numpy's (exp)."""
    args = _args(text)
    got = exe(*args)
    want = hlofuse.compile(parse_hlo(text), target="interpreter")(*args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if rtol:
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=rtol)
        else:
            assert bits_equal(np.asarray(g), np.asarray(w)).all()


def test_projection_keeps_its_epilogue():
    exe = _compile(PROJECTION)
    conv = _fusion_of(exe, "conv")
    assert conv.opcode == "fusion" and conv.attrs["kind"] == "kOutput"
    assert _holds(conv, "conv") and _holds(conv, "m")  # the scale is the epilogue, written once
    # the residual add (c3's epilogue) reads m from memory instead of a copy of it
    r = _fusion_of(exe, "r")
    assert r.attrs["kind"] == "kOutput" and _holds(r, "c3")
    assert not _holds(r, "m")
    rules = _refusals(exe)
    assert ("m", "r", "conv-epilogue-duplicate") in rules
    assert not any(rule == "conv-output-users" for _, _, rule in rules)
    # three kernels: conv+m, c2, c3+r (was four: conv, m, c2, c3+r+copy of m)
    assert len(exe.program._planner.kernels) == 3
    _check_against_interpreter(PROJECTION, exe)


def test_chain_of_two_keeps_its_epilogue():
    exe = _compile(CHAIN)
    conv = _fusion_of(exe, "conv")
    assert conv.attrs["kind"] == "kOutput"
    assert all(_holds(conv, n) for n in ("conv", "m", "a"))
    rules = _refusals(exe)
    assert ("a", "u", "conv-epilogue-duplicate") in rules
    reason = next(r["reason"] for r in exe.report()["refused"] if r["rule"] == "conv-epilogue-duplicate")
    assert "conv -> m -> a" in reason
    _check_against_interpreter(CHAIN, exe)


def test_expensive_link_is_judged_by_its_own_rules():
    """The walk stops at exp, whose copies the expensive-duplication rules judge (they refuse
    it here): n's copy into u is made, e stays conv's epilogue."""
    exe = _compile(EXPENSIVE_LINK)
    conv = _fusion_of(exe, "conv")
    assert conv.attrs["kind"] == "kOutput" and _holds(conv, "e")
    assert not any(rule == "conv-epilogue-duplicate" for _, _, rule in _refusals(exe))
    assert ("e", "n", "expensive-duplicate") in _refusals(exe)
    _check_against_interpreter(EXPENSIVE_LINK, exe, rtol=1e-6)


def test_copies_stay_where_every_user_fuses_the_chain():
    exe = _compile(ALL_USERS_FUSE)
    rules = _refusals(exe)
    assert not any(rule == "conv-epilogue-duplicate" for _, _, rule in rules)
    assert any(p == "conv" and rule == "conv-output-users" for p, _, rule in rules)
    assert any(i.opcode == "convolution" for i in exe.fused_module.entry.instructions)
    _check_against_interpreter(ALL_USERS_FUSE, exe)


@pytest.mark.parametrize("text", [PROJECTION, CHAIN])
def test_gpu_rules_have_no_conv_epilogue(text):
    """The GPU fuses no convolution epilogue, so nothing is refused for one."""
    from hlofuse.passes.fusion import fusion_passes, module_log
    module = parse_hlo(text)
    for p in fusion_passes("gpu"):
        p.run(module)
    assert not any(e.rule == "conv-epilogue-duplicate" for e in module_log(module).entries)
