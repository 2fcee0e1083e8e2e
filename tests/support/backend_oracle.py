"""Check an HLO module on every compiled backend (CPU and emulated GPU, fused and unfused)
against the numpy interpreter and, where jaxlib's XLA CPU client is usable, XLA itself; floats
are compared bit for bit (any NaN equals any NaN). Shared by the fuzz regression tests."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.parser import parse_hlo
from xla_oracle import compile_on_xla, run_on_xla, xla_available

COMPILED = [("cpu", True), ("cpu", False), ("gpu-emulated", True), ("gpu-emulated", False)]
HAS_XLA = xla_available()
needs_xla = pytest.mark.skipif(not HAS_XLA, reason="jaxlib's XLA CPU client is not usable here")


def run(text: str, args: list, backend: str, fusion: bool = True) -> list[np.ndarray]:
    """Outputs of module `text` on `args` through hlofuse's `backend`."""
    return _outputs(_compiled(text, backend, fusion), args)


def _compiled(text: str, backend: str, fusion: bool = True):
    with np.errstate(all="ignore"):
        return hlofuse.compile(parse_hlo(text), target=backend, fusion=fusion)


def _outputs(exe, args: list) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return [np.asarray(o) for o in exe(*args)]


def bits_equal(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise: same bit pattern, or both NaN (floats); same value otherwise."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    if got.dtype.kind not in "fV" or "int" in got.dtype.name:
        return got == want
    ut = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    with np.errstate(invalid="ignore"):  # signalling NaNs of ml_dtypes' types warn in isnan
        both_nan = np.isnan(got) & np.isnan(want)
    return both_nan | (got.view(ut) == want.view(ut))


def check_everywhere(text: str, args: list, with_xla: bool = True) -> None:
    """`text` on `args` gives the interpreter's outputs (and XLA's, where usable and `with_xla`)
    on every compiled backend, fused and unfused; the interpreter also agrees with XLA."""
    check_everywhere_on(text, [args], with_xla)


def check_everywhere_on(text: str, arg_sets: list[list], with_xla: bool = True) -> None:
    """`check_everywhere` on each of several inputs of one module, compiling it once per
    backend (and once for XLA): the compiles are what such a check costs, not the runs."""
    interpreter = _compiled(text, "interpreter")
    xla = compile_on_xla(text) if HAS_XLA and with_xla else None
    refs = []
    for n, args in enumerate(arg_sets):
        ref = {"interpreter": _outputs(interpreter, args)}
        if xla is not None:
            ref["xla"] = xla(args)
            for k, (i, x) in enumerate(zip(ref["interpreter"], ref["xla"])):
                ok = bits_equal(i, x)
                assert ok.all(), f"inputs {n}: interpreter vs XLA, out{k}: {_mismatches(args, i, x, ok)}"
        refs.append(ref)
    for backend, fusion in COMPILED:
        exe = _compiled(text, backend, fusion)
        for n, (args, ref) in enumerate(zip(arg_sets, refs)):
            got = _outputs(exe, args)
            for name, want in ref.items():
                assert len(got) == len(want), (n, backend, name, len(got), len(want))
                for k, (g, w) in enumerate(zip(got, want)):
                    ok = bits_equal(g, w)
                    assert ok.all(), (f"inputs {n}: {backend} fusion={fusion} vs {name}, out{k}: "
                                      f"{_mismatches(args, g, w, ok)}")


def _mismatches(args: list, got: np.ndarray, want: np.ndarray, ok: np.ndarray) -> str:
    """The first few mismatching elements, with the same-shaped inputs at their positions."""
    idx = np.flatnonzero(~np.asarray(ok))
    shown = idx[:5]
    ins = [[np.asarray(a).reshape(-1)[i].item() for a in args if np.asarray(a).size == ok.size] for i in shown]
    return f"{idx.size} differ; inputs {ins}, got {got.reshape(-1)[shown]}, want {want.reshape(-1)[shown]}"


# jax's argmax reducer on (f32 value, s32 index) as computation `cmp` (accumulator a, ai;
# element b, bi): the greater value or the first NaN, ties to the lower index.
JAX_ARGMAX_REDUCER = """cmp {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  nan = pred[] compare(a, a), direction=NE
  take = pred[] or(gt, nan)
  v = f32[] select(take, a, b)
  eq = pred[] compare(a, b), direction=EQ
  lt = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, lt)
  takei = pred[] or(take, tie)
  i = s32[] select(takei, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
"""
