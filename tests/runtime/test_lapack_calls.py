"""JAX's LAPACK custom calls on the CPU (hlo/lapack_calls.py): ?potrf and ?trsm, as JAX writes
them, computed by the interpreter as LAPACK defines them (checked against numpy's own
factorization and solves) and by the compiled backends through XLA's ops
(passes/lapack_call_expander.py), checked against the interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.lapack_calls import lapack_call
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.interpreter import evaluate

POTRF = """HloModule potrf
ENTRY e {{
  a = f32[{b}8,8]{{{layout}}} parameter(0)
  ROOT c = (f32[{b}8,8]{{{layout}}}, s32[{bi}]) custom-call(a), custom_call_target="lapack_spotrf_ffi", operand_layout_constraints={{f32[{b}8,8]{{{layout}}}}}, output_to_operand_aliasing={{{{0}}: (0, {{}})}}, api_version=API_VERSION_TYPED_FFI, backend_config={{uplo = {uplo} : ui8}}
}}
"""

TRSM = """HloModule trsm
ENTRY e {{
  a = f32[8,8]{{0,1}} parameter(0)
  b = f32[{bshape}]{{0,1}} parameter(1)
  ROOT x = f32[{bshape}]{{0,1}} custom-call(a, b), custom_call_target="lapack_strsm_ffi", operand_layout_constraints={{f32[8,8]{{0,1}}, f32[{bshape}]{{0,1}}}}, output_to_operand_aliasing={{{{}}: (1, {{}})}}, api_version=API_VERSION_TYPED_FFI, backend_config={{diag = {diag} : ui8, side = {side} : ui8, trans_x = {trans} : ui8, uplo = {uplo} : ui8}}
}}
"""


def _spd(batch: tuple, n: int = 8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = rng.standard_normal(batch + (n, n))
    return (m @ np.swapaxes(m, -1, -2) + n * np.eye(n)).astype(np.float32)


def _compiled(text: str, args: list):
    out = hlofuse.compile(parse_hlo(text), "cpu", cache=False)(*args)
    return list(out) if isinstance(out, (list, tuple)) else [out]


@pytest.mark.parametrize("uplo,batch", [("L", ()), ("U", ()), ("L", (3,))], ids=["lower", "upper", "batched"])
def test_potrf_factor_keeps_the_other_triangle_and_reports_info(uplo, batch):
    text = POTRF.format(b="".join(f"{d}," for d in batch), bi=",".join(map(str, batch)),
                        layout=",".join(map(str, [len(batch), len(batch) + 1] + list(range(len(batch) - 1, -1, -1)))),
                        uplo=ord(uplo))
    a = _spd(batch)
    if batch:
        a[1] = -a[1]  # not positive definite: info 1, a NaN factor
    factor, info = evaluate(parse_hlo(text), [a])
    lower = uplo == "L"
    keep = np.tri(8, dtype=bool) if lower else np.tri(8, dtype=bool).T
    for k in np.ndindex(*batch):
        if batch and k == (1,):
            assert info[k] == 1 and np.isnan(factor[k][keep]).all()
            continue
        want = np.linalg.cholesky(a[k].astype(np.float64))
        want = want if lower else want.T
        np.testing.assert_allclose(factor[k][keep], want[keep], rtol=2e-6, atol=1e-6)
        np.testing.assert_array_equal(factor[k][~keep], a[k][~keep])  # LAPACK leaves it as it was
        assert info[k] == 0
    got_factor, got_info = _compiled(text, [a])
    np.testing.assert_array_equal(got_info, info)
    np.testing.assert_allclose(got_factor, factor, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("side,trans,diag", [("L", "N", "N"), ("L", "T", "N"), ("R", "N", "U"), ("R", "C", "N")])
def test_trsm_solves_as_lapack(side, trans, diag):
    bshape = "8,3" if side == "L" else "3,8"
    text = TRSM.format(bshape=bshape, side=ord(side), trans=ord(trans), diag=ord(diag), uplo=ord("L"))
    call = lapack_call(parse_hlo(text).entry.root)
    assert call.left_side == (side == "L") and call.unit_diagonal == (diag == "U")
    rng = np.random.default_rng(1)
    a = (np.tril(rng.standard_normal((8, 8))) + 4 * np.eye(8)).astype(np.float32)
    b = rng.standard_normal((8, 3) if side == "L" else (3, 8)).astype(np.float32)
    (x,) = evaluate(parse_hlo(text), [a, b])
    m = np.tril(a).astype(np.float64)
    if diag == "U":
        np.fill_diagonal(m, 1)
    op = m if trans == "N" else m.T
    want = np.linalg.solve(op, b) if side == "L" else np.linalg.solve(op.T, b.T).T
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-6)
    (got,) = _compiled(text, [a, b])
    np.testing.assert_allclose(got, x, rtol=1e-5, atol=1e-6)


def test_other_targets_stay_refused_by_name():
    text = """HloModule lu
ENTRY e {
  a = f32[4,4]{0,1} parameter(0)
  ROOT c = (f32[4,4]{0,1}, s32[4], s32[]) custom-call(a), custom_call_target="lapack_sgetrf_ffi"
}
"""
    assert lapack_call(parse_hlo(text).entry.root) is None
    with pytest.raises(Exception, match="lapack_sgetrf_ffi"):
        _compiled(text, [np.eye(4, dtype=np.float32)])
