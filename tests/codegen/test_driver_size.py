"""The native driver's IR per step (codegen/driver.py): what a step costs to emit and compile is
what the calling function holds for it, so the parallel launch and the profile timer are shared
functions called from each step, and block names stay short. The results stay the
interpreter's on one and two threads, and the profile still counts every step."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import region_cost
from hlofuse.codegen.driver import emit_driver
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.hlo.parser import parse_hlo
from hlofuse.runtime.interpreter import evaluate

N = 1 << 14


def _chain(kernels: int) -> str:
    """`kernels` elementwise steps over f32[N], each its own kernel (an optimization barrier
    between them stops fusion), alternating one and two operands (so launchers of two pointer
    counts); every step's result is also an element of the output."""
    lines = ["HloModule chain", "ENTRY e {", f"  x = f32[{N}] parameter(0)", f"  y = f32[{N}] parameter(1)"]
    cur, outs = "x", []
    for i in range(kernels):
        op = f"tanh({cur})" if i % 2 == 0 else f"add({cur}, y)"
        lines += [f"  t{i} = f32[{N}] {op}", f"  w{i} = (f32[{N}]) tuple(t{i})",
                  f"  b{i} = (f32[{N}]) opt-barrier(w{i})", f"  s{i} = f32[{N}] get-tuple-element(b{i}), index=0"]
        cur = f"s{i}"
        outs.append(cur)
    shape = ", ".join([f"f32[{N}]"] * len(outs))
    lines += [f"  ROOT r = ({shape}) tuple({', '.join(outs)})", "}"]
    return "\n".join(lines) + "\n"


def _compile(text: str):
    return hlofuse.compile(parse_hlo(text), target="cpu", cache=False)


def _function(text: str, name: str) -> list[str]:
    """The instruction lines of function `name` in LLVM IR `text` (labels and braces left out)."""
    body = text.split(f'@"{name}"(', 1)[1].split("\n}\n", 1)[0]
    return [ln for ln in body.splitlines()[1:] if ln.startswith("  ")]


@pytest.fixture
def split_everything(monkeypatch):
    """Every kernel worth a region (REGION_NS of 1 ns): each launch goes through GOMP_parallel."""
    monkeypatch.setattr(region_cost, "REGION_NS", 1.0)


def _launch_lines(kernels: int, split: bool, monkeypatch) -> tuple[int, str]:
    monkeypatch.setattr(region_cost, "REGION_NS", 1.0 if split else 1e12)
    program = _compile(_chain(kernels)).program
    text = emit_driver(program.code.native, CpuTarget())
    return len(_function(text, "hlofuse_plan_0")), text


def test_a_parallel_launch_is_a_call_of_a_shared_launcher(monkeypatch):
    """Each kernel that may open a region adds a few instructions to the plan's function (the
    thread count and one call), not the region's setup: the launcher is one function per
    pointer count, however many kernels use it."""
    serial_4, text = _launch_lines(4, False, monkeypatch)
    assert "GOMP_parallel(" not in text.split('define i32 @"hlofuse_plan_0"')[1].split("\n}\n")[0]
    parallel_4, text_4 = _launch_lines(4, True, monkeypatch)
    parallel_8, text_8 = _launch_lines(8, True, monkeypatch)
    kernels_4 = text_4.count('call void @"hlofuse_launch_')
    assert kernels_4 >= 4
    # per launch: min(threads, cap) (icmp, select) in place of the direct call's bitcast
    assert parallel_4 - serial_4 <= 2 * kernels_4
    launchers = re.findall(r'define internal void @"(hlofuse_launch_\d+)"', text_8)
    assert launchers and len(launchers) == len(set(launchers)) <= 3
    assert text_8.count('call void @"GOMP_parallel"(') == len(launchers)
    # twice the kernels: the plan's function grows by the steps alone
    assert parallel_8 - parallel_4 <= 2 * (parallel_4 - 20)


def test_block_names_stay_short(monkeypatch):
    """Labels are named per purpose and numbered, not after the block before them."""
    _, text = _launch_lines(8, True, monkeypatch)
    labels = re.findall(r"^([^\s;][^:\s]*):", text, re.M)
    assert len(labels) > 20 and max(len(x.strip('"')) for x in labels) <= 16


@pytest.mark.parametrize("threads", [1, 2])
def test_shared_launcher_and_timer_compute_what_the_interpreter_does(split_everything, threads):
    """Every kernel through the launcher (split on two threads, or run directly on one): the
    results are the interpreter's; the profile counts each step once per run."""
    text = _chain(6)
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(N).astype(np.float32) * 0.5 for _ in range(2))
    exe = _compile(text)
    exe.program.driver.pin_threads(threads)
    got = exe(x, y)
    want = evaluate(parse_hlo(text), [x, y])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=2e-6)
    steps, seconds, calls, wall = exe.program.profile([x, y], runs=3)
    kernels = [ns for ns in steps if ns.kind == "kernel" and ns.step.kernels]
    assert len(kernels) >= 6 and all(calls[ns.id] == 3 for ns in kernels)
    assert (seconds >= 0).all() and wall > 0


LAYER_NORM = """HloModule ln
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[64,768] parameter(0)
  z = f32[] constant(0)
  s = f32[64] reduce(x, z), dimensions={1}, to_apply=add
  n = f32[] constant(0.0013020833)
  nb = f32[64] broadcast(n), dimensions={}
  m = f32[64] multiply(s, nb)
  mb = f32[64,768] broadcast(m), dimensions={0}
  d = f32[64,768] subtract(x, mb)
  d2 = f32[64,768] multiply(d, d)
  v = f32[64] reduce(d2, z), dimensions={1}, to_apply=add
  vm = f32[64] multiply(v, nb)
  eps = f32[] constant(1e-5)
  eb = f32[64] broadcast(eps), dimensions={}
  ve = f32[64] add(vm, eb)
  r = f32[64] rsqrt(ve)
  rb = f32[64,768] broadcast(r), dimensions={0}
  ROOT y = f32[64,768] multiply(d, rb)
}
"""


def test_a_step_whose_work_a_sibling_does_gets_no_code():
    """Layer norm: the statistics' fusions are written by the normalising kernel (shared
    outputs), so their steps run nothing; they get no code and no timer, the profile shows no
    call of them, and the result is the interpreter's."""
    exe = _compile(LAYER_NORM)
    native = exe.program.code.native
    kernel_steps = [ns for p in native.plans for ns in p.steps if ns.kind == "kernel"]
    working = [ns for ns in kernel_steps if any(int(k.units) > 0 for k in ns.step.kernels) or ns.pre_copies]
    assert 0 < len(working) < len(kernel_steps)
    text = emit_driver(native, CpuTarget())
    assert text.count('call void @"hlofuse_step_time"(') == len(working)
    x = np.random.default_rng(1).standard_normal((64, 768)).astype(np.float32)
    np.testing.assert_allclose(exe(x)[0], evaluate(parse_hlo(LAYER_NORM), [x])[0], rtol=1e-5, atol=1e-5)
    steps, seconds, calls, wall = exe.program.profile([x], runs=2)
    assert all(calls[ns.id] == (2 if ns in working else 0) for ns in kernel_steps)
