"""JAX's LAPACK custom calls on the CPU, read as the linear-algebra ops they compute.

JAX lowers `jnp.linalg.cholesky` and `jax.scipy.linalg.solve_triangular` (and what is built on
them: `cho_solve`, Gaussian processes, Kalman filters) on the CPU to typed-FFI custom calls into
jaxlib's LAPACK wrappers, not to XLA's `cholesky` and `triangular-solve` ops:

    (f32[n,n]{0,1}, s32[]) custom-call(a), custom_call_target="lapack_spotrf_ffi",
        backend_config={uplo = 76 : ui8}
    f32[n,k]{0,1} custom-call(a, b), custom_call_target="lapack_strsm_ffi",
        backend_config={diag = 78 : ui8, side = 76 : ui8, trans_x = 84 : ui8, uplo = 76 : ui8}

(the options are LAPACK's characters: uplo 'L'/'U', side 'L'/'R', trans_x 'N'/'T'/'C', diag
'N'/'U'; ?potrf also returns LAPACK's `info`, 0 where the factorization succeeded), and
`jnp.linalg.solve`, `inv`, `det` and `slogdet` to `lapack_?getrf_ffi` (an LU factorization with
partial pivoting: (lu, ipiv, info), ipiv LAPACK's 1-based row interchanges) and ?trsm,
`jnp.linalg.eigh` to ?syevd ((vectors, values, info)), `svd` to ?gesdd ((a, s, u, vt, info)),
`qr` to ?geqrf ((packed reflectors, tau)) and ?orgqr (the reflectors' product).
`lapack_call` reads such an instruction; the interpreter computes it with its own Cholesky,
LU and substitution (runtime/interpreter/linalg.py); the compiled backends rewrite ?potrf and
?trsm into XLA's ops (passes/lapack_call_expander.py) and run ?getrf, which XLA has no op
for, through a library rule of their own (runtime/library_lu.lu_factor). The
decompositions LAPACK alone defines (their signs and orders are its algorithms': ?syevd,
?gesdd, ?geqrf) run numpy's LAPACK on both sides (interpreter/linalg.lapack_decomposition),
and ?orgqr multiplies the reflectors out. Other LAPACK targets stay refused by name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .ir import HloInstruction

_TARGET = re.compile(r"^lapack_([sdcz])(potrf|trsm|getrf|syevd|heevd|gesdd|geqrf|orgqr|ungqr)_ffi$")
_OPTION = re.compile(r"(\w+)\s*=\s*(\d+)\s*:\s*ui8")
_TRANSPOSE = {"N": "NO_TRANSPOSE", "T": "TRANSPOSE", "C": "ADJOINT"}


@dataclass(frozen=True)
class LapackCall:
    """A LAPACK custom call as the op it computes (module docstring)."""

    op: str  # "cholesky", "triangular-solve", "lu", "eigh", "svd", "qr" or "householder"
    lower: bool
    left_side: bool = True
    transpose_a: str = "NO_TRANSPOSE"
    unit_diagonal: bool = False
    mode: str = ""  # ?syevd's and ?gesdd's job ('V'/'N'; 'A'/'S'/'O'/'N')


def _options(inst: HloInstruction) -> dict[str, str]:
    """backend_config's `name = N : ui8` options as characters."""
    raw = inst.attrs.get("backend_config")
    text = getattr(raw, "text", raw)
    return {k: chr(int(v)) for k, v in _OPTION.findall(str(text or ""))}


def lapack_call(inst: HloInstruction) -> LapackCall | None:
    """The LAPACK call `inst` makes, or None (not a custom call of a routine read here, or
    options outside LAPACK's)."""
    if inst.opcode != "custom-call":
        return None
    m = _TARGET.match(str(inst.attrs.get("custom_call_target", "")))
    if m is None:
        return None
    opts = _options(inst)
    uplo = opts.get("uplo", "L")
    if uplo not in "LU":
        return None
    routine = m.group(2)
    if routine == "getrf":
        return LapackCall("lu", False)
    if routine in ("syevd", "heevd"):
        return LapackCall("eigh", uplo == "L", mode=opts.get("mode", "V"))
    if routine == "gesdd":
        return LapackCall("svd", False, mode=opts.get("mode", "A"))
    if routine == "geqrf":
        return LapackCall("qr", False)
    if routine in ("orgqr", "ungqr"):
        return LapackCall("householder", False)
    if routine == "potrf":
        return LapackCall("cholesky", uplo == "L")
    side, trans, diag = opts.get("side", "L"), opts.get("trans_x", "N"), opts.get("diag", "N")
    if side not in "LR" or trans not in _TRANSPOSE or diag not in "NU":
        return None
    return LapackCall("triangular-solve", uplo == "L", side == "L", _TRANSPOSE[trans], diag == "U")
