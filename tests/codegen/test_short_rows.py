"""Row sums whose rows are one vector (kernels/short_rows.py): LANES rows at a time, reduced
together by a transposed tree. Each row's lanes are paired as in one row's horizontal sum (i
with i + LANES/2, then + LANES/4 ...), the init joining lane 0 first: the results equal a
numpy model of that order bit for bit, for every row (a last, partial step included), and the
row loop's (TRANSPOSES_SHORT_ROWS False) within the reduction tolerance."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.cpu import emit_kernel_module
from hlofuse.codegen.kernels import short_rows
from hlofuse.codegen.kernels.reduction_groups import lanes_of, vector_registers
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.runtime.compare import compare_outputs

LANES32 = lanes_of(vector_registers()[1] * 8, 32)  # f32 lanes of the host's vectors (16 with AVX-512)


def _module(dims: tuple[int, ...], dtype: str = "f32", init: str = "0", squares: bool = False,
            epilogue: bool = False, reducer: str = "add") -> str:
    shape = ",".join(map(str, dims))
    out = ",".join(map(str, dims[:-1]))
    last = len(dims) - 1
    lines = [f"  a = {dtype}[{shape}] abs(x)",
             f"  s0 = {dtype}[{out}] reduce(a, init), dimensions={{{last}}}, to_apply={reducer}"]
    outs, types = ["s0"], [f"{dtype}[{out}]"]
    if squares:
        lines += [f"  xx = {dtype}[{shape}] multiply(x, x)",
                  f"  s1 = {dtype}[{out}] reduce(xx, init), dimensions={{{last}}}, to_apply={reducer}"]
        outs.append("s1")
        types.append(f"{dtype}[{out}]")
    if epilogue:  # a mean: the sum times 1/n
        lines += [f"  k = {dtype}[] constant(0.0625)", f"  kb = {dtype}[{out}] broadcast(k), dimensions={{}}",
                  f"  m = {dtype}[{out}] multiply(s0, kb)"]
        outs.append("m")
        types.append(f"{dtype}[{out}]")
    body = "\n".join(lines)
    return f"""HloModule short_rows
add {{
  p = {dtype}[] parameter(0)
  q = {dtype}[] parameter(1)
  ROOT s = {dtype}[] add(p, q)
}}
max {{
  p = {dtype}[] parameter(0)
  q = {dtype}[] parameter(1)
  ROOT s = {dtype}[] maximum(p, q)
}}
ENTRY main {{
  x = {dtype}[{shape}] parameter(0)
  init = {dtype}[] constant({init})
{body}
  ROOT t = ({", ".join(types)}) tuple({", ".join(outs)})
}}
"""


def _compile(text: str):
    return hlofuse.compile(hlofuse.parse_hlo(text), "cpu", cache=False)


def _transposed(exe) -> bool:
    return any("tree.header" in str(emit_kernel_module(k, CpuTarget(), k.name))
               for k in exe.program._planner.kernels if k.group is not None)


def _tree_model(x: np.ndarray, init: float) -> np.ndarray:
    """Row sums of `x` in the tree's order: init + lane 0 first, then lane i + lane i + w for
    w = LANES/2, LANES/4, ... 1."""
    v = x.copy()
    v[..., 0] = (v.dtype.type(init) + v[..., 0]).astype(v.dtype)
    w = v.shape[-1] // 2
    while w >= 1:
        v = (v[..., :w] + v[..., w:2 * w]).astype(x.dtype)
        w //= 2
    return v[..., 0]


@pytest.mark.parametrize("dims,init", [((1000, LANES32), "0"), ((37, LANES32), "1.5"), ((3, 41, LANES32), "-2"),
                                       ((LANES32 + 3, LANES32), "0")])
def test_bits_equal_the_tree_model(dims, init, monkeypatch):
    x = np.random.default_rng(sum(dims)).standard_normal(dims).astype(np.float32)
    x[0, ..., 1] = -0.0  # signed zeros and a large value keep the order visible
    x.reshape(-1)[7] = 3e7
    text = _module(dims, init=init, squares=True, epilogue=True)
    tree = _compile(text)
    assert _transposed(tree)
    got = [np.asarray(o) for o in tree(x)]
    np.testing.assert_array_equal(got[0], _tree_model(np.abs(x), float(init)))
    np.testing.assert_array_equal(got[1], _tree_model((x * x).astype(np.float32), float(init)))
    np.testing.assert_array_equal(got[2], (got[0] * np.float32(0.0625)).astype(np.float32))
    monkeypatch.setattr(short_rows, "TRANSPOSES_SHORT_ROWS", False)
    rows = _compile(text)
    assert not _transposed(rows)
    for r in compare_outputs(got, [np.asarray(w) for w in rows(x)]):
        assert r.ok, r


def test_f64_rows_of_its_lanes():
    lanes = LANES32 // 2
    x = np.random.default_rng(2).standard_normal((300, lanes))
    exe = _compile(_module((300, lanes), dtype="f64"))
    assert _transposed(exe)
    np.testing.assert_array_equal(np.asarray(exe(x)[0]), _tree_model(np.abs(x), 0.0))


@pytest.mark.parametrize("text", [
    _module((100, LANES32), reducer="max"),  # not an add
    _module((100, 2 * LANES32)),  # rows of two vectors: the row loop
    _module((100, LANES32 // 2)),  # half a vector: LLVM's loop across outputs
    _module((LANES32 - 1, LANES32)),  # fewer rows than a step
    _module((100, LANES32), dtype="bf16"),  # rounds every step: in order
])
def test_the_row_loop_where_the_rule_does_not_apply(text):
    assert not _transposed(_compile(text))


def test_chunks_over_threads_fold_every_row_by_the_tree(monkeypatch):
    """Split over the threads in chunks whose bounds are not multiples of LANES (every kernel
    given threads: region_cost.REGION_NS 1 ns), each chunk's last step folds the LANES rows
    that end there and writes only its own: every row still equals the tree model."""
    from hlofuse.codegen import region_cost

    monkeypatch.setattr(region_cost, "REGION_NS", 1)
    n = 100003
    exe = _compile(_module((n, LANES32)))
    assert _transposed(exe)
    assert max(region_cost.region_threads(k) for k in exe.program._planner.kernels) > 1
    x = np.random.default_rng(5).standard_normal((n, LANES32)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(exe(x)[0]), _tree_model(np.abs(x), 0.0))
