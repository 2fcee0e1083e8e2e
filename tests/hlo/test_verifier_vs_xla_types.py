"""The verifier's element-type rules against XLA's: every elementwise opcode (and compare with each
direction and comparison type) on every element-type class, our verdict (`verify`) must equal
XLA's (parse, convert to StableHLO, compile with XLA:CPU). Where XLA's verifier accepts a
signature that XLA:CPU cannot compile (it crashes), we refuse it and say so: those are listed in
XLA_CPU_CRASHES and checked, in a child process, to still crash.

Bitcast is checked separately: XLA:CPU refuses every bitcast in its input (at layout assignment),
so the rule is XLA's layout-sensitive verifier's: the byte sizes must match.
"""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from hlofuse.hlo.dtypes import element_type, real_type
from hlofuse.hlo.errors import VerifierError
from hlofuse.hlo.opcodes import OPS
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.rule_loader import load_rules
from hlofuse.hlo.verifier import verify
from repo_paths import JAX_CORPUS
from xla_oracle import xla_available

load_rules("shape")

pytestmark = pytest.mark.skipif(not xla_available(), reason="jaxlib's XLA CPU client is not usable here")

# Every element-type class: pred, signed and unsigned (sub-byte and byte+), floats (f8, f16, bf16,
# f32, f64) and complex.
TYPES = ("pred", "s4", "s8", "s32", "s64", "u4", "u8", "u32", "f8e4m3fn", "f8e5m2", "f16", "bf16", "f32",
         "f64", "c64", "c128")
# Elementwise rows left out of the sweep: their result type is an attribute, not a function of the
# operand type (convert, bitcast-convert), they need attributes (reduce-precision) or a second
# operand type (stochastic-convert), or they take any shape (copy).
NOT_SWEPT = {"convert", "bitcast-convert", "reduce-precision", "stochastic-convert", "copy", "compare"}
DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")
COMPARISON_TYPES = ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")

# XLA's shape inference, verifier and StableHLO accept these, but XLA:CPU dies (SIGSEGV) compiling
# them: we refuse them (there is no result to agree with). Never compiled in this process.
XLA_CPU_CRASHES = {("remainder", "c64"), ("remainder", "c128")}
# XLA's newer elementwise functions: jaxlib 0.10's verifier and StableHLO conversion take them on
# floats and complex, and its CPU compiler then says UNIMPLEMENTED (bf16 and f8 compile, through
# float normalization): for these, UNIMPLEMENTED is XLA's verifier accepting the signature.
XLA_CPU_UNIMPLEMENTED = {"sinh", "cosh", "asin", "acos", "asinh", "acosh", "atanh"}
# Registered opcodes jaxlib 0.10's HLO parser does not know yet (newer XLA has them): no verdict
# to compare with (test_opcodes_xla_cannot_parse_yet checks it still cannot).
XLA_UNPARSED = {"atan"}


def _swept_opcodes() -> list[str]:
    return sorted(n for n, i in OPS.items()
                  if i.elementwise and not i.called and i.arity in (1, 2, 3) and n not in NOT_SWEPT | XLA_UNPARSED)


def _result_type(opcode: str, t: str) -> str:
    if opcode in ("abs", "real", "imag"):
        return real_type(element_type(t)).name
    if opcode in ("is-finite", "compare"):
        return "pred"
    if opcode == "complex":
        return "c128" if t == "f64" else "c64"
    return t


def _text(opcode: str, t: str, attrs: str = "") -> str:
    """`opcode` applied to parameters of type `t` (select's predicate is pred) as HLO text."""
    types = ["pred", t, t] if opcode == "select" else [t] * (2 if opcode == "compare" else OPS[opcode].arity)
    params = "".join(f"  p{i} = {u}[4] parameter({i})\n" for i, u in enumerate(types))
    args = ", ".join(f"p{i}" for i in range(len(types)))
    return (f"HloModule m\nENTRY e {{\n{params}  ROOT r = {_result_type(opcode, t)}[4] {opcode}({args}){attrs}\n}}\n")


def _ours(text: str, opcode: str) -> bool:
    """Our verifier's verdict; a refusal must name the instruction and its opcode."""
    try:
        verify(parse_hlo(text))
    except VerifierError as e:
        assert e.instruction == "r" and opcode in str(e), f"refusal does not name r/{opcode}: {e}"
        return False
    return True


_XLA_COMPILE = """
import jax
from jax._src.lib import xla_client as xc
module = xc.hlo.hlo_module_from_text(text)
stablehlo = xc._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
client = jax.devices("cpu")[0].client
client.compile_and_load(stablehlo, client.devices()[:1], xc.CompileOptions())
"""


def _xla(text: str) -> tuple[bool, str]:
    """XLA's verdict: parsed by XLA, converted to StableHLO and compiled by XLA:CPU."""
    try:
        exec(_XLA_COMPILE, {"text": text})  # the same code runs in a child process for the crashes
    except Exception as e:  # noqa: BLE001 - any refusal, at whichever stage, is XLA's "no"
        return False, str(e).splitlines()[0][:200]
    return True, ""


def _mismatches(cases: list[tuple[str, str, str, str]]) -> list[str]:
    """(label, opcode, type, text) cases whose verdicts differ between us and XLA."""
    out = []
    for label, opcode, t, text in cases:
        ours = _ours(text, opcode)
        if (opcode, t) in XLA_CPU_CRASHES:
            if ours:
                out.append(f"{label}: we accept what XLA:CPU crashes on")
            continue
        xla, why = _xla(text)
        if not xla and opcode in XLA_CPU_UNIMPLEMENTED and why.startswith("UNIMPLEMENTED"):
            xla = True  # verified, then not compiled (XLA_CPU_UNIMPLEMENTED)
        if ours != xla:
            out.append(f"{label}: ours={'accept' if ours else 'refuse'} xla={'accept' if xla else 'refuse'} {why}")
    return out


@pytest.mark.parametrize("opcode", _swept_opcodes())
def test_elementwise_type_verdicts_match_xla(opcode):
    cases = [(f"{opcode}({t})", opcode, t, _text(opcode, t)) for t in TYPES]
    bad = _mismatches(cases)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("opcode", sorted(XLA_UNPARSED))
def test_opcodes_xla_cannot_parse_yet(opcode):
    """Left out of the sweep because jaxlib's parser refuses them whatever the type: once it
    reads them, they belong in the sweep."""
    xla, why = _xla(_text(opcode, "f32"))
    assert not xla and "Syntax error" in why, why


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_compare_direction_verdicts_match_xla(direction):
    """Every direction on every type, complex LT/LE/GT/GE included (XLA orders complex values)."""
    cases = [(f"compare-{direction}({t})", "compare", t, _text("compare", t, f", direction={direction}"))
             for t in TYPES]
    bad = _mismatches(cases)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("ctype", COMPARISON_TYPES)
def test_comparison_type_must_fit_the_element_type_as_in_xla(ctype):
    """XLA's verifier takes UNSIGNED for pred and unsigned, SIGNED for signed, FLOAT or TOTALORDER
    for floats and only FLOAT for complex."""
    cases = [(f"compare-LT-{ctype}({t})", "compare", t, _text("compare", t, f", direction=LT, type={ctype}"))
             for t in TYPES]
    bad = _mismatches(cases)
    assert not bad, "\n".join(bad)


def test_the_sweep_covers_the_opcodes_of_the_brief():
    """The ops whose type rules were in question are all swept (NOT_SWEPT removes none of them)."""
    wanted = {"compare", "remainder", "cbrt", "logistic", "erf", "tan", "atan2", "exponential-minus-one",
              "log-plus-one", "rsqrt", "sqrt", "round-nearest-afz", "round-nearest-even", "floor", "ceil",
              "sign", "abs", "is-finite", "popcnt", "count-leading-zeros", "shift-left",
              "shift-right-arithmetic", "shift-right-logical", "not", "and", "or", "xor"}
    assert wanted - {"compare"} <= set(_swept_opcodes())


@pytest.mark.parametrize("opcode, t", sorted(XLA_CPU_CRASHES))
def test_refused_because_xla_cpu_crashes_on_it(opcode, t):
    """The signatures refused only because XLA:CPU crashes still crash it (in a child process);
    when XLA learns them, this fails and the refusal should go."""
    text = _text(opcode, t)
    code = f"text = {text!r}\nprint('COMPILING', flush=True)\n" + _XLA_COMPILE
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode < 0 and p.stdout.strip() == "COMPILING", \
        f"XLA:CPU no longer crashes on {opcode}({t}): rc={p.returncode} {p.stdout[-300:]} {p.stderr[-300:]}"
    with pytest.raises(VerifierError, match="XLA:CPU cannot compile it"):
        verify(parse_hlo(text))


# ---- bitcast --------------------------------------------------------------------------------------

def _bitcast_text(src: str, dst: str) -> str:
    return f"HloModule m\nENTRY e {{\n  a = {src} parameter(0)\n  ROOT r = {dst} bitcast(a)\n}}\n"


def _numpy_bytes(shape_text: str) -> int:
    """Bytes of an array `t[d0,...]{...}` from numpy's itemsize (a packed `E(n)` layout: n bits each)."""
    name, rest = shape_text.split("[", 1)
    dims = [int(d) for d in rest.split("]")[0].split(",") if d]
    count = math.prod(dims)
    if ":E(" in rest:
        bits = int(rest.split(":E(")[1].split(")")[0])
        return -(-count * bits // 8)
    return count * np.dtype(element_type(name).numpy).itemsize


BITCASTS = [
    ("f32[4]", "s32[4]"),  # same width: XLA's optimized HLO holds these (see below)
    ("f32[2,3]{1,0}", "f32[3,2]{0,1}"),  # a transpose in memory
    ("f32[4]{0}", "f32[2,2]{1,0}"),
    ("c128[4]{0}", "c64[4,2]{1,0}"),  # element width changes, byte size kept
    ("f32[4]{0}", "f16[4,2]{1,0}"),
    ("u8[4]{0}", "pred[4]{0}"),
    ("f32[4]", "f32[5]"),  # size changes
    ("f32[4]", "f16[4]"),
    ("s4[8]", "s8[4]"),  # unpacked s4 takes a byte per element, as in XLA
    ("s4[8]{0:E(4)}", "s8[4]"),  # packed s4: 4 bytes
    ("s4[8]", "u4[8]"),
]


@pytest.mark.parametrize("src, dst", BITCASTS)
def test_bitcast_needs_equal_byte_sizes(src, dst):
    text = _bitcast_text(src, dst)
    want = _numpy_bytes(src) == _numpy_bytes(dst)
    assert _ours(text, "bitcast") == want


def test_xla_optimized_hlo_bitcasts_change_element_types():
    """Why an element-type change must stay accepted: XLA's own optimized HLO (sort_multi.opt.hlo,
    written by JAX's XLA) bitcasts f32 to s32, and the module verifies."""
    path = JAX_CORPUS / "sort_multi.opt.hlo"
    module = parse_hlo(path.read_text())
    changes = [i for c in module.computations_post_order() for i in c.instructions
               if i.opcode == "bitcast" and i.operands[0].shape.dtype != i.shape.dtype]
    assert changes, "the file no longer holds a type-changing bitcast"
    verify(module)


@pytest.mark.parametrize("src, dst", [("f32[4]", "s32[4]"), ("f32[2,3]{1,0}", "f32[3,2]{0,1}")])
def test_xla_cpu_refuses_every_input_bitcast_alike(src, dst):
    """Why XLA:CPU is not the criterion for bitcast: its layout assignment refuses a type-changing
    bitcast and a same-type one alike ("Unexpected bitcast operation seen during layout assignment")."""
    ok, why = _xla(_bitcast_text(src, dst))
    assert not ok and "Unexpected bitcast" in why, why
    assert _ours(_bitcast_text(src, dst), "bitcast")
