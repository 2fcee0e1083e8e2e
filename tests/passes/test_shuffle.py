"""XLA's `shuffle` (rotate or permute elements along dimensions; hlo/shuffle.py): the
interpreter against results worked out by hand for the forms of XLA's shuffle expander tests,
the compiled backends' expansion (passes/shuffle_expander.py) against the interpreter, the
text printed back as read, and malformed shuffles refused with the instruction named."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.errors import VerifierError
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.verifier import verify
from hlofuse.runtime.interpreter import evaluate


def _module(shape: str, attrs: str) -> str:
    return f"HloModule m\nENTRY e {{\n  p = {shape} parameter(0)\n  ROOT s = {shape} shuffle(p), {attrs}\n}}\n"


X4 = np.array([10, 11, 12, 13], np.float32)
X23 = np.arange(6, dtype=np.float32).reshape(2, 3)     # [[0 1 2] [3 4 5]]
X32 = np.arange(6, dtype=np.float32).reshape(3, 2)     # [[0 1] [2 3] [4 5]]
X222 = np.arange(8, dtype=np.float32).reshape(2, 2, 2)

# (shape, attributes, operand, the result worked out by hand)
CASES = {
    # element i + s moves to i: XLA's expander concatenates x[1:4] and x[0:1]
    "rotate_1d": ("f32[4]", "dimensions={0}, mode=rotate, shifts={1}", X4, [11, 12, 13, 10]),
    "rotate_negative": ("f32[4]", "dimensions={0}, mode=rotate, shifts={-1}", X4, [13, 10, 11, 12]),
    "rotate_past_the_size": ("f32[4]", "dimensions={0}, mode=rotate, shifts={6}", X4, [12, 13, 10, 11]),
    "rotate_zero": ("f32[4]", "dimensions={0}, mode=rotate, shifts={0}", X4, [10, 11, 12, 13]),
    # rows by 1, then columns by 2
    "rotate_2d": ("f32[2,3]", "dimensions={0,1}, mode=rotate, shifts={1,2}", X23, [[5, 3, 4], [2, 0, 1]]),
    # one coordinate per row, shared along the columns (indices s32[3,1])
    "permute_rows": ("f32[3,2]", "dimensions={0}, mode=permute, indices=s32[3,1]{1,0} { {2}, {0}, {1} }", X32,
                     [[4, 5], [0, 1], [2, 3]]),
    # one shuffled dimension, its coordinate dimension left out (indices s32[4])
    "permute_1d": ("f32[4]", "dimensions={0}, mode=permute, indices=s32[4]{0} {3, 1, 0, 2}", X4, [13, 11, 10, 12]),
    # both dimensions, a (row, column) pair per element
    "permute_2d": ("f32[3,2]", "dimensions={0,1}, mode=permute, "
                               "indices=s32[3,2,2]{2,1,0} { { {2,0}, {0,1} }, { {0,0}, {2,1} }, { {1,0}, {1,1} } }",
                   X32, [[4, 1], [0, 5], [2, 3]]),
    # the coordinates in the order of `dimensions` (column first here)
    "permute_2d_swapped": ("f32[3,2]", "dimensions={1,0}, mode=permute, "
                                       "indices=s32[3,2,2]{2,1,0} { { {0,2}, {1,0} }, { {0,0}, {1,2} }, { {0,1}, {1,1} } }",
                           X32, [[4, 1], [0, 5], [2, 3]]),
    # dimensions 0 and 2, shared along dimension 1; s8 indices
    "permute_shared": ("f32[2,2,2]", "dimensions={0,2}, mode=permute, "
                                     "indices=s8[2,1,2,2]{3,2,1,0} { { { {1,1}, {1,0} } }, { { {0,1}, {0,0} } } }",
                       X222, [[[5, 4], [7, 6]], [[1, 0], [3, 2]]]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_interpreter_gives_the_hand_worked_result(name):
    shape, attrs, x, want = CASES[name]
    (got,) = evaluate(parse_hlo(_module(shape, attrs)), [x])
    np.testing.assert_array_equal(got, np.array(want, np.float32))


@pytest.mark.parametrize("backend", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_backends_expand_it_to_the_same_result(name, backend):
    shape, attrs, x, want = CASES[name]
    exe = hlofuse.compile(parse_hlo(_module(shape, attrs)), target=backend, cache=False)
    assert not any(i.opcode == "shuffle" for c in exe.fused_module.computations for i in c.instructions)
    np.testing.assert_array_equal(np.asarray(exe(x)[0]), np.array(want, np.float32))


def test_a_large_rotate_and_permute_in_a_fusion():
    """Both forms on a larger array, fused with elementwise work around them."""
    text = """HloModule m
ENTRY e {
  p = f32[64,96] parameter(0)
  e = f32[64,96] exponential(p)
  r = f32[64,96] shuffle(e), dimensions={1,0}, mode=rotate, shifts={-7,100}
  ROOT n = f32[64,96] negate(r)
}
"""
    x = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32)
    want = -np.roll(np.roll(np.exp(x), 7, axis=1), -(100 % 64), axis=0)
    (ref,) = evaluate(parse_hlo(text), [x])
    np.testing.assert_allclose(ref, want, rtol=1e-6)
    got = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)(x)[0]
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_printed_text_reads_back_the_same(name):
    shape, attrs, x, _ = CASES[name]
    module = parse_hlo(_module(shape, attrs))
    again = parse_hlo(module.to_text())
    assert again.to_text() == module.to_text()
    np.testing.assert_array_equal(evaluate(again, [x])[0], evaluate(module, [x])[0])


@pytest.mark.parametrize("attrs, says", [
    ("dimensions={0}, mode=spin, shifts={1}", "mode must be one of rotate, permute"),
    ("dimensions={0,1}, mode=rotate, shifts={1}", "one shift per dimension"),
    ("dimensions={2}, mode=rotate, shifts={1}", "must be distinct dimensions"),
    ("dimensions={0}, mode=permute, indices=s32[3,1]{1,0} { {3}, {0}, {1} }", "must be in [0, 3)"),
    ("dimensions={0}, mode=permute, indices=s32[2,1]{1,0} { {1}, {0} }", "size 2, not 1 or 3"),
    ("dimensions={0}, mode=permute", "needs indices"),
])
def test_malformed_shuffles_are_refused_naming_the_instruction(attrs, says):
    with pytest.raises(VerifierError, match=re.escape(says)) as e:
        verify(parse_hlo(_module("f32[3,2]", attrs)))
    assert e.value.instruction == "s"
