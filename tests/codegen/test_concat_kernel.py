"""Concatenate outputs of CPU loop kernels written operand by operand
(codegen/kernels/cpu_concat.py): along the last dimension part by part in each row, along an
outer dimension one operand per unit; other shapes keep the select. Every case against the
interpreter bit for bit (a concatenate only moves data), and the structural claim on the
optimized IR: scan_rnn's concat of x and h reads both without gathers."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo

FUSED = """HloModule m
ENTRY e {
  a = T[A] parameter(0)
  b = T[B] parameter(1)
  ea = T[A] OP(a)
  ROOT c = T[C] concatenate(ea, b), dimensions={D}
}
"""


def _module(dtype: str, a, b, dim: int, op: str = "negate"):
    c = list(a)
    c[dim] += b[dim]
    text = (FUSED.replace("T[A]", f"{dtype}[{','.join(map(str, a))}]")
            .replace("T[B]", f"{dtype}[{','.join(map(str, b))}]")
            .replace("T[C]", f"{dtype}[{','.join(map(str, c))}]")
            .replace("OP", op).replace("{D}", "{" + str(dim) + "}"))
    return parse_hlo(text)


def _inputs(dtype: str, *shapes):
    rng = np.random.default_rng(sum(map(sum, shapes)))
    if dtype == "pred":
        return [rng.random(s) < 0.5 for s in shapes]
    np_type = {"f32": np.float32, "f64": np.float64, "s8": np.int8, "s32": np.int32}[dtype]
    return [(rng.standard_normal(s) * 50).astype(np_type) for s in shapes]


def _same_as_interpreter(module_fn, args):
    got = hlofuse.compile(module_fn(), target="cpu")(*args)[0]
    want = hlofuse.compile(module_fn(), target="interpreter")(*args)[0]
    np.testing.assert_array_equal(got, want)
    return got


@pytest.mark.parametrize("a,b,dim", [
    ((128, 64), (128, 64), 1),        # scan_rnn's concat of x and h: rows, part by part
    ((7, 40), (7, 33), 1),            # rows of unequal parts
    ((100, 2), (100, 1), 1),          # short rows (unrolled), part by part
    ((30, 40), (50, 40), 0),          # one operand per row
    ((3, 5, 40), (3, 2, 40), 1),      # one operand per row, a middle dimension
    ((70, 9, 3), (10, 9, 3), 0),      # plane mode, one operand per plane
    ((70, 5, 3), (70, 4, 3), 1),      # plane mode, concatenated inside the plane: select
    ((10, 7), (10, 8), 1),            # flat mode: select
    ((2048, 64), (2048, 64), 1),      # large enough for several threads
])
@pytest.mark.parametrize("dtype", ["f32", "s8"])
def test_concatenate_matches_interpreter(a, b, dim, dtype):
    args = _inputs(dtype, a, b)
    _same_as_interpreter(lambda: _module(dtype, a, b, dim), args)


@pytest.mark.parametrize("dtype,op", [("pred", "not"), ("f64", "sqrt"), ("s32", "abs")])
def test_concatenate_element_types(dtype, op):
    args = _inputs(dtype, (40, 33), (40, 40))
    _same_as_interpreter(lambda: _module(dtype, (40, 33), (40, 40), 1, op), args)


def test_three_operands_with_an_empty_one():
    text = """HloModule m
ENTRY e {
  a = f32[20,3,40] parameter(0)
  b = f32[20,0,40] parameter(1)
  c = f32[20,5,40] parameter(2)
  ROOT r = f32[20,8,40] concatenate(a, b, c), dimensions={1}
}
"""
    args = _inputs("f32", (20, 3, 40), (20, 0, 40), (20, 5, 40))
    got = _same_as_interpreter(lambda: parse_hlo(text), args)
    np.testing.assert_array_equal(got, np.concatenate(args, axis=1))


@pytest.mark.usefixtures("kernels_at_o3")
def test_scan_concat_reads_without_gathers():
    exe = hlofuse.compile(_module("f32", (128, 64), (128, 64), 1), target="cpu")
    ir_text = exe.program.llvm_ir()
    assert "llvm.masked.gather" not in ir_text
    assert "<16 x float>" in ir_text or "<8 x float>" in ir_text
