"""Numeric tests generated from the op table (STYLE.md 9; JAX's op records): every elementwise
row, on every element type its shape rule accepts, with inputs drawn from the row's `domain`,
compiled for cpu and gpu-emulated and compared with the numpy interpreter; and constant folding
of every foldable row gives the interpreter's value bit for bit (or is refused by the row).

Nothing here names an opcode except the attributes a few rows need: adding a row adds its tests.
"""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.hlo.dtypes import ElementType, from_numpy
from hlofuse.hlo.dtypes import element_type as by_name
from hlofuse.hlo.errors import UnsupportedError, VerifierError
from hlofuse.hlo.ir import HloComputation, HloInstruction, HloModule
from hlofuse.hlo.opcodes import OPS
from hlofuse.hlo.rule_loader import load_rules
from hlofuse.hlo.shape_inference import infer_shape
from hlofuse.hlo.shapes import array
from hlofuse.passes.constant_folding import ConstantFolding
from hlofuse.runtime.compare import compare_arrays
from hlofuse.runtime.interpreter import evaluate

TYPES = ("pred", "s32", "u8", "f32", "c64")  # one of each kind, and one unsigned width
N = 16  # elements per operand
ATTRS = {"compare": [{"direction": d} for d in ("EQ", "NE", "LT", "LE", "GT", "GE")],
         "reduce-precision": [{"exponent_bits": 5, "mantissa_bits": 10}]}

load_rules("shape")
load_rules("reference")


def _operand_types(opcode: str, t: str) -> list[str] | None:
    """The operand types of `opcode` applied to element type `t` (None: no such signature)."""
    info = OPS[opcode]
    if opcode == "select":
        return ["pred", t, t]
    if opcode == "stochastic-convert":
        return None  # (value, random bits) of two types: tests/passes/test_stochastic_convert.py
    return [t] * info.arity


def _probe(opcode: str, types: list[str], attrs: dict) -> HloInstruction | None:
    """`opcode` on parameters of `types` with its shape inferred, or None where the shape rule refuses."""
    params = [HloInstruction("parameter", array(t, (N,))) for t in types]
    inst = HloInstruction(opcode, array(types[-1], (N,)), params, dict(attrs))
    try:
        inst.shape = infer_shape(inst)
    except VerifierError:
        return None
    return inst


def _cases() -> list:
    out = []
    for opcode, info in sorted(OPS.items()):
        if not info.elementwise or info.called or info.arity < 1:
            continue
        if "reference" in info.unsupported:
            continue  # nothing to compare with; test_registry checks the reason is given
        for t in TYPES:
            types = _operand_types(opcode, t)
            for k, attrs in enumerate(ATTRS.get(opcode, [{}])):
                if types is not None and _probe(opcode, types, attrs) is not None:
                    out.append(pytest.param(opcode, tuple(types), attrs, id=f"{opcode}-{t}-{k}"))
    return out


CASES = _cases()


def test_every_elementwise_row_is_covered():
    covered = {c.values[0] for c in CASES}
    rows = {n for n, i in OPS.items() if i.elementwise and not i.called and "reference" not in i.unsupported}
    rows -= {"stochastic-convert"}  # operands of two types: tests/passes/test_stochastic_convert.py
    assert rows == covered, f"rows without a generated numeric test: {sorted(rows - covered)}"


def sample(et: ElementType, domain: str, rng: np.random.Generator, n: int = N) -> np.ndarray:
    """`n` values of element type `et` from a row's input domain (any|positive|unit|nonzero|int)."""
    if et.kind == "pred":
        return rng.integers(0, 2, n).astype(bool)
    if et.kind in ("sint", "uint"):
        lo = {"positive": 1, "nonzero": 1}.get(domain, 0 if et.kind == "uint" else -20)
        values = rng.integers(lo, 40, n)
        if domain == "nonzero" and et.kind == "sint":
            values = values * rng.choice([-1, 1], n)
        return values.astype(et.numpy)
    if et.kind == "complex":
        part = from_numpy(np.dtype(et.numpy).type(0).real.dtype)
        return (sample(part, domain, rng, n) + 1j * sample(part, domain, rng, n)).astype(et.numpy)
    if domain == "positive":
        values = rng.uniform(0.1, 4.0, n)
    elif domain == "at_least_one":
        values = rng.uniform(1.0, 4.0, n)
    elif domain == "unit":
        values = rng.uniform(-0.9, 0.9, n)
    elif domain == "nonzero":
        values = rng.uniform(0.5, 4.0, n) * rng.choice([-1, 1], n)
    else:
        values = rng.uniform(-4.0, 4.0, n)
    return values.astype(et.numpy)


def _module(opcode: str, types: tuple, attrs: dict) -> HloModule:
    m = HloModule(f"{opcode}_numeric")
    c = HloComputation("entry")
    m.add_computation(c, entry=True)
    params = [c.add_parameter(array(t, (N,))) for t in types]
    inst = HloInstruction(opcode, array(types[-1], (N,)), params, dict(attrs), "r")
    inst.shape = infer_shape(inst)
    c.root = c.add_instruction(inst)
    return m


def _args(opcode: str, types: tuple, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    domain = OPS[opcode].domain
    # The row's domain is that of its (last) value operands; a select's predicate is any pred.
    return [sample(by_name(t), domain if k == len(types) - 1 or opcode != "select" else "any", rng)
            for k, t in enumerate(types)]


# Signatures the shape rule accepts (as XLA does: tests/hlo/test_verifier_vs_xla_types.py) but a stage
# refuses by name (UnsupportedError): checked to be refused that way, so that one that starts
# working (or crashing) shows up here. A key may name the compare direction, e.g.
# {("compare", "c64", "LT"): "interpreter"}. None now: logistic of complex and complex
# LT/LE/GT/GE, which XLA:CPU runs, run everywhere (tests/emitters/test_complex_ops.py checks
# them against XLA). The complex inverse trigonometric and hyperbolic functions run in the
# interpreter (numpy's principal branches) only; XLA:CPU compiles none of these functions.
REFUSED: dict[tuple, str] = {(op, "c64"): "backend" for op in ("asin", "acos", "atan", "asinh", "acosh", "atanh")}


def _refused(opcode: str, types: tuple, attrs: dict) -> str | None:
    """The stage REFUSED names for this signature (None: every stage runs it)."""
    return REFUSED.get((opcode, types[-1], attrs.get("direction")), REFUSED.get((opcode, types[-1])))


@pytest.mark.parametrize("backend", ["cpu", "gpu-emulated"])
@pytest.mark.parametrize("opcode, types, attrs", CASES)
def test_elementwise_row_matches_the_interpreter(opcode, types, attrs, backend):
    args = _args(opcode, types)
    refused = _refused(opcode, types, attrs)
    with np.errstate(all="ignore"):
        if refused == "interpreter":
            with pytest.raises(UnsupportedError, match=opcode):
                evaluate(_module(opcode, types, attrs), args)
            return
        want = evaluate(_module(opcode, types, attrs), args)
        if refused == "backend":
            with pytest.raises(UnsupportedError, match=opcode):
                hlofuse.compile(_module(opcode, types, attrs), target=backend)(*args)
            return
        got = hlofuse.compile(_module(opcode, types, attrs), target=backend)(*args)
    assert len(got) == len(want) == 1
    result = compare_arrays(np.asarray(got[0]), np.asarray(want[0]))
    assert result.ok, f"{opcode}{list(types)} on {backend}: {result}; inputs {[a.tolist() for a in args]}"


# ---- constant folding through the rows' reference rules ---------------------------------------

# A signature the interpreter refuses has no value to fold to (the row test checks the refusal).
FOLD_CASES = [c for c in CASES if OPS[c.values[0]].fold is not None and _refused(*c.values) != "interpreter"]


def _constant_module(opcode: str, types: tuple, attrs: dict, args: list[np.ndarray]) -> HloModule:
    m = HloModule(f"{opcode}_fold")
    c = HloComputation("entry")
    m.add_computation(c, entry=True)
    operands = []
    for t, a in zip(types, args):
        const = HloInstruction("constant", array(t, (N,)), name="c")
        const.literal = a
        operands.append(c.add_instruction(const))
    inst = HloInstruction(opcode, array(types[-1], (N,)), operands, dict(attrs), "r")
    inst.shape = infer_shape(inst)
    c.root = c.add_instruction(inst)
    return m


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


@pytest.mark.parametrize("opcode, types, attrs", FOLD_CASES)
def test_folding_a_row_gives_the_interpreters_value(opcode, types, attrs):
    for seed in range(3):
        args = _args(opcode, types, seed)
        module = _constant_module(opcode, types, attrs, args)
        root = module.entry.root
        allowed = OPS[opcode].fold(root, args)
        want = evaluate(module, [])[0]
        changed = ConstantFolding(max_elements=N * len(types)).run(module)
        # 4-bit integers and 8-bit floats are left alone (none among TYPES; kept for new types).
        narrow = any(by_name(t).bits < 8 or by_name(t).kind == "float" and by_name(t).bits == 8
                     for t in (*types, root.shape.dtype.name)) and OPS[opcode].kind != "data"
        assert changed == (allowed and not narrow), f"{opcode}{list(types)}: folded={changed}, row allows {allowed}"
        if changed:
            got = module.entry.root
            assert got.opcode == "constant"
            folded = np.asarray(got.literal).reshape(want.shape).astype(want.dtype, copy=False)
            assert _bits(folded) == _bits(want), f"{opcode}{list(types)}: {folded} != interpreter {want}"


def test_folding_covers_every_foldable_elementwise_row():
    foldable = {n for n, i in OPS.items() if i.fold is not None and i.elementwise}
    assert foldable == {c.values[0] for c in FOLD_CASES}
