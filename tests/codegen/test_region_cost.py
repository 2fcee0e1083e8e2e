"""The driver's thread rule (codegen/region_cost.py): a kernel gets a thread per REGION_NS of its
estimated one-thread time, priced per kernel kind; the driver's text follows the rule, and the
results do not depend on it."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import region_cost
from hlofuse.codegen.driver import emit_driver
from hlofuse.codegen.region_cost import (
    ELEMENT_NS, REDUCED_ELEMENT_NS, REGION_NS, TRANSCENDENTAL_NS, is_transcendental, kernel_ns, region_threads,
)
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.hlo.parser import parse_hlo


def _unary(op: str, n: int) -> str:
    return (f"HloModule u\nENTRY e {{\n  x = f32[{n}] parameter(0)\n  c = f32[] constant(1.5)\n"
            f"  b = f32[{n}] broadcast(c), dimensions={{}}\n  y = f32[{n}] multiply(x, b)\n"
            f"  ROOT t = f32[{n}] {op}(y)\n}}\n")


def _row_sums(rows: int, cols: int) -> str:
    return (f"HloModule r\nadd {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}}\n"
            f"ENTRY e {{\n  x = f32[{rows},{cols}] parameter(0)\n  z = f32[] constant(0)\n"
            f"  ROOT r = f32[{rows}] reduce(x, z), dimensions={{1}}, to_apply=add\n}}\n")


def _program(text: str):
    return hlofuse.compile(parse_hlo(text), target="cpu").program


def _only_kernel(program):
    (kernel,) = [k for s in program._entry.steps if s.kind == "kernel" for k in s.kernels]
    return kernel


def test_transcendentals_are_the_expensive_elementwise_ops_but_division():
    assert all(is_transcendental(op) for op in ("exponential", "tanh", "logistic", "log", "erf", "power"))
    assert not any(is_transcendental(op) for op in ("add", "multiply", "divide", "remainder", "reduce", "dot"))


@pytest.mark.parametrize("op", ["negate", "tanh"])
def test_loop_kernels_are_priced_per_element_and_transcendental(op):
    """x * 1.5 then `op`: one element costs ELEMENT_NS, plus TRANSCENDENTAL_NS for tanh."""
    kernel = _only_kernel(_program(_unary(op, 1 << 16)))
    per = ELEMENT_NS + (TRANSCENDENTAL_NS if op == "tanh" else 0.0)
    assert kernel_ns(kernel) == pytest.approx((1 << 16) * per)


def test_a_thread_per_region_of_work():
    """Two threads from 2 x REGION_NS of one-thread time: the size where that falls differs by
    kind, and a tanh kernel is split at fewer elements than a plain one."""
    plain_share = int(REGION_NS / ELEMENT_NS)  # elements of one thread's share
    tanh_share = int(REGION_NS / (ELEMENT_NS + TRANSCENDENTAL_NS))
    assert region_threads(_only_kernel(_program(_unary("negate", 2 * plain_share - 4096)))) == 1
    assert region_threads(_only_kernel(_program(_unary("negate", 2 * plain_share + 4096)))) == 2
    assert region_threads(_only_kernel(_program(_unary("tanh", 2 * tanh_share + 4096)))) == 2
    assert 2 * tanh_share + 4096 < 2 * plain_share - 4096


@pytest.mark.parametrize("dtype,ns", [("f32", 0.0083), ("f64", 0.034), ("c64", 0.067), ("c128", 0.13)])
def test_gemms_are_priced_per_multiply_add_of_their_type(dtype, ns):
    """A GEMM kernel's work is its multiply-adds at its BLAS type's measured cost."""
    text = (f"HloModule d\nENTRY e {{\n  a = {dtype}[128,200] parameter(0)\n  b = {dtype}[200,80] parameter(1)\n"
            f"  ROOT d = {dtype}[128,80] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n}}\n")
    kernel = [k for s in _program(text)._entry.steps if s.kind == "kernel" for k in s.kernels if k.custom == "gemm"][0]
    assert kernel_ns(kernel) == pytest.approx(128 * 80 * 200 * ns)  # 2 row panels of 64


def test_reductions_are_priced_per_input_element():
    rows, cols = 4096, 1024  # 4 M input elements, 147 us at REDUCED_ELEMENT_NS
    kernel = _only_kernel(_program(_row_sums(rows, cols)))
    assert kernel_ns(kernel) == pytest.approx(rows * cols * REDUCED_ELEMENT_NS)
    assert region_threads(kernel) == int(rows * cols * REDUCED_ELEMENT_NS // REGION_NS)


def test_the_driver_opens_a_region_only_for_a_kernel_that_pays_for_it():
    """A kernel under two shares is called directly; a larger one through GOMP_parallel, with
    its cap as a constant of the driver's text."""
    region = 'call void @"GOMP_parallel"('
    small = _program(_unary("tanh", 1 << 16))
    assert region not in emit_driver(small.code.native, CpuTarget())
    big = _program(_unary("tanh", 1 << 21))  # 2 M elements x 0.22 ns: 11 shares
    text = emit_driver(big.code.native, CpuTarget())
    cap = region_threads(_only_kernel(big))
    assert cap == int((1 << 21) * (ELEMENT_NS + TRANSCENDENTAL_NS) // REGION_NS)
    assert region in text and f"i64 {cap}\n" in text


def test_results_do_not_depend_on_the_rule(monkeypatch):
    """Splitting changes which thread computes a unit, never how: the same bits with every
    kernel forced onto the threads (REGION_NS of 1 ns) as under the rule, on 1 and 2 threads."""
    text = _row_sums(512, 300)
    x = np.random.default_rng(0).standard_normal((512, 300)).astype(np.float32)
    want = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)(x)[0]
    monkeypatch.setattr(region_cost, "REGION_NS", 1.0)
    forced = hlofuse.compile(parse_hlo(text), target="cpu", cache=False)
    assert region_threads(_only_kernel(forced.program)) > 1
    for threads in (1, 2):
        forced.program.driver.pin_threads(threads)
        np.testing.assert_array_equal(forced(x)[0], want)
