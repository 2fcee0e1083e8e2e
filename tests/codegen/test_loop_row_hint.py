"""Rows-mode loop kernels keep LLVM's vectorizer off their loop over rows (cpu_loop.emit_loop):
a row of 32 elements LLVM unrolled fully and then vectorized the loop over rows instead,
gathering and scattering every vector across rows (x / 4 over f32[256,14,14,32], the flax MNIST
CNN's pooling divide, 25x slower). Rows of up to 4 elements are unrolled on purpose and
vectorized across rows (cpu_loop's module docstring): no hint there. Results checked against
the interpreter."""
from __future__ import annotations

import re

import numpy as np
import pytest

from hlofuse.codegen import generic_kernels
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.cpu_executor import CpuProgram
from hlofuse.runtime.interpreter import evaluate

NO_VECTORIZE = re.compile(r'"llvm\.loop\.vectorize\.enable", i1 (0|false)')


def _divide(dims: tuple[int, ...]) -> str:
    shape = f"f32[{','.join(map(str, dims))}]"
    return (f"HloModule d\nENTRY e {{\n  x = {shape} parameter(0)\n  c = f32[] constant(4)\n"
            f"  b = {shape} broadcast(c), dimensions={{}}\n  ROOT d = {shape} divide(x, b)\n}}\n")


def _run(dims: tuple[int, ...]) -> str:
    text = _divide(dims)
    prog = CpuProgram.compile(parse_hlo(text))
    x = np.random.default_rng(len(dims)).standard_normal(dims).astype(np.float32)
    (got,) = prog.run([x])
    want = evaluate(parse_hlo(text), [x])
    want = np.asarray(want[0] if isinstance(want, (list, tuple)) else want)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    return prog.llvm_ir()


@pytest.mark.parametrize("row", [32, 48, 64])
def test_rows_of_a_few_vectors_are_not_gathered(row):
    ir_text = _run((64, 14, row))
    assert NO_VECTORIZE.search(ir_text)
    assert "masked.gather" not in ir_text and "masked.scatter" not in ir_text
    assert "x float>" in ir_text


@pytest.mark.parametrize("row", [3, 4])
def test_rows_of_up_to_four_may_vectorize_across_rows(row, monkeypatch):
    # at the kernel's own rows (its shape-generic form walks rows of 512: codegen/generic_kernels.py)
    monkeypatch.setattr(generic_kernels, "GENERIC_KERNELS", False)
    assert not NO_VECTORIZE.search(_run((512, row)))
