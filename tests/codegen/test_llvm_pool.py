"""LLVM work in worker processes (codegen/llvm_pool.py): the same object bytes as the in-process
path, used by compile_objects when enough kernels are missing, and results that agree with the
interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import llvm_pool
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
from hlofuse.emitters.cpu.target import CpuTarget, compile_ir_timed
from hlofuse.runtime.interpreter import evaluate


def _module(kernels: int) -> str:
    """`kernels` independent elementwise computations of different shapes (so none is shared),
    each its own kernel, summed into a tuple."""
    lines = ["HloModule many", "", "ENTRY main {"]
    outs = []
    for k in range(kernels):
        n = 3 + k
        lines += [f"  p{k} = f32[{n}] parameter({k})", f"  e{k} = f32[{n}] exponential(p{k})",
                  f"  t{k} = f32[{n}] tanh(e{k})", f"  r{k} = f32[{n}] multiply(t{k}, p{k})"]
        outs.append(f"r{k}")
    types = ", ".join(f"f32[{3 + k}]" for k in range(kernels))
    lines += [f"  ROOT out = ({types}) tuple({', '.join(outs)})", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def two_workers(monkeypatch):
    monkeypatch.setenv("HLOFUSE_LLVM_PROCESSES", "2")
    yield
    llvm_pool.shutdown()


def test_worker_object_is_the_same_bytes(two_workers):
    fused = hlofuse.compiler.optimize(hlofuse.parse_hlo(_module(2)), "cpu", verify=False)[0]
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    for level in (2, 3):
        text = str(emit_kernel_module(code.kernels[0], CpuTarget(), "k"))
        here = compile_ir_timed(text, level)[0]
        there = llvm_pool.submit(text, level).result(timeout=300)[0]
        assert there == here and len(here) > 100


def test_compile_uses_the_pool_and_agrees_with_the_interpreter(two_workers):
    n = llvm_pool.MIN_KERNELS + 2
    module = hlofuse.parse_hlo(_module(n))
    assert llvm_pool.use_pool(n) and not llvm_pool.use_pool(llvm_pool.MIN_KERNELS - 1)
    exe = hlofuse.compile(module, "cpu", cache=False)
    assert llvm_pool._pool is not None  # the kernels went to the workers
    rng = np.random.default_rng(3)
    args = [rng.uniform(-1, 1, p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    for g, w in zip(exe(*args), evaluate(module, args)):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-7)


def test_workers_setting(monkeypatch):
    monkeypatch.setenv("HLOFUSE_LLVM_PROCESSES", "0")
    assert llvm_pool.workers() == 0 and not llvm_pool.use_pool(1000)
    monkeypatch.setenv("HLOFUSE_LLVM_PROCESSES", "many")
    with pytest.raises(ValueError, match="HLOFUSE_LLVM_PROCESSES"):
        llvm_pool.workers()
