"""Compiled window ops on the CPU: the select-and-scatter kernel
(codegen/kernels/cpu_select_scatter.py) against the interpreter, and the StableHLO
conformance files of convolution, select-and-scatter and reduce-window on the cpu backend."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.frontends.conformance import run_file
from hlofuse.hlo.parser import parse_hlo

from backend_oracle import bits_equal
from repo_paths import SHARED_STABLEHLO

SELECT = {"GE": "ge", "GT": "gt", "LE": "le", "LT": "lt"}


def _select_and_scatter(dtype: str, dims: tuple, window: str, source: tuple, direction: str, combine: str) -> str:
    shape = f"{dtype}[{','.join(map(str, dims))}]"
    src = f"{dtype}[{','.join(map(str, source))}]"
    return f"""HloModule sas
select {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT c = pred[] compare(a, b), direction={direction}
}}
scatter {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT c = {dtype}[] {combine}(a, b)
}}
ENTRY e {{
  x = {shape} parameter(0)
  s = {src} parameter(1)
  i = {dtype}[] parameter(2)
  ROOT r = {shape} select-and-scatter(x, s, i), window={{{window}}}, select=select, scatter=scatter
}}
"""


def _window_out(n: int, size: int, stride: int, lo: int, hi: int) -> int:
    padded = n + lo + hi
    return 0 if padded < size else (padded - size) // stride + 1


# (dims, window sizes, strides, paddings): max-pool gradients with overlapping windows
# (stride < size), disjoint ones (split across threads), padding and a rank-1 case.
CASES = [
    ((2, 9, 9, 3), (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0))),
    ((1, 8, 8, 4), (1, 2, 2, 1), (1, 2, 2, 1), ((0, 0),) * 4),
    ((3, 7, 5), (2, 3, 2), (1, 1, 2), ((0, 1), (1, 1), (0, 0))),
    ((17,), (4,), (3,), ((2, 1),)),
    ((4, 6), (3, 3), (3, 3), ((1, 1), (0, 0))),
]


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16", "s32", "u8"])
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("direction,combine", [("GE", "add"), ("LT", "maximum")])
def test_select_and_scatter_kernel(dtype, case, direction, combine):
    dims, sizes, strides, pads = CASES[case]
    src = tuple(_window_out(n, k, s, lo, hi) for n, k, s, (lo, hi) in zip(dims, sizes, strides, pads))
    window = (f"size={'x'.join(map(str, sizes))} stride={'x'.join(map(str, strides))} "
              f"pad={'x'.join(f'{lo}_{hi}' for lo, hi in pads)}")
    text = _select_and_scatter(dtype, dims, window, src, direction, combine)
    module = parse_hlo(text)
    rng = np.random.default_rng(case)
    args = []
    for p in module.entry.parameters:
        dt = p.shape.dtype.numpy
        # Few distinct values, so windows hold ties and the select's tie rule matters.
        args.append(rng.integers(0, 5, tuple(p.shape.dims)).astype(dt))
    (want,) = hlofuse.compile(parse_hlo(text), target="interpreter")(*args)
    exe = hlofuse.compile(parse_hlo(text), target="cpu")
    assert [k.custom for k in exe.program._planner.kernels] == ["select_and_scatter"] * 2
    (got,) = exe(*args)
    assert bits_equal(got, want).all(), (got, want)


def _files(prefix: str) -> list[str]:
    if not SHARED_STABLEHLO.is_dir():
        return []
    return sorted(p.name for p in SHARED_STABLEHLO.iterdir() if p.name.startswith(prefix))


CONFORMANCE = _files("conv_general_dilated") + _files("select_and_scatter") + _files("reduce_window")


@pytest.mark.skipif(not SHARED_STABLEHLO.is_dir(), reason="../shared/stablehlo_testdata is absent")
@pytest.mark.parametrize("name", CONFORMANCE)
def test_conformance_on_cpu(name):
    result = run_file(str(SHARED_STABLEHLO / name), backend="cpu")
    assert result.status == "passed", result.line()


@pytest.mark.skipif(not SHARED_STABLEHLO.is_dir(), reason="../shared/stablehlo_testdata is absent")
def test_conformance_files_present():
    """The folder has the convolution files this module runs (a rename would skip them silently)."""
    assert len(_files("conv_general_dilated")) >= 8 and len(_files("select_and_scatter")) >= 5
