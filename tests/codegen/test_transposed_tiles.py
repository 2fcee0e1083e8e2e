"""Loop kernels that read a large operand transposed walk tiles (codegen/kernels/transposed_tiles.py):
which kernels do, the values of every tiled kernel against the interpreter (whole and partial
blocks, ranks 2 and 5, f64 and bf16, a fused elementwise chain), and that the plan's units are
the tiles'."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.kernels import transposed_tiles
from hlofuse.codegen.kernels.cpu_loop import kernel_loop_shape
from hlofuse.codegen.kernels.args import output_leaves
from hlofuse.hlo.parser import parse_hlo


def _module(body: str) -> str:
    return "HloModule m\nENTRY e {\n" + body + "\n}\n"


TRANSPOSE_2D = _module("""  p = f32[ROWS,COLS] parameter(0)
  ROOT t = f32[COLS,ROWS] transpose(p), dimensions={1,0}""")

# keras_hub Gemma's attention scores: heads innermost in the dot's output, read head-major.
SCORES = _module("""  p = f32[4,1,256,256,4] parameter(0)
  t = f32[4,1,4,256,256] transpose(p), dimensions={0,1,4,3,2}
  ROOT e = f32[4,1,4,256,256] exponential(t)""")

# A transposed operand beside a plain one, through a chain of elementwise ops.
CHAIN = _module("""  p = f32[512,768] parameter(0)
  q = f32[768,512] parameter(1)
  t = f32[768,512] transpose(p), dimensions={1,0}
  m = f32[768,512] multiply(t, q)
  ROOT s = f32[768,512] tanh(m)""")


def _sized(text: str, rows: int, cols: int) -> str:
    return text.replace("ROWS", str(rows)).replace("COLS", str(cols))


def _walk(text: str):
    comp = parse_hlo(text).entry
    return kernel_loop_shape(comp, output_leaves(comp)).tiles


def test_a_large_transpose_walks_tiles_across_its_operands_rows():
    walk = _walk(_sized(TRANSPOSE_2D, 1024, 1024))
    assert walk is not None and (walk.across, walk.columns) == (0, 16)
    assert _walk(SCORES).across == 2  # the heads: contiguous in the operand
    assert _walk(CHAIN).across == 0


@pytest.mark.parametrize("text", [
    _sized(TRANSPOSE_2D, 256, 256),  # 256 KiB: stays in L2, no tiles
    _module("""  p = f32[1024,1024] parameter(0)
  ROOT n = f32[1024,1024] negate(p)"""),  # read in order
    _module("""  p = f32[1024] parameter(0)
  ROOT b = f32[1024,1024] broadcast(p), dimensions={0}"""),  # a broadcast: no operand line crossed
], ids=["small", "in-order", "broadcast"])
def test_no_tiles_where_no_large_operand_is_read_across_lines(text):
    assert _walk(text) is None


@pytest.mark.parametrize("text,dtype", [
    (_sized(TRANSPOSE_2D, 1024, 1024), np.float32),
    (_sized(TRANSPOSE_2D, 1024, 1000), np.float32),  # 1000 rows across: the last block of 128 is 104
    (_sized(TRANSPOSE_2D, 600, 640).replace("f32", "f64"), np.float64),  # 8 columns a tile
    (_sized(TRANSPOSE_2D, 1024, 1024).replace("f32", "bf16"), "bf16"),  # 32 columns a tile
    (SCORES, np.float32),
    (CHAIN, np.float32),
], ids=["square", "partial-block", "f64", "bf16", "scores", "chain"])
def test_tiled_kernels_match_the_interpreter(text, dtype, monkeypatch):
    module = parse_hlo(text)
    assert _walk(text) is not None
    rng = np.random.default_rng(3)
    if dtype == "bf16":
        import ml_dtypes
        dtype = ml_dtypes.bfloat16
    args = [rng.standard_normal(p.shape.dims).astype(dtype) for p in module.entry.parameters]
    got = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)(*args)
    want = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(*args)
    monkeypatch.setattr(transposed_tiles, "TILED", False)
    untiled = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)(*args)
    for g, w, u in zip(got, want, untiled):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(u))  # another order, the same bits
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=2e-6, atol=1e-6)


def test_the_plan_has_one_unit_per_tile_and_no_scatter():
    text = _sized(TRANSPOSE_2D, 1024, 1000)
    exe = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    (kernel,) = [k for k in exe.program._planner.kernels if k.units]
    walk = _walk(text)
    assert (kernel.units, kernel.unit_elements) == (walk.units, walk.unit_elements)
    assert walk.units == (1024 // 16) * 8  # 64 column blocks x 8 row blocks (7 of 128, one of 104)
    assert "llvm.masked.scatter" not in exe.program.llvm_ir()
