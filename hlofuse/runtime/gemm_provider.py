"""Which library computes a GEMM kernel's matrix product: oneDNN's `dnnl_sgemm` for f32, the
OpenBLAS scipy ships for everything else (and for f32 where oneDNN is absent or not wanted).

    gemm_provider("f32")   # "onednn" or "openblas"
    onednn_library()       # the loaded libdnnl (ctypes.CDLL), or None

Why two: on this AVX-512 machine oneDNN's sgemm (the PyPI wheel `onednn-cpu-gomp`, which
threads through libgomp like hlofuse's kernels) reaches about 245 GFLOP/s on one thread at
2048^3 where scipy's OpenBLAS reaches 83 (OPENBLAS_CORETYPE=Haswell, as this environment sets)
or 122 (its own SkylakeX kernels), and XLA:CPU's YNNPACK about 210. oneDNN has no f64 or
complex GEMM, so dgemm, cgemm and zgemm stay on OpenBLAS.

The choice is made at code generation (the kernel's IR calls one or the other) and is part of
the CPU target's fingerprint (emitters/cpu/target.py), so cached code of one provider is never
loaded for the other. `HLOFUSE_GEMM=openblas` forces OpenBLAS for f32 too (tests run both);
`HLOFUSE_GEMM=onednn` (or unset) takes oneDNN when its library loads, OpenBLAS otherwise
(the wheel exists for Linux x86-64 only).
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading

from ..hlo.errors import InputError
from .openmp_env import default_wait_policy

GEMM_ENV = "HLOFUSE_GEMM"
PROVIDERS = ("onednn", "openblas")
ONEDNN_DISTRIBUTION = "onednn-cpu-gomp"
LIBRARY = "libdnnl.so.3"

_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL | None] = {}


def requested_provider() -> str:
    """The f32 provider `HLOFUSE_GEMM` asks for ("onednn" when unset)."""
    text = os.environ.get(GEMM_ENV, "").strip().lower()
    if not text:
        return "onednn"
    if text not in PROVIDERS:
        raise InputError(f"{GEMM_ENV}={text!r}: expected one of {', '.join(PROVIDERS)}")
    return text


def library_candidates() -> list[str]:
    """Paths libdnnl may be at, most specific first. The wheel's data directory goes to the
    user base for a --user install (~/.local: <site.USER_BASE>/lib) or to the environment's
    prefix (<sys.prefix>/lib); when one of those holds the library, they are the candidates.
    Only when neither does are the files the installed wheel lists asked for: importing
    importlib.metadata and finding the distribution took 13-15 ms of CPU, most of the target's
    fingerprint, which a cached compile in a new process pays (docs/compile_time.md)."""
    import site

    known = [os.path.join(base, "lib", LIBRARY) for base in
             ((site.USER_BASE,) if site.ENABLE_USER_SITE and site.USER_BASE else ()) + (sys.prefix,)]
    if any(os.path.exists(path) for path in known):
        return known
    found: list[str] = []
    try:
        from importlib import metadata

        dist = metadata.distribution(ONEDNN_DISTRIBUTION)
        for f in dist.files or ():
            if f.name == LIBRARY:
                found.append(str(dist.locate_file(f)))
    except Exception:  # not installed (PackageNotFoundError), or metadata without a file list
        pass
    found.append(os.path.join(sys.prefix, "lib", LIBRARY))
    return found


def onednn_library() -> ctypes.CDLL | None:
    """libdnnl, loaded once per process, or None when it is not installed or does not load
    (another platform). Loaded RTLD_LOCAL: compiled kernels reach `dnnl_sgemm` through the
    address runtime/jit_builtins.py registers, so nothing needs its symbols in the global scope,
    where they would interpose on the oneDNN other libraries in the process link (TensorFlow and
    PyTorch bundle their own, of other versions)."""
    with _lock:
        if "lib" in _loaded:
            return _loaded["lib"]
        lib = None
        default_wait_policy()  # libdnnl loads libgomp, which reads its wait policy then
        for path in library_candidates():
            if not os.path.exists(path):
                continue
            try:
                lib = ctypes.CDLL(os.path.realpath(path), mode=ctypes.RTLD_LOCAL)
                break
            except OSError:
                continue
        if lib is not None and not hasattr(lib, "dnnl_sgemm"):
            lib = None
        _loaded["lib"] = lib
        return lib


def gemm_provider(dtype: str) -> str:
    """The library GEMM kernels of BLAS element type `dtype` (f32, f64, c64, c128) call:
    "onednn" for f32 when requested and available, else "openblas"."""
    if dtype != "f32" or requested_provider() != "onednn":
        return "openblas"
    return "onednn" if onednn_library() is not None else "openblas"


def provider_fingerprint() -> str:
    """What compiled GEMM code depends on beyond the CPU: the f32 provider."""
    return f"gemm-f32={gemm_provider('f32')}"
