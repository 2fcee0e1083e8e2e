"""Outcome classes of a fuzz case and the signature that groups failures with one cause."""
from __future__ import annotations

import traceback
from pathlib import Path

OK = "ok"  # ran (and matched the reference where there is one)
EXPECTED = "expected-error"  # an hlofuse.HloError subclass with a message: the user's mistake, reported
UNEXPECTED = "unexpected-exception"  # anything else: a traceback is a bug
CRASH = "crash"  # the worker process died (a signal: segfault, abort)
HANG = "hang"  # no answer within the per-case timeout, while the interpreter alone answers in time
# Timed out, and the interpreter alone does not finish in time either: the program itself runs long.
LONG_RUNNING = "long-running"
MISMATCH = "mismatch"  # a backend's result differs from the reference
DENORMAL = "denormal-only"  # differs only where denormals are flushed (XLA:CPU's FTZ/DAZ): known, counted apart
# Differs only on elements whose reductions cancel, where a reversed reduction order moves the
# reference as far (reassociation.py): any order is a valid answer there; counted apart.
ORDER_SENSITIVE = "order-sensitive"
# Differs only in outputs computed from the bits of floats (bitcast-convert) that agree within
# the float tolerance (bit_exposure.py): a last-ULP difference made visible; counted apart.
BITS_EXPOSED = "bits-exposed"
# An edge case where the backend agrees with the function computed in a wider type and XLA:CPU
# does not (edge.py): XLA's approximation is off there, or its convert of f64 to f16 rounds
# twice (through f32) where hlofuse rounds once; counted apart.
XLA_LESS_ACCURATE = "xla-less-accurate"
# A real-GPU mismatch that goes away with the kernels assembled by `ptxas -O0` instead of the
# driver's JIT: the assembler's optimizer, not hlofuse (docs/gpu_device.md); counted apart, its
# reproducers kept for the vendor's bug report.
PTXAS_MISCOMPILE = "ptxas-miscompile"
SKIPPED = "skipped"  # not run: too large, an input type with no numpy counterpart, unsupported by XLA
INVALID = "generator-invalid"  # a generated "valid" module the verifier rejects (generator or verifier bug)

FAILURES = (UNEXPECTED, CRASH, HANG, MISMATCH, INVALID)
ORDER = (OK, EXPECTED, SKIPPED, DENORMAL, ORDER_SENSITIVE, BITS_EXPOSED, XLA_LESS_ACCURATE, LONG_RUNNING,
         PTXAS_MISCOMPILE, UNEXPECTED, CRASH, HANG, MISMATCH, INVALID)

_PACKAGE = "hlofuse"


def innermost_frame(tb_frames: list[traceback.FrameSummary]) -> str:
    """`hlofuse/path.py:function` of the innermost frame inside the hlofuse package (the last
    frame of any file when no hlofuse frame is on the stack)."""
    for fr in reversed(tb_frames):
        parts = Path(fr.filename).parts
        if _PACKAGE in parts and "tests" not in parts:
            rel = "/".join(parts[len(parts) - 1 - parts[::-1].index(_PACKAGE):])
            return f"{rel}:{fr.name}"
    if tb_frames:
        return f"{Path(tb_frames[-1].filename).name}:{tb_frames[-1].name}"
    return "?"


def exception_signature(exc: BaseException) -> str:
    """`ExceptionType at hlofuse/file.py:function` (the innermost hlofuse frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{type(exc).__name__} at {innermost_frame(frames)}"


def signature_from_dump(dump: str) -> str:
    """The innermost hlofuse frame of a faulthandler dump (`File "...", line N in fn` lines,
    innermost first), for crashes and hangs."""
    for line in dump.splitlines():
        line = line.strip()
        if line.startswith("File ") and "/hlofuse/" in line and "/tests/" not in line:
            path = line.split('"')[1]
            fn = line.rsplit(" in ", 1)[-1]
            return "hlofuse/" + path.split("/hlofuse/", 1)[1] + ":" + fn
    return "?"
