"""No input may crash the process: every elementwise op on every element type, and random
small elementwise modules (rank 0, [0], [1], [3], [2,3], [17]; fused and unfused; the CPU
and the emulated GPU), run in a child process (tests/support/crash_worker.py).

A crash of compiled code (SIGSEGV from a call to a builtin the JIT did not provide, as an
f16 atan2 and an f64 -> f16 convert did; SIGFPE from an integer division; a store past a
buffer) kills the child, and the test names the module that did it. The worker also runs
the interpreter and compares: with HLOFUSE_NO_CRASH_STRICT=1 an exception or a different
result fails the random test too (a local search; those are other classes of bugs).

The CI variant is short and derandomized; a search runs many more examples with
HLOFUSE_NO_CRASH_EXAMPLES=3000 (and HLOFUSE_NO_CRASH_RANDOM=1 for fresh ones).
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlofuse.hlo.opcodes import OPS
from repo_paths import SUPPORT

_EXAMPLES = int(os.environ.get("HLOFUSE_NO_CRASH_EXAMPLES", "60"))
_DERANDOMIZE = os.environ.get("HLOFUSE_NO_CRASH_RANDOM", "") != "1"
_STRICT = os.environ.get("HLOFUSE_NO_CRASH_STRICT", "") == "1"

TYPES = ("pred", "s4", "u4", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64",
         "f8e4m3fn", "f8e5m2", "c64", "c128")
SHAPES = ((), (1,), (0,), (3,), (2, 3), (17,))
_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")
# Elementwise opcodes whose operands all have one type (the registry's unary and binary rows);
# the others are generated with their own forms below.
_SPECIAL = {"convert", "bitcast-convert", "reduce-precision", "complex", "stochastic-convert", "compare",
            "select", "clamp", "map"}
UNARY = tuple(n for n, i in OPS.items() if i.elementwise and i.arity == 1 and n not in _SPECIAL)
BINARY = tuple(n for n, i in OPS.items() if i.elementwise and i.arity == 2 and n not in _SPECIAL)
_BITS = {"pred": 8, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "f16": 16, "bf16": 16, "s32": 32,
         "u32": 32, "f32": 32, "s64": 64, "u64": 64, "f64": 64, "f8e4m3fn": 8, "f8e5m2": 8, "c64": 64,
         "c128": 128}


def _shape(ty: str, dims: tuple[int, ...]) -> str:
    return f"{ty}[{','.join(map(str, dims))}]"


@functools.lru_cache(maxsize=None)
def result_type(form: str, ty: str) -> str | None:
    """The element type of `form` (an instruction right-hand side over operands a, b of type
    `ty`, with {out} for its result type) as the verifier accepts it, or None if it rejects
    every candidate: the op's applicability comes from shape inference, not a list here."""
    from hlofuse.hlo.parser import parse_hlo
    from hlofuse.hlo.verifier import verify

    component = {"c64": "f32", "c128": "f64"}.get(ty, ty)
    for out in dict.fromkeys((ty, "pred", component)):
        text = (f"HloModule m\nENTRY e {{\n  a = {ty}[2] parameter(0)\n  b = {ty}[2] parameter(1)\n"
                f"  ROOT r = {out}[2] {form.format(out=out)}\n}}\n")
        try:
            verify(parse_hlo(text))
        except Exception:  # noqa: BLE001 - any rejection means "not this result type"
            continue
        return out
    return None


@st.composite
def random_case(draw) -> dict:
    """A request for tests/support/crash_worker.py: a random module of up to 5 elementwise
    instructions over one shape, its backend, fusion on or off, and an input seed."""
    dims = draw(st.sampled_from(SHAPES))
    ty0 = draw(st.sampled_from(TYPES))
    nparams = draw(st.integers(1, 2))
    nodes = [(f"p{i}", ty0) for i in range(nparams)]
    lines = [f"  p{i} = {_shape(ty0, dims)} parameter({i})" for i in range(nparams)]
    for k in range(draw(st.integers(1, 5))):
        name = f"n{k}"
        src, ty = nodes[draw(st.integers(0, len(nodes) - 1))]
        same = [n for n, t in nodes if t == ty]
        other = same[draw(st.integers(0, len(same) - 1))]
        kind = draw(st.sampled_from(("unary", "binary", "binary", "compare", "convert", "bitcast", "select",
                                     "clamp", "constant")))
        line = None
        if kind == "unary":
            op = draw(st.sampled_from(UNARY))
            out = result_type(f"{op}(a)", ty)
            if out is not None:
                line, ty = f"{op}({src})", out
        elif kind == "binary":
            op = draw(st.sampled_from(BINARY))
            out = result_type(f"{op}(a, b)", ty)
            if out is not None:
                line, ty = f"{op}({src}, {other})", out
        elif kind == "compare":
            direction = draw(st.sampled_from(_DIRECTIONS))
            if result_type(f"compare(a, b), direction={direction}", ty) is not None:
                line, ty = f"compare({src}, {other}), direction={direction}", "pred"
        elif kind == "convert":
            out = draw(st.sampled_from(TYPES))
            if result_type("convert(a)", ty) is not None and _convertible(ty, out):
                line, ty = f"convert({src})", out
        elif kind == "bitcast":
            outs = [t for t in TYPES if _BITS[t] == _BITS[ty] and t != "pred" and ty != "pred" and _BITS[t] >= 8]
            if outs:
                out = draw(st.sampled_from(outs))
                if _bitcast_ok(ty, out):
                    line, ty = f"bitcast-convert({src})", out
        elif kind == "select":
            preds = [n for n, t in nodes if t == "pred"]
            if preds:
                line = f"select({draw(st.sampled_from(preds))}, {src}, {other})"
        elif kind == "clamp":
            if result_type("clamp(a, a, b)", ty) is not None:
                line = f"clamp({other}, {src}, {other})"
        elif kind == "constant":
            value = draw(st.sampled_from(("0", "1", "-1", "2", "nan", "inf", "-inf", "65504", "0.5", "-0")))
            const = _constant(ty, value)
            bop = draw(st.sampled_from(BINARY))
            out = result_type(f"{bop}(a, b)", ty)
            if const is not None and out is not None:
                lines.append(f"  c{k} = {ty}[] constant({const})")
                lines.append(f"  {name}b = {_shape(ty, dims)} broadcast(c{k}), dimensions={{}}")
                line, ty = f"{bop}({src}, {name}b)", out
        if line is None:
            continue
        lines.append(f"  {name} = {_shape(ty, dims)} {line}")
        nodes.append((name, ty))
    last, last_ty = nodes[-1]
    if draw(st.booleans()) and len(nodes) > 1:
        extra, extra_ty = nodes[draw(st.integers(0, len(nodes) - 2))]
        lines.append(f"  ROOT out = ({_shape(last_ty, dims)}, {_shape(extra_ty, dims)}) tuple({last}, {extra})")
    else:
        lines.append(f"  ROOT out = {_shape(last_ty, dims)} copy({last})")
    text = "HloModule m\nENTRY e {\n" + "\n".join(lines) + "\n}\n"
    return {"text": text, "target": draw(st.sampled_from(("cpu", "gpu-emulated"))), "fusion": draw(st.booleans()),
            "seed": draw(st.integers(0, 2 ** 16))}


def _convertible(src: str, dst: str) -> bool:
    """XLA converts between any two non-complex types, and into complex from anything."""
    return not (src in ("c64", "c128") and dst not in ("c64", "c128"))


@functools.lru_cache(maxsize=None)
def _bitcast_ok(src: str, dst: str) -> bool:
    return result_type("bitcast-convert(a)", src) is not None and _verifies(
        f"HloModule m\nENTRY e {{\n  a = {src}[2] parameter(0)\n  ROOT r = {dst}[2] bitcast-convert(a)\n}}\n")


@functools.lru_cache(maxsize=None)
def _constant(ty: str, value: str) -> str | None:
    """`value` as a constant literal of `ty`, or None when `ty` cannot hold it."""
    if ty == "pred":
        return {"0": "false", "1": "true"}.get(value)
    if ty in ("c64", "c128"):
        return f"({value}, 0)" if value not in ("nan", "inf", "-inf") else None
    text = f"HloModule m\nENTRY e {{\n  ROOT c = {ty}[] constant({value})\n}}\n"
    return value if _verifies(text) else None


def _verifies(text: str) -> bool:
    from hlofuse.hlo.parser import parse_hlo
    from hlofuse.hlo.verifier import verify

    try:
        verify(parse_hlo(text))
    except Exception:  # noqa: BLE001
        return False
    return True


def every_op_entries(ty: str, dims: tuple[int, ...]) -> list[tuple[list[str], list[tuple[str, str]]]]:
    """Every elementwise opcode the verifier accepts on `ty` (a convert to, and a
    bitcast-convert to, every type it allows; compare, select, clamp) applied to parameters
    x and y: a list of (instruction lines, [(output name, output type)]) entries."""
    entries = []

    def add(name: str, out_ty: str, rhs: str, before: tuple[str, ...] = ()) -> None:
        entries.append(([*before, f"  {name} = {_shape(out_ty, dims)} {rhs}"], [(name, out_ty)]))

    for op in UNARY:
        out = result_type(f"{op}(a)", ty)
        if out is not None:
            add(f"u_{op.replace('-', '_')}", out, f"{op}(x)")
    for op in BINARY:
        out = result_type(f"{op}(a, b)", ty)
        if out is not None:
            add(f"b_{op.replace('-', '_')}", out, f"{op}(x, y)")
    if result_type("compare(a, b), direction=LT", ty) is not None:
        add("sel", ty, "select(lt, x, y)", (f"  lt = {_shape('pred', dims)} compare(x, y), direction=LT",))
    if result_type("clamp(a, a, b)", ty) is not None:
        add("clamp", ty, "clamp(y, x, y)")
    for out in TYPES:
        if _convertible(ty, out) and result_type("convert(a)", ty) is not None:
            add(f"cv_{out}", out, "convert(x)")
        if out != ty and _BITS[out] == _BITS[ty] and _bitcast_ok(ty, out):
            add(f"bc_{out}", out, "bitcast-convert(x)")
    return entries


def entries_module(ty: str, dims: tuple[int, ...], entries) -> str:
    """The module computing `entries` (see every_op_entries), all outputs in the root tuple."""
    lines = [f"  x = {_shape(ty, dims)} parameter(0)", f"  y = {_shape(ty, dims)} parameter(1)"]
    outs = []
    for body, results in entries:
        lines += body
        outs += results
    lines.append(f"  ROOT out = ({', '.join(_shape(t, dims) for _, t in outs)}) tuple({', '.join(n for n, _ in outs)})")
    return f"HloModule every_{ty}\nENTRY e {{\n" + "\n".join(lines) + "\n}\n"


def crashing_entries(worker: CrashWorker, ty: str, dims: tuple[int, ...], target: str, fusion: bool,
                     entries) -> list[str]:
    """Run `entries` as one module; on a crash, or an error or unsupported op that keeps the
    others from running, bisect: the crashes found, each as its module and the worker's words."""
    text = entries_module(ty, dims, entries)
    reply = worker.run({"text": text, "target": target, "fusion": fusion, "seed": len(entries)})
    if reply["status"] in ("ok", "mismatch") or (len(entries) == 1 and reply["status"] != "crash"):
        return []
    if len(entries) == 1:
        return [f"{reply['detail']}\n{text}"]
    half = len(entries) // 2
    return (crashing_entries(worker, ty, dims, target, fusion, entries[:half])
            + crashing_entries(worker, ty, dims, target, fusion, entries[half:]))


class CrashWorker:
    """tests/support/crash_worker.py as a child process; restarted after it dies."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        here = str(SUPPORT)
        return subprocess.Popen([sys.executable, str(SUPPORT / "crash_worker.py")], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=here)

    def run(self, case: dict) -> dict:
        """The worker's reply to `case`, or {"status": "crash", "detail": ...} if it died."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if line:
            return json.loads(line)
        rc = self.proc.wait()
        err = self.proc.stderr.read()[-2000:]
        self.proc = None
        return {"status": "crash", "detail": f"worker exited with status {rc}\n{err}"}

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def worker():
    w = CrashWorker()
    yield w
    w.close()


@settings(max_examples=_EXAMPLES, derandomize=_DERANDOMIZE, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=random_case())
def test_random_elementwise_modules_do_not_crash(worker, case):
    """A random module runs without killing the process; with HLOFUSE_NO_CRASH_STRICT=1 (a
    local search) it must also raise nothing and give the interpreter's results."""
    reply = worker.run(case)
    allowed = ("ok", "unsupported") if _STRICT else ("ok", "unsupported", "error", "mismatch")
    assert reply["status"] in allowed, (
        f"{reply['status']} on {case['target']} (fusion {'on' if case['fusion'] else 'off'}, seed {case['seed']}):\n"
        f"{reply['detail']}\n{case['text']}")


# (backend, fusion, shape): fused, every op is one output of one multi-output loop kernel (over
# a vectorized loop with a remainder, or a scalar); unfused, each op is a kernel of its own.
_EVERY_OP_CONFIGS = [("cpu", True, (17,)), ("cpu", False, ()), ("gpu-emulated", True, ()),
                     ("gpu-emulated", True, (0,))]


@pytest.mark.parametrize("target,fusion,dims", _EVERY_OP_CONFIGS)
@pytest.mark.parametrize("ty", TYPES)
def test_every_elementwise_op_on_every_type_runs_without_crashing(worker, ty, target, fusion, dims):
    """The class of the f16 atan2 segfault (a conversion LLVM lowers to a builtin the JIT did
    not have): every op and conversion of every element type compiles and runs in a process
    that survives."""
    entries = every_op_entries(ty, dims)
    assert entries, f"no elementwise op accepted on {ty}"
    crashes = crashing_entries(worker, ty, dims, target, fusion, entries)
    assert not crashes, "\n\n".join(crashes)
