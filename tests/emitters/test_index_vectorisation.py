"""Index arithmetic that keeps loops vectorisable (emitters/ir_helpers.py delinearize).

A loop over the rows of [n,4] boxes, reading their [n,1] column slices (the box decoding of
benchmarks/workloads.py), indexes each slice with the row number. Narrowed to i32 and widened
again, zext(trunc(row)), that index is no longer affine for LLVM, which then read every
column with a gather (box_decode 13.8 ms against XLA:CPU's 5-7 ms; 1.8 ms without)."""
from __future__ import annotations

import re

import numpy as np
from llvmlite import ir

import hlofuse
from hlofuse.emitters.ir_helpers import const_i64, delinearize
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.cpu_executor import CpuProgram
from hlofuse.runtime.interpreter import evaluate

BOXES = """HloModule m
ENTRY e {
  d = f32[ROWS,4] parameter(0)
  a = f32[ROWS,4] parameter(1)
  a0 = f32[ROWS,1] slice(a), slice={[0:ROWS], [0:1]}
  a2 = f32[ROWS,1] slice(a), slice={[0:ROWS], [2:3]}
  d0 = f32[ROWS,1] slice(d), slice={[0:ROWS], [0:1]}
  d2 = f32[ROWS,1] slice(d), slice={[0:ROWS], [2:3]}
  w = f32[ROWS,1] subtract(a2, a0)
  e = f32[ROWS,1] exponential(d2)
  ew = f32[ROWS,1] multiply(e, w)
  dw = f32[ROWS,1] multiply(d0, w)
  c = f32[ROWS,1] add(a0, dw)
  lo = f32[ROWS,1] subtract(c, ew)
  hi = f32[ROWS,1] add(c, ew)
  ROOT r = f32[ROWS,4] concatenate(lo, hi, w, e), dimensions={1}
}
"""


def _module(n: int):
    return parse_hlo(BOXES.replace("ROWS", str(n)))


def test_box_columns_are_read_without_gathers():
    fused = hlofuse.compile(_module(4096), target="cpu").fused_module
    text = CpuProgram.compile(fused).llvm_ir()
    assert "masked.gather" not in text
    assert re.search(r"load <\d+ x float>", text), text[:3000]


def test_box_columns_values():
    rng = np.random.default_rng(0)
    for n in (1, 7, 4099):
        args = [rng.standard_normal((n, 4)).astype(np.float32) for _ in range(2)]
        want = evaluate(_module(n), args)[0]
        got = np.asarray(hlofuse.compile(_module(n), target="cpu")(*args)[0])
        # exp within 2 ULP (tests/emitters/test_cpu_math.py); the rest is exact arithmetic.
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_single_dimension_is_the_linear_index_itself():
    """delinearize of an index into [1, n, 1] hands back the i64 linear value (no trunc/zext)."""
    b = ir.IRBuilder(ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), [ir.IntType(64)]), "f")
                     .append_basic_block())
    linear = b.function.args[0]
    multi = delinearize(b, linear, (1, 1000, 1))
    assert multi[1] is linear
    assert str(multi[0]) == str(const_i64(0)) and str(multi[2]) == str(const_i64(0))
