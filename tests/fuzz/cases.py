"""What a worker does with one case: load -> verify -> compile -> run -> compare, each failure
classified (outcomes.py). Runs inside the worker process; nothing here guards against crashes
or hangs (the pool does).
"""
from __future__ import annotations

import os
import traceback
from typing import Any, Callable

import numpy as np

from . import outcomes as oc
from .bit_exposure import only_bits_exposed
from .reassociation import only_order_sensitive, other_order_references
from .values import contains_subnormal, flush_denormals, is_float_dtype, make_inputs

# Modules whose instructions hold more than this many bytes are verified and compiled but not run.
MAX_MODULE_BYTES = 64 << 20
# The fraction of edge values in the inputs each case kind makes from its seed; run_reference
# makes the same inputs again.
EDGE_FRACTION = {"malformed": 0.1, "graph": 0.25}


def _error_result(exc: BaseException, stage: str) -> dict[str, Any]:
    import hlofuse

    msg = str(exc)
    if isinstance(exc, hlofuse.HloError) and msg.strip():
        return {"outcome": oc.EXPECTED, "stage": stage, "signature": f"{type(exc).__name__} ({stage})",
                "message": msg[:300]}
    return {"outcome": oc.UNEXPECTED, "stage": stage, "signature": oc.exception_signature(exc),
            "message": f"{type(exc).__name__}: {msg[:500]}", "traceback": traceback.format_exc()[-4000:]}


def _module_bytes(module) -> int:
    total = 0
    for inst in module.all_instructions():
        try:
            total += inst.shape.byte_size()
        except Exception:  # noqa: BLE001 - a shape with no size (token): count nothing
            pass
    return total


def _inputs(module, seed: int, edge_fraction: float) -> list:
    from hlofuse.runtime.io import parameter_shapes

    return make_inputs(parameter_shapes(module), seed, edge_fraction)


def _root_opcode(module, index: int) -> str:
    """The opcode producing flattened output `index` of the entry (through tuples), for signatures."""
    root = module.entry.root
    if root.opcode == "tuple" and index < len(root.operands):
        return root.operands[index].opcode
    return root.opcode


def _denormal_elements_excused(actual: list, expected: list, flushed: list) -> list:
    """`actual` with each element that the flushing semantics give (`flushed`, both flushed,
    within the float tolerance or both NaN) set to the reference's: for the real GPU, whose
    functions keep some denormals and lose others, element by element."""
    from hlofuse.runtime.compare import tolerance_for

    out = []
    for a, e, f in zip(actual, expected, flushed):
        a, e, f = np.asarray(a), np.asarray(e), np.asarray(f)
        if a.shape != e.shape or f.shape != e.shape:
            out.append(a)
            continue
        # bf16 and fp8 arrays are numpy kind "V": judged as floats too (seed 65's bf16 case)
        if not is_float_dtype(e.dtype):
            # a bool or an integer read off a denormal (a convert to pred of 1e-40 on an H200,
            # seed 85): excused where it is exactly what the flushing semantics give
            out.append(np.where(a == f, e, a) if a.dtype == f.dtype else a)
            continue
        rtol, atol = tolerance_for(e.dtype)
        fa = np.asarray(flush_denormals(a)).astype(np.complex128 if e.dtype.kind == "c" else np.float64)
        ff = np.asarray(flush_denormals(f)).astype(fa.dtype)
        with np.errstate(all="ignore"):
            same = (np.isnan(fa) & np.isnan(ff)) | (fa == ff) | (np.abs(fa - ff) <= atol + rtol * np.abs(ff))
        out.append(np.where(same, e, a))
    return out


def compare_with_reference(actual: list, expected: list, rerun_flushed, rerun_reordered=None,
                           bits_exposed=None, denormals_by_element: bool = False) -> tuple[str, str]:
    """(outcome, message) of a backend's outputs against the reference's. A mismatch that goes
    away when the reference is rerun with denormal inputs flushed (and its denormal outputs
    flushed) is DENORMAL, not MISMATCH; one confined to elements where the reference rerun with
    its reductions in other orders (`rerun_reordered()`: a list of the outputs in each, None if
    it cannot run) moves as far is ORDER_SENSITIVE (reassociation.py); one confined to outputs
    computed from the bits of floats that agree (`bits_exposed(indices of the mismatching
    outputs)`, bit_exposure.py) is BITS_EXPOSED. With `denormals_by_element` (the real GPU's
    keeping oracle) an element may follow either semantics: one that the flushed rerun gives is
    excused by itself."""
    from hlofuse.runtime.compare import compare_outputs

    results = compare_outputs(list(actual), list(expected))
    bad = [r for r in results if not r.ok]
    if not bad:
        return oc.OK, ""
    message = "; ".join(r.line() for r in bad[:3])
    flushed = rerun_flushed()
    if flushed is not None:
        again = compare_outputs([flush_denormals(a) for a in actual], [flush_denormals(e) for e in flushed])
        if all(r.ok for r in again):
            return oc.DENORMAL, message
        if denormals_by_element and len(flushed) == len(actual) == len(expected):
            patched = _denormal_elements_excused(list(actual), list(expected), list(flushed))
            if all(r.ok for r in compare_outputs(patched, list(expected))):
                return oc.DENORMAL, message
    reordered = rerun_reordered() if rerun_reordered is not None else None
    if reordered is not None and only_order_sensitive(list(actual), list(expected), *reordered):
        return oc.ORDER_SENSITIVE, message
    if bits_exposed is not None and bits_exposed([r.index for r in bad]):
        return oc.BITS_EXPOSED, message
    return oc.MISMATCH, message


def run_malformed(text: str, seed: int) -> dict[str, Any]:
    """load -> verify -> compile(cpu) -> run; when it runs, the interpreter is the reference."""
    import hlofuse
    from hlofuse.hlo.verifier import verify

    stage = "parse"
    try:
        module = hlofuse.parse_hlo(text)
        stage = "verify"
        verify(module)
        stage = "compile"
        if _module_bytes(module) > MAX_MODULE_BYTES:
            return {"outcome": oc.SKIPPED, "stage": stage, "signature": "too large to run", "message": ""}
        exe = hlofuse.compile(module, target="cpu")
        stage = "inputs"
        try:
            args = _inputs(module, seed, EDGE_FRACTION["malformed"])
        except ValueError as e:
            return {"outcome": oc.SKIPPED, "stage": stage, "signature": "no inputs", "message": str(e)}
        stage = "run"
        got = exe(*args)
    except Exception as e:  # noqa: BLE001 - classifying every exception is the point
        return _error_result(e, stage)
    return _against_interpreter(module, args, got, "cpu", seed)


def _against_interpreter(module, args, got, backend: str, seed: int, reference=None) -> dict[str, Any]:
    """Compare `got` with the interpreter's result; `reference` is (executable, outputs) when
    the caller already ran the interpreter."""
    import hlofuse

    if reference is None:
        try:
            ref_exe = hlofuse.compile(module, target="interpreter")
            want = ref_exe(*args)
        except hlofuse.HloError as e:  # the reference cannot run it: nothing to compare
            return {"outcome": oc.OK, "stage": "reference", "signature": "", "message": f"no reference: {e}"[:200]}
        except Exception as e:  # noqa: BLE001
            return _error_result(e, "interpreter")
    else:
        ref_exe, want = reference
    denormals = getattr(ref_exe, "denormals", "flush")  # "keep": the real GPU's oracle

    def rerun():
        if denormals == "keep":
            # The real GPU's oracle keeps denormals exactly; the GPU's own functions need not
            # produce or keep one (1 / (1 + exp(-x)) is 0 below -88.7, as XLA:GPU's logistic,
            # where the exact value is a denormal: seed 65 on an H200), even where none is in
            # the inputs or the outputs. A GPU result the flushing semantics give is
            # denormal-only too.
            try:
                from hlofuse.runtime.interpreter import evaluate

                return evaluate(module, flush_denormals(args))
            except Exception:  # noqa: BLE001
                return None
        if not contains_subnormal(args) and not contains_subnormal(list(want)):
            return None
        try:
            return ref_exe(*flush_denormals(args))
        except Exception:  # noqa: BLE001
            return None

    def reordered():
        try:
            return other_order_references(module, args, denormals)
        except Exception:  # noqa: BLE001 - no second order: the mismatch stands
            return None

    def bits(mismatching):
        return only_bits_exposed(module, args, backend, mismatching, denormals, got)

    outcome, message = compare_with_reference(got, want, rerun, reordered, bits,
                                              denormals_by_element=denormals == "keep")
    if outcome == oc.OK:
        return {"outcome": oc.OK, "stage": "compare", "signature": "", "message": ""}
    first = _first_bad(got, want)
    sig = f"{backend} vs interpreter: {_root_opcode(module, first)} -> {np.asarray(want[first]).dtype}" \
        if first is not None else f"{backend} vs interpreter"
    return {"outcome": outcome, "stage": "compare", "signature": sig, "message": message}


def _first_bad(got, want) -> int | None:
    from hlofuse.runtime.compare import compare_arrays

    if len(got) != len(want):
        return None
    for i, (g, w) in enumerate(zip(got, want)):
        if not compare_arrays(g, w, i).ok:
            return i
    return None


GRAPH_BACKENDS = (("cpu", True), ("cpu", False), ("gpu-emulated", True))
# `python -m tests.fuzz --gpu` sets this (the workers inherit it): graphs also run on the CUDA GPU.
REAL_GPU_ENV = "HLOFUSE_FUZZ_REAL_GPU"


def graph_backends() -> tuple[tuple[str, bool], ...]:
    """The (target, fusion) pairs each generated graph runs on: the real GPU too under --gpu."""
    return GRAPH_BACKENDS + ((("gpu", True),) if os.environ.get(REAL_GPU_ENV) == "1" else ())


def _oracle(module, args: list, target: str, flushing: tuple) -> tuple:
    """The reference (callable, outputs) for `target`: the flushing interpreter (XLA:CPU's
    semantics), or for the real GPU, which keeps denormals as XLA:GPU does, the interpreter
    keeping them too."""
    from hlofuse.compiler import reference_denormals
    from hlofuse.runtime.interpreter import evaluate

    if reference_denormals(target) != "keep":
        return flushing

    def keep(*a):
        return evaluate(module, list(a), denormals="keep")

    keep.denormals = "keep"  # what reassociation's reordered rerun must use too
    return keep, keep(*args)


def run_graph(text: str, seed: int) -> dict[str, Any]:
    """A generated valid module on every backend, each compared with the interpreter."""
    import hlofuse
    from hlofuse.hlo.verifier import verify

    try:
        module = hlofuse.parse_hlo(text)
        verify(module)
    except hlofuse.HloError as e:
        return {"outcome": oc.INVALID, "stage": "verify", "signature": f"{type(e).__name__}: "
                + str(e).splitlines()[0][:120], "message": str(e)[:500]}
    except Exception as e:  # noqa: BLE001
        return _error_result(e, "parse")
    args = _inputs(module, seed, EDGE_FRACTION["graph"])
    try:
        ref_exe = hlofuse.compile(module, target="interpreter")
        want = ref_exe(*args)
    except Exception as e:  # noqa: BLE001 - a valid module the interpreter cannot run is a finding
        r = _error_result(e, "interpreter")
        r["outcome"] = oc.UNEXPECTED if r["outcome"] == oc.UNEXPECTED else oc.EXPECTED
        r["signature"] = "interpreter: " + r["signature"]
        return r
    worst: dict[str, Any] = {"outcome": oc.OK, "stage": "compare", "signature": "", "message": ""}
    rank = {o: k for k, o in enumerate(oc.ORDER)}
    for target, fusion in graph_backends():
        label = target + ("" if fusion else " (no fusion)")
        try:
            got = hlofuse.compile(module, target=target, fusion=fusion)(*args)
        except Exception as e:  # noqa: BLE001
            r = _error_result(e, label)
            r["signature"] = f"{label}: {r['signature']}"
        else:
            oracle = _oracle(module, args, target, (ref_exe, want))
            r = _against_interpreter(module, args, got, label, seed, oracle)
            if target == "gpu" and r["outcome"] == oc.MISMATCH and _passes_at_ptxas_o0(module, args, label, seed, oracle):
                r = {**r, "outcome": oc.PTXAS_MISCOMPILE}
        if rank[r["outcome"]] > rank[worst["outcome"]]:
            worst = r
    return worst



def _passes_at_ptxas_o0(module, args: list, label: str, seed: int, oracle) -> bool:
    """Whether the real GPU gives the reference's answer (no mismatch) with the kernels
    assembled by `ptxas -O0` (HLOFUSE_PTXAS_LEVEL) instead of the driver's JIT at its default
    level: then the assembler's optimizer made the mismatch."""
    import hlofuse
    from hlofuse.runtime.gpu_executor import PTXAS_LEVEL_ENV

    from unittest import mock

    try:
        with mock.patch.dict(os.environ, {PTXAS_LEVEL_ENV: "0"}):
            got = hlofuse.compile(module, target="gpu")(*args)
    except Exception:  # noqa: BLE001 - no second answer: the mismatch stands
        return False
    return _against_interpreter(module, args, got, label, seed, oracle)["outcome"] != oc.MISMATCH


def run_reference(payload: dict[str, Any], started: Callable[[], None]) -> dict[str, Any]:
    """The interpreter alone on a timed-out case's module and inputs (the pool's check of
    whether the program itself runs long): parse, verify, compile for the interpreter and make
    the same inputs as the case did, then call `started()` (the pool times the run from there)
    and run. Any answer, an exception included, means the interpreter finished."""
    import time

    import hlofuse
    from hlofuse.hlo.verifier import verify

    t0 = time.monotonic()
    try:
        module = hlofuse.parse_hlo(payload["text"])
        verify(module)
        exe = hlofuse.compile(module, target="interpreter")
        if payload["kind"] == "edge":
            args = payload["args"]
        else:
            args = _inputs(module, payload["seed"], EDGE_FRACTION[payload["kind"]])
        started()
        t0 = time.monotonic()
        exe(*args)
        message = ""
    except Exception as e:  # noqa: BLE001 - an error is an answer too
        message = f" (with {type(e).__name__}: {str(e)[:200]})"
    return {"finished": True, "seconds": time.monotonic() - t0, "message": message}
