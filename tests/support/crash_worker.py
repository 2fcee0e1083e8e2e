"""A child process that compiles and runs HLO modules for tests/test_no_crash.py.

It reads one JSON request per line on stdin ({"text", "target", "fusion", "seed"}) and
answers one JSON line: {"status": "ok" | "mismatch" | "error" | "unsupported", "detail"}.
A test that gives its cases to this process sees a crash of compiled code (SIGSEGV,
SIGFPE, ...) as the process dying, not as a dead pytest worker; one process serves many
cases, so a search can afford thousands of them.
"""
from __future__ import annotations

import json
import sys
import traceback

import numpy as np


def special_values(dtype: np.dtype, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random values of `dtype` that reach the corner cases: for floats zeros of both signs,
    infinities, NaN, the extremes and subnormals beside ordinary values; for integers the
    whole range with 0, -1, min and max; complex parts drawn like floats."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if dtype.kind == "c":
        part = np.float64 if dtype.itemsize == 16 else np.float32
        return (special_values(part, rng, shape) + 1j * special_values(part, rng, shape)).astype(dtype)
    if dtype.kind in "iu" or (dtype.kind == "V" and "int" in dtype.name):
        import ml_dtypes

        info = ml_dtypes.iinfo(dtype) if dtype.kind == "V" else np.iinfo(dtype)
        lo, hi = int(info.min), int(info.max)
        if dtype.kind in "iu":  # random bits cover the whole range, 64-bit types included
            vals = rng.integers(0, 256, n * dtype.itemsize, dtype=np.uint8).view(dtype)
        else:
            vals = rng.integers(lo, hi, n, endpoint=True).astype(dtype)
        picks = np.array([0, 1, -1 if lo < 0 else 2, lo, hi, 2, 3], dtype=object)
        special = rng.random(n) < 0.4
        chosen = picks[rng.integers(0, len(picks), int(special.sum()))]
        vals[special] = np.array([int(v) for v in chosen], dtype=object).astype(dtype) if chosen.size else []
        return vals.reshape(shape)
    ordinary = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)
    picks = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 1e-40, -1e-310, 1e38, -1e308, 65504.0,
                      7.0, -3.0])
    special = rng.random(n) < 0.35
    ordinary[special] = picks[rng.integers(0, len(picks), int(special.sum()))]
    with np.errstate(all="ignore"):
        return ordinary.astype(dtype).reshape(shape)


def run_case(request: dict) -> dict:
    """Compile and run one module on the requested backend against the interpreter."""
    import hlofuse
    from hlofuse.hlo.errors import UnsupportedError
    from hlofuse.hlo.parser import parse_hlo
    from hlofuse.runtime.compare import compare_outputs
    from hlofuse.runtime.interpreter import evaluate

    module = parse_hlo(request["text"])
    rng = np.random.default_rng(request["seed"])
    args = [special_values(p.shape.dtype.numpy, rng, tuple(p.shape.dims)) for p in module.entry.parameters]
    try:
        with np.errstate(all="ignore"):
            want = evaluate(module, args)
    except UnsupportedError as e:
        return {"status": "unsupported", "detail": f"interpreter: {e}"}
    try:
        exe = hlofuse.compile(module, target=request["target"], fusion=request["fusion"])
        for _ in range(2):  # a second run reuses arenas, pooled outputs and remembered addresses
            got = list(exe(*args))
    except UnsupportedError as e:
        return {"status": "unsupported", "detail": str(e)}
    except Exception:  # noqa: BLE001 - reported to the test, which decides
        return {"status": "error", "detail": traceback.format_exc(limit=6)}
    results = compare_outputs(got, [np.asarray(w) for w in want])
    if all(r.ok for r in results):
        return {"status": "ok", "detail": ""}
    return {"status": "mismatch", "detail": "\n".join(r.line() for r in results)}


def main() -> None:
    """Serve requests until stdin closes."""
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = run_case(json.loads(line))
        except Exception:  # noqa: BLE001 - a parse error of a generated module, for instance
            reply = {"status": "error", "detail": traceback.format_exc(limit=6)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
