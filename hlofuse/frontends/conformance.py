"""The StableHLO conformance runner behind `hlofuse conformance PATH...`.

Each test file (as in openxla/stablehlo's `testdata/`) has `@main` computing results from
`@inputs()` and checking them against `@expected()` with
`stablehlo.custom_call @check.expect_close / expect_eq / expect_almost_eq (actual, expected)`.
The runner imports `@main` with the checks taken out and the values of `@inputs()` turned into
parameters (so a compiled backend sees real inputs, not constants), evaluates `@inputs()` and
`@expected()` with the reference interpreter, runs `@main` on the chosen backend and compares
each checked value the way the StableHLO interpreter does:

  expect_eq         bit-exact (NaN equals NaN for floats)
  expect_close      at most 3 ULP apart (complex: per component; NaN matches NaN)
  expect_almost_eq  |actual - expected| <= 1e-3, same sign (complex: per component)
"""
from __future__ import annotations

import os
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, TextIO

import numpy as np

from ..hlo.errors import HloError, UnsupportedError
from ..hlo.ir import HloInstruction, HloModule
from ..hlo.shapes import TupleShape
from ..progress import Progress
from .stablehlo import from_stablehlo, inline_all_calls

MAX_ULP_DIFFERENCE = 3
ALMOST_EQ_TOLERANCE = 1e-3
CHECKS = ("check.expect_eq", "check.expect_close", "check.expect_almost_eq")
# Attributes a check may carry to override the defaults above.
_LIMITS = ("max_ulp_difference", "min_ulp_difference", "tolerance")


@dataclass
class ConformanceResult:
    """The outcome of one test file."""

    name: str
    status: str  # passed | failed | skipped
    reason: str = ""
    family: str = ""
    dtypes: tuple[str, ...] = ()
    seconds: float = 0.0

    def line(self) -> str:
        """`PASSED  name`, or the status and name followed by the reason."""
        text = f"{self.status.upper():7s} {self.name}"
        return text + (f"  ({self.reason})" if self.reason else "")


@dataclass
class Check:
    """One check call: which output of the test module, against which expected value."""

    kind: str
    actual: HloInstruction
    expected: HloInstruction
    limits: dict = field(default_factory=dict)  # max_ulp_difference, min_ulp_difference, tolerance


@dataclass
class PreparedTest:
    """A test file ready to run: the module under test, its inputs and expectations."""

    module: HloModule
    inputs: list[np.ndarray]
    kinds: list[str]
    expected: list[np.ndarray]
    dtypes: tuple[str, ...] = field(default_factory=tuple)
    limits: list[dict] = field(default_factory=list)


class ConformanceSkip(Exception):
    """The test cannot be run by design (the reason says why)."""


# ---- naming ------------------------------------------------------------------------------
_DTYPE_WORD = re.compile(r"_(bool|bfloat16|float8\w*?|float\d+|complex\d+|u?int\d+)(?=_|$)")


def op_family(name: str) -> str:
    """The op a test file exercises, from its name (`scatter_add_float32_...` -> `scatter_add`)."""
    base = os.path.basename(name)
    base = base[:-5] if base.endswith(".mlir") else base
    m = _DTYPE_WORD.search(base)
    family = base[:m.start()] if m else base
    family = re.sub(r"_(shape|dtypes|any)?_?$", "", family)
    return family.rstrip("_") or base


# ---- preparation -------------------------------------------------------------------------
def _collect_checks(checks: list) -> Callable:
    def handler(imp, op, scope, target):
        if target not in CHECKS:
            return None
        if len(op.operands) != 2:
            raise imp.unsupported(f"@{target} with {len(op.operands)} operands")
        limits = {k: op.attributes[k].value for k in _LIMITS if k in op.attributes}
        checks.append(Check(target.split(".")[1], scope.get(op.operands[0]), scope.get(op.operands[1]), limits))
        return []

    return handler


def prepare(text: str, filename: str = "<string>") -> PreparedTest:
    """Import a test file into a module computing the checked values from parameters."""
    from ..runtime.interpreter import evaluate

    checks: list[Check] = []
    module = from_stablehlo(text, "main", filename, inline_calls=False,
                            custom_call_handler=_collect_checks(checks))
    if not checks:
        raise ConformanceSkip("no check.expect_* call in @main")
    entry = module.entry
    if entry.parameters:
        raise ConformanceSkip("@main takes arguments (test files compute their inputs with @inputs())")
    input_calls = [i for i in entry.instructions if i.opcode == "call" and i.attrs["to_apply"].name == "inputs"]
    expected_calls = [i for i in entry.instructions if i.opcode == "call" and i.attrs["to_apply"].name == "expected"]

    inputs: list[np.ndarray] = []
    if input_calls:
        call = input_calls[0]
        inputs = [np.asarray(a) for a in evaluate(from_stablehlo(text, "inputs", filename), [])]
        _parameterize(entry, call)

    expected_values: list[np.ndarray] = []
    if expected_calls:
        expected_values = [np.asarray(a) for a in evaluate(from_stablehlo(text, "expected", filename), [])]

    outputs: list[HloInstruction] = []
    expected: list[np.ndarray | None] = []
    for check in checks:
        outputs.append(check.actual)
        expected.append(_expected_from_call(check.expected, expected_calls, expected_values))
    # Expectations that are not plain results of @expected() are computed by the module itself.
    extra = [c.expected for c, e in zip(checks, expected) if e is None]
    results = outputs + extra
    entry.root = entry.add_instruction(
        HloInstruction("tuple", TupleShape(tuple(r.shape for r in results)), results, name="checked"))
    _remove_dead(entry)
    inline_all_calls(module)
    if extra:
        values = evaluate(module, inputs)
        computed = iter(values[len(outputs):])
        expected = [e if e is not None else np.asarray(next(computed)) for e in expected]
    dtypes = tuple(sorted({str(c.actual.shape.dtype) for c in checks if c.actual.shape.is_array}))
    return PreparedTest(module, inputs, [c.kind for c in checks], expected, dtypes, [c.limits for c in checks])


def _parameterize(entry, call: HloInstruction) -> None:
    """Replace `call @inputs()` (or its get-tuple-elements) by entry parameters."""
    shapes = call.shape.elements if call.shape.is_tuple else (call.shape,)
    params = []
    for i, shape in enumerate(shapes):
        p = HloInstruction("parameter", shape, name=f"input_{i}")
        p.parameter_number = i
        entry.add_instruction(p)
        entry.instructions.remove(p)
        entry.instructions.insert(i, p)
        params.append(p)
    if call.shape.is_tuple:
        for user in list(call.users):
            if user.opcode == "get-tuple-element":
                user.replace_all_uses_with(params[user.attrs["index"]])
        tup = entry.add_instruction(HloInstruction("tuple", call.shape, params, name="inputs"))
        call.replace_all_uses_with(tup)
    else:
        call.replace_all_uses_with(params[0])


def _expected_from_call(inst: HloInstruction, calls, values) -> np.ndarray | None:
    """The value of @expected() that `inst` reads, or None when it is computed otherwise."""
    if inst.opcode == "get-tuple-element" and inst.operands[0] in calls:
        return values[inst.attrs["index"]]
    if inst in calls and not inst.shape.is_tuple:
        return values[0]
    return None


def _remove_dead(comp) -> None:
    """Remove the instructions the root does not depend on (parameters stay)."""
    live: set[HloInstruction] = set()
    stack = [comp.root]
    while stack:
        inst = stack.pop()
        if inst in live:
            continue
        live.add(inst)
        stack.extend(inst.operands)
        stack.extend(inst.control_predecessors)
    for inst in reversed(comp.post_order()):
        if inst not in live and inst.opcode != "parameter":
            comp.remove_instruction(inst)


# ---- comparison --------------------------------------------------------------------------
def _magnitude_and_sign(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|x| as a count of representable values above zero (uint64), and the sign bit."""
    width = x.dtype.itemsize
    bits = x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width]).astype(np.uint64)
    sign_mask = np.uint64(1) << np.uint64(8 * width - 1)
    return bits & ~sign_mask, (bits & sign_mask) != 0


def ulp_difference(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Elementwise ULP distance as the StableHLO interpreter counts it (uint64; the maximum
    for a non-finite value that does not match bit for bit; NaN matches any NaN)."""
    if actual.dtype.kind == "c":
        return np.maximum(ulp_difference(np.ascontiguousarray(actual.real), np.ascontiguousarray(expected.real)),
                          ulp_difference(np.ascontiguousarray(actual.imag), np.ascontiguousarray(expected.imag)))
    a_mag, a_neg = _magnitude_and_sign(np.ascontiguousarray(actual))
    e_mag, e_neg = _magnitude_and_sign(np.ascontiguousarray(expected))
    same_side = np.where(a_mag >= e_mag, a_mag - e_mag, e_mag - a_mag)
    diff = np.where(a_neg != e_neg, a_mag + e_mag, same_side)
    af = actual.astype(np.float64)
    ef = expected.astype(np.float64)
    finite = np.isfinite(af) & np.isfinite(ef)
    same_bits = (a_mag == e_mag) & (a_neg == e_neg)
    both_nan = np.isnan(af) & np.isnan(ef)
    top = np.uint64(np.iinfo(np.uint64).max)
    return np.where(same_bits | both_nan, np.uint64(0), np.where(finite, diff, top))


def compare(kind: str, actual: np.ndarray, expected: np.ndarray, max_ulp_difference: int = MAX_ULP_DIFFERENCE,
            min_ulp_difference: int = 0, tolerance: float = ALMOST_EQ_TOLERANCE) -> str:
    """'' when `actual` passes check `kind` against `expected`, else the reason it does not."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return f"got {actual.dtype}{list(actual.shape)}, expected {expected.dtype}{list(expected.shape)}"
    if actual.size == 0:
        return ""
    inexact = actual.dtype.kind in "fc" or actual.dtype.name in ("bfloat16",) or "float8" in actual.dtype.name
    if kind == "expect_eq" or not inexact:
        if inexact:
            a, e = actual.astype(np.complex128 if actual.dtype.kind == "c" else np.float64), \
                expected.astype(np.complex128 if actual.dtype.kind == "c" else np.float64)
            bad = ~((a == e) | (np.isnan(a) & np.isnan(e)))
        else:
            bad = actual != expected
        n = int(np.count_nonzero(bad))
        return "" if n == 0 else f"{n} of {actual.size} elements differ (first at {_first(bad)}: " \
                                 f"{actual[bad].ravel()[0]!r} vs {expected[bad].ravel()[0]!r})"
    if kind == "expect_close":
        ulps = ulp_difference(actual, expected)
        bad = (ulps > np.uint64(max_ulp_difference)) | (ulps < np.uint64(min_ulp_difference))
        n = int(np.count_nonzero(bad))
        if n == 0:
            return ""
        return (f"{n} of {actual.size} elements outside {min_ulp_difference}..{max_ulp_difference} ULP (max "
                f"{int(ulps.max())} ULP; first at {_first(bad)}: {actual[bad].ravel()[0]!r} vs "
                f"{expected[bad].ravel()[0]!r})")
    # expect_almost_eq
    parts = [(actual.real, expected.real), (actual.imag, expected.imag)] if actual.dtype.kind == "c" \
        else [(actual, expected)]
    bad = np.zeros(actual.shape, bool)
    for a, e in parts:
        with np.errstate(invalid="ignore", over="ignore"):
            bad |= _not_almost_equal(a, e, tolerance)
    n = int(np.count_nonzero(bad))
    if n == 0:
        return ""
    return (f"{n} of {actual.size} elements differ by more than {tolerance} (first at {_first(bad)}: "
            f"{actual[bad].ravel()[0]!r} vs {expected[bad].ravel()[0]!r})")


def _not_almost_equal(a, e, tolerance: float) -> np.ndarray:
    """Where two real arrays are not equal within `tolerance` (same sign, NaN == NaN)."""
    a = np.asarray(a, np.float64)
    e = np.asarray(e, np.float64)
    nan_ok = np.isnan(a) & np.isnan(e)
    close = np.isfinite(a) & np.isfinite(e) & (np.signbit(a) == np.signbit(e)) & \
        (np.abs(a - e) <= tolerance)
    return ~(nan_ok | (a == e) | close)


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0]) if mask.ndim else ()


# ---- running -----------------------------------------------------------------------------
def _runner(backend: str) -> Callable[[HloModule, list], list]:
    if backend == "interpreter":
        from ..runtime.interpreter import evaluate

        return lambda module, args: evaluate(module, args)

    def run(module: HloModule, args: list) -> list:
        from .jax_api import compile_module

        return list(compile_module(module, backend)(*args))

    return run


def run_file(path: str, backend: str = "interpreter") -> ConformanceResult:
    """Run one test file; never raises for a problem of the file or of hlofuse."""
    name = os.path.basename(path)
    family = op_family(name)
    dtypes = dtypes_from_name(name)
    start = time.perf_counter()

    def result(status: str, reason: str = "") -> ConformanceResult:
        return ConformanceResult(name, status, reason, family, dtypes, time.perf_counter() - start)

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        test = prepare(text, name)
        dtypes = test.dtypes or dtypes
        outputs = _runner(backend)(test.module, test.inputs)
        reasons = []
        for i, (kind, exp, limits) in enumerate(zip(test.kinds, test.expected, test.limits)):
            why = compare(kind, np.asarray(outputs[i]), exp, **limits)
            if why:
                reasons.append(f"check {i} ({kind}): {why}")
        return result("failed" if reasons else "passed", "; ".join(reasons))
    except ConformanceSkip as e:
        return result("skipped", str(e))
    except UnsupportedError as e:
        return result("skipped", _one_line(e))
    except HloError as e:
        return result("failed", _one_line(e))
    except Exception as e:  # noqa: BLE001 - a crash in hlofuse fails this file, not the run
        return result("failed", f"{type(e).__name__}: {_one_line(e)}")


_NAME_TO_HLO = {"bool": "pred", "bfloat16": "bf16", "complex64": "c64", "complex128": "c128"}


def dtypes_from_name(name: str) -> tuple[str, ...]:
    """The element type a test file name starts with (`abs_float32_20_20` -> ('f32',))."""
    m = _DTYPE_WORD.search(os.path.basename(name))
    if m is None:
        return ()
    word = m.group(1)
    if word in _NAME_TO_HLO:
        return (_NAME_TO_HLO[word],)
    hlo = re.sub(r"^uint", "u", re.sub(r"^int", "s", re.sub(r"^float", "f", word)))
    return (hlo,)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300]


class ConformancePathError(HloError):
    """A path given to the conformance runner that names no test file."""


def expand_paths(paths: Iterable[str]) -> list[str]:
    """Files named, plus the `.mlir` files of folders named (sorted). ConformancePathError
    naming every path that does not exist, and every folder without a test file: a typo must
    not pass as a run of zero tests."""
    out: list[str] = []
    missing: list[str] = []
    empty: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(os.path.join(p, n) for n in os.listdir(p) if n.endswith(".mlir"))
            if not found:
                empty.append(p)
            out.extend(found)
        elif os.path.exists(p):
            out.append(p)
        else:
            missing.append(p)
    problems = []
    if missing:
        problems.append(f"no such file or folder: {', '.join(missing)}")
    if empty:
        problems.append(f"no test files (*.mlir) in the folder{'s' if len(empty) > 1 else ''} {', '.join(empty)}")
    if problems:
        raise ConformancePathError("; ".join(problems))
    return out


def run_conformance(paths: Iterable[str], backend: str = "interpreter", jobs: int = 1) -> Iterator[ConformanceResult]:
    """One result per test file found under `paths`, in order (`jobs` worker processes)."""
    files = expand_paths(paths)
    if jobs <= 1 or len(files) < 2:
        for path in files:
            yield run_file(path, backend)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn, not fork: forking a process that runs JAX/XLA threads can deadlock.
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield from pool.map(run_file, files, [backend] * len(files), chunksize=4)


def summary_line(results: list[ConformanceResult]) -> str:
    """`N passed, M failed, K skipped`."""
    counts = Counter(r.status for r in results)
    return f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"


def breakdown(results: list[ConformanceResult]) -> dict[str, dict[str, Counter]]:
    """Counts of passed/failed/skipped by op family and by element type."""
    by_family: dict[str, Counter] = {}
    by_dtype: dict[str, Counter] = {}
    for r in results:
        by_family.setdefault(r.family, Counter())[r.status] += 1
        for d in r.dtypes or ("?",):
            by_dtype.setdefault(d, Counter())[r.status] += 1
    return {"family": by_family, "dtype": by_dtype}


def format_breakdown(results: list[ConformanceResult]) -> str:
    """A table of the breakdown (families with a failure or skip first)."""
    lines = []
    for title, table in breakdown(results).items():
        lines.append(f"by {title}:")
        rows = sorted(table.items(), key=lambda kv: (-(kv[1]["failed"] + kv[1]["skipped"]), kv[0]))
        for key, c in rows:
            lines.append(f"  {key:32s} {c['passed']:4d} passed {c['failed']:4d} failed {c['skipped']:4d} skipped")
    return "\n".join(lines)


def main_conformance(paths: list[str], backend: str = "interpreter", stream: TextIO | None = None,
                     verbose_breakdown: bool = False, jobs: int = 1) -> int:
    """Run the files, print a line per file, each skip reason with its count, (optionally) the
    breakdown by op family and dtype, and the summary line; exit code 0 iff nothing failed
    (2, with the reason on standard error, when a path does not exist or a folder holds no
    test file)."""
    stream = stream or sys.stdout
    try:
        files = expand_paths(paths)
    except ConformancePathError as e:
        print(f"hlofuse: {e}", file=sys.stderr)
        return 2
    results = []
    with Progress(len(files), "conformance", stream=sys.stderr) as bar:  # drawn on a terminal only
        for r in run_conformance(files, backend, jobs):
            results.append(r)
            bar.clear()
            print(r.line(), file=stream, flush=True)
            bar.update(note=summary_line(results))
    skips = Counter(r.reason for r in results if r.status == "skipped")
    for reason, n in skips.most_common():
        print(f"skipped {n}: {reason}", file=stream)
    if verbose_breakdown:
        print(format_breakdown(results), file=stream)
    print(summary_line(results), file=stream)
    return 1 if any(r.status == "failed" for r in results) else 0
