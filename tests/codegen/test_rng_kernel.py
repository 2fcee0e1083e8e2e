"""Compiled rng-bit-generator and get-dimension-size kernels (codegen/kernels/cpu_rng.py): bit for
bit the interpreter's bits and new state, for ThreeFry, Philox and the default algorithm, over
element types (8 to 64 bits, ints and floats), shapes (scalars, odd split dimensions, empty,
several work units), 2- and 3-word states and counters that wrap; no step calls back into Python."""
from __future__ import annotations

import numpy as np
import pytest
from backend_oracle import bits_equal

import hlofuse
from hlofuse.hlo.parser import parse_hlo


def _module(algorithm: str, t: str, dims: tuple, words: int) -> str:
    shape = ",".join(str(d) for d in dims)
    return f"""HloModule rng
ENTRY e {{
  s = u64[{words}] parameter(0)
  ROOT r = (u64[{words}], {t}[{shape}]) rng-bit-generator(s), algorithm={algorithm}
}}
"""


def _check(text: str, args: list) -> None:
    want = hlofuse.compile(parse_hlo(text), target="interpreter")(*args)
    exe = hlofuse.compile(parse_hlo(text), target="cpu")
    assert not [s for s in exe.program.code.native.steps if s.kind == "callback"]
    got = exe(*args)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert bits_equal(np.asarray(g), np.asarray(w)).all(), (k, g, w)


STATES = {
    "plain": [0x1234_5678_9ABC_DEF0, 42, 7],
    "wrapping": [0xDEAD_BEEF, 2**64 - 3, 2**64 - 1],  # the low counter word carries into the high one
}


@pytest.mark.parametrize("state", sorted(STATES))
@pytest.mark.parametrize("algorithm,words", [("rng_three_fry", 2), ("rng_philox", 2), ("rng_philox", 3),
                                             ("rng_default", 2), ("rng_default", 3)])  # ThreeFry: u64[2] only
@pytest.mark.parametrize("t,dims", [
    ("u32", (7,)), ("u32", ()), ("s32", (5, 3)), ("f32", (3, 4)), ("u64", (9,)), ("f64", (2, 3)),
    ("u8", (3, 5, 7)), ("s16", (6, 5)), ("bf16", (11,)), ("f16", (4, 3)), ("u32", (0, 4)),
    ("u32", (3, 1401)), ("s64", (2049,)),
])
def test_rng_bit_generator_matches_the_interpreter(algorithm, t, dims, words, state):
    s = np.array(STATES[state][:words], dtype=np.uint64)
    _check(_module(algorithm, t, dims, words), [s])


def test_rng_in_a_while_loop_advances_its_state_natively():
    text = """HloModule rng_loop
cond {
  p = (s32[], u64[2], u32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], u64[2], u32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  s = u64[2] get-tuple-element(p), index=1
  acc = u32[64] get-tuple-element(p), index=2
  r = (u64[2], u32[64]) rng-bit-generator(s), algorithm=rng_three_fry
  ns = u64[2] get-tuple-element(r), index=0
  bits = u32[64] get-tuple-element(r), index=1
  x = u32[64] xor(acc, bits)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], u64[2], u32[64]) tuple(j, ns, x)
}
ENTRY e {
  s = u64[2] parameter(0)
  z = s32[] constant(0)
  c = u32[] constant(0)
  acc = u32[64] broadcast(c), dimensions={}
  init = (s32[], u64[2], u32[64]) tuple(z, s, acc)
  w = (s32[], u64[2], u32[64]) while(init), condition=cond, body=body
  ns = u64[2] get-tuple-element(w), index=1
  x = u32[64] get-tuple-element(w), index=2
  ROOT o = (u64[2], u32[64]) tuple(ns, x)
}
"""
    _check(text, [np.array([99, 1000], dtype=np.uint64)])


def test_get_dimension_size_is_a_kernel():
    text = """HloModule gds
ENTRY e {
  x = f32[3,17] parameter(0)
  d = s32[] get-dimension-size(x), dimensions={1}
  two = s32[] constant(2)
  ROOT m = s32[] multiply(d, two)
}
"""
    _check(text, [np.zeros((3, 17), np.float32)])
    exe = hlofuse.compile(parse_hlo(text), target="cpu")
    assert "dimension_size" in [k.custom for k in exe.program.code.kernels]
