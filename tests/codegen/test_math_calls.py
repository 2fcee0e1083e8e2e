"""A loop kernel whose element goes through so many f32 math functions that it interleaves no
vectors calls them (emitters/math_calls.py, codegen/kernels/cpu_loop.calls_math): one internal
function per math function and module, with a vector form the loop vectorizer calls. Claims
tested: the results are the inlined kernel's bits for every f32 approximation (vectorised loops,
folded short loops and scalar remainders; special values included) and equal the interpreter's;
each function is defined once per module however often it is used; the vectorised loop calls
the vector form; LLVM's output is far smaller; kernels with few math functions still inline."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
from hlofuse.codegen.kernels import cpu_loop
from hlofuse.codegen.kernels.reduction_groups import lanes_of
from hlofuse.emitters.cpu.target import CpuTarget, optimized_module
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.compare import compare_outputs
from hlofuse.runtime.cpu_executor import CpuProgram
from llvm_loops import instructions_after_o3

UNARY = {"exponential": "exp", "exponential-minus-one": "expm1", "log": "log", "log-plus-one": "log1p",
         "tanh": "tanh", "logistic": "logistic", "erf": "erf", "sine": "sin", "cosine": "cos", "tan": "tan",
         "cbrt": "cbrt"}
BINARY = {"power": "pow", "atan2": "atan2"}


def _module(op: str, dims: tuple[int, ...], binary: bool = False) -> str:
    shape = f"f32[{','.join(map(str, dims))}]"
    y = f"  y = {shape} parameter(1)\n" if binary else ""
    call = f"{op}(x, y)" if binary else f"{op}(x)"
    return f"HloModule m\nENTRY e {{\n  x = {shape} parameter(0)\n{y}  ROOT r = {shape} {call}\n}}\n"


def _chain(n: int, dims=(8, 64)) -> str:
    """`n` alternating exp and tanh of (x + previous) / 2: one loop kernel, n math functions."""
    shape = f"f32[{','.join(map(str, dims))}]"
    lines = ["HloModule chain", "ENTRY e {", f"  x = {shape} parameter(0)", "  h = f32[] constant(0.5)",
             f"  hb = {shape} broadcast(h), dimensions={{}}"]
    cur = "x"
    for i in range(n):
        lines += [f"  a{i} = {shape} add({cur}, x)", f"  m{i} = {shape} multiply(a{i}, hb)",
                  f"  f{i} = {shape} {'exponential' if i % 2 else 'tanh'}(m{i})"]
        cur = f"f{i}"
    lines[-1] = lines[-1].replace(f"  f{n - 1} =", f"  ROOT f{n - 1} =")
    return "\n".join(lines + ["}"]) + "\n"


def _compile(text: str, calls: bool, monkeypatch) -> CpuProgram:
    with monkeypatch.context() as m:
        m.setattr(cpu_loop, "calls_math", lambda comp: calls)
        return CpuProgram.compile(hlofuse.compiler.optimize(parse_hlo(text))[0], cache=False)


def _kernel_ir(text: str, monkeypatch, calls: bool | None = None) -> str:
    fused = hlofuse.compiler.optimize(parse_hlo(text), "cpu")[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    (kernel,) = code.kernels
    with monkeypatch.context() as m:
        if calls is not None:
            m.setattr(cpu_loop, "calls_math", lambda comp: calls)
        return str(emit_kernel_module(kernel, CpuTarget(), "k"))


def _values(n: int, seed: int) -> np.ndarray:
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1e-30, 88.7, -104.0, 1e10, -1e10,
                        0.5, 1.0, -1.0, 3.0e38], np.float32)
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32) * 4
    x[:len(special)] = special[:n]
    return x


@pytest.mark.parametrize("dims", [(8, 64), (1000,), (2000,)], ids=["rows", "folded", "remainder"])
@pytest.mark.parametrize("op", sorted(UNARY) + sorted(BINARY))
def test_called_math_gives_the_inlined_bits(op, dims, monkeypatch):
    binary = op in BINARY
    text = _module(op, dims, binary)
    n = int(np.prod(dims))
    args = [_values(n, 1).reshape(dims)] + ([np.abs(_values(n, 2)).reshape(dims)] if binary else [])
    if op in ("log", "log-plus-one", "cbrt"):
        args[0] = np.abs(args[0])
    called, inlined = _compile(text, True, monkeypatch), _compile(text, False, monkeypatch)
    (got,) = called.run(args)
    (want,) = inlined.run(args)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
    ref = hlofuse.compile(parse_hlo(text), target="interpreter", fusion=False)(*args)
    for r in compare_outputs([got], list(ref)):
        assert r.ok, r


def test_each_function_is_defined_once_and_vectorised(monkeypatch):
    text = _chain(40)
    ir_text = _kernel_ir(text, monkeypatch)  # 40 math functions: past the budget, so called
    defined = re.findall(r'^define internal .*? @"(hlofuse\.math\.[\w.]+)"', ir_text, re.M)
    lanes = lanes_of(CpuTarget().vector_width, 32)  # the host's f32 vector: 16 with AVX-512, 8 with AVX2
    assert sorted(defined) == ["hlofuse.math.exp.f32", f"hlofuse.math.exp.v{lanes}f32",
                               "hlofuse.math.tanh.f32", f"hlofuse.math.tanh.v{lanes}f32"]
    assert len(re.findall(r'call float @"hlofuse\.math\.', ir_text)) == 40
    optimized = str(optimized_module(ir_text))
    assert len(re.findall(rf"call <{lanes} x float> @hlofuse\.math\.(?:exp|tanh)\.v{lanes}f32", optimized)) == 40
    inlined = _kernel_ir(text, monkeypatch, calls=False)
    assert instructions_after_o3(ir_text) < 0.25 * instructions_after_o3(inlined)
    x = _values(8 * 64, 3).reshape(8, 64)
    (got,) = _compile(text, True, monkeypatch).run([x])
    (want,) = _compile(text, False, monkeypatch).run([x])
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


def test_the_rule_follows_the_interleaving_budget(monkeypatch):
    """A few math functions keep being inlined (the loop interleaves vectors); past half the
    interleaving budget they are called."""
    budget = cpu_loop._INTERLEAVE_BUDGET
    few = _kernel_ir(_chain(budget // 2), monkeypatch)
    many = _kernel_ir(_chain(budget // 2 + 1), monkeypatch)
    assert "hlofuse.math." not in few and '"llvm.loop.interleave.count", i32 2' in few
    assert "hlofuse.math." in many


def test_kernels_of_one_group_share_the_definitions(monkeypatch):
    """Two calling kernels compiled in one LLVM module (codegen/cpu.kernel_groups) define each
    math function once between them, and both give the inlined kernels' bits."""
    from hlofuse.codegen.cpu import distinct_kernels, kernel_groups

    one = _chain(30).replace("ROOT ", "").rstrip().rstrip("}")
    text = (one + "  y = f32[8,64] parameter(1)\n"
            + "".join(f"  b{i} = f32[8,64] add({'y' if i == 0 else f'g{i - 1}'}, y)\n"
                      f"  g{i} = f32[8,64] exponential(b{i})\n" for i in range(30))
            + "  ROOT t = (f32[8,64], f32[8,64]) tuple(f29, g29)\n}\n")
    fused = hlofuse.compiler.optimize(parse_hlo(text), "cpu")[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    target = CpuTarget()
    groups = list(kernel_groups(distinct_kernels(code.kernels, target), target))
    calling = [str(mod) for _, mod in groups if "hlofuse.math." in str(mod)]
    lanes = lanes_of(target.vector_width, 32)  # the host's f32 vector: 16 with AVX-512, 8 with AVX2
    assert len(calling) == 1
    assert calling[0].count(f'define internal <{lanes} x float> @"hlofuse.math.exp.v{lanes}f32"') == 1
    x = _values(8 * 64, 5).reshape(8, 64)
    y = _values(8 * 64, 6).reshape(8, 64)
    got = _compile(text, True, monkeypatch).run([x, y])
    want = _compile(text, False, monkeypatch).run([x, y])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.view(np.int32), w.view(np.int32))
