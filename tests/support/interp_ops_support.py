"""Shared helpers of the interpreter heavy-op tests (test_interpreter_ops*.py): build one
instruction over parameters and run its reference rule, a stub interpreter for the small
scalar computations rules call, random inputs and a dtype-strict comparison."""
from __future__ import annotations

import jax
import numpy as np
import pytest
from jax import lax

from hlofuse.hlo.attributes import Window, WindowDimension
from hlofuse.hlo.dtypes import from_numpy
from hlofuse.hlo.ir import HloComputation, HloInstruction
from hlofuse.hlo.opcodes import op_info
from hlofuse.hlo.parser import parse_hlo
from hlofuse.hlo.shapes import ArrayShape, array
from hlofuse.hlo.rule_loader import load_rules
from hlofuse.runtime.interpreter import evaluate

load_rules("reference")  # registers every reference rule
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def x64():
    """64-bit types in JAX for the duration of one test only (the flag is process-wide)."""
    with jax.enable_x64(True):
        yield


def shape_of(x) -> ArrayShape:
    x = np.asarray(x)
    return array(from_numpy(x.dtype), x.shape)


def param(shape, number: int) -> HloInstruction:
    p = HloInstruction("parameter", shape, name=f"p{number}")
    p.parameter_number = number
    return p


def instruction(opcode, out_shape, operand_shapes, **attrs) -> HloInstruction:
    ops = [param(s, i) for i, s in enumerate(operand_shapes)]
    return HloInstruction(opcode, out_shape, ops, attrs, name=f"{opcode}.0")


class StubInterp:
    """Evaluates the small scalar computations (combiners, comparators) the rules call."""

    BINARY = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
              "subtract": np.subtract, "and": np.logical_and, "or": np.logical_or}
    CMP = {"LT": np.less, "GT": np.greater, "LE": np.less_equal, "GE": np.greater_equal,
           "EQ": np.equal, "NE": np.not_equal}

    # It evaluates combiners in IEEE arithmetic, as the interpreter's "keep" mode does (the
    # rules' fast paths read this to decide whether recognised combiners flush).
    denormals = "keep"

    def __init__(self) -> None:
        self.calls = 0

    def call(self, comp: HloComputation, args):
        self.calls += 1
        env = {}
        for inst in comp.post_order():
            ops = [env[id(o)] for o in inst.operands]
            if inst.opcode == "parameter":
                v = np.asarray(args[inst.parameter_number])
            elif inst.opcode == "constant":
                v = inst.literal
            elif inst.opcode in self.BINARY:
                v = self.BINARY[inst.opcode](*ops).astype(inst.shape.dtype.numpy)
            elif inst.opcode == "compare":
                v = self.CMP[inst.attrs["direction"]](*ops)
            elif inst.opcode == "select":
                v = np.where(*ops)
            elif inst.opcode == "tuple":
                v = tuple(ops)
            else:
                raise NotImplementedError(inst.opcode)
            env[id(inst)] = v
        return env[id(comp.root)]


def run(inst: HloInstruction, *args, interp=None):
    return op_info(inst.opcode).reference(inst, [np.asarray(a) for a in args], interp or StubInterp())


def scalar_computation(name: str, body, n_params: int, dtype="f32") -> HloComputation:
    """A computation over `n_params` scalars whose root is `body(params)` (builds the instructions)."""
    comp = HloComputation(name)
    params = [comp.add_parameter(array(dtype, ()), f"x{i}") for i in range(n_params)]
    root = body(comp, params)
    comp.root = root
    return comp


def binary_comp(opcode: str, dtype="f32", swap=False) -> HloComputation:
    def body(comp, p):
        a, b = (p[1], p[0]) if swap else (p[0], p[1])
        return comp.add_instruction(HloInstruction(opcode, array(dtype, ()), [a, b]))
    return scalar_computation(opcode, body, 2, dtype)


def rand(shape, dtype=np.float32, low=-3, high=3):
    if np.issubdtype(np.dtype(dtype), np.integer):
        return RNG.integers(low, high, size=shape).astype(dtype)
    return RNG.uniform(low, high, size=shape).astype(dtype)


def close(actual, expected, rtol=1e-5, atol=1e-5):
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_allclose(actual.astype(np.float64) if actual.dtype.kind == "V" else actual,
                               expected.astype(np.float64) if expected.dtype.kind == "V" else expected,
                               rtol=rtol, atol=atol)


HIGHEST = lax.Precision.HIGHEST



def make_window(sizes, strides=None, padding=None, base=None, dil=None) -> Window:
    n = len(sizes)
    strides, base, dil = strides or (1,) * n, base or (1,) * n, dil or (1,) * n
    padding = padding or ((0, 0),) * n
    return Window(tuple(WindowDimension(size=k, stride=s, padding_low=p[0], padding_high=p[1],
                                        window_dilation=w, base_dilation=b)
                        for k, s, p, b, w in zip(sizes, strides, padding, base, dil)))


def opaque_add(dtype="f32"):
    """add written so that it is not recognised: select(x1 == x1, x0 + x1, x0)."""
    def body(comp, p):
        s = array(dtype, ())
        total = comp.add_instruction(HloInstruction("add", s, [p[0], p[1]]))
        same = comp.add_instruction(HloInstruction("compare", array("pred", ()), [p[1], p[1]], {"direction": "EQ"}))
        return comp.add_instruction(HloInstruction("select", s, [same, total, p[0]]))
    return scalar_computation("opaque_add", body, 2, dtype)


def pred_constant(comp, value: bool):
    c = HloInstruction("constant", array("pred", ()))
    c.literal = np.array(value)
    return comp.add_instruction(c)


def run_hlo(body: str, *args):
    """Evaluate an entry computation whose instructions are `body` (parameters p0, p1, ...)."""
    return evaluate(parse_hlo(f"HloModule test\n\nENTRY main {{\n{body}\n}}\n"), list(args))


def hlo_type(x) -> str:
    return shape_of(x).to_text(with_layout=False)


def spd_matrix(n, batch=(), dtype=np.float64):
    m = rand((*batch, n, n), np.float64)
    if np.dtype(dtype).kind == "c":
        m = m + 1j * rand((*batch, n, n), np.float64)
    a = m @ np.conj(np.swapaxes(m, -1, -2)) + n * np.eye(n)
    return a.astype(dtype)
