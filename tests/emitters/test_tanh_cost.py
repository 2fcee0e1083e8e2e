"""tanh_f32's cost in IR (emitters/math_approx.py): the Pade quotient for e**2r folded into the
one divide keeps the element at 10 multiply-adds, one divide and 4 multiplies (the degree-6
polynomial it replaced took 14 multiply-adds: 38.2 -> 34.2 cycles a vector on a Zen 1 core);
its accuracy (1 ULP, no worse than XLA:CPU region by region) is tests/emitters/test_cpu_math.py's."""
from __future__ import annotations

import re

import numpy as np
from llvmlite import ir

from hlofuse.emitters import math_approx
from hlofuse.emitters.cpu.target import CpuTarget


def _tanh_ir() -> str:
    mod = ir.Module("t")
    fn = ir.Function(mod, ir.FunctionType(ir.FloatType(), [ir.FloatType()]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    b.ret(math_approx.tanh_f32(b, CpuTarget(), fn.args[0]))
    return str(mod)


def test_tanh_instruction_budget():
    text = _tanh_ir()
    assert len(re.findall(r"call float @\"?llvm\.fmuladd", text)) == 10
    assert len(re.findall(r"= fdiv ", text)) == 1
    assert len(re.findall(r"= fmul ", text)) == 4


def test_tanh_branches_meet_within_one_ulp():
    """Both sides of the small branch's edge (_TANH_SMALL) and of the reduction's steps
    (n = 1, 2, 3 at |x| = k ln2 / 4) agree with numpy's f64 tanh to 1 ULP, signs included."""
    from hlofuse.hlo.parser import parse_hlo
    from hlofuse.runtime.cpu_executor import CpuProgram

    edges = [math_approx._TANH_SMALL] + [k * np.log(2) / 4 for k in (1, 3, 5, 7)]
    e = np.float32(edges)
    x = np.concatenate([e, np.nextafter(e, np.float32(0)), np.nextafter(e, np.float32(1))])
    x = np.concatenate([x, -x]).astype(np.float32)
    text = f"HloModule m\nENTRY e {{\n  x = f32[{x.size}] parameter(0)\n  ROOT r = f32[{x.size}] tanh(x)\n}}\n"
    got = CpuProgram.compile(parse_hlo(text)).run([x])[0]
    want = np.tanh(x.astype(np.float64)).astype(np.float32)
    ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert ulps.max() <= 1
