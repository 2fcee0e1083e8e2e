"""Loops over outputs (rows) around a short row are kept from LLVM's loop vectorizer
(kernels/loop_hints.py): otherwise it fully unrolls the short row and vectorises across outputs,
gathering each vector through interleaved strided loads (row sums of 16 f32: 15x slower). The
hint is set where a row (or a column block) fills a vector register and left off narrower ones,
where packing several outputs into a vector is the better use of it. Results are checked against
numpy and the interpreter."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hlofuse
from backend_cases import reduce_module, reducer
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_outputs
from hlofuse.runtime.cpu_executor import CpuProgram
from test_row_kernels import _input, module

NO_VECTORIZE = re.compile(r'!\{\s*!"llvm\.loop\.vectorize\.enable", i1 false\s*\}')


def _widest_vector(ir_text: str) -> int:
    """The most lanes of any vector type in `ir_text` (an interleaved group of strided loads
    shows as a vector of lanes x stride elements)."""
    return max((int(n) for n in re.findall(r"<(\d+) x (?:float|i32)>", ir_text)), default=1)


@pytest.mark.parametrize("n", [16, 32, 64])
def test_short_row_sums_are_not_vectorised_across_rows(n):
    rows = 8192
    prog = CpuProgram.compile(parse_hlo(reduce_module((rows, n), (1,))))
    ir_text = prog.llvm_ir()
    assert NO_VECTORIZE.search(ir_text)
    assert _widest_vector(ir_text) <= 64
    x = np.random.default_rng(n).standard_normal((rows, n)).astype(np.float32)
    (got,) = prog.run([x])
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_narrow_rows_may_be_vectorised_across_rows():
    prog = CpuProgram.compile(parse_hlo(reduce_module((8192, 3), (1,))))
    assert not NO_VECTORIZE.search(prog.llvm_ir())
    x = np.random.default_rng(3).standard_normal((8192, 3)).astype(np.float32)
    (got,) = prog.run([x])
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("columns", [16, 32])
def test_integer_column_blocks_are_not_vectorised_along_the_reduction(columns):
    """Integer adds need no reassociation flag for LLVM to vectorise along the reduced
    dimension, so the float rule (no reassoc) does not cover them: the hint does."""
    rows = 8192
    text = reduce_module((rows, columns), (0,), ty="s32", computations=reducer("add", "s32", "add"))
    prog = CpuProgram.compile(parse_hlo(text))
    ir_text = prog.llvm_ir()
    assert NO_VECTORIZE.search(ir_text) and _widest_vector(ir_text) <= 64
    x = np.random.default_rng(columns).integers(-1000, 1000, (rows, columns), dtype=np.int32)
    (got,) = prog.run([x])
    np.testing.assert_array_equal(got, x.sum(axis=0, dtype=np.int64).astype(np.int32))


@pytest.mark.parametrize("pattern", ["layer_norm", "softmax"])
@pytest.mark.parametrize("n", [16, 32])
def test_short_row_kernels_are_not_vectorised_across_rows(pattern, n):
    dims = (2048, n)
    text = module(pattern, dims)
    exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    assert [k.custom for k in exe.program._planner.kernels] == ["row"]
    assert NO_VECTORIZE.search(exe.program.llvm_ir())
    x = _input(dims, "f32", seed=n)
    want = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(x)
    for r in compare_outputs(list(exe(x)), list(want)):
        assert r.ok, r
