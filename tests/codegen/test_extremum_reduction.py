"""Max/min/argmax reductions (issue 14 item 2): XLA's NaN semantics on every backend, and the
CPU's row max kernel vectorised.

Values are checked bit for bit against the interpreter (and XLA where usable) with NaN at the
first, last and middle positions of rows and columns, -0 beside +0, infinities, rows that are
all -inf and masked rows (select with -inf, as causal attention), on the CPU and the emulated
GPU, fused and unfused (tests/support/backend_oracle.py).

The reference is the interpreter, not XLA:CPU: XLA's documented semantics propagate NaN and
order -0 below +0, and so does its scalar path, but its vectorised row reduction (seen with
jax 0.10 on rows of 130) returns a number for rows holding a NaN and +-0 in either order."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hlofuse
from backend_oracle import JAX_ARGMAX_REDUCER, check_everywhere
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.cpu_executor import CpuProgram

REDUCER = """
red {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] {op}(a, b)
}}
"""


def _reduce_module(op: str, rows: int, cols: int, dim: int, masked: bool = False) -> str:
    init = "-inf" if op == "maximum" else "inf"
    out = rows if dim == 1 else cols
    body = f"  p = f32[{rows},{cols}] parameter(0)\n  c = f32[] constant({init})\n"
    src = "p"
    if masked:  # keep x[i, j] where j <= i (causal), else -inf / +inf
        body += (f"  i0 = s32[{rows},{cols}] iota(), iota_dimension=0\n"
                 f"  i1 = s32[{rows},{cols}] iota(), iota_dimension=1\n"
                 f"  m = pred[{rows},{cols}] compare(i0, i1), direction=GE\n"
                 f"  cb = f32[{rows},{cols}] broadcast(c), dimensions={{}}\n"
                 f"  s = f32[{rows},{cols}] select(m, p, cb)\n")
        src = "s"
    body += f"  ROOT r = f32[{out}] reduce({src}, c), dimensions={{{dim}}}, to_apply=red\n"
    return "HloModule m\n" + REDUCER.format(op=op) + "\nENTRY e {\n" + body + "}\n"


def _edge_matrix(rows: int, cols: int, seed: int) -> np.ndarray:
    """Random values with NaN, +-0, +-inf and all--inf rows/columns planted at the edges of the
    vector blocks (first, last, middle, position 15/16) of some rows and columns."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    spots = sorted({0, cols - 1, cols // 2, min(15, cols - 1), min(16, cols - 1)})
    for k, j in enumerate(spots):
        x[(3 * k) % rows, j] = np.nan
    x[1 % rows, :] = -np.inf
    x[2 % rows, :] = np.float32(-0.0)
    x[2 % rows, cols // 3] = 0.0
    x[3 % rows, :] = -0.0 if cols % 2 else 0.0
    x[4 % rows, cols - 1] = np.inf
    x[5 % rows, 0] = -np.inf
    x[:, 2 % cols] = np.where(np.arange(rows) % 2 == 0, np.float32(0.0), np.float32(-0.0))
    x[:, 3 % cols] = -np.inf
    x[rows // 2, cols // 2] = np.nan
    return x


SHAPES = [(6, 7), (9, 16), (17, 33), (8, 64), (33, 130)]


@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("dim", [1, 0], ids=["row", "column"])
@pytest.mark.parametrize("rows,cols", SHAPES, ids=[f"{r}x{c}" for r, c in SHAPES])
def test_extremum_reduction_edges(op, dim, rows, cols):
    check_everywhere(_reduce_module(op, rows, cols, dim), [_edge_matrix(rows, cols, rows * cols)], with_xla=False)


@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("rows,cols", [(16, 16), (37, 37), (64, 64)])
def test_masked_row_extremum(op, rows, cols):
    """The causal-mask pattern: row 0 keeps one element, masked positions are +-inf."""
    x = _edge_matrix(rows, cols, 7 * rows)
    check_everywhere(_reduce_module(op, rows, cols, 1, masked=True), [x], with_xla=False)


ARGMAX = "HloModule m\n" + JAX_ARGMAX_REDUCER + """
ENTRY e {
  p = f32[ROWS,COLS] parameter(0)
  io = s32[ROWS,COLS] iota(), iota_dimension=1
  c = f32[] constant(-inf)
  z = s32[] constant(0)
  r = (f32[ROWS], s32[ROWS]) reduce(p, io, c, z), dimensions={1}, to_apply=cmp
  v = f32[ROWS] get-tuple-element(r), index=0
  i = s32[ROWS] get-tuple-element(r), index=1
  ROOT t = (f32[ROWS], s32[ROWS]) tuple(v, i)
}
"""


@pytest.mark.parametrize("rows,cols", SHAPES, ids=[f"{r}x{c}" for r, c in SHAPES])
def test_argmax_edges(rows, cols):
    """jax's argmax reducer: the first NaN wins, ties go to the lower index, all -inf gives 0."""
    text = ARGMAX.replace("ROWS", str(rows)).replace("COLS", str(cols))
    check_everywhere(text, [_edge_matrix(rows, cols, rows + cols)], with_xla=False)


@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked"])
def test_row_extremum_kernel_is_vectorised(op, masked):
    """The optimized IR of a row max/min kernel folds whole vectors: a vector llvm.maximum /
    llvm.minimum (or maxnum/minnum), not one scalar maximum per element. (Masked, the kernel
    needs cpu_reduction's frozen reducer inputs: without them this fails.)"""
    fused = hlofuse.compile(parse_hlo(_reduce_module(op, 64, 512, 1, masked=masked)), target="cpu").fused_module
    assert not any(i.opcode in ("select", "compare") for i in fused.entry.instructions)  # one kernel
    ir = CpuProgram.compile(fused).llvm_ir()
    name = "maximum" if op == "maximum" else "minimum"
    nan_free = "maxnum" if op == "maximum" else "minnum"
    pattern = rf"@llvm\.({name}|{nan_free})\.v(8|16)f32"
    assert re.search(pattern, ir), f"no <8|16 x float> {name} in the row kernel:\n{ir[:3000]}"
