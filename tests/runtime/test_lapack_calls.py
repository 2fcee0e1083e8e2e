"""JAX's LAPACK custom calls on the CPU (hlo/lapack_calls.py): ?potrf, ?trsm and ?getrf, as JAX
writes them, computed by the interpreter as LAPACK defines them (checked against numpy's own
factorization and solves, and P A = L U) and by the compiled backends (XLA's ops for ?potrf and
?trsm, passes/lapack_call_expander.py; library rules for the rest), checked against the
interpreter; ?syevd, ?gesdd, ?geqrf and ?orgqr checked as the decompositions they are."""
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


GETRF = """HloModule getrf
ENTRY e {{
  a = f32[{b}{m},{n}]{{{layout}}} parameter(0)
  ROOT c = (f32[{b}{m},{n}]{{{layout}}}, s32[{b}{k}], s32[{bi}]) custom-call(a), custom_call_target="lapack_sgetrf_ffi", operand_layout_constraints={{f32[{b}{m},{n}]{{{layout}}}}}, output_to_operand_aliasing={{{{0}}: (0, {{}})}}, api_version=API_VERSION_TYPED_FFI
}}
"""


def _unpack(lu: np.ndarray, ipiv: np.ndarray) -> tuple:
    """(P, L, U) of one packed factorization with 1-based interchanges."""
    m, n = lu.shape
    k = min(m, n)
    low = np.tril(lu, -1)[:, :k] + np.eye(m, k)
    up = np.triu(lu)[:k, :]
    perm = np.arange(m)
    for i, p in enumerate(ipiv):
        perm[[i, p - 1]] = perm[[p - 1, i]]
    return perm, low, up


@pytest.mark.parametrize("m,n,batch", [(16, 16, ()), (70, 70, ()), (24, 10, ()), (10, 24, ()), (8, 8, (2,))],
                         ids=["square", "two-panels", "tall", "wide", "batched"])
def test_getrf_factors_with_partial_pivoting(m, n, batch):
    layout = ",".join(map(str, [len(batch), len(batch) + 1] + list(range(len(batch) - 1, -1, -1))))
    text = GETRF.format(b="".join(f"{d}," for d in batch), bi=",".join(map(str, batch)), m=m, n=n, k=min(m, n),
                        layout=layout)
    a = np.random.default_rng(m * n).standard_normal(batch + (m, n)).astype(np.float32)
    if batch:
        a[1, :, 3] = 0  # a zero column: LAPACK's info is its 1-based index, the factorization goes on
    for lu, ipiv, info in (evaluate(parse_hlo(text), [a]), _compiled(text, [a])):
        for idx in np.ndindex(*batch):
            perm, low, up = _unpack(lu[idx].astype(np.float64), ipiv[idx])
            np.testing.assert_allclose(low @ up, a[idx][perm].astype(np.float64), rtol=1e-5, atol=1e-5)
            assert np.all(np.abs(np.tril(lu[idx], -1)) <= 1 + 1e-6)  # partial pivoting's multipliers
            assert info[idx] == (4 if batch and idx == (1,) else 0)
    want, got = evaluate(parse_hlo(text), [a]), _compiled(text, [a])
    np.testing.assert_array_equal(got[1], want[1])  # the same pivots
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def test_other_targets_stay_refused_by_name():
    text = """HloModule gees
ENTRY e {
  a = f32[4,4]{0,1} parameter(0)
  ROOT c = (f32[4,4]{0,1}, f32[4]) custom-call(a), custom_call_target="lapack_sgees_ffi"
}
"""
    assert lapack_call(parse_hlo(text).entry.root) is None
    with pytest.raises(Exception, match="lapack_sgees_ffi"):
        _compiled(text, [np.eye(4, dtype=np.float32)])


SYEVD = """HloModule syevd
ENTRY e {
  a = f32[6,6]{0,1} parameter(0)
  ROOT c = (f32[6,6]{0,1}, f32[6]{0}, s32[]) custom-call(a), custom_call_target="lapack_ssyevd_ffi", api_version=API_VERSION_TYPED_FFI, backend_config={mode = 86 : ui8, uplo = 76 : ui8}
}
"""

GESDD = """HloModule gesdd
ENTRY e {{
  a = f32[6,4]{{0,1}} parameter(0)
  ROOT c = (f32[6,4]{{0,1}}, f32[4]{{0}}, f32[6,6]{{0,1}}, f32[4,4]{{0,1}}, s32[]) custom-call(a), custom_call_target="lapack_sgesdd_ffi", api_version=API_VERSION_TYPED_FFI, backend_config={{mode = {mode} : ui8}}
}}
"""

QR = """HloModule qr
ENTRY e {
  a = f32[6,4]{0,1} parameter(0)
  g = (f32[6,4]{0,1}, f32[4]{0}) custom-call(a), custom_call_target="lapack_sgeqrf_ffi", api_version=API_VERSION_TYPED_FFI, backend_config={}
  h = f32[6,4]{0,1} get-tuple-element(g), index=0
  t = f32[4]{0} get-tuple-element(g), index=1
  q = f32[6,4]{0,1} custom-call(h, t), custom_call_target="lapack_sorgqr_ffi", api_version=API_VERSION_TYPED_FFI, backend_config={}
  ROOT r = (f32[6,4]{0,1}, f32[6,4]{0,1}) tuple(h, q)
}
"""


def _both(text: str, args: list):
    want = evaluate(parse_hlo(text), args)
    got = _compiled(text, args)
    for w, g in zip(want, got):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-6)
    return want


def test_syevd_is_an_eigendecomposition():
    m = np.random.default_rng(5).standard_normal((6, 6)).astype(np.float32)
    a = m + m.T
    v, w, info = _both(SYEVD, [a])
    assert info == 0 and np.all(np.diff(w) >= 0)  # ascending, as LAPACK's
    np.testing.assert_allclose(a @ v, v * w, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(v.T @ v, np.eye(6), atol=1e-5)


@pytest.mark.parametrize("mode", ["A", "N"])
def test_gesdd_is_a_singular_value_decomposition(mode):
    a = np.random.default_rng(6).standard_normal((6, 4)).astype(np.float32)
    _, s, u, vt, info = _both(GESDD.format(mode=ord(mode)), [a])
    np.testing.assert_allclose(s, np.linalg.svd(a.astype(np.float64), compute_uv=False), rtol=1e-5)
    if mode == "A":
        np.testing.assert_allclose(u[:, :4] * s @ vt, a, rtol=1e-4, atol=1e-5)
    assert info == 0


def test_geqrf_and_orgqr_give_q_and_r():
    a = np.random.default_rng(7).standard_normal((6, 4)).astype(np.float32)
    packed, q = _both(QR, [a])
    r = np.triu(packed[:4])
    np.testing.assert_allclose(q @ r, a, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(q.T @ q, np.eye(4), atol=1e-5)
